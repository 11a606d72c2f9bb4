"""The shared-prompt forward: a GRPO batch's completions scored with each prompt run once per group.

TRL's loss and scoring forwards run every row's prompt through the policy: a group of ``G`` completions of one prompt
pays for its prompt ``G`` times. :func:`shared_prompt_forward` runs the prompt's first ``P - 1`` columns once per
group (the backbone only, keeping its key/value cache, with gradient when the caller needs one), repeats that cache
over the group's rows, and runs each row's last prompt column and its completion on top of it. The per-token
log-probs and entropies are TRL's (the fused head of ``trl.trainer.utils.add_fused_lm_head``, at the same column
positions and under the same attention mask), equal to TRL's own forward to float rounding; the gradient reaches the
prompt's activations through the cache, summed over the group, as in the unshared forward.

With ``P`` prompt columns, ``T`` completion columns and ``G`` rows a group, a forward reads ``P - 1 + G (T + 1)``
columns a group instead of ``G (P + T)``: a 2x cut at ``P = 2 T``, more when prompts are long beside completions (the
collapse study's one-digit prompts: ~104 prompt tokens, <= 64 completion tokens, G = 4).

Applies to causal LMs with rotary or ALiBi positions (the continuation reads the same column positions as TRL's
forward, which for such models is all that matters; :mod:`trl_explore.trl_guards.positions`) whose backbone takes a
key/value cache. :func:`shared_prompt_groups` decides whether a batch has anything to share.
"""

from __future__ import annotations

import torch


def shared_prompt_groups(input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int,
                         ) -> list[tuple[int, int]] | None:
    """Runs of consecutive rows whose prompt columns are equal (ids and mask), as ``[(start, end), ...]`` covering
    every row; ``None`` when no run has two rows or the prompt has fewer than 2 columns (nothing to share).

    Args:
        input_ids, attention_mask: ``[B, P + T]``, TRL's layout (left-padded prompts, then completions).
        logits_to_keep: ``T``, the completion columns.
    """
    prompt_len = input_ids.size(1) - logits_to_keep
    if prompt_len < 2 or input_ids.size(0) < 2:
        return None
    ids, mask = input_ids[:, :prompt_len], attention_mask[:, :prompt_len]
    same = ((ids[1:] == ids[:-1]) & (mask[1:] == mask[:-1])).all(dim=1).tolist()
    groups, start = [], 0
    for row, same_as_previous in enumerate(same, start=1):
        if not same_as_previous:
            groups.append((start, row))
            start = row
    groups.append((start, input_ids.size(0)))
    return groups if len(groups) < input_ids.size(0) else None


def shared_prompt_forward(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int,
                          groups: list[tuple[int, int]], compute_entropy: bool = False,
                          ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs and entropies (nats) of the completion columns, each group's prompt run once.

    Args:
        model: a causal LM patched with TRL's fused LM head (``model(..., labels=..., fused_lm_head=True)``), with a
            ``base_model`` backbone that returns ``past_key_values`` (transformers' ``Cache``).
        input_ids, attention_mask: ``[B, P + T]`` (TRL's layout).
        logits_to_keep: ``T``.
        groups: :func:`shared_prompt_groups` of the batch.
        compute_entropy: also return the entropies (the head must have been patched with ``"entropy"``).

    Returns:
        ``(logps [B, T], entropies [B, T] or None)``, as TRL's ``_get_per_token_logps_and_entropies`` returns them
        (the temperature is the fused head's).
    """
    prompt_len = input_ids.size(1) - logits_to_keep
    firsts = torch.tensor([start for start, _ in groups], device=input_ids.device)
    rows_of = torch.repeat_interleave(torch.arange(len(groups), device=input_ids.device),
                                      torch.tensor([end - start for start, end in groups], device=input_ids.device))
    backbone = model.base_model
    name = _cache_argument(backbone)
    prefix = backbone(input_ids=input_ids[firsts, : prompt_len - 1],
                      attention_mask=attention_mask[firsts, : prompt_len - 1], use_cache=True)
    cache = getattr(prefix, name)
    for layer in cache.layers:  # each group's prompt cache, once per row of the group (autograd sums the gradients)
        layer.keys, layer.values = layer.keys[rows_of], layer.values[rows_of]
    tail = input_ids[:, prompt_len - 1:]
    labels = tail.masked_fill(attention_mask[:, prompt_len - 1:] == 0, -100)
    labels[:, 0] = -100  # the last prompt column: read, not scored
    outputs = model(input_ids=tail, attention_mask=attention_mask, labels=labels, fused_lm_head=True, **{name: cache})
    entropies = outputs.entropy[:, -logits_to_keep:] if compute_entropy else None
    return outputs.log_probs[:, -logits_to_keep:], entropies


def share_prompt_blocker(model, num_processes: int) -> str | None:
    """Why :func:`shared_prompt_forward` may not stand in for TRL's forward on ``model``, in a few words, or None
    where it may: one process and no wrapper (DDP, FSDP and DeepSpeed expect one forward call a step), no gradient
    checkpointing (it turns the cache off), a backbone taking transformers' ``cache`` argument (transformers >= 5.20;
    a PEFT wrapper's does not), rotary or ALiBi positions
    (:func:`~trl_explore.trl_guards.positions.absolute_position_owner`),
    and no forward hook anywhere in the model (a hook, e.g. ASE's steering, may read the columns of a whole row)."""
    from trl_explore.trl_guards.models import unwrap_model
    from trl_explore.trl_guards.positions import absolute_position_owner

    if num_processes != 1:
        return f"{num_processes} processes (DDP, FSDP and DeepSpeed expect one forward call a step)"
    if unwrap_model(model) is not model:
        return f"the model is wrapped ({type(model).__name__})"
    if getattr(model, "is_gradient_checkpointing", False):
        return "gradient checkpointing is on (it turns the key/value cache off)"
    backbone = getattr(model, "base_model", None)
    if backbone is None or backbone is model or _cache_argument(backbone) != "cache":
        return f"{type(model).__name__} has no backbone taking a key/value cache (PEFT, or transformers < 5.20)"
    if absolute_position_owner(model) is not None:
        return "the model has absolute position embeddings"
    hooked = [name or type(model).__name__ for name, m in model.named_modules()
              if m._forward_hooks or m._forward_pre_hooks]
    return f"forward hooks on {', '.join(hooked[:3])}" if hooked else None


def can_share_prompt(model, num_processes: int) -> bool:
    """Whether :func:`shared_prompt_forward` may stand in for TRL's forward on ``model``
    (:func:`share_prompt_blocker` finds nothing against it)."""
    return share_prompt_blocker(model, num_processes) is None


def group_chunks(groups: list[tuple[int, int]], batch_size: int | None) -> list[list[tuple[int, int]]]:
    """``groups`` cut into consecutive chunks of whole groups of at least ``batch_size`` rows each (the last may be
    smaller; a group is never split); one chunk when ``batch_size`` is None."""
    if batch_size is None:
        return [groups]
    chunks, chunk = [], []
    for group in groups:
        chunk.append(group)
        if chunk[-1][1] - chunk[0][0] >= batch_size:
            chunks.append(chunk)
            chunk = []
    return chunks + ([chunk] if chunk else [])


def _cache_argument(backbone) -> str:
    """The name transformers gives the key/value cache, in a backbone's arguments and outputs: ``cache`` from 5.20
    on, ``past_key_values`` before (the vLLM environment's pin)."""
    import inspect

    return "cache" if "cache" in inspect.signature(backbone.forward).parameters else "past_key_values"
