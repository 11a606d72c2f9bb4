"""Gold-answer text every data set shares: Unicode maths symbols as ASCII, whitespace, a final full stop. Pure string
functions (a data set's own phrasing rules reach the grader as a ``gold_normalizer``, see
:class:`~trl_explore.rewards.grading.GraderOptions`)."""

from __future__ import annotations

import re

UNICODE_REPLACEMENTS = {"−": "-", "–": "-", "≥": ">=", "≤": "<=", "×": "*", "·": "*", "≠": "!=", "π": "pi", "∞": "inf"}
"""Unicode maths symbols in gold answers, as ASCII."""


def clean_gold_text(gold: str) -> str:
    """Unicode maths symbols to ASCII, whitespace collapsed, one final ``.`` dropped (not an ellipsis)."""
    text = str(gold)
    for old, new in UNICODE_REPLACEMENTS.items():
        text = text.replace(old, new)
    return re.sub(r"(?<!\.)\.$", "", " ".join(text.split())).strip()
