"""The verifiable math reward ``R_m in {0, 1}`` as a TRL reward function, and the verdict API.

The verdict itself (modes, guard-rails, recall) is :mod:`trl_explore.rewards.grading`; this module runs it on a
pool of worker processes with a wall-clock timeout per completion, and exposes it the ways the package needs:

* :class:`MathVerifyReward` / :data:`math_reward`: TRL's ``reward_funcs`` signature. ``R_m`` of OGER (Eq. 7-8) and
  the verifier of ASE-GRPO (§3.1).
* :func:`verify_answer`, :func:`grade_batch`: verdicts for one pair or a batch (the offline builder and the
  evaluation call these, with the same mode option, so a training reward and an evaluation score of the same text
  never disagree).
* :func:`extract_answer`, :func:`parse_gold`: the final answer as text, and a gold's parsed forms.

Timeouts. math-verify's own timeout uses ``signal.alarm`` (main thread only), and nothing inside one Python process
can stop sympy in the middle of one long C call (``9^(9^9)``). So every call runs in a ``pebble.ProcessPool`` worker
(forked from this process) with a per-task timeout: a task past ``timeout_seconds`` is killed with its worker, which
pebble replaces; the completion scores 0 and a warning is logged. ``num_workers`` workers grade a batch in parallel.
"""

from __future__ import annotations

import atexit
import logging
import math
import multiprocessing
import os
import threading
from collections.abc import Sequence
from concurrent.futures import TimeoutError as FutureTimeoutError
from typing import Any

from pebble import ProcessPool

from trl_explore.rewards.grading import (
    DEFAULT_MODE,
    GUARDS,
    MODES,
    GoldAnswerError,
    GraderOptions,
    completion_text,
    extract,
    grade,
    last_boxed_content,
    read_gold,
)
from trl_explore.rewards.guards import prompt_text

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 5.0
__all__ = [
    "DEFAULT_MODE", "DEFAULT_TIMEOUT_SECONDS", "GUARDS", "MODES", "GoldAnswerError", "GraderOptions",
    "MathVerifyReward", "completion_text", "extract_answer", "golds_parseable", "grade_batch", "last_boxed_content",
    "math_reward", "parse_gold", "verify_answer",
]  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Worker pool
# --------------------------------------------------------------------------------------------------


def _grade_task(
    text: str, gold: str, options: GraderOptions, prompt: str | None = None, terminated: bool | None = None
) -> tuple[str, Any]:
    """One verdict in a worker: ``("ok", bool)`` or ``("gold_error", message)``."""
    try:
        return "ok", grade(text, gold, options, prompt=prompt, terminated=terminated)
    except GoldAnswerError as err:
        return "gold_error", str(err)


def _gold_task(gold: str, keep_chained_equalities: bool, gold_normalizer=None) -> tuple[str, Any]:
    try:
        return "ok", read_gold(gold, keep_chained_equalities, gold_normalizer)
    except GoldAnswerError as err:
        return "gold_error", str(err)


def _warm_up() -> None:
    """Worker initializer: the first parse loads Math-Verify's LaTeX grammar (~0.4 s), outside any task's timeout."""
    grade(r"\boxed{x^2+1}", "x^2+1")


class _Pools:
    """One ``pebble.ProcessPool`` per worker count, started on first use, per process (a fork gets its own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: dict[int, tuple[int, ProcessPool]] = {}

    def get(self, num_workers: int) -> ProcessPool:
        with self._lock:
            owner, pool = self._pools.get(num_workers, (None, None))
            if pool is None or owner != os.getpid() or not pool.active:
                # fork: the workers share this process's imports (no re-import, no re-run of the main script)
                pool = ProcessPool(max_workers=num_workers, initializer=_warm_up,
                                   context=multiprocessing.get_context("fork"))
                self._pools[num_workers] = (os.getpid(), pool)
            return pool

    def stop(self) -> None:
        with self._lock:
            for owner, pool in self._pools.values():
                if owner == os.getpid():
                    pool.stop()
                    pool.join(timeout=5)
            self._pools.clear()


_POOLS = _Pools()
atexit.register(_POOLS.stop)


_MAX_CHUNK = 16  # tasks sent to a worker at once: fewer hand-offs through the parent on large batches


def _run_chunk(function, chunk: Sequence[tuple]) -> list:
    return [function(*task) for task in chunk]


def _run(function, tasks: Sequence[tuple], timeout_seconds: float, num_workers: int) -> list[tuple[str, Any]]:
    """``function(*task)`` for each task on the pool, in order; a task past the timeout gives ``("timeout", msg)``.

    Tasks travel in chunks (at most ``_MAX_CHUNK``, at least 4 chunks per worker) with the timeout of one task: the
    usual chunk of ~5 ms verdicts ends far within it. A chunk that does not (or whose worker dies) is run again one
    task at a time, each with its own timeout, so a task scores "timeout" only when it alone runs past the limit.
    """
    pool = _POOLS.get(num_workers)
    size = max(1, min(_MAX_CHUNK, len(tasks) // (4 * num_workers)))
    chunks = [tasks[i : i + size] for i in range(0, len(tasks), size)]
    futures = [pool.schedule(_run_chunk, args=(function, chunk), timeout=timeout_seconds) for chunk in chunks]
    results = []
    for chunk, future in zip(chunks, futures):
        outcome = _outcome(future, timeout_seconds)
        if outcome[0] == "ok":
            results += outcome[1]
        elif len(chunk) == 1:
            results.append(outcome)  # that one task failed: its timeout or error is its result
        else:  # a slow chunk, a dead worker or an error: each task again on its own, with its own timeout
            retried = [pool.schedule(function, args=task, timeout=timeout_seconds) for task in chunk]
            results += [_unwrap(_outcome(f, timeout_seconds)) for f in retried]
    return results


def _outcome(future, timeout_seconds: float) -> tuple[str, Any]:
    """``("ok", result)``, ``("timeout", message)`` or ``("error", repr)`` of a scheduled task."""
    try:
        return "ok", future.result()
    except FutureTimeoutError:
        return "timeout", f"no verdict within {timeout_seconds:.3g} s"
    except Exception as err:  # noqa: BLE001 - a worker that died or raised: reported per task
        return "error", repr(err)


def _unwrap(outcome: tuple[str, Any]) -> tuple[str, Any]:
    return outcome[1] if outcome[0] == "ok" else outcome


def _check_timeout(timeout_seconds: float) -> float:
    if not isinstance(timeout_seconds, (int, float)) or not math.isfinite(timeout_seconds) or timeout_seconds <= 0:
        raise ValueError(f"timeout_seconds must be a finite number > 0, got {timeout_seconds!r}")
    return float(timeout_seconds)


def _check_workers(num_workers: int) -> int:
    if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 1:
        raise ValueError(f"num_workers must be an integer >= 1, got {num_workers!r}")
    return num_workers


def _options(mode: str, guards: Sequence[str] | None, recall: bool, gold_normalizer=None) -> GraderOptions:
    if isinstance(guards, str):
        raise TypeError(f"guards must be a list of guard names (of {GUARDS}), got the string {guards!r}")
    return GraderOptions(mode=mode, guards=GUARDS if guards is None else frozenset(guards), recall=recall,
                         gold_normalizer=gold_normalizer)


def _gold_text(gold: Any, row: int) -> str | None:
    """A gold answer as text: strings and numbers as they are, bytes decoded, None kept (not scored).

    Raises ValueError for a list, tuple, set or dict (several answers in one row), naming the row.
    """
    if gold is None or isinstance(gold, str):
        return gold
    if isinstance(gold, bytes):
        return gold.decode("utf-8", errors="replace")
    if isinstance(gold, (list, tuple, set, dict)):
        raise ValueError(f"the gold answer of row {row} is a {type(gold).__name__} ({_short(repr(gold))}); "
                         "give one string per row")
    return str(gold)


def _short(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[: limit // 2] + " ... " + text[-limit // 2 :])


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------


def grade_batch(
    completions: Sequence[Any],
    golds: Sequence[Any],
    *,
    mode: str = DEFAULT_MODE,
    guards: Sequence[str] | None = None,
    recall: bool = True,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    num_workers: int = 1,
    prompts: Sequence[Any] | None = None,
    terminated: Sequence[bool | None] | None = None,
    outcomes: bool = False,
    gold_normalizer=None,
) -> list[bool | str | None]:
    """Verdicts for ``(completion, gold)`` pairs, graded on ``num_workers`` worker processes.

    Args:
        completions: completions (text or conversational; see ``completion_text``); any iterable.
        golds: their gold answers, same length (strings, numbers or bytes; None is not scored).
        mode: one of ``MODES`` (default ``"math_verify"``); see :mod:`trl_explore.rewards.grading`.
        guards: guard-rail classes to apply (default: all of ``GUARDS``).
        recall: apply the recall rules (default True).
        timeout_seconds: wall-clock limit per pair (default 5 s); past it the pair scores False and a warning
            is logged.
        num_workers: worker processes (default 1).
        prompts: the prompts (text or TRL messages), same length (default None: the ``"prompt_echo"`` guard does
            not judge).
        terminated: per completion, whether it ended with an EOS token (None entries: unknown), same length
            (default None: the ``"unterminated"`` guard does not judge).
        outcomes: give ``"timeout"`` for a pair past the timeout and ``"error"`` for one whose worker failed, instead
            of False with a warning (default False; the offline builder caches only real verdicts).
        gold_normalizer: a data set's phrasing rules for its golds (``GraderOptions.gold_normalizer``; e.g. CHAMP's
            ``trl_explore.data.champ_answers.gold_alternatives``); default None.

    Returns:
        ``list[bool | None]``: True/False, or None where the gold cannot be parsed (and, with ``outcomes``,
        ``"timeout"`` / ``"error"``).

    Raises:
        ValueError: lengths differ, ``golds`` is one string, a gold is a list or dict (naming the row), a bad mode
            or guard, ``timeout_seconds`` not > 0, ``num_workers`` < 1.
        TypeError: ``guards`` is a string instead of a list of names.
    """
    if isinstance(golds, (str, bytes)):
        raise ValueError(f"golds must be a sequence of gold answers, one per completion, got {_short(repr(golds))}")
    completions, golds = list(completions), list(golds)
    if len(completions) != len(golds):
        raise ValueError(f"{len(completions)} completions for {len(golds)} gold answers")
    prompt_texts = _per_row(prompts, "prompts", len(completions), prompt_text)
    ended = _per_row(terminated, "terminated", len(completions), lambda t: None if t is None else bool(t))
    options = _options(mode, guards, recall, gold_normalizer)
    timeout_seconds, num_workers = _check_timeout(timeout_seconds), _check_workers(num_workers)
    texts = [completion_text(c) for c in completions]
    tasks = [(text, _gold_text(gold, row), options, prompt_texts[row], ended[row])
             for row, (text, gold) in enumerate(zip(texts, golds))]  # fmt: skip
    verdicts: list[bool | str | None] = []
    for (text, gold, *_), (status, value) in zip(tasks, _run(_grade_task, tasks, timeout_seconds, num_workers)):
        if status == "ok":
            verdicts.append(bool(value))
        elif status == "gold_error":
            verdicts.append(None)
        elif outcomes:
            verdicts.append("timeout" if status == "timeout" else "error")
        else:  # a timeout, or an error on strange input: score 0, loudly
            logger.warning("grading scored 0 (%s) for completion %s against gold %s", value, _short(text),
                           _short(str(gold)))
            verdicts.append(False)
    return verdicts


def _per_row(values: Sequence[Any] | None, name: str, num_rows: int, convert) -> list:
    """``values`` converted, one per completion (all None when ``values`` is None); ValueError on another length."""
    if values is None:
        return [None] * num_rows
    if isinstance(values, (str, bytes)):
        raise ValueError(f"{name} must hold one entry per completion ({num_rows}), got one string")
    values = list(values)
    if len(values) != num_rows:
        raise ValueError(f"{len(values)} {name} for {num_rows} completions")
    return [convert(value) for value in values]


def verify_answer(
    completion: Any,
    gold: Any,
    *,
    mode: str = DEFAULT_MODE,
    guards: Sequence[str] | None = None,
    recall: bool = True,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    prompt: Any = None,
    terminated: bool | None = None,
    gold_normalizer=None,
) -> bool:
    """True iff the completion's final answer is equivalent to ``gold`` (``R_m``; OGER Eq. 7-8, ASE-GRPO §3.1).

    Args:
        completion: the completion; garbage (empty, 100k characters, unbalanced braces) gives False, never raises.
        gold: the gold answer, LaTeX or plain text (a number is converted with ``str``).
        mode, guards, recall, timeout_seconds: as in :func:`grade_batch`.
        prompt, terminated: the prompt and whether the completion ended with an EOS (default None: unknown), as
            ``prompts`` and ``terminated`` of :func:`grade_batch`.
        gold_normalizer: a data set's phrasing rules for its golds, as in :func:`grade_batch`.

    Raises:
        GoldAnswerError: ``gold`` cannot be parsed (or its parse timed out).
        ValueError: a bad option.
    """
    if gold is None:
        raise GoldAnswerError("gold answer is None")
    parse_gold(gold, timeout_seconds=timeout_seconds,
               keep_chained_equalities=guards is None or "chained_equality" in guards, gold_normalizer=gold_normalizer)
    (verdict,) = grade_batch(
        [completion], [gold], mode=mode, guards=guards, recall=recall, timeout_seconds=timeout_seconds,
        prompts=[prompt], terminated=[terminated], gold_normalizer=gold_normalizer,
    )  # fmt: skip
    if verdict is None:
        raise GoldAnswerError(f"gold answer {_short(str(gold))} cannot be parsed")
    return verdict


def parse_gold(gold: Any, *, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS, keep_chained_equalities: bool = True,
               gold_normalizer=None) -> list:
    """The accepted forms of a gold answer (see :func:`trl_explore.rewards.grading.read_gold`; ``gold_normalizer``: a
    data set's phrasing rules).

    Returns:
        A list as ``math_verify.parse`` returns it (sympy objects and texts), or ``["yes"]``/``["no"]``.

    Raises:
        GoldAnswerError: the gold cannot be parsed, or its parse timed out.
    """
    if gold is None:
        raise GoldAnswerError("gold answer is None")
    ((status, value),) = _run(_gold_task, [(str(gold), keep_chained_equalities, gold_normalizer)],
                              _check_timeout(timeout_seconds), 1)
    if status != "ok":
        raise GoldAnswerError(f"parsing gold answer {_short(str(gold))} failed: {value}")
    return value


def golds_parseable(golds: Sequence[Any], *, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS, num_workers: int = 1,
                    keep_chained_equalities: bool = True, gold_normalizer=None,
                    outcomes: bool = False) -> list[bool | str]:
    """Whether :func:`parse_gold` parses each gold (None, a timeout or a failed worker: False), in one pool call;
    with ``outcomes``, ``"timeout"`` / ``"error"`` instead of False for a gold past the timeout or whose worker failed
    (the offline builder caches only real answers)."""
    tasks = [(str(gold), keep_chained_equalities, gold_normalizer) for gold in golds]
    results = _run(_gold_task, tasks, _check_timeout(timeout_seconds), _check_workers(num_workers))
    if outcomes:
        return [status if status in ("timeout", "error") else gold is not None and status == "ok"
                for gold, (status, _) in zip(golds, results)]
    return [gold is not None and status == "ok" for gold, (status, _) in zip(golds, results)]


def extract_answer(
    completion: Any, *, mode: str = DEFAULT_MODE, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
) -> str | None:
    """The final answer of a completion as the mode reads it, as text; None when there is none (or on a timeout).

    Used for answer-disagreement metrics and evaluation logs. Never raises on bad input.
    """
    options = _options(mode, None, True)
    ((status, value),) = _run(_extract_task, [(completion_text(completion), options)],
                              _check_timeout(timeout_seconds), 1)
    return value if status == "ok" else None


def _extract_task(text: str, options: GraderOptions) -> tuple[str, Any]:
    return "ok", extract(text, options)


def _data_columns(kwargs: dict) -> list[str]:
    """The data set's columns among a reward call's kwargs: the per-row lists, without the kwargs TRL, the driver and
    the components add (the calling trainer's ``added_reward_kwargs``, read through TRL's bound ``log_metric``)."""
    trainer = getattr(kwargs.get("log_metric"), "__self__", None)
    added = set(getattr(trainer, "added_reward_kwargs", ())) | {"environments"}
    return sorted(k for k, v in kwargs.items() if isinstance(v, (list, tuple)) and k not in added)


class MathVerifyReward:
    """TRL reward function: 1.0 if a completion's final answer matches the gold answer, else 0.0.

    Pass an instance in ``GRPOTrainer(reward_funcs=[...])``. TRL calls it as
    ``reward(prompts=..., completions=..., completion_ids=..., **columns)``; the gold answers are read from the
    dataset column ``answer_column``. This is ``R_m`` of OGER (Eq. 7-8) and the verifier reward of ASE-GRPO (§3.1).

    The prompts feed the ``"prompt_echo"`` guard; ``completion_ids`` and the EOS ids the ``"unterminated"`` guard (a
    completion whose last id is not an EOS did not end). The EOS ids are ``eos_token_ids`` when given, else those
    of the ``GRPOTrainer`` that calls the reward: TRL 1.16 passes its bound ``_log_metric`` as the ``log_metric``
    keyword, and the reward reads that trainer's ``eos_token_ids`` and its tokenizer's pad id, the ids TRL's own
    ``mask_truncated_completions`` counts as an ending (``grpo_trainer.py``: ``eos_and_pad``). Called without
    either (the offline builder, the evaluation, a plain call), termination is unknown and that guard does not judge.

    Args:
        answer_column: the dataset column holding gold answers (default ``"answer"``).
        mode: grader mode, one of ``MODES`` (default ``"math_verify"``: Math-Verify's semantics plus the guard-rails
            and recall rules of :mod:`trl_explore.rewards.grading`); the ``grader_mode`` option of the configs.
        guards: guard-rail classes (default: all of ``GUARDS``).
        recall: apply the recall rules (default True).
        timeout_seconds: wall-clock limit per completion (default 5 s).
        num_workers: grading processes per call (default 1).
        name: ``__name__``, which TRL uses in metric names (default ``"math_reward"``).
        eos_token_ids: token ids that end a completion (default None: the calling trainer's, see above).
        gold_normalizer: the training data's phrasing rules for its golds (``GraderOptions.gold_normalizer``; CHAMP's:
            ``trl_explore.data.gold_normalizers.GOLD_NORMALIZERS["champ"]``, the function
            ``trl_explore.data.champ_answers.gold_alternatives``); default None.

    Rows whose gold answer cannot be parsed get ``None`` (TRL turns it into NaN and leaves it out of the reward
    sums). Each such row adds one to ``num_unparseable_gold``, and a warning is logged once per row id
    (``kwargs["problem_id"]`` if that column exists, else the gold text).

    Raises (from ``__call__``):
        ValueError: the answer column is missing (the message lists the columns that are there), or it, the prompts
            or the completion ids have a different length from ``completions``.
    """

    def __init__(
        self,
        answer_column: str = "answer",
        mode: str = DEFAULT_MODE,
        guards: Sequence[str] | None = None,
        recall: bool = True,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        num_workers: int = 1,
        name: str = "math_reward",
        eos_token_ids: Sequence[int] | None = None,
        gold_normalizer=None,
    ) -> None:
        self.answer_column = answer_column
        self.options = _options(mode, guards, recall, gold_normalizer)
        self.timeout_seconds = _check_timeout(timeout_seconds)
        self.num_workers = _check_workers(num_workers)
        self.__name__ = name
        self.eos_token_ids = None if eos_token_ids is None else frozenset(_check_ids(eos_token_ids))
        self._trainer_eos_ids: frozenset | None = None  # read from the calling trainer, once
        self.num_unparseable_gold = 0
        self._reported_rows: set = set()
        # The last call's (completions, golds, prompts, endings) and rewards: OGERRewardFunction calls this reward
        # again on the same batch right after TRL did, and gets the rewards without a second verification.
        self._last_call: tuple | None = None

    @property
    def mode(self) -> str:
        """The grader mode (one of ``MODES``)."""
        return self.options.mode

    def _ending_ids(self, log_metric: Any) -> frozenset | None:
        """The EOS ids (given, else the calling trainer's with its pad id, else the last trainer's), or None."""
        if self.eos_token_ids is not None:
            return self.eos_token_ids
        trainer = getattr(log_metric, "__self__", None)
        ids = getattr(trainer, "eos_token_ids", None)
        if ids is not None:
            pad = getattr(getattr(trainer, "_tokenizer", None), "pad_token_id", None)
            self._trainer_eos_ids = frozenset(int(i) for i in [*ids, *([] if pad is None else [pad])])
        return self._trainer_eos_ids

    def terminated(self, completion_ids: Sequence[Sequence[int]] | None, log_metric: Any = None) -> list | None:
        """Per completion, whether its last id is an EOS id (None when the ids or the EOS ids are unknown)."""
        ending = self._ending_ids(log_metric)
        if completion_ids is None or ending is None:
            return None
        return [None if len(ids) == 0 else int(ids[-1]) in ending for ids in completion_ids]

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs) -> list[float | None]:
        """Score each completion: 1.0, 0.0, or None when its gold answer cannot be parsed."""
        if completions is None:
            raise ValueError("MathVerifyReward needs `completions`")
        if self.answer_column not in kwargs:
            from trl_explore.rewards.checks import rename_example

            columns = _data_columns(kwargs)
            guess = rename_example(columns, self.answer_column)
            raise ValueError(
                f"MathVerifyReward reads each row's gold answer from the column {self.answer_column!r}, which the "
                f"data set does not have; its columns: {columns}. Rename the column that holds the gold answers "
                f"(dataset.rename_column({guess}, {self.answer_column!r})), or pass "
                f"MathVerifyReward(answer_column={guess}) in reward_funcs"
            )
        golds = kwargs[self.answer_column]
        if isinstance(golds, (str, bytes)):
            raise ValueError(f"column {self.answer_column!r} must hold one gold answer per completion, got one string")
        golds, completions = list(golds), list(completions)
        if len(golds) != len(completions):
            raise ValueError(
                f"column {self.answer_column!r} has {len(golds)} gold answers for {len(completions)} completions"
            )
        row_ids = kwargs.get("problem_id")
        if row_ids is not None and (isinstance(row_ids, (str, bytes)) or len(list(row_ids)) != len(completions)):
            raise ValueError(f"column 'problem_id' must hold one id per completion ({len(completions)}), "
                             f"got {row_ids!r}")
        if completion_ids is not None and len(completion_ids) != len(completions):
            raise ValueError(f"{len(completion_ids)} completion_ids for {len(completions)} completions")
        prompt_texts = _per_row(prompts, "prompts", len(completions), prompt_text)
        ended = self.terminated(completion_ids, kwargs.get("log_metric")) or [None] * len(completions)
        texts = tuple(completion_text(c) for c in completions)
        key = (texts, tuple(str(g) for g in golds), tuple(prompt_texts), tuple(ended))
        if self._last_call is not None and self._last_call[0] == key:
            return list(self._last_call[1])
        verdicts = grade_batch(
            list(texts), golds, mode=self.options.mode, guards=self.options.guards, recall=self.options.recall,
            timeout_seconds=self.timeout_seconds, num_workers=self.num_workers, prompts=prompt_texts, terminated=ended,
            gold_normalizer=self.options.gold_normalizer,
        )  # fmt: skip
        rewards: list[float | None] = []
        for row, (verdict, gold) in enumerate(zip(verdicts, golds)):
            if verdict is None:
                self._report_unparseable(row_ids[row] if row_ids is not None else gold, gold)
                rewards.append(None)
            else:
                rewards.append(1.0 if verdict else 0.0)
        self._last_call = (key, list(rewards))
        return rewards

    def _report_unparseable(self, row_id: Any, gold: Any) -> None:
        self.num_unparseable_gold += 1
        key = repr(row_id)  # hashable even for list-valued ids
        if key not in self._reported_rows:
            self._reported_rows.add(key)
            logger.warning("%s: no reward for row %s, its gold answer %s cannot be parsed", self.__name__, key,
                           _short(str(gold)))


def _check_ids(ids: Sequence[int]) -> list[int]:
    if isinstance(ids, int) and not isinstance(ids, bool):
        return [ids]
    values = list(ids)
    if not values or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in values):
        raise ValueError(f"eos_token_ids must be token ids (integers >= 0), as [tokenizer.eos_token_id]; got {ids!r}")
    return values


math_reward = MathVerifyReward()
