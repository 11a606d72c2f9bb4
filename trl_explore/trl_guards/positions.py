"""Position ids from the attention mask for the forwards this package makes or controls on left-padded rows.

``generate`` numbers positions from the attention mask (a left-padded row's first real token is position 0), but a
plain ``model(input_ids, attention_mask)`` call, as TRL 1.16's scoring and loss forwards make it, numbers columns: a
row padded with ``k`` tokens is read at positions ``k, k + 1, ...``. Rotary (RoPE) and ALiBi attention only see
relative positions, so their values agree to float rounding; models with an absolute position table (GPT-2's
``wpe``, OPT's and BioGPT's ``embed_positions``, ...) are read at shifted positions and give other log-probs and
readouts (a tiny GPT-2, prompts of 3 and 7 tokens: up to 0.36 in log-probs, 0.07 in block-0 readouts).

:func:`mask_positions` passes ``position_ids`` computed from the attention mask into such models for the duration of
a forward, through a pre-hook on the module that owns the position table; RoPE / ALiBi models are left exactly as
they are (no hook). :func:`check_position_ids_supported` refuses, at construction, a model with an absolute position
table whose forward takes no ``position_ids``.
"""

from __future__ import annotations

import contextlib
import inspect
import logging

import torch
from torch import nn

from trl_explore.trl_guards.models import unwrap_model

logger = logging.getLogger(__name__)

ABSOLUTE_POSITION_TABLES = ("wpe", "embed_positions", "position_embeddings")
"""Attribute names of learned or sinusoidal absolute position tables in transformers' causal LMs (GPT-2, GPT-Neo,
GPTBigCode: ``wpe``; OPT, BioGPT, XGLM: ``embed_positions``; others: ``position_embeddings``)."""


def positions_from_mask(attention_mask: torch.Tensor, length: int | None = None) -> torch.Tensor:
    """Position ids numbered from each row's first attended token, as ``generate`` numbers them.

    ``cumsum(mask) - 1`` on attended tokens; masked tokens get 1 (``generate``'s filler; they are never attended to).

    Args:
        attention_mask: ``[B, T]`` of 0/1 (left, right or both-side padding).
        length: keep the last ``length`` columns (a forward over the last ``length`` tokens); default all ``T``.

    Returns:
        ``LongTensor[B, length]`` on the mask's device.

    Raises:
        ValueError: the mask is not 2-D, or ``length`` is not in ``[1, T]``.
    """
    if attention_mask.dim() != 2:
        raise ValueError(f"attention_mask must be 2-D [B, T], got shape {tuple(attention_mask.shape)}")
    length = attention_mask.shape[1] if length is None else length
    if not 1 <= length <= attention_mask.shape[1]:
        raise ValueError(f"length must be in [1, {attention_mask.shape[1]}], got {length}")
    mask = attention_mask.long()
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    return positions[:, -length:]


def absolute_position_owner(model: nn.Module) -> nn.Module | None:
    """The submodule of ``model`` whose direct child is an absolute position table (``ABSOLUTE_POSITION_TABLES``),
    e.g. ``GPT2Model`` for GPT-2; ``None`` for RoPE / ALiBi models (nothing to do for them)."""
    for module in unwrap_model(model).modules():
        if any(module._modules.get(name) is not None for name in ABSOLUTE_POSITION_TABLES):  # registered children
            return module
    return None


def _takes_position_ids(module: nn.Module) -> bool:
    return "position_ids" in inspect.signature(module.forward).parameters


def check_position_ids_supported(model: nn.Module) -> None:
    """Raise ``ValueError`` if ``model`` has an absolute position table but its forward takes no ``position_ids``:
    its left-padded rows could not be scored at the positions ``generate`` used."""
    owner = absolute_position_owner(model)
    if owner is not None and not _takes_position_ids(owner):
        config = getattr(unwrap_model(model), "config", None)
        model_type = getattr(config, "model_type", type(unwrap_model(model)).__name__)
        raise ValueError(
            f"model type {model_type!r} has absolute position embeddings ({type(owner).__name__}) but its forward "
            "takes no position_ids: left-padded prompts would be scored at shifted positions. Use a model with "
            "rotary or ALiBi positions, or one whose forward accepts position_ids"
        )


@contextlib.contextmanager
def mask_positions(model: nn.Module):
    """Within the context, forwards of ``model`` that pass no ``position_ids`` get them from their attention mask.

    A no-op for models without an absolute position table (RoPE, ALiBi): their forwards are untouched. Otherwise a
    forward pre-hook on the owner of the table (:func:`absolute_position_owner`) fills ``position_ids`` from the
    ``attention_mask`` argument, over the forward's last ``input_ids`` / ``inputs_embeds`` columns. It fires through
    DDP / DeepSpeed / PEFT wrappers, which call the inner modules.

    Raises:
        ValueError: (at entry) see :func:`check_position_ids_supported`.
    """
    owner = absolute_position_owner(model)
    if owner is None:
        yield
        return
    check_position_ids_supported(model)
    signature = inspect.signature(owner.forward)
    slot = list(signature.parameters).index("position_ids")

    def fill_positions(module, args, kwargs):
        given = signature.bind_partial(*args, **kwargs).arguments
        mask, ids = given.get("attention_mask"), given.get("input_ids")
        ids = given.get("inputs_embeds") if ids is None else ids
        if given.get("position_ids") is not None or mask is None or ids is None or mask.dim() != 2:
            return None
        positions = positions_from_mask(mask, ids.shape[1])
        if len(args) > slot:  # passed positionally (as None)
            return (*args[:slot], positions, *args[slot + 1 :]), kwargs
        return args, {**kwargs, "position_ids": positions}

    handle = owner.register_forward_pre_hook(fill_positions, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def position_table_size(model: nn.Module) -> int | None:
    """The number of positions the policy was built for (``max_position_embeddings`` of its text config), or None."""
    config = getattr(unwrap_model(model), "config", None)
    if config is None:
        return None
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    size = getattr(text_config, "max_position_embeddings", None) or getattr(text_config, "n_positions", None)
    return int(size) if size else None


def context_length_problem(model: nn.Module, prompt_lengths, max_completion_length: int) -> tuple[str, str] | None:
    """``("error" | "warning", message)`` when prompts (plus completions) run past the policy's position table.

    A model with an absolute position table (:func:`absolute_position_owner`) cannot read a position past it (an
    index error inside ``generate``): a prompt longer than the table is an error. A prompt whose completion may run
    past it (prompt + ``max_completion_length``), or a RoPE / ALiBi model read past its table (it runs, at positions
    it was not trained on, e.g. with rope scaling on purpose), is a warning. TRL truncates no prompt.

    Args:
        prompt_lengths: tokens per prompt (one process's batch).
        max_completion_length: TRL's limit on new tokens.
    """
    size = position_table_size(model)
    lengths = list(prompt_lengths)
    if size is None or not lengths:
        return None
    longest = max(range(len(lengths)), key=lambda i: lengths[i])
    tokens = lengths[longest]
    if tokens + max_completion_length <= size:
        return None
    absolute = absolute_position_owner(model) is not None
    what = (f"row {longest} of the generation batch has a prompt of {tokens} tokens, and the policy's position table "
            f"(max_position_embeddings) holds {size}")
    if absolute and tokens >= size:
        return "error", (f"{what}: a model with absolute positions cannot read past it. Shorten or filter the "
                         "prompts (e.g. drop rows whose tokenised prompt is longer than the table)")
    if tokens >= size:
        return "warning", (f"{what}: the model reads it at positions it was not trained on. Shorten or filter the "
                           "prompts, or use a model with a longer context (warned once)")
    crash = ", an index error for a model with absolute positions" if absolute else ""
    return "warning", (f"{what}: with max_completion_length={max_completion_length} a completion can run past it "
                       f"({tokens + max_completion_length} positions){crash}. Lower max_completion_length or shorten "
                       "the prompts (warned once)")


def check_context_length(model: nn.Module, prompt_lengths, max_completion_length: int, warned: bool = False) -> bool:
    """Raise the error of :func:`context_length_problem`, or log its warning unless ``warned``; returns whether a
    warning has been logged now or before (keep it for the next call)."""
    problem = context_length_problem(model, prompt_lengths, max_completion_length)
    if problem is not None and problem[0] == "error":
        raise ValueError(problem[1])
    if problem is not None and not warned:
        logger.warning(problem[1])
        return True
    return warned
