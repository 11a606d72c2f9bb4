"""Filters of OGER §3.1 / App. A.1: exact duplicates, length under the policy tokenizer, correctness.

Correctness uses the project's math reward (:mod:`trl_explore.rewards.math_verify_reward`, built on
Math-Verify, as in the paper); length is counted in tokens of the POLICY's tokenizer, text only
(``add_special_tokens=False``; the EOS the trainer appends is not counted).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from tqdm.auto import tqdm

logger = logging.getLogger(__name__)


def duplicate_flags(completions: Sequence[tuple[str, str]]) -> list[bool]:
    """Flag exact repeats of a ``(teacher, text)`` pair; the first occurrence is not a repeat.

    The same text from two different teachers is not a repeat (two distinct trajectories).

    Returns:
        ``list[bool]`` aligned with ``completions``: ``True`` for a repeat.
    """
    seen: set[tuple[str, str]] = set()
    flags = []
    for pair in completions:
        flags.append(pair in seen)
        seen.add(pair)
    return flags


def token_lengths(texts: Sequence[str], tokenizer, batch_size: int = 1024, cache=None) -> list[int]:
    """Length of each text in tokens of ``tokenizer``, without special tokens (each distinct text tokenised once).

    Args:
        texts: completions.
        tokenizer: a Hugging Face tokenizer (the policy's).
        batch_size: texts per tokenizer call.
        cache: a :class:`~trl_explore.data.build_cache.TokenLengthCache` of this tokenizer, or None: cached texts
            are not tokenised again, new lengths are added to it and saved.

    Returns:
        ``list[int]``, one length per text.
    """
    distinct = list(dict.fromkeys(texts))
    lengths: dict[str, int] = {}
    if cache is not None:
        lengths = {text: n for text, n in zip(distinct, cache.lookup(distinct)) if n is not None}
        distinct = [text for text in distinct if text not in lengths]
    for start in range(0, len(distinct), batch_size):
        batch = distinct[start : start + batch_size]
        lengths.update(zip(batch, (len(ids) for ids in tokenizer(batch, add_special_tokens=False)["input_ids"])))
    if cache is not None and distinct:
        cache.add(distinct, [lengths[text] for text in distinct])
        cache.save()
    return [lengths[text] for text in texts]


def gold_is_parseable(gold: str, gold_normalizer: str = "none") -> bool:
    """Whether the project's math verifier parses ``gold`` whole (else ``parse_gold`` raises ``GoldAnswerError``);
    ``gold_normalizer``: the data set's phrasing rules, by name (:mod:`trl_explore.data.gold_normalizers`)."""
    from trl_explore.data.gold_normalizers import GOLD_NORMALIZERS
    from trl_explore.rewards.math_verify_reward import GoldAnswerError, parse_gold

    try:
        parse_gold(gold, gold_normalizer=GOLD_NORMALIZERS[gold_normalizer])
    except GoldAnswerError:
        return False
    return True


TEACHER_VERDICTS_DESC = "Verifying teacher answers (cached after the first build)"
"""The progress bar's text while the builder grades teacher solutions."""
_SAVE_EVERY = 2048  # new verdicts between two saves of the cache: an interrupted build keeps most of its work


RETRY_TIMEOUT_SECONDS = 60.0
"""The second budget of a grading that ran past the first (``DEFAULT_TIMEOUT_SECONDS``, 5 s): a timeout says how
busy the machine was as much as how hard the solution is, so it is graded again once the batch is done."""


def golds_parseable(golds: Sequence[str], num_proc: int = 1, cache=None, gold_normalizer: str = "none",
                    timeout_seconds: float | None = None,
                    retry_timeout_seconds: float = RETRY_TIMEOUT_SECONDS) -> list[bool | None]:
    """:func:`gold_is_parseable` of each gold, on ``num_proc`` worker processes in one call; ``cache``: a
    :class:`~trl_explore.data.build_cache.VerdictCache` to read them from and add them to (None: no cache).

    A gold whose reading ran past ``timeout_seconds`` (default: the grader's 5 s) is read again with
    ``retry_timeout_seconds`` once the others are done; one that runs past both is undecided: None, not cached, and
    counted in a warning. A failed worker gives False, not cached."""
    from trl_explore.data.gold_normalizers import GOLD_NORMALIZERS
    from trl_explore.rewards.math_verify_reward import DEFAULT_TIMEOUT_SECONDS
    from trl_explore.rewards.math_verify_reward import golds_parseable as parseable

    timeout_seconds = DEFAULT_TIMEOUT_SECONDS if timeout_seconds is None else timeout_seconds
    known = cache.lookup_golds(golds) if cache is not None else [None] * len(golds)
    todo = list(dict.fromkeys(gold for gold, ok in zip(golds, known) if ok is None))
    normalizer = GOLD_NORMALIZERS[gold_normalizer]

    def read(texts, seconds):
        return dict(zip(texts, parseable(texts, num_workers=num_proc, gold_normalizer=normalizer,
                                         timeout_seconds=seconds, outcomes=True))) if texts else {}

    found = read(todo, timeout_seconds)
    late = [gold for gold, value in found.items() if value == "timeout"]
    if late:
        logger.info("%d gold answers ran past %.3g s: graded again with %.3g s", len(late), timeout_seconds,
                    retry_timeout_seconds)
    found.update(read(late, retry_timeout_seconds))  # once the batch is done, with a longer budget
    undecided = [gold for gold, value in found.items() if value == "timeout"]
    decided = {gold: value for gold, value in found.items() if isinstance(value, bool)}
    if cache is not None and decided:
        cache.add_golds(list(decided), list(decided.values()))
        cache.save()
    if undecided:
        logger.warning("%d gold answers could not be read within %.3g s, nor again within %.3g s: their problems are "
                       "left out of this build, undecided and not cached (a later build reads them again)",
                       len(undecided), timeout_seconds, retry_timeout_seconds)
    values = {gold: (None if value == "timeout" else value is True) for gold, value in found.items()}
    return [values[gold] if ok is None else ok for gold, ok in zip(golds, known)]


def judge_completions(
    pairs: Sequence[tuple[str, str]],
    num_proc: int = 1,
    show_progress: bool = True,
    desc: str = "Verifying",
    grader_mode: str = "math_verify",
    cache=None,
    gold_normalizer: str = "none",
    timeout_seconds: float | None = None,
    retry_timeout_seconds: float = RETRY_TIMEOUT_SECONDS,
) -> list[bool | None]:
    """Correctness of each ``(completion, gold)`` pair with the package's grader (Math-Verify's semantics by default).

    Args:
        pairs: completions and their gold answers; every gold must be parseable
            (check with :func:`gold_is_parseable` first).
        num_proc: grading worker processes. Math-Verify costs about 5-10 ms per pair.
        show_progress: show a tqdm bar (over the pairs that are not cached).
        desc: the bar's text.
        grader_mode: the grader mode (:data:`trl_explore.rewards.modes.MODES`), as in training and evaluation.
        gold_normalizer: the data set's phrasing rules for its golds, by name
            (:data:`~trl_explore.data.gold_normalizers.GOLD_NORMALIZERS`; default ``"none"``).
        cache: a :class:`~trl_explore.data.build_cache.VerdictCache` of the same grader mode, or None: cached
            pairs are not graded again, and new verdicts are added to it (saved every 2,048 and at the end).
        timeout_seconds: the grader's budget per pair (default: its 5 s, ``DEFAULT_TIMEOUT_SECONDS``).
        retry_timeout_seconds: the budget of a pair graded again because it ran past ``timeout_seconds``, once
            every pair was graded (default :data:`RETRY_TIMEOUT_SECONDS`).

    Returns:
        ``list[bool | None]`` in the order of ``pairs``; None: undecided (past both budgets: not cached, counted in
        a warning). A pair whose worker failed is False, not cached.

    Raises:
        GoldAnswerError: a gold answer is unparseable.
        ValueError: ``cache`` is of another grader mode.
    """
    from trl_explore.data.gold_normalizers import GOLD_NORMALIZERS
    from trl_explore.rewards.math_verify_reward import DEFAULT_TIMEOUT_SECONDS, GoldAnswerError, grade_batch

    timeout_seconds = DEFAULT_TIMEOUT_SECONDS if timeout_seconds is None else timeout_seconds
    normalizer = GOLD_NORMALIZERS[gold_normalizer]
    if cache is not None and cache.gold_normalizer != gold_normalizer:
        raise ValueError(f"the verdict cache holds verdicts read with gold_normalizer={cache.gold_normalizer!r}, not "
                         f"{gold_normalizer!r}")
    if cache is not None and cache.grader_mode != grader_mode:
        raise ValueError(f"the verdict cache holds grader_mode={cache.grader_mode!r} verdicts, not {grader_mode!r}")
    verdicts: list[bool | None] = cache.lookup(pairs) if cache is not None else [None] * len(pairs)
    todo = [i for i, verdict in enumerate(verdicts) if verdict is None]
    if cache is not None:
        cached = len(pairs) - len(todo)
        logger.info("%d of %d teacher verdicts read from %s; grading %d", cached, len(pairs), cache.path, len(todo))
    chunk, unsaved, late = 64 * num_proc, 0, []

    def grade(rows, seconds):
        batch = [pairs[i] for i in rows]
        graded = grade_batch([c for c, _ in batch], [g for _, g in batch], mode=grader_mode, num_workers=num_proc,
                             outcomes=True, gold_normalizer=normalizer, timeout_seconds=seconds)  # fmt: skip
        for (_, gold), verdict in zip(batch, graded):
            if verdict is None:
                raise GoldAnswerError(f"gold answer {gold!r} cannot be parsed")
        for i, verdict in zip(rows, graded):
            verdicts[i] = verdict is True
        if cache is not None:
            cache.add(batch, graded)  # verdicts only: a timeout or an error is no verdict
        return [i for i, verdict in zip(rows, graded) if verdict == "timeout"]

    with tqdm(total=len(todo), desc=desc, disable=not show_progress or not todo, unit="completion") as bar:
        for start in range(0, len(todo), chunk):
            rows = todo[start : start + chunk]
            late += grade(rows, timeout_seconds)
            unsaved += len(rows)
            if cache is not None and unsaved >= _SAVE_EVERY:
                cache.save()
                unsaved = 0
            bar.update(len(rows))
    undecided = []
    if late:
        logger.info("%d teacher solutions ran past %.3g s: graded again with %.3g s", len(late), timeout_seconds,
                    retry_timeout_seconds)
    for start in range(0, len(late), chunk):  # once the batch is done: the timed-out pairs, with a longer budget
        undecided += grade(late[start : start + chunk], retry_timeout_seconds)
    for i in undecided:
        verdicts[i] = None
    if cache is not None:
        cache.save()
    if undecided:
        logger.warning("%d teacher solution(s) ran past the grader's timeout (%.3g s) and again past %.3g s: "
                       "undecided, left out of this build and not cached (a later build grades them again)",
                       len(undecided), timeout_seconds, retry_timeout_seconds)
    return verdicts
