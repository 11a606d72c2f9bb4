"""HF transformers backend of activation steering for ASE-GRPO (SPEC §3.2-3.3, §3.5, §4).

:class:`ActivationSteeringGenerator` adds ``alpha * v_{route}`` to the output of one decoder block of
the policy while ``model.generate`` runs (one forward hook, per-row ``[B, 1, d]`` offsets), and replays
a finished batch teacher-forced with the same hook to get the behaviour log-probs (for the truncated
importance sampling of SPEC §3.5) and the block readouts (SPEC §3.3) in one no-grad forward.

Usage::

    steerer = ActivationSteeringGenerator(model, layer=0, alpha=0.5)
    with steerer.steering(route_ids, bank):          # route_ids: LongTensor[B], bank: Tensor[K, d]
        out = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, ...)
    behaviour_logps, readouts = steerer.score(
        prompt_ids, prompt_mask, completion_ids, completion_mask, route_ids, bank, temperature=1.0
    )
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import torch
from torch import nn

from trl_explore.ase.steering.base import (
    SteeringBackend,
    add_to_block_output,
    block_hidden_states,
    check_alpha,
    check_layer_index,
    check_routes,
    check_temperature,
    completion_log_probs,
    readout_positions,
    steering_offsets,
)
from trl_explore.sampling.decode import current_rows, row_keys
from trl_explore.trl_guards.models import unwrap_model
from trl_explore.trl_guards.positions import mask_positions

# Attribute paths (after unwrapping) where decoder stacks live, tried after ``get_decoder().layers``.
_LAYER_PATHS = (
    "model.layers",  # Llama, Qwen2, Mistral, Gemma, Phi3, ... (XxxForCausalLM.model.layers)
    "layers",  # a bare XxxModel
    "model.language_model.layers",  # vision-language wrappers (transformers 5.x)
    "language_model.model.layers",  # vision-language wrappers (transformers 4.x)
    "model.decoder.layers",  # OPT
    "transformer.h",  # GPT-2, Falcon, GPT-J, Bloom
    "transformer.layers",
    "gpt_neox.layers",  # GPT-NeoX, Pythia
)


def find_decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The list of decoder blocks of a (possibly wrapped) causal LM.

    Looks in ``unwrap_model(model).get_decoder().layers`` first (transformers' own accessor), then in
    the common attribute paths ``model.layers``, ``layers``, ``model.language_model.layers``,
    ``language_model.model.layers``, ``model.decoder.layers``, ``transformer.h``, ``transformer.layers``,
    ``gpt_neox.layers``. Works for ``LlamaForCausalLM``, ``Qwen2ForCausalLM``, PEFT ``PeftModel``
    wrappers, and models wrapped by accelerate / DDP / DeepSpeed (``.module``).

    Args:
        model: the policy, wrapped or not.

    Returns:
        A non-empty ``nn.ModuleList`` of decoder blocks.

    Raises:
        ValueError: no decoder-block list found (the message names the model class and the paths tried).
    """
    inner = unwrap_model(model)
    candidates = []
    get_decoder = getattr(inner, "get_decoder", None)
    if callable(get_decoder):
        try:
            candidates.append(getattr(get_decoder(), "layers", None))
        except (AttributeError, NotImplementedError, ValueError):
            pass  # exotic models raise here; the attribute paths below still apply
    for path in _LAYER_PATHS:
        obj = inner
        for name in path.split("."):
            obj = getattr(obj, name, None)
            if obj is None:
                break
        candidates.append(obj)
    for layers in candidates:
        if isinstance(layers, nn.ModuleList) and len(layers) > 0:
            return layers
    raise ValueError(
        f"could not find the decoder layers of {type(inner).__name__} (unwrapped from {type(model).__name__}); "
        f"tried get_decoder().layers and {', '.join(_LAYER_PATHS)}"
    )


def _hidden_size(model: nn.Module) -> int | None:
    """``config.hidden_size`` of the unwrapped model (text config for multimodal ones), if known."""
    config = getattr(unwrap_model(model), "config", None)
    if config is None:
        return None
    if callable(getattr(config, "get_text_config", None)):
        config = config.get_text_config()
    return getattr(config, "hidden_size", None)


class ActivationSteeringGenerator(SteeringBackend):
    """Route-steered generation and teacher-forced replay for ASE-GRPO, HF ``generate`` backend.

    Implements SPEC §4 ``ActivationSteeringGenerator`` (HF path): route ``s`` in ``1..K`` adds
    ``alpha * v_s`` to the OUTPUT hidden state of decoder block ``layer`` (ASE paper §3.3, "we add
    alpha v_s to the output of the target Transformer block during generation"; App.: block 0); route
    0 is the clean route (``v_0 = 0``). The offset is one ``[d]`` vector per rollout, broadcast over the
    positions of that row (``[B, 1, d]``), so one ``generate`` call serves every route.

    Design choices (documented because they change numbers):

    * ``steer_prompt=True`` (default): the hook is active for the whole ``generate`` call, prompt
      prefill included, so the prompt's KV cache is steered too and even the first completion token
      is drawn from the steered policy. With ``False`` the prefill pass is left clean: the first
      completion token comes from the clean policy, later tokens are steered but attend to a clean
      prompt cache. :meth:`score` reproduces whichever was used (it steers all positions, or only the
      completion positions), so the behaviour log-probs always match the distribution the tokens were
      actually drawn from. ``steer_prompt=False`` requires one ``generate`` call per context (the
      first hooked forward is taken as the prefill; a second multi-token forward raises).
    * Left padding (TRL pads prompts on the left): the offset is also added at pad positions. Real
      tokens never attend to pad positions (attention mask), so the steered distribution of the real
      tokens does not depend on the padding; only the (unused) hidden states of pads change.
    * Readouts are the STEERED block outputs, i.e. the activations of the rollout trajectories as the
      behaviour policy produced them (ASE paper §3.2 builds the bank from "activations of the rollout
      trajectories"). Since nothing upstream of block ``layer`` is steered, the clean readout is
      exactly ``readout - alpha * v_route`` if a caller wants it (the trainer's bank uses the clean one by
      default: ``ASEConfig.bank_readouts``).
    * The hook counts its calls (:attr:`hook_calls`) and a pre-hook counts the model's forward passes
      (:attr:`forward_calls`); leaving :meth:`steering` normally with a non-clean route raises if the
      hook never ran or ran on fewer passes than the model (compiled / graph-captured decoding can
      bypass Python hooks). Batch-shape surprises (beam search, ``num_return_sequences > 1``, paged /
      continuous batching) raise inside the hook instead of steering the wrong rows.

    Args:
        model: the policy (``PreTrainedModel``, ``PeftModel``, or a DDP / DeepSpeed / compile wrapper
            of one); generation must run through this model's modules.
        layer: decoder block whose output is steered and read (default 0).
        alpha: default steering strength (default 0.5, SPEC §3.4).
        steer_prompt: see above (default True).

    Raises:
        ValueError: bad ``layer`` / ``alpha`` / ``steer_prompt``, decoder layers not found, or ``layer``
            out of range.
    """

    def __init__(self, model: nn.Module, *, layer: int = 0, alpha: float = 0.5, steer_prompt: bool = True) -> None:
        super().__init__(layer=layer, alpha=alpha, steer_prompt=steer_prompt)
        self.model = model
        self.forward_calls = 0
        self._active = False
        self.decoder_block()  # fail now, not at the first rollout, if the block cannot be found

    def decoder_block(self, model: nn.Module | None = None) -> nn.Module:
        """Decoder block ``self.layer`` of ``model`` (default: the bound model).

        Raises:
            ValueError: layers not found, or ``layer`` out of range (message gives the number of layers).
        """
        layers = find_decoder_layers(self.model if model is None else model)
        check_layer_index(self.layer, len(layers))
        return layers[self.layer]

    @contextmanager
    def steering(
        self, route_ids: torch.Tensor, vectors: torch.Tensor, alpha: float | None = None
    ) -> Iterator[None]:
        """Steer the ``model.generate`` calls made inside this context, row ``i`` by route ``route_ids[i]``.

        Installs one forward hook on decoder block ``layer`` (adds ``alpha * v_route`` per row to its
        output) and one forward pre-hook on the unwrapped model (counts forward passes). Both are
        removed on exit, also when the body raises.

        Args:
            route_ids: ``LongTensor[B]``, values in ``0..K``; ``B`` must equal the generation batch size
                (prompts already repeated per rollout, as TRL does; no beam search).
            vectors: ``Tensor[K, d]`` vector bank, ``d`` = the model's hidden size.
            alpha: steering strength for this context (default: ``self.alpha``).

        Raises:
            RuntimeError: a steering context or :meth:`score` is already active on this generator; (inside
                the body) the block output's batch size or hidden size differs from ``route_ids`` /
                ``vectors``, or a second multi-token forward pass arrives with ``steer_prompt=False``; (on a
                normal exit) a non-clean route was requested and the hook never ran or missed forward passes.
            TypeError / ValueError: see :func:`~trl_explore.ase.steering.base.check_routes`.
        """
        if self._active:
            raise RuntimeError("a steering context is already active on this ActivationSteeringGenerator")
        check_routes(route_ids, vectors, _hidden_size(self.model))
        offsets = steering_offsets(route_ids, vectors, self.alpha if alpha is None else alpha)  # [B, d]
        steer_any = bool((route_ids != 0).any())
        batch, dim = offsets.shape
        cast_cache: dict[tuple, torch.Tensor] = {}
        self.hook_calls = 0
        self.forward_calls = 0

        def steer_hook(module, args, output):
            hidden = block_hidden_states(output)
            # trl_explore's decoder shares prefills and drops finished rows: it names the rows of each forward
            active = current_rows()
            rows = batch if active is None else len(active.index)
            if hidden.dim() != 3 or hidden.shape[0] != rows or hidden.shape[-1] != dim:
                raise RuntimeError(
                    f"steering expects block outputs of shape [B={rows}, T, d={dim}], got {tuple(hidden.shape)}: "
                    "beam search, num_return_sequences > 1 and paged generation are not supported"
                )
            self.hook_calls += 1
            if not steer_any:
                return None
            if not self.steer_prompt:
                if (self.hook_calls == 1) if active is None else active.prefill:
                    return None  # the prefill pass stays clean
                if active is None and hidden.shape[1] != 1:
                    raise RuntimeError(
                        "steer_prompt=False: a second multi-token forward pass was seen; use one generate call "
                        "per steering context"
                    )
            key = (hidden.device, hidden.dtype)
            if key not in cast_cache:
                cast_cache[key] = offsets.to(device=hidden.device, dtype=hidden.dtype).unsqueeze(1)  # [B, 1, d]
            added = cast_cache[key] if active is None else cast_cache[key][active.index.to(hidden.device)]
            return add_to_block_output(output, added)

        def count_forward(module, args):
            self.forward_calls += 1

        block = self.decoder_block()
        handles = []
        try:
            handles.append(block.register_forward_hook(steer_hook))
            handles.append(unwrap_model(self.model).register_forward_pre_hook(count_forward))
            self._active = True
            with row_keys(route_ids):  # rows of different routes never share a prefill in trl_explore's decoder
                yield
        finally:
            for handle in handles:
                handle.remove()
            self._active = False
        self._raise_if_not_fired(route_ids, "steering", self.forward_calls)

    @torch.no_grad()
    def score(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor,
        route_ids: torch.Tensor,
        vectors: torch.Tensor,
        *,
        temperature: float,
        readout_fraction: float = 0.25,
        alpha: float | None = None,
        model: nn.Module | None = None,
        batch_size: int | None = None,
        fused_lm_head: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Behaviour log-probs and readouts of a finished batch, in one teacher-forced no-grad forward.

        Runs ``model(cat(prompt, completion))`` with the steering hook on (route-0 rows unsteered,
        ``steer_prompt`` honoured exactly as in :meth:`steering`), and from that single pass returns:

        * ``behaviour_logps[i, t] = log softmax(logits / temperature)[completion_ids[i, t]]`` of the
          STEERED model (the behaviour policy of SPEC §3.5, ``pi_steered`` in the truncated IS ratio
          ``min(pi_theta / pi_steered, 2)``); for route-0 rows this is the plain model's log-prob.
          Positions with ``completion_mask == 0`` are 0.
        * ``readouts[i] =`` the (steered) output of block ``layer`` at the completion position
          ``readout_positions(completion_mask, readout_fraction)[i]`` (SPEC §3.3), captured in the hook,
          so only ``[B, d]`` is kept.

        Why a replay rather than generation scores: ``generate(output_scores=True)`` would hold
        ``B x T_c x V`` floats for the whole generation (e.g. 8 x 8192 x 152k fp32 = 40 GB), plus the
        readout would have to be stored at every position because ``len(response)`` is known only at
        the end. The replay costs one extra forward over the batch (prompt + completion, no grad, no
        backward) and, with ``fused_lm_head=True`` or a small ``batch_size``, little memory. Behaviour
        log-probs obtained this way match the sampling distribution up to float rounding: models with
        absolute positions (GPT-2, ...) get position ids from the attention mask, numbered as ``generate``
        numbers them (:func:`~trl_explore.trl_guards.positions.mask_positions`); RoPE only sees relative positions.

        The behaviour distribution is ``softmax(logits / temperature)``: top-k / top-p / min-p /
        repetition-penalty filters are not applied (TRL's defaults use none), the same convention as
        TRL's own log-probs of the trained policy, so the IS ratio compares like with like. The model
        is run in its current train/eval mode (dropout, if any, applies as in TRL's scoring passes).

        Args:
            prompt_ids: ``LongTensor[B, P]``, left-padded (TRL convention), ``P >= 1``.
            prompt_mask: ``Tensor[B, P]`` 0/1; the last column must be all ones (left padding).
            completion_ids: ``LongTensor[B, T_c]``, right-padded.
            completion_mask: ``Tensor[B, T_c]`` 0/1 (TRL: 1 up to and including the first EOS).
            route_ids: ``LongTensor[B]`` routes used at generation (0 = clean).
            vectors: ``Tensor[K, d]`` the bank used at generation.
            temperature: sampling temperature ``T > 0`` used at generation.
            readout_fraction: ``f`` in ``[0, 1]`` (default 0.25).
            alpha: steering strength used at generation (default ``self.alpha``).
            model: module to run (default: the bound model); pass the accelerate-prepared model under
                FSDP so that parameters are gathered. Its block ``layer`` is hooked.
            batch_size: rows per forward (default: all ``B`` at once), to bound activation memory.
            fused_lm_head: if True, use TRL's fused LM head (``model(..., labels=, fused_lm_head=True)``,
                installed by ``GRPOTrainer`` through ``trl.trainer.utils.add_fused_lm_head``): no
                ``[B, T_c, V]`` logits are materialised and the numbers come from the same kernel as TRL's
                own log-probs. The fused head divides by the temperature it was installed with
                (``GRPOConfig.temperature``); ``temperature`` must equal it (cannot be checked here).
                If False (default), logits of the completion positions only (``logits_to_keep``) are
                turned into log-probs one row at a time.

        Returns:
            ``(behaviour_logps, readouts)``: ``Tensor[B, T_c]`` float32 (nats) and ``Tensor[B, d]`` float32.

        Raises:
            ValueError: shapes / masks inconsistent, prompts not left-padded, bad ``temperature``,
                ``readout_fraction``, ``batch_size``; ``fused_lm_head=True`` on a model without the
                fused head.
            RuntimeError: called inside an active :meth:`steering` context, or the hook did not run.
            TypeError: see :func:`~trl_explore.ase.steering.base.check_routes`.
        """
        if self._active:
            raise RuntimeError("score() cannot run inside an active steering context (the offset would be added "
                               "twice)")
        model = self.model if model is None else model
        temperature = check_temperature(temperature)
        alpha = self.alpha if alpha is None else check_alpha(alpha)
        _check_score_inputs(prompt_ids, prompt_mask, completion_ids, completion_mask, route_ids)
        bad_batch_size = isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
        if batch_size is not None and bad_batch_size:
            raise ValueError(f"`batch_size` must be a positive int or None, got {batch_size!r}")
        check_routes(route_ids, vectors, _hidden_size(model))

        device = prompt_ids.device
        num_rows, prompt_len = prompt_ids.shape
        completion_len = completion_ids.shape[1]
        offsets = steering_offsets(route_ids, vectors, alpha).to(device)  # [B, d]
        positions = readout_positions(completion_mask, readout_fraction).to(device)  # [B], response-relative
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # [B, P + T_c]
        attention_mask = torch.cat([prompt_mask, completion_mask.to(prompt_mask.dtype)], dim=1)
        steer_from = 0 if self.steer_prompt else prompt_len  # first steered position (see steering())
        steer_rows = route_ids.to(device) != 0

        state: dict = {}

        def score_hook(module, args, output):
            hidden = block_hidden_states(output)
            rows = state["rows"]
            if hidden.dim() != 3 or hidden.shape[0] != rows.numel() or hidden.shape[1] != prompt_len + completion_len:
                raise RuntimeError(
                    f"score expected block outputs of shape [{rows.numel()}, {prompt_len + completion_len}, d], "
                    f"got {tuple(hidden.shape)}"
                )
            self.hook_calls += 1
            if bool(steer_rows[rows].any()):
                delta = offsets[rows].to(hidden.dtype).unsqueeze(1)  # [b, 1, d]
                if steer_from > 0:
                    keep = (torch.arange(hidden.shape[1], device=hidden.device) >= steer_from).to(hidden.dtype)
                    delta = delta * keep[None, :, None]  # [b, P + T_c, d], zero on the prompt
                output = add_to_block_output(output, delta)
                hidden = block_hidden_states(output)
            index = torch.arange(rows.numel(), device=hidden.device)
            state["readouts"] = hidden[index, prompt_len + positions[rows].to(hidden.device)].float()
            return output

        block = self.decoder_block(model)
        step = num_rows if batch_size is None else batch_size
        logps_parts, readout_parts = [], []
        self.hook_calls = 0
        numbering = ExitStack()  # absolute-position models: numbered from the attention mask, as generate does
        numbering.enter_context(mask_positions(model))
        handle = block.register_forward_hook(score_hook)
        self._active = True
        try:
            for start in range(0, num_rows, step):
                rows = torch.arange(start, min(start + step, num_rows), device=device)
                state["rows"], state["readouts"] = rows, None
                ids, mask = input_ids[rows], attention_mask[rows]
                if fused_lm_head:
                    labels = ids.masked_fill(mask == 0, -100)
                    labels[:, :prompt_len] = -100
                    outputs = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
                    log_probs = getattr(outputs, "log_probs", None)
                    if log_probs is None:
                        raise ValueError(
                            "`fused_lm_head=True` but the model returned no `log_probs`: install TRL's fused head "
                            "(trl.trainer.utils.add_fused_lm_head) or pass fused_lm_head=False"
                        )
                    logps = log_probs[:, -completion_len:].float()
                else:
                    outputs = model(
                        input_ids=ids, attention_mask=mask, logits_to_keep=completion_len + 1, use_cache=False
                    )
                    # logits[:, j] predicts token j + 1: the last T_c + 1 positions minus the final one
                    logits = outputs.logits[:, -(completion_len + 1) : -1]
                    logps = completion_log_probs(logits, completion_ids[rows], temperature)
                if state["readouts"] is None:
                    raise RuntimeError(
                        f"score: the hook on decoder block {self.layer} did not run during the forward pass "
                        "(compiled model?); readouts and steered log-probs would be wrong"
                    )
                logps_parts.append(logps.masked_fill(completion_mask[rows] == 0, 0.0))
                readout_parts.append(state["readouts"])
        finally:
            handle.remove()
            numbering.close()
            self._active = False
        return torch.cat(logps_parts, dim=0), torch.cat(readout_parts, dim=0)


def _check_score_inputs(prompt_ids, prompt_mask, completion_ids, completion_mask, route_ids) -> None:
    """Shape and padding checks for :meth:`ActivationSteeringGenerator.score`."""
    named = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
    }
    for name, tensor in named.items():
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 2:
            raise ValueError(f"`{name}` must be a 2-D tensor")
    if prompt_mask.shape != prompt_ids.shape:
        raise ValueError(f"`prompt_mask` {tuple(prompt_mask.shape)} must match `prompt_ids` {tuple(prompt_ids.shape)}")
    if completion_mask.shape != completion_ids.shape:
        raise ValueError(
            f"`completion_mask` {tuple(completion_mask.shape)} must match "
            f"`completion_ids` {tuple(completion_ids.shape)}"
        )
    num_rows = prompt_ids.shape[0]
    if (completion_ids.shape[0] != num_rows or not isinstance(route_ids, torch.Tensor)
            or route_ids.shape != (num_rows,)):
        raise ValueError(f"`prompt_ids`, `completion_ids` and `route_ids` must share the batch size B={num_rows}")
    if prompt_ids.shape[1] < 1 or completion_ids.shape[1] < 1:
        raise ValueError("`prompt_ids` and `completion_ids` need at least one column")
    if not bool((prompt_mask[:, -1] != 0).all()):
        raise ValueError("`prompt_mask` must be left-padded (its last column all ones), as TRL pads prompts")
