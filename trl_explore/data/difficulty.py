"""Difficulty filter: keep the training problems whose measured pass rate lies in a range.

Dropping problems a policy never (or always) solves is a common RLVR practice: a GRPO group whose completions are
all wrong (or all right) has zero advantages and teaches nothing. The rates are data measured beforehand and
shipped with the package: ``pass_rates/smollm2_champ_train.json`` holds, for a sample of CHAMP training problems,
how many of ``k`` completions of the embedded SmolLM2-135M-Instruct were correct, for each completion-token budget
graded. The file names the model, ``k``, the sampling settings, the token budgets, the grader and the date; it is
written by ``benchmarks/demo_solve_rate.py --ship``, whose saved completions can be graded again
(``--grade-only``) when the grader changes.
"""

from __future__ import annotations

import json
import math
import pathlib
from dataclasses import dataclass, field

SHIPPED_PASS_RATES = pathlib.Path(__file__).resolve().parent / "pass_rates" / "smollm2_champ_train.json"
"""Pass rates of the embedded policy on a sample of CHAMP training problems (see the module docstring)."""


def load_pass_rates(path: str | pathlib.Path | None = None, max_new_tokens: int | None = None) -> dict[str, float]:
    """Measured pass rate of each problem id, for one completion-token budget.

    Args:
        path: a file written by ``benchmarks/demo_solve_rate.py`` (default: :data:`SHIPPED_PASS_RATES`).
        max_new_tokens: the token budget whose grading to use (default: the budget the samples were generated
            with, ``max_new_tokens`` in the file). The file grades the same samples cut at several budgets.

    Returns:
        ``{problem_id: rate}`` with ``rate = correct / samples`` in ``[0, 1]``; problems whose gold answer could not
        be graded are left out.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        KeyError: the file has no grading for ``max_new_tokens`` (the message lists the budgets it has).
    """
    path = SHIPPED_PASS_RATES if path is None else pathlib.Path(path)
    record = json.loads(path.read_text())
    budget = str(record["max_new_tokens"] if max_new_tokens is None else max_new_tokens)
    if budget not in record["rates"]:
        raise KeyError(f"{path} has pass rates for completion budgets {sorted(record['rates'], key=int)} tokens, "
                       f"not {budget}")
    return {pid: entry["rate"] for pid, entry in record["rates"][budget].items() if entry["rate"] is not None}


def pass_rate_mask(problem_ids, rates: dict[str, float], min_rate: float = 0.0, max_rate: float = 1.0) -> list[bool]:
    """Which problems to keep: those with a measured rate ``r`` and ``min_rate <= r <= max_rate``.

    Args:
        problem_ids: the ids of the rows, in order.
        rates: ``{problem_id: rate}`` (:func:`load_pass_rates`).
        min_rate, max_rate: the inclusive range, ``0 <= min_rate <= max_rate <= 1``. A problem without a
            measured rate is never kept (its difficulty is unknown).

    Returns:
        One bool per row.

    Raises:
        ValueError: the range is not inside ``[0, 1]`` or ``min_rate > max_rate``.
    """
    bounds_ok = all(isinstance(v, (int, float)) and math.isfinite(v) for v in (min_rate, max_rate))
    if not bounds_ok or not 0.0 <= min_rate <= max_rate <= 1.0:
        raise ValueError(f"need 0 <= min_rate <= max_rate <= 1, got min_rate={min_rate}, max_rate={max_rate}")
    return [pid in rates and min_rate <= rates[pid] <= max_rate for pid in problem_ids]


def filter_by_pass_rate(dataset, min_rate: float = 0.0, max_rate: float = 1.0, rates_file=None,
                        max_new_tokens: int | None = None, id_column: str = "problem_id"):
    """The rows of ``dataset`` whose measured pass rate lies in ``[min_rate, max_rate]`` (see :func:`pass_rate_mask`).

    Args:
        dataset: a ``datasets.Dataset`` with an ``id_column``.
        min_rate, max_rate: the inclusive range of pass rates to keep.
        rates_file, max_new_tokens: see :func:`load_pass_rates`.
        id_column: the column holding the problem ids the rates are keyed by.

    Returns:
        ``datasets.Dataset`` (possibly empty: the caller decides whether that is an error).

    Raises:
        KeyError: ``dataset`` has no ``id_column`` (the message lists its columns), or see :func:`load_pass_rates`.
        ValueError: see :func:`pass_rate_mask`.
    """
    if id_column not in dataset.column_names:
        raise KeyError(f"the pass-rate filter needs the column {id_column!r}; the dataset has {dataset.column_names}")
    rates = load_pass_rates(rates_file, max_new_tokens)
    keep = pass_rate_mask(dataset[id_column], rates, min_rate, max_rate)
    return dataset.select([i for i, k in enumerate(keep) if k])


@dataclass
class PassRateFilterArguments:
    """Script options of the difficulty filter (mixed into the example scripts' ``ScriptArguments``)."""

    min_pass_rate: float | None = field(
        default=None,
        metadata={"help": "Keep only the training problems whose measured pass rate is at least this (None: no "
                  "filter). Rates: pass_rates_file; problems without a measured rate are dropped. The CPU demos use "
                  "0.25: problems the embedded policy solved at least once in 4 samples."},
    )
    max_pass_rate: float = field(
        default=1.0, metadata={"help": "With min_pass_rate: keep only problems whose pass rate is at most this."}
    )
    pass_rates_file: str | None = field(
        default=None,
        metadata={"help": "JSON of measured pass rates (benchmarks/demo_solve_rate.py). Default: the shipped rates of "
                  "the embedded SmolLM2 on CHAMP training problems, graded at the run's max_completion_length."},
    )

    def filter_dataset(self, dataset, max_completion_length: int | None = None):
        """``dataset`` filtered by pass rate when ``min_pass_rate`` is set, else unchanged (see
        :func:`filter_by_pass_rate`; the rates graded at ``max_completion_length`` tokens)."""
        if self.min_pass_rate is None:
            return dataset
        return filter_by_pass_rate(dataset, self.min_pass_rate, self.max_pass_rate, self.pass_rates_file,
                                   max_completion_length)
