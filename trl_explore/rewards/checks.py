"""Checks on the rewards TRL computed, before they become advantages."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def check_finite_rewards(rewards_per_func: torch.Tensor, names: Sequence[str]) -> None:
    """Raise on an infinite reward; NaN stays TRL's "not scored" (a ``None`` reward).

    One ``+inf`` would make its group's mean and std infinite and silently zero every advantage of the group
    (Eq. 9), so it is an error, not a value.

    Args:
        rewards_per_func: ``[B, F]`` rewards of the generation batch (NaN where a function returned None).
        names: the ``F`` reward functions' names, in column order.

    Raises:
        ValueError: naming the first infinite entry's reward function and row, and how many there are.
    """
    infinite = torch.isinf(rewards_per_func)
    if infinite.any():
        row, column = (int(i) for i in infinite.nonzero()[0])
        raise ValueError(
            f"reward function {names[column]!r} returned {rewards_per_func[row, column].item()} for row {row} of the "
            f"generation batch ({int(infinite.sum())} infinite rewards in all); return a finite value, or None for "
            "'not scored'"
        )
