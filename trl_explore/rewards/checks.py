"""Checks on the rewards TRL computed, before they become advantages."""

from __future__ import annotations

import contextlib
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


GOLD_COLUMN_GUESSES = ("solution", "gold", "gold_answer", "ground_truth", "final_answer", "target", "label",
                      "answers", "output", "response")
"""Column names that often hold a data set's gold answers: the rename a message suggests, when one is there."""
PROMPT_COLUMN_GUESSES = ("question", "problem", "query", "input", "instruction", "messages")
"""Column names that often hold a data set's problems."""


def rename_example(columns, wanted: str) -> str:
    """``"'solution'"``: the column of ``columns`` a message suggests renaming to ``wanted`` (the first there of
    :data:`PROMPT_COLUMN_GUESSES` for ``"prompt"``, else of :data:`GOLD_COLUMN_GUESSES`; else the column whose name
    is closest to ``wanted``, e.g. ``'anwser'``), else ``"'<your column>'"``."""
    import difflib

    guesses = PROMPT_COLUMN_GUESSES if wanted == "prompt" else GOLD_COLUMN_GUESSES
    found = [c for c in guesses if c in set(columns) and c != wanted]
    if not found:  # a misspelling of the wanted name ('anwser', 'promt')
        found = difflib.get_close_matches(wanted, [c for c in columns if c != wanted], n=1, cutoff=0.75)
    return repr(found[0]) if found else "'<your column>'"


def empty_value_index(values) -> int | None:
    """The index of the first empty value of a column (None, a blank string, an empty list), or None when every
    value holds something. Numbers count as values (``0`` is a gold answer)."""
    for i, value in enumerate(values):
        if value is None or (isinstance(value, str) and not value.strip()) or (
                isinstance(value, (list, tuple)) and not value):
            return i
    return None


def _gold_columns(reward_funcs) -> dict[str, str]:
    """``{column: reward name}``: the gold-answer columns the reward functions read (``answer_column`` of a
    ``MathVerifyReward``, also through an ``OGERRewardFunction``'s ``verifier``)."""
    found = {}
    for func in reward_funcs:
        for reader in (func, getattr(func, "verifier", None)):
            column = getattr(reader, "answer_column", None)
            if isinstance(column, str):
                found.setdefault(column, getattr(reader, "__name__", type(reader).__name__))
    return found


def check_gold_columns(datasets: dict, reward_funcs) -> None:
    """Refuse, when the trainer is built, a dataset without the gold-answer column its reward reads, or with an empty
    gold answer in it (map-style datasets; an ``IterableDataset`` whose columns are unknown is checked at its first
    batch by the reward itself).

    Args:
        datasets: ``{"train_dataset": ..., "eval_dataset": ...}`` (None values and dicts of datasets allowed).
        reward_funcs: the trainer's reward functions (:func:`_gold_columns` finds the columns they read).

    Raises:
        ValueError: naming the dataset, the column, the columns there are and the fix; or the row and the field.
    """
    golds = _gold_columns(reward_funcs)
    for where, dataset in datasets.items():
        parts = dataset.items() if isinstance(dataset, dict) else [(None, dataset)]
        for key, part in parts:
            columns = getattr(part, "column_names", None)
            if part is None or columns is None:
                continue
            name = where if key is None else f"{where}[{key!r}]"
            for column, reward in golds.items():
                if column not in columns:
                    guess = rename_example(columns, column)
                    raise ValueError(
                        f"{name} has no {column!r} column, where the reward {reward!r} reads each row's gold answer "
                        f"(its columns: {sorted(columns)}); rename the column that holds the gold answers, e.g. "
                        f"dataset.rename_column({guess}, {column!r}), or pass MathVerifyReward(answer_column={guess}) "
                        f"in reward_funcs"
                    )
                if hasattr(part, "__len__"):  # map-style: the column is read once
                    index = empty_value_index(part[column])
                    if index is not None:
                        raise ValueError(f"{name}, row {index}: the {column!r} field is empty; give every row its "
                                         f"gold answer, or drop the row (dataset.filter)")


def check_reward_values(values, name: str) -> None:
    """Refuse a reward function's output that TRL cannot turn into rewards, naming the function and the completion.

    TRL takes one value per completion: a real number (``float``, ``int``, ``bool``, a NumPy or 0-d tensor scalar) or
    ``None`` ("not scored"); anything else (a string such as ``"1.0"``, a list) fails in ``torch.tensor`` with "too
    many dimensions 'str'" or "must be real number", naming no function.

    Args:
        values: what the reward function returned.
        name: its name (TRL's ``reward_func_names`` entry).

    Raises:
        TypeError: naming the function, the first bad completion index, its value and type, and the fix.
    """
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise TypeError(f"reward function {name!r} returned a {type(values).__name__} ({values!r:.60}); return a list "
                        "with one float per completion (None: not scored)")
    for i, value in enumerate(values):
        if value is None:
            continue
        ok = not isinstance(value, (str, bytes))
        try:
            float(value)
        except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of more than one element
            ok = False
        if not ok:
            raise TypeError(f"reward function {name!r} returned {value!r:.60} ({type(value).__name__}) for completion "
                            f"{i}: return one float per completion (None: not scored), e.g. float(value)")


def checked_reward_function(func, name: str):
    """``func`` (a reward function, sync or async) whose every output goes through :func:`check_reward_values`.

    The driver hands these to TRL's ``_calculate_rewards`` for the duration of one call; TRL's reward names, weights
    and the functions the trainer holds are unchanged.
    """
    from trl.trainer.utils import is_async_callable

    if is_async_callable(func):
        async def checked_async(*args, **kwargs):
            values = await func(*args, **kwargs)
            check_reward_values(values, name)
            return values

        return checked_async

    def checked(*args, **kwargs):
        values = func(*args, **kwargs)
        check_reward_values(values, name)
        return values

    return checked


@contextlib.contextmanager
def checked_reward_functions(trainer):
    """For the duration of the context, ``trainer.reward_funcs`` holds each plain reward function wrapped by
    :func:`checked_reward_function` (models are kept as they are); restored afterwards."""
    funcs = trainer.reward_funcs
    trainer.reward_funcs = [f if isinstance(f, torch.nn.Module) else checked_reward_function(f, name)
                            for f, name in zip(funcs, trainer.reward_func_names)]
    try:
        yield
    finally:
        trainer.reward_funcs = funcs


def unscored_correctness_warning(values: torch.Tensor, name: str, index: int) -> str | None:
    """The warning for a generation batch whose correctness reward scored nothing (all None / NaN), or None.

    ASE labels rollouts correct or incorrect from this reward; with none scored there is no contrast pair, and the
    bank update is skipped (the bank kept). A reward may mean it for a batch (e.g. golds it cannot parse), so this is a
    warning, given once by the caller.

    Args:
        values: ``[B]`` rewards of the function (gathered); name: its name; index: ``correctness_reward_index``.
    """
    if values.numel() == 0 or not torch.isnan(values).all():
        return None
    return (f"ASE: the correctness reward {name!r} (correctness_reward_index={index}) scored none of the "
            f"{values.numel()} rollouts of this generation (all None/NaN): no contrast pairs, the bank update is "
            "skipped and the bank kept. Check the reward's inputs (e.g. the 'answer' column) and the index. Warned "
            "once")
