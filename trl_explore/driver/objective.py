"""Rows taken out of TRL's objective (``Component.drop_rows``): the pure parts of the driver's rule.

A dropped row leaves TRL 1.16's objective with its normaliser, for every ``loss_type``: the driver counts the
generation batch's loss tokens without it (:func:`kept_items`, TRL's ``num_items_in_batch`` of the ``dapo`` /
``cispo`` / ``vespo`` losses) and hands TRL's ``_compute_loss`` each micro-batch without it (:func:`take_rows`), so
the per-row means of ``grpo`` / ``sapo`` / ``luspo``, the ``B x max_completion_length`` of ``dr_grpo`` and the token
count of ``bnpo`` are those of the smaller batch. :func:`objective_share` gives the factor back to the whole batch's
normaliser, for a component that trains the dropped rows itself under one normaliser (OGER's teacher rows).
"""

from __future__ import annotations

import torch

DROPPED = "dropped_from_objective"
"""Batch key (``[B]`` bool) of the rows the components dropped (``Component.drop_rows``)."""

ITEMS_BEFORE_DROPS = "num_items_before_drops"
"""Batch key (0-d) of TRL's ``num_items_in_batch`` before the drops (every loss token of the generation batch)."""

ROW_NORMALISED = ("grpo", "sapo", "dr_grpo", "luspo")
"""TRL 1.16 losses normalised per row of the micro-batch (``mean`` over rows, or ``B x max_completion_length``)."""

MICRO_TOKEN_NORMALISED = ("bnpo",)
"""Normalised by the micro-batch's loss-token count."""

BATCH_TOKEN_NORMALISED = ("dapo", "cispo", "vespo")
"""Normalised by ``num_items_in_batch``, the loss tokens of the whole generation batch (all processes)."""


def loss_mask(batch: dict) -> torch.Tensor:
    """``[B, T]`` TRL's loss mask: ``completion_mask`` times ``tool_mask`` when there is one."""
    mask = batch["completion_mask"]
    return mask * batch["tool_mask"] if "tool_mask" in batch else mask


def kept_items(mask: torch.Tensor, dropped: torch.Tensor) -> torch.Tensor:
    """0-d: the loss tokens of the rows not dropped (this process's; the driver sums it over processes).

    Args:
        mask: ``[B, T]`` 0/1 loss mask (:func:`loss_mask`).
        dropped: ``[B]`` bool.
    """
    return (mask * (~dropped).unsqueeze(1).to(mask.dtype)).sum()


def take_rows(batch: dict, keep: torch.Tensor) -> dict:
    """The batch restricted to the rows where ``keep`` (``[B]`` bool) is True: every tensor whose first dimension is
    ``B`` and every list of length ``B`` is indexed; 0-d tensors and other values are kept as they are (TRL's own
    split treats batch values the same way)."""
    num_rows = keep.numel()
    index = keep.nonzero().squeeze(1)
    out = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.size(0) == num_rows:
            out[key] = value.index_select(0, index.to(value.device))
        elif isinstance(value, list) and len(value) == num_rows:
            out[key] = [v for v, k in zip(value, keep.tolist()) if k]
        else:
            out[key] = value
    return out


def objective_share(loss_type: str, dropped: torch.Tensor, mask: torch.Tensor, num_items_kept=None,
                    num_items_all=None) -> torch.Tensor:
    """0-d factor ``s`` such that ``s x`` (TRL's policy objective over the kept rows) is the same sum normalised as
    over every row: ``kept rows / rows`` for the row-normalised losses (:data:`ROW_NORMALISED`), ``kept tokens /
    tokens`` of the micro-batch for ``bnpo``, ``num_items_kept / num_items_all`` for the generation-batch token
    losses (:data:`BATCH_TOKEN_NORMALISED`). 1 when nothing is dropped.

    Args:
        loss_type: TRL's ``loss_type``.
        dropped: ``[B]`` bool.
        mask: ``[B, T]`` 0/1 loss mask of the micro-batch.
        num_items_kept, num_items_all: the generation batch's loss tokens without and with the dropped rows (0-d or
            numbers), for the :data:`BATCH_TOKEN_NORMALISED` losses.

    Raises:
        ValueError: a ``loss_type`` TRL 1.16 does not define; a token-normalised loss without the two counts.
    """
    dropped = dropped.bool()
    if loss_type in ROW_NORMALISED:
        return (~dropped).sum().float() / max(dropped.numel(), 1)
    if loss_type in MICRO_TOKEN_NORMALISED:
        mask = mask.float()
        return kept_items(mask, dropped) / mask.sum().clamp(min=1.0)
    if loss_type in BATCH_TOKEN_NORMALISED:
        if num_items_kept is None or num_items_all is None:
            raise ValueError(f"objective_share: loss_type={loss_type!r} needs num_items_kept and num_items_all")
        return torch.as_tensor(num_items_kept, dtype=torch.float32) / torch.as_tensor(
            num_items_all, dtype=torch.float32).clamp(min=1.0)
    raise ValueError(f"objective_share: unknown loss_type {loss_type!r}; TRL 1.16 has "
                     f"{', '.join(ROW_NORMALISED + MICRO_TOKEN_NORMALISED + BATCH_TOKEN_NORMALISED)}")


def batch_objective_share(loss_type: str, batch: dict, dropped: torch.Tensor) -> torch.Tensor:
    """:func:`objective_share` of a micro-batch as TRL's loss receives it (its loss mask, ``num_items_in_batch``
    counted without the dropped rows and :data:`ITEMS_BEFORE_DROPS`)."""
    return objective_share(loss_type, dropped, loss_mask(batch), batch["num_items_in_batch"],
                           batch.get(ITEMS_BEFORE_DROPS))
