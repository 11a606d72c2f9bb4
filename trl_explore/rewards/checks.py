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


def not_scored_counts(rewards_per_func: torch.Tensor, names: Sequence[str]) -> dict[str, int]:
    """How many rewards of the generation batch were "not scored" (None, NaN in TRL's table).

    Args:
        rewards_per_func: ``[B, F]`` rewards (NaN where a function returned None).
        names: the ``F`` reward functions' names, in column order.

    Returns:
        ``{"rewards/<name>/not_scored": count}`` per function, and ``"rewards/unscorable"``: the rows where every
        function returned None (TRL gives them advantage 0).
    """
    missing = torch.isnan(rewards_per_func)
    counts = {f"rewards/{name}/not_scored": int(missing[:, j].sum()) for j, name in enumerate(names)}
    counts["rewards/unscorable"] = int(missing.all(dim=1).sum()) if missing.shape[1] else 0
    return counts


def non_binary_values(values: torch.Tensor, limit: int = 5) -> list[float]:
    """The distinct values of a correctness reward outside ``{0, 1}`` (NaN, i.e. None, allowed), at most ``limit``.

    Args:
        values: ``[B]`` rewards of the function used as the verifier (ASE's ``correctness_reward_index``).
        limit: how many distinct offending values to return (smallest first).
    """
    values = values.detach().float().cpu()
    bad = values[~torch.isnan(values) & (values != 0) & (values != 1)]
    return torch.unique(bad)[:limit].tolist()


def _column_names(dataset) -> set[str]:
    """The columns of a ``Dataset``, ``IterableDataset`` (when its features are known) or list of row dicts."""
    names = getattr(dataset, "column_names", None)
    if names is None and isinstance(dataset, (list, tuple)) and dataset and isinstance(dataset[0], dict):
        names = list(dataset[0])
    return set(names or ())


def check_column_clash(datasets: dict, components) -> None:
    """Refuse a dataset column that a component would overwrite in the reward functions' kwargs.

    Args:
        datasets: ``{"train_dataset": ..., "eval_dataset": ...}`` (None values and dicts of datasets allowed).
        components: objects with ``reward_field_names`` (the trainer's components: the keys each one adds).

    Raises:
        ValueError: naming the dataset, the column and the component.
    """
    for where, dataset in datasets.items():
        parts = dataset.items() if isinstance(dataset, dict) else [(None, dataset)]
        for key, part in parts:
            columns = _column_names(part)
            for component in components:
                clash = sorted(columns & set(component.reward_field_names))
                if clash:
                    name = where if key is None else f"{where}[{key!r}]"
                    raise ValueError(
                        f"{name} has column(s) {clash}, which {type(component).__name__} adds to the reward "
                        f"functions' inputs itself; rename the column(s) (the component's fields are "
                        f"{list(component.reward_field_names)})"
                    )
