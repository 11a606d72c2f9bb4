"""Difficulty filter: keep the training problems whose measured pass rate lies in a range.

Dropping problems a policy never (or always) solves is a common RLVR practice: a GRPO group whose completions are
all wrong (or all right) has zero advantages and teaches nothing. The rates are data measured beforehand and
shipped with the package: ``pass_rates/smollm2_champ_train.json`` holds, for a sample of CHAMP training problems,
how many of ``k`` completions of the embedded SmolLM2-135M-Instruct were correct, for each completion-token budget
graded. The file names the model, ``k``, the sampling settings, the token budgets, the grader and the date; it is
written by ``benchmarks/demo_solve_rate.py --ship``, whose saved completions can be graded again
(``--grade-only``) when the grader changes.

Rates file format (JSON; :func:`load_pass_rates` validates it and names the file and the key of any bad value)::

    {
      "max_new_tokens": 256,                  # optional: the budget used when none is asked for
      "rates": {                              # required: one object per completion-token budget (a string)
        "256": {                              # budget -> {problem id -> entry}
          "P_Inequality_8": {"samples": 4, "correct": 1, "rate": 0.25},
          "P_Sequence_4": {"rate": 0.0},      # "samples" and "correct" are optional
          "P_Polynomial_9": 0.5,              # an entry may also be the rate itself
          "P_Sequence_11": {"rate": null}     # null: not gradable (left out)
        }
      },
      "model": "...", "k": 4, "date": "..."   # any other keys: free-form provenance (not read)
    }

A rate is a number in ``[0, 1]`` (or null); with ``samples`` and ``correct`` (integers, ``0 <= correct <=
samples``) it must equal ``correct / samples``. The problem ids are those of the dataset's ``problem_id`` column
(``id_column``). A filter that keeps no row raises :class:`EmptyFilterError` with the rates it saw.
"""

from __future__ import annotations

import json
import math
import pathlib
import statistics
from dataclasses import dataclass, field

SHIPPED_PASS_RATES = pathlib.Path(__file__).resolve().parent / "pass_rates" / "smollm2_champ_train.json"
"""Pass rates of the embedded policy on a sample of CHAMP training problems (see the module docstring)."""


class PassRatesFileError(ValueError):
    """A rates file that is not valid JSON or does not follow the format of the module docstring."""


class EmptyFilterError(ValueError):
    """The pass-rate filter kept no row (the message gives the rates seen, the thresholds and the fixes)."""


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _entry_rate(path, budget: str, pid: str, entry) -> float | None:
    """The rate of one entry of a rates file, checked (see the module docstring)."""
    where = f"{path}: rates[{budget!r}][{pid!r}]"
    if entry is None or _is_number(entry):
        rate, samples, correct = entry, None, None
    elif isinstance(entry, dict):
        if "rate" not in entry:
            raise PassRatesFileError(f"{where} has no 'rate' (keys: {sorted(entry)}); give it a number in [0, 1] or "
                                     "null")
        rate, samples, correct = entry["rate"], entry.get("samples"), entry.get("correct")
    else:
        raise PassRatesFileError(f"{where} = {entry!r}: expected a rate in [0, 1], null or an object with 'rate'")
    if rate is not None and not (_is_number(rate) and 0.0 <= rate <= 1.0):
        raise PassRatesFileError(f"{where}['rate'] = {rate!r}: a rate must be a number in [0, 1] or null")
    if samples is not None or correct is not None:
        ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (samples, correct))
        if not ints or not 0 <= correct <= samples or samples == 0:
            raise PassRatesFileError(f"{where}: samples={samples!r}, correct={correct!r}; need integers with "
                                     "0 <= correct <= samples and samples >= 1 (or leave both out)")
        if rate is not None and abs(rate - correct / samples) > 1e-9:
            raise PassRatesFileError(f"{where}['rate'] = {rate!r} but correct / samples = {correct}/{samples}")
    return None if rate is None else float(rate)


def load_pass_rates(path: str | pathlib.Path | None = None, max_new_tokens: int | None = None) -> dict[str, float]:
    """Measured pass rate of each problem id, for one completion-token budget (file format: module docstring).

    Args:
        path: a rates file, e.g. written by ``benchmarks/demo_solve_rate.py`` (default: :data:`SHIPPED_PASS_RATES`).
        max_new_tokens: the token budget whose grading to use (default: the file's ``max_new_tokens``, or its only
            budget). The shipped file grades the same samples cut at several budgets.

    Returns:
        ``{problem_id: rate}`` with ``rate`` in ``[0, 1]`` (``correct / samples``); problems whose rate is null
        (not gradable) are left out.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        PassRatesFileError: not JSON, or not the documented format (the message names the file and the bad key/value).
        KeyError: the file has no grading for ``max_new_tokens`` (the message lists the budgets it has).
    """
    path = SHIPPED_PASS_RATES if path is None else pathlib.Path(path)
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise PassRatesFileError(f"{path} is not valid JSON ({err}); format: see trl_explore.data.difficulty"
                                 ) from None
    if not isinstance(record, dict) or not isinstance(record.get("rates"), dict):
        found = sorted(record) if isinstance(record, dict) else type(record).__name__
        raise PassRatesFileError(f"{path} needs a top-level object with 'rates': {{budget: {{problem_id: entry}}}} "
                                 f"(found {found}); format: see trl_explore.data.difficulty")
    budgets = record["rates"]
    for budget, rates in budgets.items():
        if not str(budget).isdigit() or not isinstance(rates, dict):
            raise PassRatesFileError(f"{path}: rates[{budget!r}] must be a completion-token budget (digits) "
                                     f"mapping to {{problem_id: entry}}, got {type(rates).__name__}")
    if max_new_tokens is None:
        default = record.get("max_new_tokens")
        if default is None and len(budgets) != 1:
            raise PassRatesFileError(f"{path} grades budgets {sorted(budgets, key=int)} tokens and names no "
                                     "'max_new_tokens': pass max_new_tokens (or add the key to the file)")
        budget = str(default) if default is not None else next(iter(budgets))
    else:
        budget = str(max_new_tokens)
    if budget not in budgets:
        raise KeyError(f"{path} has pass rates for completion budgets {sorted(budgets, key=int)} tokens, not {budget}")
    rates = {str(pid): _entry_rate(path, budget, pid, entry) for pid, entry in budgets[budget].items()}
    return {pid: rate for pid, rate in rates.items() if rate is not None}


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


def describe_rates(problem_ids, rates: dict[str, float]) -> str:
    """How many of ``problem_ids`` have a rate in ``rates``, and the min / median / max of those rates."""
    unique = list(dict.fromkeys(problem_ids))
    seen = [rates[pid] for pid in unique if pid in rates]
    if not seen:
        examples = ", ".join(repr(p) for p in unique[:3]) or "none"
        known = ", ".join(repr(p) for p in list(rates)[:3]) or "none"
        return (f"none of the dataset's {len(unique)} problem ids (e.g. {examples}) has a rate in the file, which has "
                f"{len(rates)} (e.g. {known})")
    return (f"{len(seen)} of the dataset's {len(unique)} problems have a measured rate: min {min(seen):.3g}, median "
            f"{statistics.median(seen):.3g}, max {max(seen):.3g}")


def filter_by_pass_rate(dataset, min_rate: float = 0.0, max_rate: float = 1.0, rates_file=None,
                        max_new_tokens: int | None = None, id_column: str = "problem_id"):
    """The rows of ``dataset`` whose measured pass rate lies in ``[min_rate, max_rate]`` (see :func:`pass_rate_mask`).

    Args:
        dataset: a ``datasets.Dataset`` with an ``id_column``.
        min_rate, max_rate: the inclusive range of pass rates to keep.
        rates_file, max_new_tokens: see :func:`load_pass_rates`.
        id_column: the column holding the problem ids the rates are keyed by.

    Returns:
        ``datasets.Dataset`` with at least one row.

    Raises:
        EmptyFilterError: no row kept; the message gives the thresholds, the budget, the file and the rates seen
            (:func:`describe_rates`).
        KeyError: ``dataset`` has no ``id_column`` (the message lists its columns), or see :func:`load_pass_rates`.
        PassRatesFileError: see :func:`load_pass_rates`.
        ValueError: see :func:`pass_rate_mask`.
    """
    if id_column not in dataset.column_names:
        raise KeyError(f"the pass-rate filter needs the column {id_column!r}; the dataset has {dataset.column_names}")
    rates = load_pass_rates(rates_file, max_new_tokens)
    ids = dataset[id_column]
    keep = pass_rate_mask(ids, rates, min_rate, max_rate)
    if not any(keep):
        budget = "the file's default budget" if max_new_tokens is None else f"{max_new_tokens} tokens"
        raise EmptyFilterError(
            f"the pass-rate filter kept 0 of {len(ids)} rows (min_rate={min_rate}, max_rate={max_rate}; rates graded "
            f"at {budget}, from {SHIPPED_PASS_RATES if rates_file is None else rates_file}): "
            f"{describe_rates(ids, rates)}; "
            "widen the range (--min_pass_rate / --max_pass_rate), or measure rates for these problems "
            "(benchmarks/demo_solve_rate.py) and pass them with --pass_rates_file"
        )
    return dataset.select([i for i, k in enumerate(keep) if k])


@dataclass
class PassRateFilterArguments:
    """Script options of the difficulty filter (mixed into the example scripts' ``ScriptArguments``)."""

    min_pass_rate: float | None = field(
        default=None,
        metadata={"help": "Keep only the training problems whose measured pass rate is at least this (None: no "
                  "filter). Rates: pass_rates_file; problems without a measured rate are dropped. The CPU recipes use "
                  "no filter (docs/offline-datasets.md)."},
    )
    max_pass_rate: float = field(
        default=1.0, metadata={"help": "With min_pass_rate: keep only problems whose pass rate is at most this."}
    )
    pass_rates_file: str | None = field(
        default=None,
        metadata={"help": "JSON of measured pass rates, {'rates': {'<max_new_tokens>': {'<problem_id>': "
                  "{'rate': r}}}} (format: trl_explore.data.difficulty; benchmarks/demo_solve_rate.py writes one). "
                  "Default: the shipped rates of the embedded SmolLM2 on CHAMP training problems, graded at the run's "
                  "max_completion_length."},
    )

    def filter_dataset(self, dataset, max_completion_length: int | None = None):
        """``dataset`` filtered by pass rate when ``min_pass_rate`` is set, else unchanged (see
        :func:`filter_by_pass_rate`; the rates graded at ``max_completion_length`` tokens)."""
        if self.min_pass_rate is None:
            return dataset
        return filter_by_pass_rate(dataset, self.min_pass_rate, self.max_pass_rate, self.pass_rates_file,
                                   max_completion_length)
