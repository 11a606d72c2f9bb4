"""DAPO's group filter (Yu et al. 2025, arXiv 2503.14476, §3.2, Eq. 11's constraint ``0 < |{o_i correct}| < G``)."""

from __future__ import annotations

import torch


def flat_groups(values: torch.Tensor, group_size: int, tolerance: float = 0.0) -> torch.Tensor:
    """``[G]`` bool: the groups whose values all agree (no advantage signal), True = flat.

    A group is flat when ``max - min <= tolerance`` over its values. With ``tolerance = 0`` (the default) that is
    exact equality: DAPO's "accuracy 0 or 1" for a 0/1 verifier, and no float noise decides (a standard deviation of
    equal floats can come out as ``1e-8`` rather than 0, which made NeMo-RL keep flat groups, its PR #4158); a
    positive tolerance treats graded rewards closer than it as equal. NaN counts as equal to NaN and unequal to any
    number (an unscored row beside scored ones is a difference; a group of unscored rows is flat).

    Args:
        values: ``[N]`` one value per completion, groups of ``group_size`` consecutive rows (TRL's order).
        group_size: completions per prompt.
        tolerance: the largest spread that still counts as flat, ``>= 0``.

    Raises:
        ValueError: ``N`` not a multiple of ``group_size``, or a negative tolerance.
    """
    if tolerance < 0:
        raise ValueError(f"flat_groups: tolerance must be >= 0, got {tolerance}")
    if values.numel() % group_size:
        raise ValueError(f"flat_groups: {values.numel()} values are not whole groups of {group_size}")
    grouped = values.detach().float().reshape(-1, group_size)
    missing = torch.isnan(grouped)
    all_missing, any_missing = missing.all(dim=1), missing.any(dim=1)
    low = grouped.masked_fill(missing, float("inf")).amin(dim=1)
    high = grouped.masked_fill(missing, -float("inf")).amax(dim=1)
    spread = torch.where(any_missing, torch.full_like(low, float("inf")), high - low)
    return all_missing | (spread <= tolerance)
