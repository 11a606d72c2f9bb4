"""Guard-rails against hedged and unfinished answers, and recall rules where equivalence is certain.

Part of the grader of :mod:`trl_explore.rewards.grading` (engineering choices on top of Math-Verify's semantics; the
rewards an RL policy learns to exploit first). Pure functions: strings and parsed answers in, verdicts out.

**Where the answer is** (:func:`locate_answer`): the regex match Math-Verify's ``parse`` reads its answer from, found
with Math-Verify's own extraction regexes and in its order (priority groups from the lowest, the rightmost match
first in a group, the first one that parses). Priority below 300 means a box or an answer phrase ("final answer
is", "answer:"); 300 is a bare number or LaTeX anywhere.

**Guard-rails** (each only turns a 1 into a 0; names in :data:`~trl_explore.rewards.modes.GUARDS`):

* ``"hedge"``: several different values offered as the answer: "The answer is 5 or 6.", "5, 6, 7 or 8", "\\boxed{5}
  or 6", "Final answer: 5 (or maybe 6)". The alternatives must stand next to the value that was read, joined by "or"
  (or, after an answer phrase, by commas), and differ in value ("1/2 or 0.5" is one answer). Never applied when the
  gold has several values (a set, tuple, interval, list or system), which such a list may legitimately state.
* ``"unterminated"``: a completion that did not end (its last token is not an EOS; known only where the reward gets
  ``completion_ids`` and the EOS ids), or whose text visibly stops mid-sentence (:func:`ends_mid_sentence`: on "by",
  "of", "the", an operator, a comma), and that has no boxed or phrase-anchored answer: Math-Verify would read the
  last number of prose cut off mid-sentence.
* ``"retraction"``: the answer is followed by words that take it back or declare it impossible ("Wait, that is
  wrong", "I made a mistake", "no such number exists", "which is impossible"), or by a correction that states
  another value ("The answer is 5. Wait, actually it is 6.": :func:`corrected_after`). An answer restated after the
  retraction is what Math-Verify reads, so it is not affected.
* ``"prompt_echo"``: the answer is an unevaluated expression copied from the prompt ("The math solution for 9 + 8 is
  x." for "What is 9 + 8?", gold 17: Math-Verify evaluates ``9 + 8``). Applies where the reward gets the prompts, to
  answers that are not a plain number or fraction and are written differently from the gold.
* ``"mixed_number"``: a mixed number is read as its value: "2 2/3" is 8/3 (Math-Verify reads the ``2`` of the
  numerator: Math-Verify issue #34), so it no longer matches gold 2. Its recall half (8/3 now matches) is a recall
  rule below.

**Recall** (each only turns a 0 into a 1; on with ``recall=True``): a mixed number equal to the gold; ``\\textbf{X}``
after an answer phrase or alone, ending the completion, read as ``\\boxed{X}`` (as the bold rule of the grading
module does for ``**X**``; a multiple-choice letter in bold too); thousands separated by thin spaces or mixed
separators in one number (``2\\,024\\,000``, ``2{,}024\\,000``: every group after the first has 3 digits);
e-notation (``1.5e-3``) where the gold is a plain number; repeating decimals written with ``\\overline`` or
``\\dot`` (``0.1\\overline{6}`` = 1/6); a function answer up to its variable's name (``f(t)=t^2`` for ``f(x)=x^2``).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

import math_verify
import sympy
from math_verify import ExprExtractionConfig, LatexExtractionConfig
from math_verify.parser import extract_match, get_extraction_regexes

DEFAULT_EXTRACTION = (LatexExtractionConfig(), ExprExtractionConfig())
"""Math-Verify's default extraction targets (``parse``'s defaults)."""
UNANCHORED_PRIORITY = 300
"""Math-Verify's priority of a match that needs no box and no answer phrase."""


@dataclass(frozen=True)
class AnswerSpan:
    """Where Math-Verify reads the answer of a text.

    Attributes:
        start, end: the regex match (characters of the text), answer phrase included.
        value_start, value_end: the part of the match that holds the answer itself.
        answer: the answer as text (Math-Verify's extracted string).
        parsed: Math-Verify's parse of it (a sympy object or a string).
        anchored: a box or an answer phrase (Math-Verify priority < 300).
    """

    start: int
    end: int
    value_start: int
    value_end: int
    answer: str
    parsed: Any
    anchored: bool


def locate_answer(text: str, configs=DEFAULT_EXTRACTION) -> AnswerSpan | None:
    """The match ``math_verify.parse(text, configs)`` takes its answer from, or None.

    Uses Math-Verify's regexes and ``extract_match`` in the order of its ``extract_target_from_pred``: priority groups
    from the lowest, in a group the match that ends last (then starts first), the first that parses.
    """
    patterns = sorted(((p, target, priority) for group, target in get_extraction_regexes(configs)
                       for p, priority in group), key=lambda item: item[2])  # fmt: skip
    for priority, group in itertools.groupby(patterns, key=lambda item: item[2]):
        matches = sorted(((m, target) for p, target, _ in group for m in p.finditer(text)),
                         key=lambda item: (item[0].end(), -item[0].start()), reverse=True)  # fmt: skip
        for match, target in matches:
            parsed, answer = extract_match(match, target)
            if parsed is not None:
                spans = [match.span(name) for name, value in match.groupdict().items() if value is not None]
                value_start = min((s for s, _ in spans), default=match.start())
                value_end = max((e for _, e in spans), default=match.end())
                return AnswerSpan(match.start(), match.end(), value_start, value_end, answer, parsed,
                                  priority < UNANCHORED_PRIORITY)  # fmt: skip
    return None


def _is_multi_valued(form: Any) -> bool:
    """A set, tuple, list, interval, union, matrix or system: a gold that may list several values."""
    if isinstance(form, sympy.Eq):
        return _is_multi_valued(form.rhs)
    return isinstance(form, (sympy.FiniteSet, sympy.Tuple, sympy.Interval, sympy.Union, sympy.MatrixBase, sympy.And,
                             sympy.Or, tuple, list, set))  # fmt: skip


def single_valued(gold_parsed: list) -> bool:
    """True iff no parsed form of the gold has several values (see :func:`_is_multi_valued`)."""
    return not any(_is_multi_valued(form) for form in gold_parsed if not isinstance(form, str))


# --------------------------------------------------------------------------------------------------
# "hedge": several different values offered as the answer
# --------------------------------------------------------------------------------------------------

_NUMBER = r"[-+−]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?:\s*/\s*\d+)?(?:\s*\\?%)?"
_VALUE = (rf"(?:[A-Za-z]\s*=\s*)?(?:\$\s*{_NUMBER}\s*\$|{_NUMBER}|\$[^$\n]{{1,40}}\$|\\boxed\{{[^{{}}\n]{{1,40}}\}}"
          r"|\\[dt]?frac\{[^{}]*\}\{[^{}]*\})")  # fmt: skip
_OR = r"\s*,?\s*\(?\s*\b(?:or|and/or)\b\s+(?:(?:else|maybe|possibly|perhaps|even|probably)\s+)?"
_COMMA = r"\s*,\s*"
_FORWARD = re.compile(rf"(?P<sep>{_OR}|{_COMMA})(?P<value>{_VALUE})")
_BACKWARD = re.compile(rf"(?<![\w.])(?P<value>{_VALUE})(?P<sep>{_OR}|{_COMMA})$")
# a value listed after a comma must end there (", 3 more than 9" is no alternative); after "or" anything may follow
_LIST_ITEM_END = re.compile(r"\s*(?:[,.;:!?)]|$|\n|\s(?:or|and)\b)")
_MAX_ALTERNATIVES = 8


def _alternatives(text: str, span: AnswerSpan) -> tuple[list[str], bool]:
    """The values listed next to the answer that was read, and whether one separator is "or"."""
    values, has_or = [], False
    position = span.value_end
    for _ in range(_MAX_ALTERNATIVES):
        match = _FORWARD.match(text, position)
        if match is None:
            break
        is_or = bool(re.search(r"\bor\b", match.group("sep")))
        if not is_or and not _LIST_ITEM_END.match(text, match.end()):
            break
        values.append(match.group("value"))
        has_or |= is_or
        position = match.end()
    before = re.sub(r"[A-Za-z]\s*=\s*$", "", text[max(0, span.value_start - 300) : span.value_start])  # "x = " of it
    for _ in range(_MAX_ALTERNATIVES):
        match = _BACKWARD.search(before)
        if match is None:
            break
        values.append(match.group("value"))
        has_or |= bool(re.search(r"\bor\b", match.group("sep")))
        before = before[: match.start()]
    return values, has_or


def is_hedge(text: str, span: AnswerSpan, gold_parsed: list, same_value) -> bool:
    """True iff the answer that was read stands in a list of alternatives that differ in value.

    Alternatives joined by "or" count anywhere; a list joined by commas only after an answer phrase or in a box.

    Args:
        text: the completion; span: where its answer was read (:func:`locate_answer`).
        gold_parsed: the gold's parsed forms (a multi-valued gold is never judged).
        same_value: ``same_value(text, parsed) -> bool | None``: whether Math-Verify reads ``text`` as a value
            equal to ``parsed`` (None: it reads no value, and the alternative is not counted).
    """
    if not single_valued(gold_parsed):
        return False
    values, has_or = _alternatives(text, span)
    if not values or not (has_or or span.anchored):
        return False
    return any(same_value(value, span.parsed) is False for value in values)


# --------------------------------------------------------------------------------------------------
# "retraction": the answer taken back or declared impossible
# --------------------------------------------------------------------------------------------------

_BAD = (r"\s*(?:'s|is|was|seems|must be|would be)\s+(?:(?:clearly|definitely|actually|obviously|also)\s+)?"
        r"(?:wrong|incorrect|not (?:right|correct|possible|valid|an? (?:valid )?(?:answer|solution))|impossible|"
        r"invalid|a contradiction|a mistake|an error)\b")
# words that take an answer back: anywhere after it
_RETRACTION = re.compile(
    r"|".join([
        rf"\b(?:my (?:previous |last |earlier |first )?answer|the (?:above|previous) answer){_BAD}",
        r"\b(?:I|we)\s*(?:made|have made|must have made|'ve made)\s+(?:a|an)\s+(?:\w+\s+)?(?:mistake|error)\b",
        r"\b(?:wait|hmm|oops|actually)[,.!]*\s+no\b", r"\bno,?\s+wait\b", r"\bscratch that\b",
        r"\bon second thought\b", r"\bignore (?:that|this|the above)\b", r"\bthat can(?:no|')t be (?:right|correct)\b",
    ]),  # fmt: skip
    re.IGNORECASE,
)
# words that call the answer wrong or impossible, or say that none exists: in the rest of its sentence and the next
# one only (a proof that follows an answer may call other cases impossible); "which" in its own sentence only
_NEXT_SENTENCE = re.compile(
    r"|".join([
        rf"\b(?:that|this|it){_BAD}",
        r"\bthere (?:is|are|exists?) no (?:such )?(?:real |integer |valid |positive |possible )?"
        r"(?:solutions?|answers?|numbers?|integers?|values?)(?=\s*[.,;!]|\s*$|\s+(?:exists?|to|for)\b)",
        r"\bno such (?:\w+ )?(?:numbers?|integers?|values?|solutions?|answers?) exists?\b",
        r"\b(?:does not|doesn't|do not|don't|cannot) exist\b",
        # not "... has no real solutions": in "given that f(x) = x has no real solutions, ... is 0" it is a condition
    ]),  # fmt: skip
    re.IGNORECASE,
)
_SAME_SENTENCE = re.compile(rf"\bwhich{_BAD}", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)|\n\s*\n")
# words that correct an answer by stating another value after them ("The answer is 5. Wait, actually it is 6."):
# a retraction only when the value that follows differs from the answer ("Wait, actually it is 5" confirms it)
_CORRECTION = re.compile(
    r"|".join([
        r"\b(?:wait|hmm|oops|sorry)\b[,.!]*\s+(?:actually|I mean|it should be|it's|it is)\b",
        r"\bactually,?\s+(?:it|the (?:answer|result|value|total|sum)|that|this)\s+(?:is|was|should be|equals)\b",
        r"\bcorrection\b", r"\bI mean\b", r"\b(?:it|the answer) should (?:actually )?be\b",
    ]),  # fmt: skip
    re.IGNORECASE,
)


def retraction_after(text: str, span: AnswerSpan) -> str | None:
    """The words after the answer that take it back, or None.

    Searched: anywhere after it for explicit retractions ("I made a mistake", "Wait, no", "scratch that"); in the
    rest of its sentence and the next one for "that/this/it is wrong/impossible" and "there is no such ..."; in its
    own sentence for "which is wrong/impossible". An answer Math-Verify reads without an anchor (the last number) is
    searched from the start of its sentence ("there is no such integer, since 7 is not even").
    """
    start = span.end
    if not span.anchored:  # Math-Verify read the last number: what takes it back may stand just before it
        start = max((m.end() for m in _SENTENCE_END.finditer(text, 0, span.value_start)), default=0)
    # explicit retractions after the answer only: one just before a last number takes back an earlier value and
    # introduces this one ("Hmm, no, I made an error: x = 14.")
    match = _RETRACTION.search(text, span.end)
    if match:
        return match.group(0)
    correction = corrected_after(text, span)
    if correction is not None:
        return correction
    ends = [m.end() for m in itertools.islice(_SENTENCE_END.finditer(text, span.end), 2)] + [len(text)] * 2
    match = _SAME_SENTENCE.search(text, start, ends[0]) or _NEXT_SENTENCE.search(text, start, ends[1])
    return match.group(0) if match else None


def corrected_after(text: str, span: AnswerSpan) -> str | None:
    """The correction after the answer that states another value ("Wait, actually it is 6" after "The answer is 5"),
    or None: correction words (:data:`_CORRECTION`) followed, in the rest of their sentence, by a value Math-Verify
    reads and that is not equal to the answer. A correction that restates the same value, or states none, is not
    one."""
    for match in _CORRECTION.finditer(text, span.end):
        end = next((m.start() for m in _SENTENCE_END.finditer(text, match.end())), len(text))
        rest = text[match.end():end]
        if not re.search(r"\d|\\frac|\\boxed", rest):
            continue
        same = _same_value(rest, span.parsed)
        if same is False:
            return text[match.start():end].strip()
    return None


# --------------------------------------------------------------------------------------------------
# "prompt_echo": an unevaluated expression copied from the prompt
# --------------------------------------------------------------------------------------------------

_SPACING = re.compile(r"\$|\\left|\\right|\\[,;:! ]|~|[{}]")
_TIMES = re.compile(r"\\times|\\cdot|×|·|\*")
_DIVIDE = re.compile(r"\\div|÷")
_NUMBER_LITERAL = re.compile(r"[-+]?(?:\d+(?:\.\d+)?|\.\d+|\d{1,3}(?:,\d{3})+(?:\.\d+)?)(?:\\?%)?")
_FRACTION_LITERAL = re.compile(r"[-+]?(\d+)/(\d+)")


def _normalise_maths(text: str) -> str:
    """Maths as text, compared: no ``$``, braces, ``\\left``/``\\right`` or thin spaces; one sign per operation; spaces
    kept (so that the prompt keeps its word boundaries)."""
    text = re.sub(r"\\[dt]frac", r"\\frac", text).replace("−", "-")
    text = re.sub(r"\\frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}", r"\1/\2", text)
    return _DIVIDE.sub("/", _TIMES.sub("*", _SPACING.sub("", text)))


def _is_literal(normalised: str) -> bool:
    """A number as one writes a value: ``17``, ``-2.5``, ``28\\%``, or a fraction in lowest terms (``3/4``; not
    ``9/3`` or ``6/8``, which still need evaluating)."""
    if _NUMBER_LITERAL.fullmatch(normalised):
        return True
    fraction = _FRACTION_LITERAL.fullmatch(normalised)
    return fraction is not None and int(fraction[2]) > 1 and math.gcd(int(fraction[1]), int(fraction[2])) == 1


def _strip_brackets(normalised: str) -> str:
    """``(5-9).`` -> ``5-9``: trailing punctuation and brackets around all of it removed."""
    normalised = normalised.rstrip(".,;:")
    while len(normalised) > 2 and normalised[0] == "(" and normalised[-1] == ")":
        depth = 0
        for i, char in enumerate(normalised[:-1]):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0 and i > 0:
                return normalised  # "(1+2)*(3+4)": the outer brackets are not one pair
        normalised = normalised[1:-1]
    return normalised


def prompt_echo(answer: str, gold_text: str, prompt: str, text: str = "", evaluates_to_gold=None) -> bool:
    """True iff ``answer`` is an expression (not a plain number or fraction) that occurs in ``prompt``, is not
    written as the gold is, and is not worked out to the gold in ``text``.

    Compared without spaces, ``$``, braces, ``\\left``/``\\right``, trailing punctuation and enclosing brackets,
    with ``\\times``/``\\cdot``/``*`` and ``\\div``/``/`` unified; the occurrence must not be part of a longer number
    or name (``2^{10}`` is not in ``2^{105}``). A leading ``x =`` of the answer is ignored.

    Args:
        answer: the answer that was read; gold_text: the gold; prompt: the prompt's text.
        text: the completion: an echo it works out ("7 - 5 = 2", "7 - 5 is 2") to a value for which
            ``evaluates_to_gold(value_text)`` is True is no echo ("So, 2 is the answer to 7 - 5.").
    """
    answer = re.sub(r"^\s*[A-Za-z]\s*=\s*", "", answer)
    normalised = _strip_brackets(re.sub(r"\s+", "", _normalise_maths(answer)))
    if not normalised or _is_literal(normalised) or normalised == re.sub(r"\s+", "", _normalise_maths(str(gold_text))):
        return False
    if not re.search(r"[-+*/^!]|\\(?:sqrt|frac|binom)", re.sub(r"^[-+]", "", normalised)):
        return False  # a name or a number with a sign: not an expression that a grader evaluates
    pattern = r"\s*".join(re.escape(char) for char in normalised)
    if re.search(rf"(?<![\w^_])(?<!\d\.){pattern}(?![\w^_]|\.\d)", _normalise_maths(prompt)) is None:
        return False
    if evaluates_to_gold is not None:
        worked = rf"{pattern}\s*\)?\s*(?:=|\bis\b|\bequals\b|\bis equal to\b|\bgives\b)\s*({_NUMBER})"
        if any(evaluates_to_gold(m.group(1)) for m in re.finditer(worked, _normalise_maths(text))):
            return False
    return True


def prompt_text(prompt: Any) -> str:
    """The text of a TRL prompt: a string, or the contents of its messages joined (every role)."""
    if prompt is None:
        return ""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, dict):
        prompt = [prompt]
    parts = []
    for message in prompt:
        content = message.get("content") if isinstance(message, dict) else message
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append("" if content is None else str(content))
    return "\n".join(parts)


# --------------------------------------------------------------------------------------------------
# "mixed_number": 2 2/3 is 8/3
# --------------------------------------------------------------------------------------------------

_MIXED = re.compile(
    r"(?<![\d.,/^*+\-−\w])(?P<sign>[-−]?)(?P<whole>\d+)[ \t]+(?P<num>\d+)\s*/\s*(?P<den>\d+)(?![\d,/^\w]|\.\d)"
)


def has_mixed_number(text: str) -> bool:
    """Whether ``text`` holds a whole number and a fraction (a cheap test before :func:`mixed_number_answer`)."""
    return _MIXED.search(text) is not None


def mixed_number_answer(text: str, span: AnswerSpan | None) -> sympy.Rational | None:
    """The value of the mixed number that the answer was read from (``2 2/3``: ``8/3``), or None.

    A mixed number here is a whole number, a space and a proper fraction of integers (``0 < numerator <
    denominator``), not inside a longer expression; it must overlap the answer that was read and either contain it
    (Math-Verify reads a part of "2 2/3") or be all of it (``\\boxed{2 2/3}``, read as 4/3).
    """
    if span is None:
        return None
    window = text[max(0, span.value_start - 40) : span.value_end + 40]
    offset = max(0, span.value_start - 40)
    inner = re.sub(r"\\boxed\{|\}|\$|\\\(|\\\)", "", text[span.value_start : span.value_end]).strip()
    for match in _MIXED.finditer(window):
        start, end = match.start() + offset, match.end() + offset
        overlaps = start < span.value_end and span.value_start < end
        contains = start <= span.value_start and span.value_end <= end
        if not overlaps or not (contains or inner == match.group(0).strip()):
            continue
        return _mixed_value(match)
    return None


def mixed_number_value(text: str) -> sympy.Rational | None:
    """The value of ``text`` when all of it is one mixed number (``3 3/4``: 15/4, ``-2 1/2``: -5/2), else None.

    The mixed numbers :func:`mixed_number_answer` reads in answers: a whole number, a space and a proper fraction of
    integers (``3 5/4`` is not one). The grader reads a plain-text gold this way
    (:func:`trl_explore.rewards.answers.read_gold`).
    """
    match = _MIXED.fullmatch(text.strip())
    return None if match is None else _mixed_value(match)


def _mixed_value(match: re.Match) -> sympy.Rational | None:
    """The value of a match of ``_MIXED``; None when its fraction is not proper (``0 < numerator < denominator``)."""
    whole, num, den = int(match["whole"]), int(match["num"]), int(match["den"])
    if not 0 < num < den:
        return None
    value = sympy.Rational(whole * den + num, den)
    return -value if match["sign"] else value


# --------------------------------------------------------------------------------------------------
# Recall rewrites (a 0 becomes a 1 only where the rewritten reading is certain)
# --------------------------------------------------------------------------------------------------

_ANSWER_PHRASE = r"(?:final answer|answer)\s*(?:is|:)?\s*:?\s*"
# \textbf{X} after an answer phrase or alone on the last line, ending the completion
_TEXTBF_ANSWER = re.compile(
    rf"(?P<prefix>{_ANSWER_PHRASE}|^\s*|\n\s*)\\textbf\{{(?P<answer>[^{{}}\n]+)\}}(?=[\s.!$]*$)", re.IGNORECASE
)
# a choice letter after an answer phrase, ending the completion: "The answer is **(D)**", "answer: (B)", "is C."
_CHOICE = re.compile(rf"((?i:{_ANSWER_PHRASE}))(?:\*\*)?(?:\(([A-E])\)|([A-E]))(?:\*\*)?(?=[\s.!]*$)")
_THIN = r"(?:\\[,;: !]|\{,\}|~|,)+"
_GROUPED = re.compile(rf"(?<![\d.,}}])(\d{{1,3}})((?:{_THIN}\d{{3}})+)(?![\d])")
_E_NOTATION = re.compile(r"(?<![\w.\\])(\d+(?:\.\d+)?)[eE]([-+]?\d{1,3})(?![\w^(]|\.\d)")
_REPEATING = re.compile(  # 0.1\overline{6}; 0.\dot{1}4285\dot{7} (first and last digit of the period); 0.\dot{3}
    r"(?<![\d.])(-?)(\d+)\.(\d*)(?:\\overline\{(\d+)\}|\\dot\{(\d)\}(\d*)\\dot\{(\d)\}|\\dot\{(\d)\})"
)


def _thousands(match: re.Match) -> str:
    """``2\\,024\\,000`` -> ``2024000``; a plain-comma number (which Math-Verify reads itself) is left as it is."""
    if re.fullmatch(r"(?:,\d{3})+", match.group(2)):
        return match.group(0)
    return match.group(1) + re.sub(r"\D", "", match.group(2))


def _plain_decimal(match: re.Match) -> str:
    try:
        value = Decimal(f"{match.group(1)}e{match.group(2)}")
    except InvalidOperation:
        return match.group(0)
    return format(value.normalize(), "f")


def _repeating_fraction(match: re.Match) -> str:
    """``0.1\\overline{6}`` -> ``1/6``; ``0.\\dot{1}4285\\dot{7}`` -> ``1/7``."""
    sign, whole, prefix = match.group(1), match.group(2), match.group(3)
    period = match.group(4) or (match.group(5) + match.group(6) + match.group(7) if match.group(5) else match.group(8))
    value = Fraction(int(whole)) + Fraction(int(prefix or "0"), 10 ** len(prefix))
    value += Fraction(int(period), (10 ** len(period) - 1) * 10 ** len(prefix))
    value = -value if sign else value
    return f"{value.numerator}/{value.denominator}" if value.denominator != 1 else str(value.numerator)


def rewrite_for_recall(text: str, gold_is_plain_number: bool) -> str:
    """The text with the readings that are certain made explicit (see the module docstring); unchanged otherwise.

    Args:
        text: a completion (or a gold answer: the thousands and repeating-decimal rewrites apply to it as well).
        gold_is_plain_number: the gold is a number written without ``e``; only then is e-notation read as a number
            (``2e-1`` could mean ``2e - 1``).
    """
    text = _TEXTBF_ANSWER.sub(r"\g<prefix>\\boxed{\g<answer>}", text)
    text = _CHOICE.sub(lambda m: f"{m[1]}\\boxed{{{m[2] or m[3]}}}", text)
    text = _GROUPED.sub(_thousands, text)
    text = _REPEATING.sub(_repeating_fraction, text)
    if gold_is_plain_number:
        text = _E_NOTATION.sub(_plain_decimal, text)
    return text


def is_plain_number(gold_parsed: list) -> bool:
    """True iff the gold is one number without the constant ``e`` or symbols (``0.001``, ``3/4``, ``10^{-3}``)."""
    forms = [form for form in gold_parsed if not isinstance(form, str)]
    return bool(forms) and all(isinstance(f, sympy.Expr) and f.is_number and not f.has(sympy.E) for f in forms)


def same_function_up_to_variable(a: Any, b: Any, same_value) -> bool:
    """True iff ``a`` and ``b`` define the same function under another name of its variables: ``f(x)=x^2`` and
    ``f(t)=t^2`` (both ``Eq(f(v...), expression)`` with the same function name and arity, variables renamed in order).

    Args:
        same_value: ``same_value(a_expr, b_expr) -> bool``, Math-Verify's equivalence of two parsed values.
    """
    if not (isinstance(a, sympy.Eq) and isinstance(b, sympy.Eq)):
        return False
    f, g = a.lhs, b.lhs
    if not (isinstance(f, sympy.core.function.AppliedUndef) and isinstance(g, sympy.core.function.AppliedUndef)):
        return False
    if f.func.__name__ != g.func.__name__ or len(f.args) != len(g.args) or f.args == g.args:
        return False
    if not all(isinstance(v, sympy.Symbol) for v in f.args + g.args) or len(set(g.args)) != len(g.args):
        return False
    renamed = b.rhs.xreplace(dict(zip(g.args, f.args)))
    return same_value(a.rhs, renamed)


# "unterminated": prose that visibly stops mid-sentence, whatever the token ids say
# --------------------------------------------------------------------------------------------------

# words a sentence cannot end on: articles, prepositions, conjunctions, auxiliaries, arithmetic words
_DANGLING_WORDS = frozenset("""
a an the of by to for from with into onto in on at as than then that which who whose whom and or but nor so if
because since while when where whether is are was were be been being has have had do does did can could will would
shall should may might must we i you they it its our their this these those my your his her times plus minus over
divided multiplied gives give becomes become equals equal get gets got makes make yields yield leaves leave
""".split())
_TRAILING_WORD = re.compile(r"([A-Za-z]+)\s*$")
_TRAILING_OPERATOR = re.compile(r"(?:[,:=+\-*/^(]|\\(?:times|cdot|div|frac))\s*$")


def ends_mid_sentence(text: str) -> bool:
    """Whether ``text`` visibly stops in the middle of a sentence: it ends on a word no sentence ends on ("...
    and dividing by", "the price of") or on an operator or comma, with no closing punctuation. Such prose was cut
    off (a length limit, a stop sequence) or abandoned; its last number is an intermediate value, not an answer
    (issue 45: "prose cut off mid-sentence"). Read with the ``"unterminated"`` guard, for answers without a box or an
    answer phrase only."""
    tail = text.rstrip()[-64:]  # the last words only (and linear time on long texts)
    if not tail or _TRAILING_OPERATOR.search(tail):
        return bool(tail)
    match = _TRAILING_WORD.search(tail)
    return bool(match) and match.group(1).lower() in _DANGLING_WORDS


# --------------------------------------------------------------------------------------------------
# The guard-rails of this module, in turn
# --------------------------------------------------------------------------------------------------


def _parse(text: str) -> list:
    return math_verify.parse(text, parsing_timeout=None)


def _same_value(value_text: str, parsed: Any) -> bool | None:
    """Whether Math-Verify reads ``value_text`` as a value equal to ``parsed`` (None: it reads nothing)."""
    value = _parse(value_text)
    if not value:
        return None
    return bool(math_verify.verify([parsed], value, timeout_seconds=None))


def failed_guard(
    text: str,
    gold_text: str,
    gold_parsed: list,
    guards: frozenset,
    mode: str,
    prompt: str | None = None,
    terminated: bool | None = None,
    answer: str | None = None,
) -> str | None:
    """The first guard-rail of this module that refutes a verdict of 1, by name, else None.

    Args:
        text: the completion text the verdict was given on.
        gold_text, gold_parsed: the gold answer and its parsed forms.
        guards: the guard-rails switched on (names of :data:`~trl_explore.rewards.modes.GUARDS`).
        mode: the grader mode. ``"math_verify"``: every guard here applies, at the answer Math-Verify reads
            (:func:`locate_answer`). ``"strict"`` and ``"boxed"``: ``"prompt_echo"``, on ``answer``; ``"strict"``
            also ``"retraction"``, after an answer Math-Verify reads behind a box or an answer phrase.
        prompt: the prompt's text (None: ``"prompt_echo"`` does not judge).
        terminated: whether the completion ended with an EOS (None: unknown, ``"unterminated"`` does not judge).
        answer: the final answer as the mode reads it, as text (``"strict"``/``"boxed"`` modes).
    """

    def worked_out(value_text: str) -> bool:  # the completion states this value for the echoed expression
        value = _parse(value_text)
        return bool(value) and bool(math_verify.verify(gold_parsed, value, timeout_seconds=None))

    if mode != "math_verify":
        if "prompt_echo" in guards and prompt and answer and prompt_echo(answer, gold_text, prompt, text, worked_out):
            return "prompt_echo"
        if mode == "strict" and "retraction" in guards:  # an answer after an answer phrase, corrected or taken back
            span = locate_answer(text)
            if span is not None and span.anchored and retraction_after(text, span) is not None:
                return "retraction"
        return None
    span = locate_answer(text)
    if ("unterminated" in guards and (span is None or not span.anchored)
            and (terminated is False or ends_mid_sentence(text))):
        return "unterminated"
    if span is None:
        return None
    if "hedge" in guards and is_hedge(text, span, gold_parsed, _same_value):
        return "hedge"
    if "retraction" in guards and retraction_after(text, span) is not None:
        return "retraction"
    if "prompt_echo" in guards and prompt and prompt_echo(span.answer, gold_text, prompt, text, worked_out):
        return "prompt_echo"
    return None
