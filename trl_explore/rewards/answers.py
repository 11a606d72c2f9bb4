"""Reading answers, the first half of the grader of :mod:`trl_explore.rewards.grading`: the text of a completion, its
last box, the accepted forms of a gold answer (:func:`read_gold`) and the final answer of a completion as each mode
reads it (:func:`read_prediction`, :func:`extract`), all through Math-Verify's parser without its timeout (the
grading worker processes of :mod:`trl_explore.rewards.math_verify_reward` enforce one). The module docstring of
:mod:`trl_explore.rewards.grading` says what each mode reads and how a gold is read.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Sequence
from typing import Any

import math_verify
from latex2sympy2_extended import NormalizationConfig
from math_verify import ExprExtractionConfig, LatexExtractionConfig, StringExtractionConfig

from trl_explore.rewards.ascii_math import (
    ascii_answer_to_latex,
    ascii_to_latex,
    is_missing_answer_mark,
    looks_like_latex,
    nesting_depth,
    yes_no_word,
)
from trl_explore.rewards.gold_text import clean_gold_text
from trl_explore.rewards.guards import has_mixed_number, mixed_number_value
from trl_explore.rewards.modes import DEFAULT_MODE, GraderOptions

# Math-Verify warns on every call that its own timeout is off: the worker pool enforces it instead.
logging.getLogger("math_verify").setLevel(logging.ERROR)

MAX_ANSWER_CHARS = 1_000  # a longer gold (or, in the strict and boxed modes, boxed answer) is not parsed
# math-verify's LaTeX parser (ANTLR) slows down fast with nesting: ~0.1 s at depth 3, ~0.6 s at 10, ~4 s at 40.
MAX_NESTING = 10
_TAIL_CHARS = 2_000  # strict mode: an unboxed completion is searched for its answer in this many last characters


class GoldAnswerError(ValueError):
    """A gold answer that no reading parses (Math-Verify's, nor this package's plain-text reader).

    Raised by :func:`read_gold`; :class:`~trl_explore.rewards.math_verify_reward.MathVerifyReward` turns it into a
    ``None`` reward (TRL: "not scored") and logs it once per row.
    """


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


def mv_parse(text: str, config=None, **kwargs) -> list:
    """``math_verify.parse`` (its default extraction configs unless ``config`` is given), no timeout."""
    if config is None:
        return math_verify.parse(text, parsing_timeout=None, **kwargs)
    return math_verify.parse(text, config, parsing_timeout=None, **kwargs)


def mv_verify(gold: list, prediction: list) -> bool:
    """``math_verify.verify`` with its defaults, no timeout."""
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
    parsed = mv_parse(f"${latex}$", [_WHOLE_LATEX_CONFIG], fallback_mode="no_fallback", extraction_mode="first_match")
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
        mixed = _mixed_number_form(alternative)
        if mixed is not None:
            forms += mixed
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


def _mixed_number_form(text: str) -> list | None:
    """``[value, text]`` of a plain-text gold that is one mixed number, read as the ``mixed_number`` guard reads
    answers (``3 3/4``: 15/4, ``-2 1/2``: -5/2; Math-Verify reads ``3 3/4`` as ``3``, :func:`ascii_to_latex` as
    ``3 * 3/4``); None for text without a whole number next to a fraction, and for LaTeX (Math-Verify reads
    ``3\\frac{3}{4}`` as 15/4 itself).

    Raises:
        GoldAnswerError: a whole number next to a fraction that is not all of the text, or whose fraction is not
            proper (``3 5/4``, ``x = 3 3/4``, ``1 1/2, 2``): no reading of it is certain.
    """
    if looks_like_latex(text) or not has_mixed_number(text):
        return None
    value = mixed_number_value(text)
    if value is None:
        raise GoldAnswerError(f"gold answer {text!r} writes a whole number next to a fraction, which is read only "
                              "when the whole gold is one mixed number with a proper fraction ('3 3/4'); write its "
                              "value instead ('15/4')")
    return [value, text.strip()]


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
    if is_missing_answer_mark(text):
        raise GoldAnswerError(f"gold answer {gold!r} marks a missing answer, it states no value")
    bare = re.sub(r"^\$+|\$+$", "", text).strip()
    if not looks_like_latex(bare) and has_mixed_number(bare):
        # a whole number next to a fraction: Math-Verify reads a part of it (its issue #34), so only this package's
        # reading counts (a mixed number's value, or GoldAnswerError)
        return _own_gold_reading(bare, keep_chained_equalities, gold_normalizer)
    mv_reading = mv_parse(str(gold))
    word = yes_no_word(text)
    if word is not None and not mv_reading:
        return [word]  # a plain-text "Yes"/"No", which Math-Verify cannot parse
    if looks_like_latex(text) and mv_reading:
        whole = parse_latex_whole(text) if "$" not in text and not _BOX_COMMAND.search(text) else []
        if whole and not mv_verify(whole, mv_reading):
            return whole  # bare LaTeX that Math-Verify reads only in part (2^{n-1} without $ as 2)
        return mv_reading
    try:
        own_reading = _own_gold_reading(text, keep_chained_equalities, gold_normalizer)
    except GoldAnswerError:
        if mv_reading and not is_prose(text) and "..." not in text:
            return mv_reading
        raise
    if mv_reading and mv_verify(own_reading, mv_reading):
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
        GoldAnswerError: None, empty, too long or deep, a mark for a missing answer (``n/a``, ``NA``, ``TBD``), a
            whole number next to a fraction that is not one mixed number (``3 5/4``), or no reading parses it.
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
        return mv_parse(text, _TRL_COMPLETION_CONFIG, extraction_mode="first_match")
    if "unclosed_box" in options.guards and not _last_box(text)[1]:
        return []
    parsed = mv_parse(text)
    if parsed and "operator_fragment" in options.guards:
        whole = operator_expression(text)
        if whole is not None:  # Math-Verify read only the leading number of an operator expression
            return (whole or []) if options.recall else []
    return parsed


# --- the "operator_fragment" guard: an unboxed answer that is an operator expression is read whole or not at all ----

# What continues an expression right after the number Math-Verify stopped at: an operator (^ ( * / _), a percent sign,
# an exponent (e-3, E3), or a "x 10^" / "\times 10^" / "\cdot 10^" power of ten. Not "!" (it ends sentences too) and
# not a letter ("2x", "5cm": an implicit product or a unit), both left to Math-Verify.
_CONTINUES = re.compile(r"[\^(*/_%]|\\%|[eE][-+]?\d|\s*(?:[x×*]|\\times|\\cdot)\s*10\s*\^")
_BEFORE_MIXED_FRACTION = re.compile(r"\d\s+$")
# after "12 %": a number, or a bracket opening on one, is the operand of the % operator
_MODULO_OPERAND = re.compile(r"\s*(?:[-+]?\d|\(\s*[-+]?\d)")
_PERCENT_OPERATION = re.compile(r"\s*\\?%\s*(?:[-+]?\d|\(\s*[-+]?\d)")
_PLAIN_PERCENT = re.compile(r"[-+]?\d[\d.,]*\s*\\?%")  # a number and its percent sign ("12.5\\%")
_POWER_OF_TEN = re.compile(r"(\d)\s*[x×]\s*(10\s*\^)")
# Where the expression ends: a sentence or clause break, a new line, a dollar sign, or a prose word.
_EXPRESSION_END = re.compile(r"[.,;:?!](?=\s|$)|\n|\$|\s(?:[A-Za-z]{3,})\b")


def operator_expression(text: str) -> list | None:
    """The whole operator expression an unboxed answer is, when Math-Verify reads only its leading number.

    Math-Verify's expression reader stops at the first operator it cannot take in the sentence: "So the answer is
    2^(3)." is read as ``2``, "The answer is 3*(4+1)." as ``3``, "1.5e-3" as ``1.5``, "3/8%" as ``3``, "2^n" as
    ``2``: a policy that writes an expression would be paid for its first number. Where the answer Math-Verify reads
    (:func:`~trl_explore.rewards.guards.locate_answer`, not in a box) is followed at once by an operator, the text
    from the answer's start to the end of its sentence (or clause, or the first prose word) is read as one ASCII-maths
    or LaTeX expression and parsed whole.

    Returns:
        None: Math-Verify's reading is not a fragment (a box, no operator after it). ``[]``: it is a fragment and the
        whole expression has no certain reading (it does not parse whole; a percent sign after an operator,
        ``(3/8)%``, which Math-Verify's percent reading would take as ``3/(8%)``; a percent sign followed by an
        operand, ``12 % 5``, the remainder operator of programming languages, which Math-Verify reads as 12
        percent). Else ``[sympy object, text]``.
    """
    from trl_explore.rewards.guards import locate_answer

    if _last_box(text)[0] is not None:
        return None
    span = locate_answer(text)
    if span is None:
        return None
    if text[span.value_start : span.value_end].rstrip().endswith("%") and _MODULO_OPERAND.match(text, span.value_end):
        return []  # "12 % 5": a percent sign with an operand after it is an operation, not 12 percent (issue 45)
    if not _CONTINUES.match(text, span.value_end):
        return None
    start = span.value_start
    if text[start : span.value_end].strip() != span.answer.strip():
        return None  # the match holds more than the answer
    if _BEFORE_MIXED_FRACTION.search(text, 0, start):
        return None  # the fraction of a mixed number ("2 2/3"): the mixed_number guard reads it
    end = _EXPRESSION_END.search(text, span.value_end)
    expression = text[start : end.start() if end else len(text)].strip()
    if _PLAIN_PERCENT.fullmatch(expression):
        return None  # a number and its percent sign: Math-Verify's own percent reading
    if "%" in expression or nesting_depth(expression) > MAX_NESTING or len(expression) > MAX_ANSWER_CHARS:
        return []
    latex = expression
    if not looks_like_latex(expression):
        try:
            latex = ascii_to_latex(_POWER_OF_TEN.sub(r"\1 * \2", expression))
        except (ValueError, RecursionError):
            return []
    parsed = parse_latex_whole(latex)
    return [parsed[0], expression] if parsed else []


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
    found = mv_parse(plain, [_YES_NO_CONFIG])
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
    """True if the last ``answer`` in ``text`` is followed by ``^ _ ( ! * /`` or a letter/digit ("2" of "2^(n-1)"), or
    by a percent sign with an operand after it ("12 % 5")."""
    position = text.rfind(answer)
    if position < 0:
        return False
    rest = text[position + len(answer) :]
    if _PERCENT_OPERATION.match(rest) or (answer.rstrip().endswith("%") and _MODULO_OPERAND.match(rest)):
        return True  # "12 % 5": the % operator with its operand, not 12 percent
    following = rest[:1]
    return bool(following) and (following in "^_(!*/" or following.isalnum())


def _strict_prediction(text: str) -> list:
    content, closed = _last_box(text)
    if content is not None:
        return _parse_box_whole(content)
    tail = text[-_TAIL_CHARS:]
    if not closed or _BOX_COMMAND.search(tail):
        return []  # a box that is never closed or too long: no final answer
    parsed = mv_parse(tail, _ANCHORED_CONFIGS)
    source = tail
    if not parsed:
        source = conclusion_answer_text(tail)
        if source is None:
            return []
        parsed = mv_parse(source, [LatexExtractionConfig(), ExprExtractionConfig()], extraction_mode="first_match")
    strings = [value for value in parsed if isinstance(value, str)]
    if strings and _ends_mid_expression(source, strings[-1]):
        return []
    return parsed


_INFTY_IN_WORD = re.compile(r"\\infty(?=[A-Za-z])")
"""Math-Verify rewrites every ``inf`` to ``\\infty``, inside words too ("infinitely" -> ``\\inftyinitely``)."""


def extract(completion: Any, options: GraderOptions = GraderOptions()) -> str | None:
    """The final answer of a completion as the mode reads it, as text (``None``: no answer). The letters ``inf``
    inside a word stay letters (Math-Verify's normalisation writes ``\\text{\\inftyinitely many}`` for "infinitely
    many"; its verdicts compare both sides normalised alike, the text shown is the completion's)."""
    text = completion_text(completion)
    if options.mode in ("boxed", "strict"):
        boxed = last_boxed_content(text)
        if boxed is not None or options.mode == "boxed":
            return boxed
    strings = [value for value in read_prediction(text, options) if isinstance(value, str)]
    if strings:
        return _INFTY_IN_WORD.sub("inf", strings[-1].strip()) or None
    if options.mode == "strict":
        found = mv_parse(text[-_TAIL_CHARS:], [_YES_NO_CONFIG])
        strings = [value for value in found if isinstance(value, str)]
        return strings[-1].strip() if strings else None
    return None
