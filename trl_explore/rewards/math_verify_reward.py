"""The verifiable math reward ``R_m in {0, 1}``, built on math-verify.

Both papers score a completion 1 when its final answer is mathematically equivalent to the gold
answer and 0 otherwise: OGER uses it as ``R^m_i`` in Eq. 7 (``R_OGER = D * exp(-H_last) * R^m``)
and Eq. 8 (total reward), and to filter the offline teacher trajectories (App. A.1, "verified by
Math-Verify"); ASE-GRPO uses it as the verifier reward that labels rollouts (§3.1).

How a completion is scored (``verify_answer``):

1. The gold answer is normalised to LaTeX (``normalise_gold``) and parsed by math-verify. Gold
   answers may be LaTeX or plain ASCII maths (CHAMP writes ``2^(n-1)``, ``C(n+1, 2m+1)``,
   ``sum_(i=1)^n i^3``, "A, or equivalently B", "0 is the only possible value", "No", ...). A gold
   answer is accepted only when math-verify parses ALL of it: math-verify's default ``parse``
   reads ``2^(n-1)`` as ``2`` (it extracts the first number it can), which would give reward 1 to
   the wrong prediction ``2``. A gold answer that cannot be parsed whole raises
   ``GoldAnswerError``; it is never scored 0 or 1.
2. The prediction is the content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), parsed whole
   the same way; without a box, math-verify's own extractors read the last ``_TAIL_CHARS``
   characters of the completion.
3. ``math_verify.verify(gold, prediction)`` decides equivalence. Yes/no gold answers are compared
   as words instead.

Timeouts. math-verify's own timeout uses ``signal.alarm``, which fails outside the main thread, and
no timeout inside one Python process can stop sympy in the middle of one long C call (for example
``9^(9^9)`` as an exact integer). So math-verify is always called with ``timeout=None``, inside a
child Python process (``_Worker``) that is killed when a call runs past ``timeout_seconds``; the
completion then scores 0 and a warning is logged. The child starts on first use and again after
a kill (0.5-1.5 s: it imports math-verify; not counted in the timeout). Measured on 2 busy CPU
cores, 118 typical boxed answers against CHAMP gold answers: 4.8 ms per call in-process, 5.0 ms
through the child process (two pipe round trips of ~13 us each, plus pickling); a thread with a
timeout costs about the same (4.8 ms, ~14 us per hand-off) but cannot stop a stuck C call.
Inputs are bounded before parsing too: only the last ``_TAIL_CHARS`` characters of an unboxed
completion are read, and a boxed (or gold) answer longer than ``_MAX_ANSWER_CHARS`` or nested
deeper than ``_MAX_NESTING`` is not parsed.
"""

from __future__ import annotations

import atexit
import functools
import logging
import math
import os
import pickle
import re
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import math_verify
from math_verify import ExprExtractionConfig, LatexExtractionConfig, StringExtractionConfig

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_SECONDS = 5.0
_TAIL_CHARS = 2_000  # an unboxed completion is searched for its answer in this many last characters
_MAX_ANSWER_CHARS = 1_000  # a longer boxed answer (or gold answer) is not parsed
# math-verify's LaTeX parser (ANTLR) slows down fast with nesting: ~0.1 s at depth 3, ~0.6 s at 10,
# ~4 s at 40 for "((...(1)...))". A boxed answer (or gold answer) nested deeper is not parsed.
_MAX_NESTING = 10
_WORKER_START_TIMEOUT_SECONDS = 120.0  # importing math-verify in a fresh process, on a busy machine
_WORKER_RUN_NAME = "__math_verify_worker__"  # __name__ of this file when run as the worker

# One config for every "parse this whole string" call: the string is wrapped as $...$ and only that
# one match is tried (extraction_mode="first_match"), so math-verify cannot fall back to a part of it.
_WHOLE_LATEX_CONFIG = LatexExtractionConfig(boxed_match_priority=-1)
# Text without a box is read only after an answer anchor ("the answer is", "Answer:", ...): a number or a
# yes/no anywhere in free text ("we have 3 apples and 0 pears", "no idea") is not a final answer, and
# accepting it would reward rambling completions that happen to mention the gold value.
_UNBOXED_CONFIGS = (
    LatexExtractionConfig(try_extract_without_anchor=False),
    ExprExtractionConfig(try_extract_without_anchor=False),
)
_UNBOXED_YES_NO_CONFIG = StringExtractionConfig(
    strings=("yes", "no", "Yes", "No", "YES", "NO"), lowercase=True, try_extract_without_anchor=False
)


class GoldAnswerError(ValueError):
    """A gold answer that cannot be parsed, or can be parsed only in part.

    Raised by ``parse_gold`` and ``verify_answer``; ``MathVerifyReward`` turns it into a ``None``
    reward (TRL: "not applicable") and logs it once per row.
    """


# --------------------------------------------------------------------------------------------------
# 1. Finding the final answer in a completion (pure string functions)
# --------------------------------------------------------------------------------------------------

_BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)\s*\{")


def last_boxed_content(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` or ``\\fbox{...}`` in ``text``, braces balanced.

    Args:
        text: a completion.

    Returns:
        The stripped content of the last box, or None when there is no box, when the last box is
        not closed (a truncated completion), is empty, or is longer than ``_MAX_ANSWER_CHARS``
        characters. Runs in time linear in ``len(text)``; escaped braces ``\\{`` ``\\}`` do not count.

    Example: ``last_boxed_content(r"\\boxed{1} so \\boxed{\\frac{1}{2}}")`` is ``r"\\frac{1}{2}"``.
    """
    starts = [m.end() for m in _BOX_COMMAND.finditer(text)]
    if not starts:
        return None
    start = starts[-1]  # index just after the opening brace
    depth = 1
    i = start
    end = min(len(text), start + _MAX_ANSWER_CHARS + 1)
    while i < end:
        char = text[i]
        if char == "\\":
            i += 2  # skip the escaped character (\{, \}, \\)
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                content = text[start:i].strip()
                return content or None
        i += 1
    return None


def nesting_depth(text: str) -> int:
    """Deepest nesting of brackets ``( [ {`` in ``text`` (all kinds counted together).

    Unbalanced closing brackets are ignored (the depth never goes below 0), so this is a cheap
    bound, not a check of balance. Example: ``nesting_depth(r"\\frac{(a+1)}{2}")`` is 2.
    """
    depth = deepest = 0
    for char in text:
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth = max(depth - 1, 0)
    return deepest


def completion_text(completion: Any) -> str:
    """The text to score from one TRL completion; never raises.

    Args:
        completion: a string (standard format), a list of message dicts (conversational format:
            the content of the LAST ``"assistant"`` message is used; a content given as a list of
            parts has its ``"text"`` parts joined), a single message dict, bytes (decoded as UTF-8
            with replacement characters) or None.

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


# --------------------------------------------------------------------------------------------------
# 2. Gold answers: from CHAMP-style ASCII (or LaTeX) to LaTeX that math-verify can parse whole
# --------------------------------------------------------------------------------------------------

_UNICODE_REPLACEMENTS = {"−": "-", "–": "-", "≥": ">=", "≤": "<=", "×": "*", "·": "*", "≠": "!="}

# "A, or equivalently B" -> both A and B are accepted; "A, or approximately B" -> only A (B is rounded).
_ALTERNATIVE_SEPARATOR = re.compile(r",\s*or (?:equivalently|an equivalent form such as)\s+", re.IGNORECASE)
_APPROXIMATION = re.compile(r",\s*or approximately\s+.*$", re.IGNORECASE)

# Sentences that only wrap one expression; group "x" is the expression.
_COUNT_UNITS = r"(?:integer-valued )?(?:values?|pairs?|roots?|zeros?|inequalit(?:y|ies)|times|numbers?|sequences?)"
_COUNT = r"(?P<x>-?\d+|[a-z]|zero|one|two|three|four|five)"
_PHRASES = [
    re.compile(r"(?P<x>.+?) is the only possible value", re.IGNORECASE),
    re.compile(r"the limit exists and is equal to (?P<x>.+)", re.IGNORECASE),
    re.compile(r"the only possible value for the limit is (?P<x>.+)", re.IGNORECASE),
    re.compile(rf"(?:at least|at most|exactly) {_COUNT}(?: {_COUNT_UNITS})?", re.IGNORECASE),
    re.compile(rf"{_COUNT} {_COUNT_UNITS}", re.IGNORECASE),
]
_NUMBER_WORDS = {"zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5"}

# Function names that ascii_to_latex understands, with the LaTeX they become.
_ONE_ARGUMENT_FUNCTIONS = {
    "sqrt": (r"\sqrt{", "}"),
    "floor": (r"\lfloor ", r" \rfloor"),
    "ceil": (r"\lceil ", r" \rceil"),
    "ln": (r"\ln\left(", r"\right)"),
    "log": (r"\log\left(", r"\right)"),
    "exp": (r"\exp\left(", r"\right)"),
    "sin": (r"\sin\left(", r"\right)"),
    "cos": (r"\cos\left(", r"\right)"),
    "tan": (r"\tan\left(", r"\right)"),
}
_BINOMIAL_NAMES = {"C", "binom"}
# Two-letter runs are read as a product of two variables ("xy") unless they are English words.
_TWO_LETTER_WORDS = {
    "am", "an", "as", "at", "be", "by", "do", "eg", "go", "he", "ie", "if", "in", "is", "it", "me", "my",
    "no", "of", "on", "or", "so", "to", "up", "us", "we",
}  # fmt: skip
_OPENERS, _CLOSERS = "([", ")]"


def _split_top_level(text: str, separators: Sequence[str]) -> list[str]:
    """Split ``text`` at ``separators`` that are outside all brackets; pieces are stripped."""
    pieces, depth, start, i = [], 0, 0, 0
    while i < len(text):
        if text[i] in _OPENERS:
            depth += 1
        elif text[i] in _CLOSERS:
            depth -= 1
        elif depth == 0:
            separator = next((s for s in separators if text.startswith(s, i)), None)
            if separator is not None:
                pieces.append(text[start:i].strip())
                i += len(separator)
                start = i
                continue
        i += 1
    pieces.append(text[start:].strip())
    return pieces


def _matching_bracket(text: str, open_index: int) -> int:
    """Index of the bracket that closes the one at ``open_index``.

    ``(`` and ``[`` may be closed by either ``)`` or ``]``, so half-open intervals like ``[0, 1)``
    work. Raises ValueError when it is never closed.
    """
    depth = 0
    for i in range(open_index, len(text)):
        if text[i] in _OPENERS:
            depth += 1
        elif text[i] in _CLOSERS:
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced bracket at position {open_index} in {text!r}")


def _is_wrapped(text: str) -> bool:
    """True if the whole of ``text`` is one bracketed group, like ``(x=1, y=2)``."""
    return bool(text) and text[0] in _OPENERS and _matching_bracket(text, 0) == len(text) - 1


def strip_note(text: str) -> str:
    """Drop a trailing remark in brackets: ``"100 (i.e., all values)"`` -> ``"100"``.

    The remark must follow a space and start with a word of two or more letters ("i.e.", "none",
    "no such ..."), so maths such as ``(x=8, y=2), (x=2, y=8)`` is left alone.
    """
    text = text.strip()
    if not text.endswith(")"):
        return text
    for start in range(len(text) - 1, 0, -1):
        if text[start] == "(" and text[start - 1] == " ":
            try:
                closes_at_end = _matching_bracket(text, start) == len(text) - 1
            except ValueError:
                continue
            if closes_at_end and re.match(r"(?:i\.e\.|e\.g\.|[A-Za-z]{2,}\b)", text[start + 1 :]):
                return text[:start].strip()
    return text


def unwrap_phrase(text: str) -> str:
    """The expression inside a known answer sentence, or ``text`` unchanged.

    ``"0 is the only possible value"`` -> ``"0"``; ``"The limit exists and is equal to 2/3"`` ->
    ``"2/3"``; ``"2 inequalities"`` -> ``"2"``; ``"At most 0 integer-valued zeros"`` -> ``"0"``;
    ``"Exactly one"`` -> ``"1"``. Only whole-sentence matches count (see ``_PHRASES``).
    """
    for phrase in _PHRASES:
        match = phrase.fullmatch(text.strip())
        if match:
            inner = match.group("x").strip()
            return _NUMBER_WORDS.get(inner.lower(), inner)
    return text


def yes_no_word(text: str) -> str | None:
    """``"yes"`` or ``"no"`` if ``text`` is just that word, else None.

    Case, surrounding ``$``, ``\\text{}``/``\\textbf{}``/``\\mathrm{}``/``\\mbox{}`` wrappers, spaces
    and a final ``.`` or ``!`` are ignored: ``yes_no_word(r"\\text{No}.")`` is ``"no"``.
    """
    word = re.sub(r"\\(?:text|textbf|mathrm|mbox|textrm)\s*\{([^{}]*)\}", r"\1", text)
    word = word.replace("$", "").strip().rstrip(".!").strip().lower()
    return word if word in ("yes", "no") else None


def _read_group(text: str, i: int) -> tuple[str, int]:
    """The ASCII group that starts at ``text[i]`` and where it ends (exclusive).

    A group is a bracketed expression (returned without its brackets), a function call like
    ``floor(n/2)``, a number or one letter. Used for exponents, subscripts and sum limits.
    """
    if i >= len(text):
        raise ValueError(f"missing exponent or subscript at the end of {text!r}")
    if text[i] in _OPENERS:
        close = _matching_bracket(text, i)
        return text[i + 1 : close], close + 1
    match = re.match(r"[A-Za-z]+\(", text[i:])
    if match:
        close = _matching_bracket(text, i + match.end() - 1)
        return text[i : close + 1], close + 1
    match = re.match(r"-?(?:\d+(?:\.\d+)?|[A-Za-z])", text[i:])
    if match:
        return match.group(), i + match.end()
    raise ValueError(f"cannot read the exponent or subscript at {text[i:]!r}")


def ascii_to_latex(text: str) -> str:
    """Rewrite plain ASCII maths as LaTeX, refusing anything it does not understand.

    Args:
        text: ASCII maths such as ``2^(n-1)``, ``n(n-3)/2``, ``(2n)!/(2^n*n!)``, ``C(n+1, 2m+1)``,
            ``2^floor(n/2)``, ``sqrt(3)/3``, ``sum_(i=1)^n i^3``, ``[-1, 1]``, ``1±sqrt(2)``.

    Returns:
        LaTeX: ``^(...)``/``_(...)`` become ``^{...}``/``_{...}``, ``1e5`` becomes
        ``1 \\cdot 10^{5}``, ``C(a, b)`` and ``binom(a, b)`` become ``\\binom{a}{b}``,
        ``sqrt``/``floor``/``ceil``/``ln``/``log``/``exp``/``sin``/``cos``/``tan`` calls
        become their LaTeX forms, ``sum_(i=1)^n`` becomes ``\\sum_{i=1}^{n}``, ``*`` becomes
        ``\\cdot``, ``±`` becomes ``\\pm``, ``>=``/``<=``/``!=`` become ``\\geq``/``\\leq``/``\\neq``,
        ``pi`` becomes ``\\pi``. Letters are variables; a two-letter run like ``xy`` is a product.

    Raises:
        ValueError: on empty text, an English word (three or more letters that are not a known
            function, or one of the common two-letter words such as "or", "no"), an ellipsis
            ``..``, unbalanced brackets, or any other character (for example ``;``, ``?``, ``{``).

    Example: ``ascii_to_latex("2^(n-1)")`` is ``"2^{n-1}"``.
    """
    if not text.strip():
        raise ValueError("empty expression")
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char.isspace():
            out.append(" ")
            i += 1
        elif char.isdigit() or (char == "." and text[i + 1 : i + 2].isdigit()):
            number = re.match(r"(\d*\.?\d+|\d+)(?:[eE]([-+]?\d+))?", text[i:])
            if text.startswith(".", i + number.end()):
                raise ValueError(f"ellipsis or malformed number at {text[i:]!r}")
            mantissa, exponent = number.groups()
            out.append(mantissa if exponent is None else mantissa + r" \cdot 10^{" + exponent + "}")
            i += number.end()
        elif char.isalpha() and char.isascii():
            i = _convert_word(text, i, out)
        elif char in "^_":
            group, i = _read_group(text, i + 1)
            out.append(char + "{" + ascii_to_latex(group) + "}")
        elif char in _OPENERS:
            close = _matching_bracket(text, i)
            out.append(char + ascii_to_latex(text[i + 1 : close]) + text[close])
            i = close + 1
        elif text.startswith((">=", "<=", "!="), i):
            out.append({">=": r" \geq ", "<=": r" \leq ", "!=": r" \neq "}[text[i : i + 2]])
            i += 2
        elif char == "*":
            out.append(r" \cdot ")
            i += 1
        elif char == "±":
            out.append(r"\pm ")
            i += 1
        elif char in "+-/=<>!,":
            out.append(char)
            i += 1
        elif char == "%":
            out.append(r"\%")
            i += 1
        else:
            raise ValueError(f"unexpected character {char!r} in {text!r}")
    return "".join(out)


def _convert_word(text: str, i: int, out: list[str]) -> int:
    """Convert the run of letters at ``text[i]`` (a function call, ``sum``, ``pi`` or variables).

    Appends LaTeX to ``out`` and returns the index after what was consumed; see ``ascii_to_latex``.
    """
    word = re.match(r"[A-Za-z]+", text[i:]).group()
    after = i + len(word)
    followed_by_bracket = text.startswith("(", after)
    if word in _ONE_ARGUMENT_FUNCTIONS and followed_by_bracket:
        close = _matching_bracket(text, after)
        before, behind = _ONE_ARGUMENT_FUNCTIONS[word]
        out.append(before + ascii_to_latex(text[after + 1 : close]) + behind)
        return close + 1
    if word in _BINOMIAL_NAMES and followed_by_bracket:
        close = _matching_bracket(text, after)
        arguments = _split_top_level(text[after + 1 : close], [","])
        if len(arguments) != 2:
            raise ValueError(f"{word}(...) needs two arguments in {text!r}")
        top, bottom = (ascii_to_latex(argument) for argument in arguments)
        out.append(r"\binom{" + top + "}{" + bottom + "}")
        return close + 1
    if word == "sum" and text.startswith("_", after):
        lower, after = _read_group(text, after + 1)
        if not text.startswith("^", after):
            raise ValueError(f"sum without an upper limit in {text!r}")
        upper, after = _read_group(text, after + 1)
        out.append(r"\sum_{" + ascii_to_latex(lower) + "}^{" + ascii_to_latex(upper) + "} ")
        return after
    if word == "pi":
        out.append(r"\pi ")
        return after
    if len(word) == 1 or (len(word) == 2 and word.lower() not in _TWO_LETTER_WORDS):
        out.append(word)
        return after
    raise ValueError(f"unknown word {word!r} in {text!r}")


def _expand_plus_minus(item: str) -> list[str]:
    """``"a(1±sqrt(2))"`` -> ``["a(1+sqrt(2))", "a(1-sqrt(2))"]``; at most one ``±`` per item."""
    count = item.count("±")
    if count == 0:
        return [item]
    if count > 1:
        raise ValueError(f"more than one ± in {item!r}")
    return [item.replace("±", "+"), item.replace("±", "-")]


def _solutions_to_latex(text: str) -> str | None:
    """LaTeX for a list of solutions written as assignments, or None if ``text`` is not one.

    * one solution of several variables -> an ordered tuple: ``"x=6, y=5"`` -> ``(6, 5)``,
      ``"x=y=0"`` -> ``(0, 0)``. (math-verify compares a set of equations such as
      ``{x=6, y=5}`` with a tuple in any order, so ``(5, 6)`` would pass; a tuple keeps the order.)
    * several solutions -> a set of tuples: ``"x=0, y=2 and x=9, y=11"`` or
      ``"(x=8, y=2), (x=2, y=8)"`` -> ``\\{(0, 2), (9, 11)\\}``.
    * one variable with several values -> a set: ``"x=16 and x=81"`` -> ``\\{16, 81\\}``,
      ``"x=±1, ±2"`` -> ``\\{+1, -1, +2, -2\\}``.

    Returns None (leave the text to math-verify) when a left-hand side is not a single letter
    (``f(x)=0``) or when there is a single variable with a single value (``x=5``).
    Raises ValueError when solutions name different variables.
    """
    if "=" not in text.replace(">=", "").replace("<=", "").replace("!=", ""):
        return None
    solutions = _split_top_level(text, [" and ", " or "])
    if len(solutions) == 1:
        groups = _split_top_level(text, [","])
        if len(groups) > 1 and all(_is_wrapped(group) for group in groups):
            solutions = groups
    parsed: list[list[tuple[str, list[str]]]] = []  # per solution: (variable, values) pairs
    for solution in solutions:
        if _is_wrapped(solution):
            solution = solution[1:-1]
        assignments: list[tuple[str, list[str]]] = []
        for piece in _split_top_level(solution, [","]):
            sides = [side.strip() for side in piece.split("=")]
            if len(sides) == 1:  # "x=±1, ±2": a further value of the previous variable
                if not assignments:
                    return None
                assignments[-1][1].extend(_expand_plus_minus(sides[0]))
                continue
            if not all(re.fullmatch(r"[A-Za-z]", side) for side in sides[:-1]):
                return None
            assignments += [(variable, _expand_plus_minus(sides[-1])) for variable in sides[:-1]]
        parsed.append(assignments)
    variables = [[variable for variable, _ in assignments] for assignments in parsed]
    if any(names != variables[0] for names in variables):
        raise ValueError(f"the solutions in {text!r} do not name the same variables")
    if len(variables[0]) == 1:
        values = [value for assignments in parsed for value in assignments[0][1]]
        if len(values) == 1:
            return None
        return r"\{" + ", ".join(ascii_to_latex(value) for value in values) + r"\}"
    tuples = []
    for assignments in parsed:
        if any(len(values) != 1 for _, values in assignments):
            raise ValueError(f"a solution with several variables has a ± in {text!r}")
        tuples.append("(" + ", ".join(ascii_to_latex(values[0]) for _, values in assignments) + ")")
    return tuples[0] if len(tuples) == 1 else r"\{" + ", ".join(tuples) + r"\}"


def _ascii_answer_to_latex(text: str) -> str:
    """One ASCII gold answer (notes and phrases already removed) as LaTeX.

    Assignments go through ``_solutions_to_latex``; a list ``"1, 4 and 9"`` (top-level ``,``,
    ``and``, ``or``, with ``±`` expanded) becomes a set ``\\{1, 4, 9\\}``; anything else is one
    expression for ``ascii_to_latex``. Raises ValueError (from those functions) when unreadable.
    """
    solutions = _solutions_to_latex(text)
    if solutions is not None:
        return solutions
    items = _split_top_level(text, [", ", " and ", " or "])
    if "" in items:
        raise ValueError(f"empty item in the list {text!r}")
    items = [expanded for item in items for expanded in _expand_plus_minus(item)]
    if len(items) == 1:
        return ascii_to_latex(items[0])
    return r"\{" + ", ".join(ascii_to_latex(item) for item in items) + r"\}"


def _looks_like_latex(text: str) -> bool:
    """True if ``text`` uses LaTeX syntax (a backslash, a brace or a ``$``)."""
    return any(char in text for char in "\\{}$")


def normalise_gold(gold: str) -> list[str]:
    """Gold answer text -> the list of accepted forms: LaTeX strings, or ``["yes"]``/``["no"]``.

    Steps: unicode maths symbols to ASCII (``−``, ``≥``, ``×``, ...); one final ``.`` dropped;
    "A, or equivalently B" and "A, or an equivalent form such as B" split into alternatives (both
    accepted); ", or approximately B" dropped (a rounded value is not the answer); then each
    alternative is a yes/no word, LaTeX (kept as is, outer ``$`` removed), or ASCII, for which a
    trailing note is removed (``strip_note``), an answer sentence is unwrapped
    (``unwrap_phrase``) and the maths is rewritten (``_ascii_answer_to_latex``).

    Args:
        gold: the gold answer, at most ``_MAX_ANSWER_CHARS`` characters.

    Raises:
        GoldAnswerError: empty or too long, words that are not maths (for example "No integer
            solutions"), an ellipsis, unbalanced brackets, or yes/no mixed with maths.

    Example: ``normalise_gold("C(10, 5), or equivalently 252")`` is ``[r"\\binom{10}{5}", "252"]``.
    """
    text = str(gold)
    for old, new in _UNICODE_REPLACEMENTS.items():
        text = text.replace(old, new)
    text = re.sub(r"(?<!\.)\.$", "", " ".join(text.split())).strip()  # a final "." (not an ellipsis)
    if not text:
        raise GoldAnswerError(f"empty gold answer {gold!r}")
    if len(text) > _MAX_ANSWER_CHARS:
        raise GoldAnswerError(f"gold answer longer than {_MAX_ANSWER_CHARS} characters: {text[:80]!r}...")
    if nesting_depth(text) > _MAX_NESTING:
        raise GoldAnswerError(f"gold answer {text[:80]!r} has brackets nested deeper than {_MAX_NESTING}")
    text = _APPROXIMATION.sub("", text)
    forms = []
    for alternative in _ALTERNATIVE_SEPARATOR.split(text):
        word = yes_no_word(alternative)
        if word is not None:
            forms.append(word)
        elif _looks_like_latex(alternative):
            forms.append(re.sub(r"^\$+|\$+$", "", alternative).strip())
        else:
            try:
                forms.append(_ascii_answer_to_latex(unwrap_phrase(strip_note(alternative))))
            except (ValueError, RecursionError) as err:
                raise GoldAnswerError(f"gold answer {gold!r} is not maths that can be read: {err}") from None
    if len({form in ("yes", "no") for form in forms}) > 1:
        raise GoldAnswerError(f"gold answer {gold!r} mixes a yes/no word with maths")
    return forms


# --------------------------------------------------------------------------------------------------
# 3. Parsing and verifying with math-verify. These run inside the worker process (section 4).
# --------------------------------------------------------------------------------------------------


def _parse_latex_whole(latex: str) -> list:
    """``[sympy object]`` if math-verify parses ALL of ``latex``, else ``[]``.

    ``latex`` is wrapped as ``$...$`` and math-verify tries only that one match, so it cannot
    return the parse of a part (such as the ``\\frac{1}{2}`` of ``\\frac{1}{2} garbage``).
    """
    latex = latex.replace("\n", " ")
    if not latex.strip() or "$" in latex.replace(r"\$", ""):
        return []
    parsed = math_verify.parse(
        f"${latex}$",
        [_WHOLE_LATEX_CONFIG],
        fallback_mode="no_fallback",
        extraction_mode="first_match",
        parsing_timeout=None,
    )
    return [value for value in parsed if not isinstance(value, str)]


def _parse_gold_uncached(gold: str) -> list:
    """``parse_gold`` without the worker or the cache. Raises GoldAnswerError."""
    parsed = []
    for form in normalise_gold(gold):
        if form in ("yes", "no"):
            parsed.append(form)
            continue
        value = _parse_latex_whole(form)
        if not value:
            raise GoldAnswerError(f"math-verify cannot parse the whole of {form!r} (gold answer {gold!r})")
        parsed += value
    return parsed


@functools.lru_cache(maxsize=4096)
def _parse_gold_cached(gold: str) -> tuple[bool, Any]:
    """``(True, parsed)`` or ``(False, error message)``; failures are cached too."""
    try:
        return True, _parse_gold_uncached(gold)
    except GoldAnswerError as err:
        return False, str(err)


def _parse_gold_in_worker(gold: str) -> list:
    """The cached parse of ``gold``; raises GoldAnswerError."""
    ok, value = _parse_gold_cached(gold)
    if not ok:
        raise GoldAnswerError(value)
    return value


def _check_gold_in_worker(gold: str) -> None:
    """Raise GoldAnswerError if ``gold`` cannot be parsed (sends nothing big back to the parent)."""
    _parse_gold_in_worker(gold)


def _parse_boxed(content: str) -> list:
    """Parse a boxed answer whole; LaTeX-free content is first read as ASCII maths if it can be.

    Returns ``[]`` (no answer) for content nested deeper than ``_MAX_NESTING``.
    """
    if nesting_depth(content) > _MAX_NESTING:
        return []
    latex = content
    if not _looks_like_latex(content):
        try:
            latex = ascii_to_latex(content)
        except (ValueError, RecursionError):
            pass  # not ASCII maths that we know: let math-verify read it as LaTeX
    return _parse_latex_whole(latex)


def _ends_mid_expression(text: str, answer: str) -> bool:
    """True if the last ``answer`` in ``text`` is followed by ``^ _ ( ! * /`` or a letter/digit.

    math-verify's plain-number extractor reads "the answer is 2^(n-1)" as ``2``; this catches it.
    """
    position = text.rfind(answer)
    if position < 0:
        return False
    following = text[position + len(answer) : position + len(answer) + 1]
    return bool(following) and (following in "^_(!*/" or following.isalnum())


# A concluding sentence ("Therefore, n mod 1982 is 0.") and its first copula: prose answers without a box.
_CONCLUSION = re.compile(r"(?:^|[.!?:]\s+|\n)\s*(?:Therefore|Thus|Hence|In conclusion|Consequently|So),?\s")
_COPULA = re.compile(r"\s(?:is|are|equals|is equal to|=)\s")
_CLAUSE_END = re.compile(r"[,;]\s+(?:and|which|where|when|while|since|because|as|so|with|for|this|that)\b")
_MAX_CONCLUSION_CHARS = 400
_SENTENCE_BREAK = re.compile(r"[.!?]\s+[A-Z]|\n\s*\n")


def conclusion_answer_text(text: str) -> str | None:
    """What follows the first copula of the last concluding sentence of ``text``, or None.

    "... Therefore, the limit exists and is equal to 2." gives "equal to 2."; a sentence must start
    with Therefore / Thus / Hence / In conclusion / Consequently / So, be the last one of the text and be
    complete (a cut-off completion has no concluding sentence).
    A trailing clause (", and this occurs when a = b = c") is cut off.
    """
    starts = [m.end() for m in _CONCLUSION.finditer(text)]
    if not starts or len(text) - starts[-1] > _MAX_CONCLUSION_CHARS:
        return None
    sentence = text[starts[-1] :].rstrip()
    # one complete sentence that ends the text: not cut off, and no further sentence after it
    if not sentence.endswith((".", "!", "$", ")", "]")) or _SENTENCE_BREAK.search(sentence[:-1]):
        return None
    copula = _COPULA.search(sentence)
    if copula is None:
        return None
    answer = sentence[copula.end() :]
    clause = _CLAUSE_END.search(answer)
    return answer[: clause.start()] if clause else answer


def _parse_unboxed(tail: str) -> list:
    """A completion without a box: math-verify after an answer anchor, else in a concluding sentence.

    Never reads a value from free text (see ``_UNBOXED_CONFIGS``).
    """
    parsed = math_verify.parse(tail, list(_UNBOXED_CONFIGS), parsing_timeout=None)
    source = tail
    if not parsed:
        source = conclusion_answer_text(tail)
        if source is None:
            return []
        parsed = math_verify.parse(
            source, [LatexExtractionConfig(), ExprExtractionConfig()], extraction_mode="first_match", parsing_timeout=None
        )
    strings = [value for value in parsed if isinstance(value, str)]
    if strings and _ends_mid_expression(source, strings[-1]):
        return []
    return parsed


def _predicted_yes_no(completion: str) -> str | None:
    """``"yes"``/``"no"`` answered by a completion: its last box, else math-verify's word extractor."""
    boxed = last_boxed_content(completion)
    if boxed is not None:
        return yes_no_word(boxed)
    found = math_verify.parse(completion[-_TAIL_CHARS:], [_UNBOXED_YES_NO_CONFIG], parsing_timeout=None)
    return found[0] if found else None


def _verify_in_worker(completion: str, gold: str) -> bool:
    """``verify_answer`` without the worker: True iff the final answer is equivalent to ``gold``."""
    gold_parsed = _parse_gold_in_worker(gold)
    if gold_parsed[0] in ("yes", "no"):
        return _predicted_yes_no(completion) in gold_parsed
    boxed = last_boxed_content(completion)
    if boxed is not None:
        prediction = _parse_boxed(boxed)
    elif _BOX_COMMAND.search(completion[-_TAIL_CHARS:]):
        prediction = []  # a box that is never closed or too long: no final answer
    else:
        prediction = _parse_unboxed(completion[-_TAIL_CHARS:])
    if not prediction:
        return False
    return math_verify.verify(gold_parsed, prediction, timeout_seconds=None)


def _extract_unboxed_in_worker(tail: str) -> str | None:
    """A readable answer string found by math-verify's extractors in ``tail``, or None."""
    parsed = _parse_unboxed(tail) or math_verify.parse(tail, [_UNBOXED_YES_NO_CONFIG], parsing_timeout=None)
    strings = [value for value in parsed if isinstance(value, str)]
    return (strings[-1].strip() or None) if strings else None


# --------------------------------------------------------------------------------------------------
# 4. Wall-clock timeout: a child process that can be killed
# --------------------------------------------------------------------------------------------------


class _WorkerFailed(Exception):
    """The worker gave no answer: it ran past its timeout (and was killed), died, or hit an error."""


# The only functions the worker runs, by name (names, not functions, travel through the pipe).
_WORKER_FUNCTIONS = {
    "verify": _verify_in_worker,
    "check_gold": _check_gold_in_worker,
    "parse_gold": _parse_gold_in_worker,
    "extract": _extract_unboxed_in_worker,
}


def _write_message(stream, message: Any) -> None:
    """Write ``message`` to a binary stream as an 8-byte length followed by its pickle."""
    data = pickle.dumps(message)
    stream.write(len(data).to_bytes(8, "little") + data)
    stream.flush()


def _read_exactly(stream, size: int) -> bytes:
    """Read ``size`` bytes from an unbuffered binary stream; fewer only at end of file."""
    chunks, remaining = [], size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _read_message(stream) -> Any:
    """Read one message written by ``_write_message``; raises EOFError when the stream has ended."""
    header = _read_exactly(stream, 8)
    size = int.from_bytes(header, "little") if len(header) == 8 else -1
    data = _read_exactly(stream, size) if size >= 0 else b""
    if size < 0 or len(data) != size:
        raise EOFError("the other process closed the pipe")
    return pickle.loads(data)


def _worker_main(requests, replies) -> None:
    """Child process loop: read ``(name, args)`` from ``requests``, write ``(status, value)`` to ``replies``.

    ``status`` is ``"ok"`` (value: the result), ``"gold_error"`` (value: a GoldAnswerError's
    message) or ``"error"`` (value: the repr of any other exception). Errors travel as text because
    the child's copy of this module has another ``__name__``, so its classes cannot be unpickled.
    """
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # its "timeout is disabled" notice
    _verify_in_worker(r"\boxed{x^2+1}", "x^2+1")  # warm up (the first parse takes ~0.4 s), before timing starts
    _write_message(replies, ("ok", "ready"))
    while True:
        try:
            name, args = _read_message(requests)
        except EOFError:
            return  # the parent has gone
        try:
            reply = ("ok", _WORKER_FUNCTIONS[name](*args))
        except GoldAnswerError as err:
            reply = ("gold_error", str(err))
        except Exception as err:  # noqa: BLE001 - every error is sent back to the caller
            reply = ("error", repr(err))
        try:
            _write_message(replies, reply)
        except Exception as err:  # noqa: BLE001 - e.g. a result too deep to pickle
            _write_message(replies, ("error", f"cannot send the result back: {err!r}"))


# The child runs this file as a script (not ``import trl_explore...``, which would also run the
# package ``__init__`` files and import torch and TRL). It speaks over its stdin and a copy of its
# stdout; its own stdout is pointed at stderr so that a stray print cannot corrupt the replies.
_WORKER_BOOT = (
    "import os, runpy, sys; replies = os.fdopen(os.dup(1), 'wb', buffering=0); os.dup2(2, 1); "
    "runpy.run_path(sys.argv[1], {'_WORKER_PIPES': (os.fdopen(0, 'rb', buffering=0), replies)}, sys.argv[2])"
)


class _Worker:
    """One child Python process that runs this module's math-verify work for the current process.

    ``run`` sends a function name and its arguments, waits at most ``timeout_seconds`` for the
    answer, and kills the child if none came (the next ``run`` starts a new one, about 1.5 s).
    Calls from several threads take turns (a lock); the wait for the lock is not part of a call's
    timeout. After a ``fork``, the forked process starts a worker of its own. The child is a plain
    ``subprocess`` (not ``multiprocessing``), so the caller's main script is not imported again in
    it. The timeout waits with ``select``, so this works on POSIX systems (Linux, macOS) only.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None

    def forget_after_fork(self) -> None:
        """In a forked process: drop the parent's child process and lock (they are the parent's)."""
        self._lock = threading.Lock()
        self._process = None

    def run(self, name: str, args: tuple, timeout_seconds: float) -> Any:
        """``_WORKER_FUNCTIONS[name](*args)`` computed in the worker.

        Raises:
            _WorkerFailed: no answer within ``timeout_seconds`` (the worker is killed), the worker
                died, or the function raised an error other than GoldAnswerError.
            GoldAnswerError: raised by the function in the worker.
            RuntimeError: the worker could not be started.
        """
        with self._lock:
            self._start_if_needed()
            try:
                _write_message(self._process.stdin, (name, args))
                status, value = self._receive(timeout_seconds)
            except (EOFError, OSError) as err:
                self.stop()
                raise _WorkerFailed(f"the worker process died: {err!r}") from None
        if status == "gold_error":
            raise GoldAnswerError(value)
        if status == "error":
            raise _WorkerFailed(f"error in the worker: {value}")
        return value

    def _receive(self, timeout_seconds: float) -> Any:
        """The next reply of the child; kills it and raises _WorkerFailed after ``timeout_seconds``."""
        readable, _, _ = select.select([self._process.stdout], [], [], timeout_seconds)
        if not readable:
            self.stop()
            raise _WorkerFailed(f"no answer within {timeout_seconds:.3g} s")
        return _read_message(self._process.stdout)

    def start(self) -> None:
        """Start the child process now if it is not running (about 1.5 s), outside any call's timeout."""
        with self._lock:
            self._start_if_needed()

    def _start_if_needed(self) -> None:
        if self._process is not None and self._process.poll() is None:
            return
        command = [sys.executable, "-c", _WORKER_BOOT, os.path.abspath(__file__), _WORKER_RUN_NAME]
        self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        try:
            ready = self._receive(_WORKER_START_TIMEOUT_SECONDS) == ("ok", "ready")
        except (_WorkerFailed, EOFError, OSError):
            ready = False
        if not ready:
            self.stop()
            raise RuntimeError(f"the math-verify worker process did not start ({command[0]} -c ...)")

    def stop(self) -> None:
        """Kill the child process, if any (it is started again on the next ``run``)."""
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=5)
            self._process.stdin.close()
            self._process.stdout.close()
        self._process = None


_WORKER = _Worker()
atexit.register(_WORKER.stop)
os.register_at_fork(after_in_child=_WORKER.forget_after_fork)


def _check_timeout(timeout_seconds: float) -> float:
    if not isinstance(timeout_seconds, (int, float)) or not math.isfinite(timeout_seconds) or timeout_seconds <= 0:
        raise ValueError(f"timeout_seconds must be a finite number > 0, got {timeout_seconds!r}")
    return float(timeout_seconds)


def _short(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[: limit // 2] + " ... " + text[-limit // 2 :])


# --------------------------------------------------------------------------------------------------
# 5. Public API
# --------------------------------------------------------------------------------------------------


def extract_answer(completion: Any, *, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS) -> str | None:
    """The final answer of a completion, as a readable string; never raises on bad input.

    Args:
        completion: the completion text (a conversational completion is also accepted, see
            ``completion_text``).
        timeout_seconds: wall-clock limit for math-verify's extractors (default 5 s).

    Returns:
        The content of the last ``\\boxed{...}``/``\\fbox{...}`` (balanced braces, stripped);
        else the string math-verify's LaTeX, expression or yes/no extractors find in the last
        ``_TAIL_CHARS`` characters (for example ``"2^{n-1}"`` or ``"42"``); else None (also on a
        timeout). Used for answer-disagreement metrics and evaluation logs.
    """
    timeout_seconds = _check_timeout(timeout_seconds)
    text = completion_text(completion)
    boxed = last_boxed_content(text)
    if boxed is not None:
        return boxed
    tail = text[-_TAIL_CHARS:]
    if not tail.strip() or _BOX_COMMAND.search(tail):
        return None
    try:
        return _WORKER.run("extract", (tail,), timeout_seconds)
    except _WorkerFailed as err:
        logger.warning("extract_answer gave up on %s: %s", _short(tail), err)
        return None


def parse_gold(gold: str, *, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS) -> list:
    """Parse a gold answer with math-verify, all of it or not at all.

    Args:
        gold: LaTeX or plain ASCII maths (see ``normalise_gold`` for the accepted forms).
        timeout_seconds: wall-clock limit (default 5 s).

    Returns:
        A list of accepted answers: sympy objects from ``math_verify.parse`` (one per alternative
        of "A, or equivalently B"), or ``["yes"]``/``["no"]``. Results are cached per gold text.

    Raises:
        GoldAnswerError: the gold answer (or any part of it) cannot be parsed, or parsing timed out.
    """
    timeout_seconds = _check_timeout(timeout_seconds)
    if gold is None:
        raise GoldAnswerError("gold answer is None")
    try:
        return _WORKER.run("parse_gold", (str(gold),), timeout_seconds)
    except _WorkerFailed as err:
        raise GoldAnswerError(f"parsing gold answer {_short(str(gold))} failed: {err}") from None


def verify_answer(completion: Any, gold: str, *, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS) -> bool:
    """True iff the completion's final answer is mathematically equivalent to ``gold``.

    This is ``R_m`` of OGER (Eq. 7-8) and the verifier of ASE-GRPO (§3.1). The final answer is the
    last boxed answer, else what math-verify's extractors find near the end; see the module
    docstring for the whole procedure.

    Args:
        completion: the completion text; anything else (None, bytes, a conversational completion)
            goes through ``completion_text``. Garbage (empty, 100k characters, unbalanced braces,
            replacement characters) gives False, never an exception.
        gold: the gold answer, LaTeX or ASCII maths (a number is converted with ``str``).
        timeout_seconds: wall-clock limit for the whole check (default 5 s), not counting the
            start of a new worker process; past it the answer counts as wrong and a warning is
            logged. Works from any thread.

    Raises:
        GoldAnswerError: ``gold`` cannot be parsed whole (or its parse timed out).
        ValueError: ``timeout_seconds`` is not a finite number > 0.
        RuntimeError: the worker process cannot be started (a broken installation).
    """
    timeout_seconds = _check_timeout(timeout_seconds)
    if gold is None:
        raise GoldAnswerError("gold answer is None")
    gold = str(gold)
    text = completion_text(completion)
    _WORKER.start()  # a restart after an earlier timeout must not eat this call's time budget
    deadline = time.monotonic() + timeout_seconds
    try:  # first the gold answer alone, so that a timeout here is reported as an unparseable gold
        _WORKER.run("check_gold", (gold,), timeout_seconds)
    except _WorkerFailed as err:
        raise GoldAnswerError(f"parsing gold answer {_short(gold)} failed: {err}") from None
    try:
        return _WORKER.run("verify", (text, gold), max(deadline - time.monotonic(), 0.01))
    except _WorkerFailed as err:  # a timeout, or an error on strange input: score 0, loudly
        logger.warning("verify_answer scored 0 (%s) for completion %s", err, _short(text))
        return False


class MathVerifyReward:
    """TRL reward function: 1.0 if a completion's final answer matches the gold answer, else 0.0.

    Pass an instance in ``GRPOTrainer(reward_funcs=[...])``. TRL calls it as
    ``reward(prompts=..., completions=..., completion_ids=..., **columns)``; the gold answers are
    read from the dataset column ``answer_column``. This is ``R_m`` of OGER (Eq. 7-8) and the
    verifier reward of ASE-GRPO (§3.1).

    Args:
        answer_column: name of the dataset column holding gold answers (default ``"answer"``).
        timeout_seconds: wall-clock limit per completion (default 5 s); see ``verify_answer``.
        name: ``__name__``, which TRL uses in metric names (default ``"math_reward"``).

    Rows whose gold answer cannot be parsed get ``None`` (TRL turns it into NaN and leaves it out
    of the reward sums) instead of a 0 or 1. Each such row adds one to ``num_unparseable_gold``,
    and a warning is logged once per row id (``kwargs["problem_id"]`` if that column exists,
    else the gold text).

    Raises (from ``__call__``):
        ValueError: the answer column is missing from the keyword arguments (the message lists the
            columns that are there), or it has a different length from ``completions``.
    """

    def __init__(
        self,
        answer_column: str = "answer",
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        name: str = "math_reward",
    ) -> None:
        self.answer_column = answer_column
        self.timeout_seconds = _check_timeout(timeout_seconds)
        self.__name__ = name
        self.num_unparseable_gold = 0
        self._reported_rows: set = set()
        # The last call's (completions, golds) and rewards: OGERRewardFunction calls this reward again
        # on the same batch right after TRL did, and gets the rewards without a second verification.
        self._last_call: tuple | None = None

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs) -> list[float | None]:
        """Score each completion: 1.0, 0.0, or None when its gold answer cannot be parsed."""
        if completions is None:
            raise ValueError("MathVerifyReward needs `completions`")
        if self.answer_column not in kwargs:
            raise ValueError(
                f"MathVerifyReward reads gold answers from the column {self.answer_column!r}, which is "
                f"missing; the columns given are {sorted(kwargs)}. Set answer_column=... to the right one."
            )
        golds = list(kwargs[self.answer_column])
        if len(golds) != len(completions):
            raise ValueError(
                f"column {self.answer_column!r} has {len(golds)} gold answers for {len(completions)} completions"
            )
        key = (tuple(completion_text(c) for c in completions), tuple(str(g) for g in golds))
        if self._last_call is not None and self._last_call[0] == key:
            return list(self._last_call[1])
        row_ids = kwargs.get("problem_id")
        rewards: list[float | None] = []
        for row, (completion, gold) in enumerate(zip(completions, golds)):
            try:
                correct = verify_answer(completion, gold, timeout_seconds=self.timeout_seconds)
            except GoldAnswerError as err:
                row_id = row_ids[row] if row_ids is not None else gold
                self._report_unparseable(row_id, err)
                rewards.append(None)
                continue
            rewards.append(1.0 if correct else 0.0)
        self._last_call = (key, list(rewards))
        return rewards

    def _report_unparseable(self, row_id: Any, err: GoldAnswerError) -> None:
        self.num_unparseable_gold += 1
        key = repr(row_id)  # hashable even for list-valued ids
        if key not in self._reported_rows:
            self._reported_rows.add(key)
            logger.warning("%s: no reward for row %s, its gold answer cannot be parsed: %s", self.__name__, key, err)


math_reward = MathVerifyReward()


if __name__ == _WORKER_RUN_NAME:  # this file run by _Worker in its child process (see _WORKER_BOOT)
    _worker_main(*_WORKER_PIPES)  # noqa: F821 - given by runpy.run_path's init_globals
