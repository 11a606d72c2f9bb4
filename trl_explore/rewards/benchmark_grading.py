"""Grading a benchmark completion by the benchmark's kind: maths, multiple choice, exact match.

:func:`grade_completion` is what evaluation scores each sample with (:mod:`trl_explore.evaluation.scoring`):

* ``math``: the training reward's grader (:func:`trl_explore.rewards.math_verify_reward.verify_answer`, with the same
  ``grader_mode`` option as the trainers);
* ``multiple_choice`` (ARC-C, GPQA-Diamond, MMLU-Pro): the option letter a completion chose
  (:func:`extract_choice_letter`) against the gold letter;
* ``exact_match`` (BBH): the normalised final answer string (:func:`extract_final_text`, :func:`normalise_exact`)
  against the target.

Engineering choices (the papers give no extraction rules for their out-of-domain sets); each rule is listed in its
function's docstring. Imports nothing from ``data/``, ``evaluation/`` or a method package.
"""

from __future__ import annotations

import re
from typing import Any

GRADINGS = ("math", "multiple_choice", "exact_match")
"""The ways a benchmark is graded (``BenchmarkSpec.grading``)."""
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
"""Option letters of multiple-choice questions, in order."""

_ANSWER_PHRASE = re.compile(
    r"(?:final\s+answer|correct\s+(?:answer|option|choice)|answer)\s*(?:is|would\s+be|:)?\s*[:\-]?\s*"
    r"(?:option\s+|choice\s+)?[\(\[\{]?\s*\**\s*(?:\\text\{|\\textbf\{|\\mathrm\{)?([A-Z])(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_LONE_LETTER_LINE = re.compile(r"^\s*[\(\[]?\s*\**([A-Z])\**\s*[\)\]]?\s*[.:]?\s*$")
_BOXED_LETTER = re.compile(
    r"^\s*(?:\\text\{|\\textbf\{|\\mathrm\{)?\s*[\(\[]?\s*([A-Z])\s*[\)\]]?\s*\}?\s*(?:[.:].*)?$", re.DOTALL
)


def extract_choice_letter(completion: Any, num_choices: int) -> str | None:
    """The option letter a completion chose, or ``None``.

    Tried in order, the first that gives a letter among the first ``num_choices`` wins:

    1. the last ``\\boxed{...}``: ``\\boxed{C}``, ``\\boxed{(C)}``, ``\\boxed{\\text{C}}``, ``\\boxed{C. 42}``;
    2. the last answer phrase: ``"the answer is (C)"``, ``"Answer: C"``, ``"final answer: **C**"``,
       ``"the correct option is C"`` (the letter must be upper case and stand alone, so
       ``"the answer is a prime"`` gives nothing);
    3. the last line that holds only a letter: ``"C"``, ``"(C)"``, ``"C."``.

    Args:
        completion: the completion text (a conversational completion is accepted too).
        num_choices: number of options (2 to 26); letters beyond it are ignored.

    Returns:
        An upper-case letter, or ``None`` if nothing was found.

    Raises:
        ValueError: ``num_choices`` outside ``[2, 26]``.
    """
    from trl_explore.rewards.math_verify_reward import completion_text, last_boxed_content

    if isinstance(num_choices, bool) or not isinstance(num_choices, int) or not 2 <= num_choices <= len(LETTERS):
        raise ValueError(f"`num_choices` must be an integer in [2, 26], got {num_choices!r}")
    valid = LETTERS[:num_choices]
    text = completion_text(completion)
    boxed = last_boxed_content(text)
    if boxed is not None:
        match = _BOXED_LETTER.match(boxed)
        if match and match.group(1) in valid:
            return match.group(1)
    for match in reversed(list(_ANSWER_PHRASE.finditer(text))):
        letter = match.group(1)
        if letter.isupper() and letter in valid:
            return letter
    for line in reversed(text.strip().splitlines()):
        if not line.strip():
            continue
        match = _LONE_LETTER_LINE.match(line)
        if match and match.group(1) in valid:
            return match.group(1)
        break  # only the last non-empty line counts
    return None


_FINAL_PHRASE = re.compile(r"(?:the\s+)?(?:final\s+)?answer\s+is\s*:?\s*(.+)", re.IGNORECASE)


def normalise_exact(text: str | None) -> str | None:
    """Normalise a free-form answer for exact matching (BBH): strip ``\\text{}``, surrounding quotes,
    brackets of a lone option ``"(A)"`` -> ``"a"``, a final period, and case; collapse spaces."""
    if text is None:
        return None
    text = re.sub(r"\\text(?:bf)?\{([^{}]*)\}", r"\1", text).replace("**", "").strip()
    text = text.strip().rstrip(".").strip().strip("\"'`").strip()
    lone = re.fullmatch(r"\(\s*([A-Za-z])\s*\)", text)
    if lone:
        text = lone.group(1)
    return re.sub(r"\s+", " ", text).lower() or None


def extract_final_text(completion: Any) -> str | None:
    """A completion's free-form final answer: the last ``\\boxed{}``, else what follows the last
    "the answer is", else the last non-empty line. ``None`` for an empty completion."""
    from trl_explore.rewards.math_verify_reward import completion_text, last_boxed_content

    text = completion_text(completion)
    boxed = last_boxed_content(text)
    if boxed is not None:
        return boxed
    phrases = list(_FINAL_PHRASE.finditer(text))
    if phrases:
        return phrases[-1].group(1).strip().splitlines()[0]
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else None


def grade_completion(completion: Any, answer: str, grading: str, num_choices: int = 0,
                     timeout_seconds: float = 5.0, grader_mode: str = "math_verify",
                     gold_normalizer=None, terminated: bool | None = None) -> tuple[str | None, bool]:
    """Extracted answer and verdict of one completion.

    Args:
        completion: the completion text.
        answer: the gold answer (a letter for ``multiple_choice``).
        grading: one of :data:`GRADINGS`.
        num_choices: number of options (``multiple_choice`` only).
        timeout_seconds: math-verify's wall-clock limit (``math`` only).
        grader_mode: (``math`` only) the grader mode, the same option as the training reward's (default
            ``"math_verify"``; ``"boxed"`` counts only the last closed ``\\boxed{}``); see
            :mod:`trl_explore.rewards.grading`.
        gold_normalizer: (``math`` only) the benchmark's phrasing rules for its golds (``GraderOptions``).
        terminated: (``math`` only) whether the completion ended with an end-of-sequence token (False: cut off at
            the cap); the ``"unterminated"`` guard then refuses an answer read from unanchored prose, as the training
            reward does (it knows the ending from the completion ids). Default None: unknown, not judged.

    Returns:
        ``(extracted answer or None, correct)``.

    Raises:
        GoldAnswerError: (``math``) the gold answer cannot be parsed.
        ValueError: unknown ``grading``.
    """
    if grading == "math":
        from trl_explore.rewards.math_verify_reward import extract_answer, verify_answer

        correct = verify_answer(completion, answer, mode=grader_mode, timeout_seconds=timeout_seconds,
                                gold_normalizer=gold_normalizer, terminated=terminated)
        return extract_answer(completion, mode=grader_mode, timeout_seconds=timeout_seconds), bool(correct)
    if grading == "multiple_choice":
        letter = extract_choice_letter(completion, num_choices)
        return letter, letter is not None and letter == answer.strip().upper()
    if grading == "exact_match":
        extracted = extract_final_text(completion)
        return extracted, extracted is not None and normalise_exact(extracted) == normalise_exact(answer)
    raise ValueError(f"unknown grading {grading!r}; expected one of {GRADINGS}")


def answer_text(value: Any, name: str, where: str) -> str:
    """A benchmark record's non-empty answer or question string: numbers converted (AMC stores ``142.0``: ``"142"``),
    lists joined with ``", "`` (OlympiadBench's ``["$-3$", "$3$"]``: ``"-3, 3"``), whitespace stripped.

    Raises:
        ValueError: the value is None or empty, naming ``where`` and the field ``name``.
    """
    if isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value if v is not None and str(v).strip()]
        value = ", ".join(item[1:-1].strip() if len(item) > 1 and item[0] == item[-1] == "$" else item
                          for item in items)
    elif isinstance(value, float) and value.is_integer():
        value = str(int(value))
    elif value is not None and not isinstance(value, str):
        value = str(value)
    if value is None or not value.strip():
        raise ValueError(f"{where}: the {name!r} field is empty")
    return value.strip()
