"""How CHAMP writes its gold answers: the phrasing rules that turn one into plain maths.

CHAMP (package ``champ-dataset``) gives many answers as short English sentences or with remarks:
"0 is the only possible value", "The limit exists and is equal to 2/3", "2 inequalities", "Exactly one",
"100 (i.e., all values)", "C(10, 5), or equivalently 252", "5/14, or approximately 35.7%". These rules
belong to that data set, not to the grader: :func:`gold_alternatives` reduces such a gold answer to the
maths it states (one string per accepted alternative). It reaches the grader as data, as its ``gold_normalizer``
(:class:`~trl_explore.rewards.grading.GraderOptions`), which applies it only to golds that Math-Verify cannot read
whole; ``trl_explore.data.gold_normalizers`` names it ``"champ"`` for the places that grade CHAMP.

Pure string functions; no maths library is imported here.
"""

from __future__ import annotations

import re

from trl_explore.rewards.gold_text import UNICODE_REPLACEMENTS, clean_gold_text  # noqa: F401 - re-exported

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


def _matching_paren(text: str, open_index: int) -> int | None:
    """Index of the ``)`` or ``]`` that closes the bracket at ``open_index``, or None."""
    depth = 0
    for i in range(open_index, len(text)):
        if text[i] in "([":
            depth += 1
        elif text[i] in ")]":
            depth -= 1
            if depth == 0:
                return i
    return None


def strip_note(text: str) -> str:
    """Drop a trailing remark in brackets: ``"100 (i.e., all values)"`` -> ``"100"``.

    The remark must follow a space and start with a word of two or more letters ("i.e.", "none",
    "no such ..."), so maths such as ``(x=8, y=2), (x=2, y=8)`` is left alone; a remark that offers another
    answer (``"x = 2 (or x = 3)"``) is not a note and is kept.
    """
    text = text.strip()
    if not text.endswith(")"):
        return text
    for start in range(len(text) - 1, 0, -1):
        if text[start] == "(" and text[start - 1] == " " and _matching_paren(text, start) == len(text) - 1:
            note = text[start + 1 :]
            if re.match(r"(?:i\.e\.|e\.g\.|[A-Za-z]{2,}\b)", note) and not re.match(r"(?:or|and)\b", note):
                return text[:start].strip()
    return text


def unwrap_phrase(text: str) -> str:
    """The expression inside a known answer sentence, or ``text`` unchanged.

    ``"0 is the only possible value"`` -> ``"0"``; ``"The limit exists and is equal to 2/3"`` ->
    ``"2/3"``; ``"2 inequalities"`` -> ``"2"``; ``"At most 0 integer-valued zeros"`` -> ``"0"``;
    ``"Exactly one"`` -> ``"1"``. Only whole-sentence matches count.
    """
    for phrase in _PHRASES:
        match = phrase.fullmatch(text.strip())
        if match:
            inner = match.group("x").strip()
            return _NUMBER_WORDS.get(inner.lower(), inner)
    return text


def gold_alternatives(gold: str) -> list[str]:
    """The maths a CHAMP gold answer states, one string per accepted alternative.

    Steps: :func:`clean_gold_text`; ", or approximately B" dropped (a rounded value is not the answer);
    "A, or equivalently B" and "A, or an equivalent form such as B" split into alternatives (both are
    accepted); then in each alternative a trailing note is removed (:func:`strip_note`) and an answer
    sentence unwrapped (:func:`unwrap_phrase`). LaTeX alternatives are returned as they are.

    Example: ``gold_alternatives("C(10, 5), or equivalently 252")`` is ``["C(10, 5)", "252"]``;
    ``gold_alternatives("0 is the only possible value.")`` is ``["0"]``.
    """
    text = _APPROXIMATION.sub("", clean_gold_text(gold))
    alternatives = []
    for alternative in _ALTERNATIVE_SEPARATOR.split(text):
        if any(char in alternative for char in "\\{}$"):
            alternatives.append(alternative.strip())
        else:
            alternatives.append(unwrap_phrase(strip_note(alternative)))
    return alternatives
