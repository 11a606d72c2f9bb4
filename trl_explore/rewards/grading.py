"""The verdict behind ``R_m``: is a completion's final answer equivalent to the gold answer?

Both papers grade with Math-Verify (OGER §3.1 and Eq. 7-8; ASE-GRPO §3.1 labels rollouts with a verifier), so the
default mode has Math-Verify's semantics (checked against math-verify 0.9.0 with its defaults: LaTeX and expression
targets, ``boxed_match_priority=50``, several boxes joined, ``float_rounding=6``, ``strict=True``). The functions here
are pure (strings in, verdicts out) and run in the grading worker processes of
:mod:`trl_explore.rewards.math_verify_reward`, which adds the wall-clock timeout.

**Gold answers** (:func:`read_gold`). A LaTeX gold (one with ``\\``, ``{``, ``}`` or ``$``) is read by
``math_verify.parse`` with its defaults. A plain-text gold is also read by this package's own reader: the CHAMP
phrasing rules (:mod:`trl_explore.data.champ_answers`), then
:func:`~trl_explore.rewards.ascii_math.ascii_answer_to_latex`, then Math-Verify on the whole LaTeX. That reading is
used when Math-Verify's own is empty or not equivalent to it (Math-Verify reads ``2^(n-1)`` as ``2`` and ``x=6, y=5``
as ``5``). Yes/no golds are words. A gold that neither reading parses, and a plain-text gold in prose or with an
ellipsis that this package's reader refuses ("Always greater than 20", from which Math-Verify would read ``20``;
"1, 2, 3, ..."), raise :class:`GoldAnswerError` (the reward gives ``None``: not scored).

**Modes** (where the final answer of a completion is read; :data:`MODES`):

* ``"math_verify"`` (default): ``math_verify.parse`` with its defaults on the whole completion.
* ``"trl"``: as TRL 1.16's ``trl.rewards.accuracy_reward`` reads completions: LaTeX only, boxed first
  (``boxed_match_priority=0``), only after an answer anchor, first match, units normalised. Plain-text and
  conversational completions are both accepted.
* ``"strict"``: this package's precision-first rule of version 0.1: the last box, parsed whole (ASCII maths
  allowed); without a box, only text after an answer phrase or in a complete concluding sentence.
* ``"boxed"``: only the content of the last ``\\boxed{}``/``\\fbox{}`` (the DAPO/verl convention).

Every mode compares with ``math_verify.verify`` (defaults); all modes but ``"trl"`` (which keeps Math-Verify's verdict,
for parity with TRL) then apply the guard-rails and recall rules below. A plain-text yes/no gold ("Yes", "No",
which Math-Verify cannot parse) is compared with the predicted word: the last box, else (not in the ``"boxed"``
mode) a yes/no after an answer phrase.

**Guard-rails** (:data:`GUARDS`; each on by default and switchable; each only turns a 1 into a 0, and none changes a
verdict on Math-Verify's published default-setting test cases):

* ``"float_collapse"``: Math-Verify rounds numbers to 6 decimals, so ``1/2^98 == 1/2^99`` and ``1/2006! == 1/2004!``.
  Numbers that compare equal only through that rounding (absolute difference < 1e-6) must also agree to a relative
  tolerance of :data:`FLOAT_RTOL`.
* ``"interval_vs_set"``: an interval of positive length is never equal to a finite set written as a set
  (Math-Verify equates ``\\{1,2\\}`` and ``(1,2)``; bare braces ``{1,3}`` are LaTeX grouping and left alone).
* ``"chained_equality"``: a plain-text gold ``a=b=c`` is a chained equality, not the solution tuple ``(c, c)``; and
  a chain of equalities between variables is not equal to anything but the same chain (Math-Verify compares an
  equality by its right-hand side, so it equates ``a=b=c`` with ``c`` and ``a=c``).
* ``"unclosed_box"``: a completion whose last ``\\boxed{`` is never closed (cut off inside its answer) has no answer
  (Math-Verify reads one).
* ``"hedge"``, ``"unterminated"``, ``"retraction"``, ``"prompt_echo"``, ``"mixed_number"``: hedged and unfinished
  answers (several values offered; a completion cut off with no boxed or phrase-anchored answer; an answer taken
  back or declared impossible; an unevaluated expression copied from the prompt; a mixed number read as its value),
  in :mod:`trl_explore.rewards.guards`. ``"unterminated"`` needs to know whether the completion ended and
  ``"prompt_echo"`` the prompt (:func:`grade`'s ``terminated`` and ``prompt``; the reward passes them); the strict
  and boxed modes apply ``"prompt_echo"`` only.

**Recall** (on by default in the ``"math_verify"`` and ``"boxed"`` modes; each only turns a 0 into a 1, where
equivalence is certain): an interval against the equivalent inequality in one variable, both directions
(``(1, 3]`` and ``1 < x \\le 3``; not a bare ``(a, b)``, which may be a point); ``\\mathrm{e}`` and ``\\mathrm{d}``
read as the letters ``e`` and ``d``; chained equalities that state the same equal quantities (``a=b=c`` and
``c=a=b``); a bold answer after an answer phrase and a ``\\fbox{}``, each only where it ends the completion (a
retracted "The answer is **5**. Wait, ... 6." stays wrong); and those of :mod:`trl_explore.rewards.guards` (a mixed
number equal to the gold, ``\\textbf{}`` and bold choice letters, thin-space thousands, e-notation, repeating
decimals, a function answer up to its variable's name).
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import math_verify
import sympy
from latex2sympy2_extended import NormalizationConfig
from math_verify import ExprExtractionConfig, LatexExtractionConfig, StringExtractionConfig

from trl_explore.rewards.ascii_math import (
    ascii_answer_to_latex,
    ascii_to_latex,
    looks_like_latex,
    nesting_depth,
    yes_no_word,
)
from trl_explore.rewards.gold_text import clean_gold_text
from trl_explore.rewards.guards import (
    failed_guard,
    has_mixed_number,
    is_plain_number,
    locate_answer,
    mixed_number_answer,
    prompt_text,
    rewrite_for_recall,
    same_function_up_to_variable,
)
from trl_explore.rewards.modes import DEFAULT_MODE, GUARDS, MODES, check_grader_mode  # noqa: F401 - MODES re-exported

# Math-Verify warns on every call that its own timeout is off: the worker pool enforces it instead.
logging.getLogger("math_verify").setLevel(logging.ERROR)

FLOAT_RTOL = 1e-5
"""Relative tolerance of the ``float_collapse`` guard (6 significant digits, as a typed decimal answer has)."""
_MV_ROUNDING_ATOL = 1e-6  # Math-Verify's float_rounding=6: closer numbers may compare equal through rounding alone

MAX_ANSWER_CHARS = 1_000  # a longer gold (or, in the strict and boxed modes, boxed answer) is not parsed
# math-verify's LaTeX parser (ANTLR) slows down fast with nesting: ~0.1 s at depth 3, ~0.6 s at 10, ~4 s at 40.
MAX_NESTING = 10
_TAIL_CHARS = 2_000  # strict mode: an unboxed completion is searched for its answer in this many last characters


class GoldAnswerError(ValueError):
    """A gold answer that no reading parses (Math-Verify's, nor this package's plain-text reader).

    Raised by :func:`read_gold`; :class:`~trl_explore.rewards.math_verify_reward.MathVerifyReward` turns it into a
    ``None`` reward (TRL: "not scored") and logs it once per row.
    """


@dataclass(frozen=True)
class GraderOptions:
    """How to grade: the mode, the guard-rails switched on, and whether the recall rules apply.

    Args:
        mode: one of :data:`MODES` (default ``"math_verify"``).
        guards: the guard-rail classes to apply, a subset of :data:`GUARDS` (default: all).
        recall: apply the recall rules (default True; used in the ``"math_verify"`` and ``"boxed"`` modes only).
        gold_normalizer: a data set's phrasing rules for its gold answers, ``gold_normalizer(text) -> [alternatives]``
            (the maths a gold states, one string per accepted reading; e.g. CHAMP's
            ``trl_explore.data.champ_answers.gold_alternatives``), applied to golds Math-Verify cannot read whole.
            Default None: the gold text itself. A module-level function (it is sent to the grading workers).

    Raises:
        ValueError: an unknown mode or guard, naming the valid ones.
    """

    mode: str = DEFAULT_MODE
    guards: frozenset = field(default_factory=lambda: frozenset(GUARDS))
    recall: bool = True
    gold_normalizer: Callable[[str], list[str]] | None = None

    def __post_init__(self) -> None:
        check_grader_mode(self.mode, "mode")
        object.__setattr__(self, "guards", frozenset(self.guards))
        unknown = self.guards - set(GUARDS)
        if unknown:
            raise ValueError(f"unknown grader guards {sorted(unknown)}; valid: {GUARDS}")


# --------------------------------------------------------------------------------------------------
# Completion text
# --------------------------------------------------------------------------------------------------

_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)\s*\{")


def completion_text(completion: Any) -> str:
    """The text to grade from one TRL completion; never raises.

    Args:
        completion: a string (standard format), a list of message dicts (conversational format: the content of the
            LAST ``"assistant"`` message; a content given as a list of parts has its ``"text"`` parts joined), a
            single message dict, bytes (decoded as UTF-8 with replacement characters) or None.

    Returns:
        The text, or ``""`` when there is none (no assistant message, None, ...).
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, bytes):
        return completion.decode("utf-8", errors="replace")
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, Sequence):
        for message in reversed(completion):
            if isinstance(message, dict) and message.get("role", "assistant") == "assistant":
                return _message_content_text(message.get("content"))
        return ""
    return str(completion)


def _message_content_text(content: Any) -> str:
    """A message's ``content`` as text: a string, or the ``"text"`` entries of a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = [part.get("text", "") for part in content if isinstance(part, dict)]
        return "".join(part for part in parts if isinstance(part, str))
    return str(content)


def _last_box(text: str) -> tuple[str | None, bool]:
    """``(content, closed)`` of the last ``\\boxed{`` / ``\\fbox{`` of ``text``; ``(None, True)`` without a box.

    Braces are balanced; escaped braces do not count. ``closed`` is False when the box never closes (a completion
    cut off inside its answer). The content is None when it is longer than ``MAX_ANSWER_CHARS`` characters.
    Linear in ``len(text)``.
    """
    starts = [m.end() for m in _BOX_COMMAND.finditer(text)]
    if not starts:
        return None, True
    start = i = starts[-1]
    depth = 1
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2  # an escaped character (\{, \}, \\)
            continue
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth == 0:
            return (text[start:i].strip() if i - start <= MAX_ANSWER_CHARS else None), True
        i += 1
    return None, False


def last_boxed_content(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` or ``\\fbox{...}`` in ``text``, braces balanced, stripped.

    None when there is no box, when the last box is not closed (a truncated completion), is empty, or is longer
    than ``MAX_ANSWER_CHARS`` characters. Linear in ``len(text)``.
    Example: ``last_boxed_content(r"\\boxed{1} so \\boxed{\\frac{1}{2}}")`` is ``r"\\frac{1}{2}"``.
    """
    content, _ = _last_box(text)
    return content or None


# --------------------------------------------------------------------------------------------------
# Math-Verify calls (no timeout here: the worker pool enforces it)
# --------------------------------------------------------------------------------------------------


def _mv_parse(text: str, config=None, **kwargs) -> list:
    if config is None:
        return math_verify.parse(text, parsing_timeout=None, **kwargs)
    return math_verify.parse(text, config, parsing_timeout=None, **kwargs)


def _mv_verify(gold: list, prediction: list) -> bool:
    return bool(math_verify.verify(gold, prediction, timeout_seconds=None))


# One config for every "parse this whole string" call: the string is wrapped as $...$ and only that one match is
# tried, so math-verify cannot fall back to a part of it.
_WHOLE_LATEX_CONFIG = LatexExtractionConfig(boxed_match_priority=-1)


def parse_latex_whole(latex: str) -> list:
    """``[sympy object, latex]`` if Math-Verify parses ALL of ``latex``, else ``[]``.

    ``latex`` is wrapped as ``$...$`` and Math-Verify tries only that one match, so it cannot return the parse of a
    part (such as the ``\\frac{1}{2}`` of ``\\frac{1}{2} garbage``).
    """
    latex = latex.replace("\n", " ").strip()
    if not latex or "$" in latex.replace(r"\$", ""):
        return []
    parsed = _mv_parse(f"${latex}$", [_WHOLE_LATEX_CONFIG], fallback_mode="no_fallback", extraction_mode="first_match")
    return [parsed[0], latex] if parsed and not isinstance(parsed[0], str) else []


# --------------------------------------------------------------------------------------------------
# Gold answers
# --------------------------------------------------------------------------------------------------


def _own_gold_reading(gold: str, keep_chained_equalities: bool, gold_normalizer=None) -> list:
    """This package's reading of a gold: the data set's phrasing rules (``gold_normalizer``), ASCII maths to LaTeX,
    each alternative parsed whole.

    Returns a list of parsed forms (sympy objects and their texts, or ``"yes"``/``"no"``). Raises GoldAnswerError.
    """
    forms: list = []
    for alternative in (gold_normalizer(gold) if gold_normalizer is not None else [gold]):
        word = yes_no_word(alternative)
        if word is not None:
            forms.append(word)
            continue
        if looks_like_latex(alternative):
            latex = re.sub(r"^\$+|\$+$", "", alternative).strip()
        else:
            try:
                latex = ascii_answer_to_latex(alternative, keep_chained_equalities)
            except (ValueError, RecursionError) as err:
                raise GoldAnswerError(f"gold answer {gold!r} is not maths that can be read: {err}") from None
        parsed = parse_latex_whole(latex)
        if not parsed:
            raise GoldAnswerError(f"Math-Verify cannot parse the whole of {latex!r} (gold answer {gold!r})")
        forms += parsed
    if len({form in ("yes", "no") for form in forms}) > 1:
        raise GoldAnswerError(f"gold answer {gold!r} mixes a yes/no word with maths")
    return forms


@functools.lru_cache(maxsize=8192)
def _read_gold_cached(gold: str, keep_chained_equalities: bool, gold_normalizer=None) -> tuple[bool, Any]:
    try:
        return True, _read_gold_uncached(gold, keep_chained_equalities, gold_normalizer)
    except GoldAnswerError as err:
        return False, str(err)


def _read_gold_uncached(gold: str, keep_chained_equalities: bool, gold_normalizer=None) -> list:
    text = clean_gold_text(gold)
    if not text:
        raise GoldAnswerError(f"empty gold answer {gold!r}")
    if len(text) > MAX_ANSWER_CHARS:
        raise GoldAnswerError(f"gold answer longer than {MAX_ANSWER_CHARS} characters: {text[:80]!r}...")
    if nesting_depth(text) > MAX_NESTING:
        raise GoldAnswerError(f"gold answer {text[:80]!r} has brackets nested deeper than {MAX_NESTING}")
    mv_reading = _mv_parse(str(gold))
    word = yes_no_word(text)
    if word is not None and not mv_reading:
        return [word]  # a plain-text "Yes"/"No", which Math-Verify cannot parse
    if looks_like_latex(text) and mv_reading:
        whole = parse_latex_whole(text) if "$" not in text and not _BOX_COMMAND.search(text) else []
        if whole and not _mv_verify(whole, mv_reading):
            return whole  # bare LaTeX that Math-Verify reads only in part (2^{n-1} without $ as 2)
        return mv_reading
    try:
        own_reading = _own_gold_reading(text, keep_chained_equalities, gold_normalizer)
    except GoldAnswerError:
        if mv_reading and not is_prose(text) and "..." not in text:
            return mv_reading
        raise
    if mv_reading and _mv_verify(own_reading, mv_reading):
        return mv_reading  # the same answer: Math-Verify's reading, as the reference grader has it
    return own_reading


_MATHS_WORDS = {"sqrt", "floor", "ceil", "exp", "sin", "cos", "tan", "log", "sum", "binom", "and", "mod", "inf",
                "infinity"}


def is_prose(text: str) -> bool:
    """True if plain text holds an English word (three or more letters that are not a maths function name).

    A prose gold ("No integer solutions", "Always greater than 20") is not scored: Math-Verify would read a number
    out of it (``20``) and reward that number.
    """
    return any(word.lower() not in _MATHS_WORDS for word in re.findall(r"[A-Za-z]{3,}", text))


def read_gold(gold: Any, keep_chained_equalities: bool = True, gold_normalizer=None) -> list:
    """The accepted forms of a gold answer: Math-Verify's parse, or this package's reading of plain text.

    Args:
        gold: the gold answer (LaTeX or plain text; a number is converted with ``str``), at most
            ``MAX_ANSWER_CHARS`` characters and ``MAX_NESTING`` nested brackets.
        keep_chained_equalities: the ``chained_equality`` guard (default True).
        gold_normalizer: a data set's phrasing rules (see :class:`GraderOptions`); default None.

    Returns:
        A list as ``math_verify.parse`` returns it (sympy objects and their texts), or ``["yes"]``/``["no"]``.
        Cached per process.

    Raises:
        GoldAnswerError: None, empty, too long or deep, or no reading parses it.
    """
    if gold is None:
        raise GoldAnswerError("gold answer is None")
    ok, value = _read_gold_cached(str(gold), keep_chained_equalities, gold_normalizer)
    if not ok:
        raise GoldAnswerError(value)
    return value


# --------------------------------------------------------------------------------------------------
# Final answers of completions, per mode
# --------------------------------------------------------------------------------------------------

# TRL 1.16's accuracy_reward reads completions with exactly this configuration.
_TRL_COMPLETION_CONFIG = [
    LatexExtractionConfig(
        normalization_config=NormalizationConfig(units=True), boxed_match_priority=0, try_extract_without_anchor=False
    )
]
_YES_NO_CONFIG = StringExtractionConfig(
    strings=("yes", "no", "Yes", "No", "YES", "NO"), lowercase=True, try_extract_without_anchor=False
)


def read_prediction(text: str, options: GraderOptions) -> list:
    """The final answer of a completion text, parsed, as the mode reads it (``[]``: no answer)."""
    if options.mode == "boxed":
        content, _ = _last_box(text)
        return _parse_box_whole(content) if content else []
    if options.mode == "strict":
        return _strict_prediction(text)
    if options.mode == "trl":
        return _mv_parse(text, _TRL_COMPLETION_CONFIG, extraction_mode="first_match")
    if "unclosed_box" in options.guards and not _last_box(text)[1]:
        return []
    return _mv_parse(text)


def _parse_box_whole(content: str) -> list:
    """Parse a boxed answer whole; LaTeX-free content is first read as ASCII maths if it can be."""
    if nesting_depth(content) > MAX_NESTING:
        return []
    latex = content
    if not looks_like_latex(content):
        try:
            latex = ascii_to_latex(content)
        except (ValueError, RecursionError):
            pass  # not ASCII maths that we know: let Math-Verify read it as LaTeX
    return parse_latex_whole(latex)


_TEXT_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mbox|textrm)\s*\{([^{}]*)\}")


def predicted_yes_no(text: str, mode: str = DEFAULT_MODE) -> str | None:
    """``"yes"``/``"no"`` answered by a completion: its last box, else (not in the ``"boxed"`` mode) a yes/no word
    after an answer phrase (``\\text{}`` wrappers and ``$`` removed)."""
    boxed = last_boxed_content(text)
    if boxed is not None or mode == "boxed":
        return None if boxed is None else yes_no_word(boxed)
    plain = _TEXT_WRAPPER.sub(r"\1", text[-_TAIL_CHARS:]).replace("$", "")
    found = _mv_parse(plain, [_YES_NO_CONFIG])
    return found[0] if found else None


# --- strict mode: version 0.1's anchored, precision-first reading ---------------------------------

_ANCHORED_CONFIGS = [LatexExtractionConfig(try_extract_without_anchor=False),
                     ExprExtractionConfig(try_extract_without_anchor=False)]
# A concluding sentence ("Therefore, n mod 1982 is 0.") and its first copula: prose answers without a box.
_CONCLUSION = re.compile(r"(?:^|[.!?:]\s+|\n)\s*(?:Therefore|Thus|Hence|In conclusion|Consequently|So),?\s")
_COPULA = re.compile(r"\s(?:is|are|equals|is equal to|=)\s")
_CLAUSE_END = re.compile(r"[,;]\s+(?:and|which|where|when|while|since|because|as|so|with|for|this|that)\b")
_MAX_CONCLUSION_CHARS = 400
_SENTENCE_BREAK = re.compile(r"[.!?]\s+[A-Z]|\n\s*\n")


def conclusion_answer_text(text: str) -> str | None:
    """What follows the first copula of the last concluding sentence of ``text``, or None (strict mode).

    "... Therefore, the limit exists and is equal to 2." gives "equal to 2."; the sentence must start with
    Therefore / Thus / Hence / In conclusion / Consequently / So, be the last one of the text and be complete (a
    cut-off completion has no concluding sentence). A trailing clause (", and this occurs when a = b = c") is cut.
    """
    starts = [m.end() for m in _CONCLUSION.finditer(text)]
    if not starts or len(text) - starts[-1] > _MAX_CONCLUSION_CHARS:
        return None
    sentence = text[starts[-1] :].rstrip()
    if not sentence.endswith((".", "!", "$", ")", "]")) or _SENTENCE_BREAK.search(sentence[:-1]):
        return None
    copula = _COPULA.search(sentence)
    if copula is None:
        return None
    answer = sentence[copula.end() :]
    clause = _CLAUSE_END.search(answer)
    return answer[: clause.start()] if clause else answer


def _ends_mid_expression(text: str, answer: str) -> bool:
    """True if the last ``answer`` in ``text`` is followed by ``^ _ ( ! * /`` or a letter/digit ("2" of "2^(n-1)")."""
    position = text.rfind(answer)
    if position < 0:
        return False
    following = text[position + len(answer) : position + len(answer) + 1]
    return bool(following) and (following in "^_(!*/" or following.isalnum())


def _strict_prediction(text: str) -> list:
    content, closed = _last_box(text)
    if content is not None:
        return _parse_box_whole(content)
    tail = text[-_TAIL_CHARS:]
    if not closed or _BOX_COMMAND.search(tail):
        return []  # a box that is never closed or too long: no final answer
    parsed = _mv_parse(tail, _ANCHORED_CONFIGS)
    source = tail
    if not parsed:
        source = conclusion_answer_text(tail)
        if source is None:
            return []
        parsed = _mv_parse(source, [LatexExtractionConfig(), ExprExtractionConfig()], extraction_mode="first_match")
    strings = [value for value in parsed if isinstance(value, str)]
    if strings and _ends_mid_expression(source, strings[-1]):
        return []
    return parsed


# --------------------------------------------------------------------------------------------------
# Guard-rails (a 1 becomes 0) and recall (a 0 becomes 1)
# --------------------------------------------------------------------------------------------------


def _numbers(value: Any) -> list | None:
    """The numbers of a parsed answer in order (a number, the items of a tuple/set/matrix, interval ends)."""
    if isinstance(value, sympy.Expr) and value.is_number:
        return [value]
    if isinstance(value, sympy.Eq):  # x = 1/2^99: Math-Verify compares the value
        return _numbers(value.rhs)
    if isinstance(value, sympy.Interval):
        items = [value.start, value.end]
    elif isinstance(value, (sympy.Tuple, sympy.FiniteSet, tuple, list)):
        items = list(value.args if isinstance(value, sympy.Basic) else value)
    elif isinstance(value, sympy.MatrixBase):
        items = list(value)
    else:
        return None
    numbers: list = []
    for item in items:
        inner = _numbers(item)
        if inner is None:
            return None
        numbers += inner
    return numbers


def collapsed_by_rounding(a: sympy.Expr, b: sympy.Expr, rtol: float = FLOAT_RTOL) -> bool:
    """True iff two numbers are equal only through Math-Verify's 6-decimal rounding.

    That is: ``|a - b| < 1e-6`` (so rounding may equate them) and ``|a - b| > rtol * max(|a|, |b|)``. Evaluated
    with 30 significant digits, so ``1/2^98`` against ``1/2^99`` and ``1/2006!`` against ``1/2004!`` are told apart.
    A pair that cannot be evaluated is never called collapsed.
    """
    try:
        a_value, b_value = sympy.N(a, 30), sympy.N(b, 30)
        difference = abs(a_value - b_value)
        scale = max(abs(a_value), abs(b_value))
        return bool(difference < _MV_ROUNDING_ATOL) and bool(difference > rtol * scale)
    except (TypeError, ValueError, AttributeError):
        return False


def _float_collapse(gold: Any, prediction: Any) -> bool:
    gold_numbers, predicted_numbers = _numbers(gold), _numbers(prediction)
    if gold_numbers is None or predicted_numbers is None or len(gold_numbers) != len(predicted_numbers):
        return False  # the structures do not align: the guard does not judge
    return any(collapsed_by_rounding(a, b) for a, b in zip(gold_numbers, predicted_numbers))


_EXPLICIT_SET = re.compile(r"\\\{|\\lbrace|\\set\b")


def _interval_vs_finite_set(gold: Any, prediction: Any, gold_text: str, predicted_text: str) -> bool:
    """True iff one side is an interval of positive length and the other a finite set written as a set (``\\{...\\}``).

    Bare braces (``{1,3}``) are LaTeX grouping, which Math-Verify also reads as a set: those are left alone.
    """
    for a, b, b_text in ((gold, prediction, predicted_text), (prediction, gold, gold_text)):
        if isinstance(a, sympy.Interval) and isinstance(b, sympy.FiniteSet) and a.measure != 0:
            if _EXPLICIT_SET.search(b_text):
                return True
    return False


def _with_texts(parsed: list) -> list[tuple[Any, str]]:
    """``[(form, text)]`` from a list as ``math_verify.parse`` returns it (each object followed by its text)."""
    pairs = []
    for i, form in enumerate(parsed):
        text = parsed[i + 1] if i + 1 < len(parsed) and isinstance(parsed[i + 1], str) else ""
        pairs.append((form, form if isinstance(form, str) else text))
    return pairs


def _passes_guards(gold_parsed: list, prediction: list, guards: frozenset) -> bool:
    """Whether some pair of gold and predicted forms that Math-Verify calls equal passes every guard."""
    pairs = itertools.product(_with_texts(gold_parsed), _with_texts(prediction))
    for (gold, gold_text), (predicted, predicted_text) in pairs:
        if not _mv_verify([gold], [predicted]):
            continue
        if isinstance(gold, str) or isinstance(predicted, str):
            return True  # the same text
        if "interval_vs_set" in guards and _interval_vs_finite_set(gold, predicted, gold_text, predicted_text):
            continue
        if "float_collapse" in guards and _float_collapse(gold, predicted):
            continue
        if "chained_equality" in guards and _chain_against_other(gold, predicted):
            continue
        return True
    return False


def _chain_against_other(gold: Any, prediction: Any) -> bool:
    """True iff one side is a chain of equalities between variables (``a=b=c``) and the other states something else.

    Math-Verify compares an equality by its right-hand side, so it equates ``a=b=c`` with ``c`` and ``a=c``.
    """
    for a, b in ((gold, prediction), (prediction, gold)):
        classes = _equal_classes(a)
        if classes is not None and all(isinstance(term, sympy.Symbol) for c in classes for term in c):
            if len(a.free_symbols) > 2 and _equal_classes(b) != classes:
                return True
    return False


def _single_variable_set(relation: Any) -> sympy.Set | None:
    """The solution set of an inequality (or a conjunction) in one variable, else None."""
    if not isinstance(relation, (sympy.core.relational.Relational, sympy.And, sympy.Or)):
        return None
    if isinstance(relation, sympy.Eq) or len(relation.free_symbols) != 1:
        return None
    try:
        return relation.as_set()
    except (NotImplementedError, TypeError, ValueError):
        return None


def _maybe_a_point(value: Any) -> bool:
    """An open interval with finite ends, ``(a, b)``, which is also how a point or ordered pair is written."""
    return (isinstance(value, sympy.Interval) and value.left_open and value.right_open
            and value.is_finite_set is False and all(end.is_finite for end in (value.start, value.end)))


def interval_matches_inequality(a: Any, b: Any) -> bool:
    """True iff one side is a set of reals (an interval or a union) and the other an inequality in one variable
    whose solution set is exactly that set: ``(1, 3]`` and ``1 < x \\le 3``, ``[\\sqrt{2}, \\infty)`` and
    ``m \\geq \\sqrt{2}``. An open interval with finite ends, ``(1, 3)``, is left alone: it is also how a point is
    written."""
    for set_side, relation_side in ((a, b), (b, a)):
        if _maybe_a_point(set_side):
            continue
        if isinstance(set_side, (sympy.Interval, sympy.Union)):
            solutions = _single_variable_set(relation_side)
            if solutions is not None and bool(sympy.Eq(solutions, set_side)) is True:
                return True
    return False


def _equal_classes(value: Any) -> frozenset | None:
    """The classes of quantities a conjunction of equalities makes equal (``a=b=c``: ``{{a, b, c}}``), or None."""
    equalities = value.args if isinstance(value, sympy.And) else (value,)
    if not equalities or not all(isinstance(e, sympy.Eq) for e in equalities):
        return None
    classes: list[set] = []
    for equality in equalities:
        joined = {equality.lhs, equality.rhs}
        for existing in [c for c in classes if c & joined]:
            joined |= existing
            classes.remove(existing)
        classes.append(joined)
    return frozenset(frozenset(c) for c in classes)


def same_chained_equality(a: Any, b: Any) -> bool:
    """True iff both are (chains of) equalities stating the same equal quantities: ``a=b=c`` and ``c=a=b``."""
    first, second = _equal_classes(a), _equal_classes(b)
    return first is not None and first == second


_ROMAN_LETTER = re.compile(r"\\(?:mathrm|operatorname|text)\s*\{\s*([ed])\s*\}")
# Only where it ends the completion (a retracted "The answer is **5**. Wait, ... 6." is no answer).
_BOLD_AFTER_ANCHOR = re.compile(r"((?:final answer|answer)\s*(?:is|:)?\s*:?\s*)\*\*([^*\n]+?)\*\*(?=[\s.!]*$)",
                                re.IGNORECASE)
_FINAL_FBOX = re.compile(r"\\fbox(\s*\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}[^0-9$\\]*)$")


def _recall(text: str, gold: str, gold_parsed: list, prediction: list, options: GraderOptions) -> str | None:
    """The recall rules, tried in turn after Math-Verify said "not equal": the text (rewritten where a rule rewrote
    it) whose answer proves equivalence, else None."""
    for a, b in itertools.product(gold_parsed, prediction):
        if isinstance(a, str) or isinstance(b, str):
            continue
        if interval_matches_inequality(a, b) or same_chained_equality(a, b):
            return text
        if same_function_up_to_variable(a, b, _mv_verify_one):
            return text
    rewritten_text = _FINAL_FBOX.sub(r"\\boxed\1", _BOLD_AFTER_ANCHOR.sub(r"\1\2", text))
    rewritten_text = _ROMAN_LETTER.sub(r"\1", rewritten_text)
    rewritten_gold = _ROMAN_LETTER.sub(r"\1", gold)
    rewritten_text = rewrite_for_recall(rewritten_text, gold_is_plain_number=is_plain_number(gold_parsed))
    rewritten_gold = rewrite_for_recall(rewritten_gold, gold_is_plain_number=False)
    if rewritten_text == text and rewritten_gold == gold:
        return None
    try:
        gold_parsed = read_gold(rewritten_gold, "chained_equality" in options.guards, options.gold_normalizer)
    except GoldAnswerError:
        return None
    prediction = read_prediction(rewritten_text, options)
    if prediction and _mv_verify(gold_parsed, prediction) and _passes_guards(gold_parsed, prediction, options.guards):
        return rewritten_text
    return None


def _mv_verify_one(a: Any, b: Any) -> bool:
    return _mv_verify([a], [b])


def _mixed_number_reading(text: str, options: GraderOptions):
    """The value of the mixed number the answer is (``2 2/3``: 8/3; :mod:`~trl_explore.rewards.guards`), or None."""
    if options.mode != "math_verify" or not ("mixed_number" in options.guards or options.recall):
        return None
    return mixed_number_answer(text, locate_answer(text)) if has_mixed_number(text) else None


# --------------------------------------------------------------------------------------------------
# The verdict
# --------------------------------------------------------------------------------------------------


def grade(
    completion: Any,
    gold: Any,
    options: GraderOptions = GraderOptions(),
    *,
    prompt: Any = None,
    terminated: bool | None = None,
) -> bool:
    """True iff the completion's final answer is equivalent to ``gold``: ``R_m`` (OGER Eq. 7-8, ASE-GRPO §3.1).

    Args:
        completion: the completion (text, or anything :func:`completion_text` accepts).
        gold: the gold answer (LaTeX or plain text).
        options: mode, guards and recall (default: ``"math_verify"``, all guards, recall on).
        prompt: the prompt the completion answers (text or TRL messages; default None: the ``"prompt_echo"`` guard
            does not judge).
        terminated: whether the completion ended with an EOS token (default None: unknown, the ``"unterminated"``
            guard does not judge).

    Returns:
        Math-Verify's verdict in the chosen mode, with the guard-rails applied to a True and the recall rules
        to a False (see the module docstring). Yes/no golds compare the predicted word.

    Raises:
        GoldAnswerError: the gold answer cannot be parsed (see :func:`read_gold`).
    """
    text = completion_text(completion)
    gold = str(gold) if gold is not None else None
    gold_parsed = read_gold(gold, "chained_equality" in options.guards, options.gold_normalizer)
    if gold_parsed[0] in ("yes", "no"):
        return predicted_yes_no(text, options.mode) in gold_parsed
    prediction = read_prediction(text, options)
    if options.mode == "trl":  # parity with TRL's accuracy_reward: Math-Verify's verdict, no guard, no recall
        return bool(prediction) and _mv_verify(gold_parsed, prediction)
    mixed = _mixed_number_reading(text, options)
    if mixed is not None and "mixed_number" in options.guards:
        prediction = [mixed, str(mixed)]
    graded = None
    if prediction and _mv_verify(gold_parsed, prediction):
        if not _passes_guards(gold_parsed, prediction, options.guards):
            return False
        graded = text
    elif options.recall and options.mode in ("math_verify", "boxed"):
        graded = text if mixed is not None and _mv_verify(gold_parsed, [mixed]) else None
        graded = graded or _recall(text, gold, gold_parsed, prediction, options)
    if graded is None:
        return False
    answer = extract(graded, options) if options.mode != "math_verify" and prompt is not None else None
    refuted = failed_guard(graded, gold, gold_parsed, options.guards, options.mode, prompt=prompt_text(prompt) or None,
                           terminated=terminated, answer=answer)  # fmt: skip
    return refuted is None


def extract(completion: Any, options: GraderOptions = GraderOptions()) -> str | None:
    """The final answer of a completion as the mode reads it, as text (``None``: no answer)."""
    text = completion_text(completion)
    if options.mode in ("boxed", "strict"):
        boxed = last_boxed_content(text)
        if boxed is not None or options.mode == "boxed":
            return boxed
    strings = [value for value in read_prediction(text, options) if isinstance(value, str)]
    if strings:
        return strings[-1].strip() or None
    if options.mode == "strict":
        found = _mv_parse(text[-_TAIL_CHARS:], [_YES_NO_CONFIG])
        strings = [value for value in found if isinstance(value, str)]
        return strings[-1].strip() if strings else None
    return None
