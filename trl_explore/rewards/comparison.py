"""Comparing answers, the second half of the grader of :mod:`trl_explore.rewards.grading`: the guard-rails that turn
a Math-Verify "equal" into 0 (:func:`passes_guards`) and the recall rules that turn a "not equal" into 1 where the
equivalence is certain (:func:`recalled_text`, :func:`mixed_number_reading`). The module docstring of
:mod:`trl_explore.rewards.grading` lists each rule; the guards of :mod:`trl_explore.rewards.guards` run after these.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import sympy

from trl_explore.rewards.answers import GoldAnswerError, mv_verify, read_gold, read_prediction
from trl_explore.rewards.guards import (
    has_mixed_number,
    is_plain_number,
    locate_answer,
    mixed_number_answer,
    rewrite_for_recall,
    same_function_up_to_variable,
)
from trl_explore.rewards.modes import GraderOptions

FLOAT_RTOL = 1e-5
"""Relative tolerance of the ``float_collapse`` guard (6 significant digits, as a typed decimal answer has)."""
_MV_ROUNDING_ATOL = 1e-6  # Math-Verify's float_rounding=6: closer numbers may compare equal through rounding alone


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


def passes_guards(gold_parsed: list, prediction: list, guards: frozenset, gold_text: str | None = None) -> bool:
    """Whether some pair of gold and predicted forms that Math-Verify calls equal passes every guard (``gold_text``:
    the gold as written, for ``"equation_variable"``, as a plain-text gold ``x = 3`` is read as its value)."""
    if "equation_variable" in guards and gold_text is not None:
        solved = _gold_solved_for(gold_text)
        if solved is not None and all(_solved_for(p) not in (None, solved) for p in prediction
                                      if not isinstance(p, str)) and any(not isinstance(p, str) for p in prediction):
            return False  # "y = 3" against the gold "x = 3"
    pairs = itertools.product(_with_texts(gold_parsed), _with_texts(prediction))
    for (gold, gold_text), (predicted, predicted_text) in pairs:
        if not mv_verify([gold], [predicted]):
            continue
        if isinstance(gold, str) or isinstance(predicted, str):
            return True  # the same text
        if "interval_vs_set" in guards and _interval_vs_finite_set(gold, predicted, gold_text, predicted_text):
            continue
        if "float_collapse" in guards and _float_collapse(gold, predicted):
            continue
        if "chained_equality" in guards and _chain_against_other(gold, predicted):
            continue
        if "equation_variable" in guards and _equation_in_another_variable(gold, predicted):
            continue
        return True
    return False


def _solved_for(form: Any) -> frozenset | None:
    """The names of the variables an answer is solved for: ``{"x"}`` for ``x = 3``, ``{"a", "b"}`` for ``a = 2,
    b = 3`` (a set or tuple of such equalities); None for anything else (a value, an equation whose left side is not
    one variable)."""
    terms = list(form) if isinstance(form, (sympy.FiniteSet, sympy.Tuple, tuple, list)) else [form]
    if not terms or not all(isinstance(t, sympy.Equality) and isinstance(t.lhs, sympy.Symbol) for t in terms):
        return None
    # by lower-case name: Math-Verify's symbols may carry assumptions, and it reads ``D`` as ``d``
    return frozenset(str(t.lhs).lower() for t in terms)


_GOLD_EQUATION = re.compile(r"\s*\$*\s*([A-Za-z])\s*=\s*([^=]+?)\s*\$*\s*")


def _gold_solved_for(gold_text: str) -> frozenset | None:
    """``{"x"}`` for a gold written ``x = <value>`` (one variable, one equals sign), else None."""
    match = _GOLD_EQUATION.fullmatch(gold_text or "")
    return frozenset({match.group(1).lower()}) if match else None


def _equation_in_another_variable(gold: Any, prediction: Any) -> bool:
    """True iff both answers are solved for variables and not for the same ones: ``y = 3`` against ``x = 3``.

    Math-Verify compares an equality by its right-hand side, so it equates ``y = 3`` with ``x = 3``; a bare value
    (``3``) against ``x = 3`` stays Math-Verify's verdict (issue 45: "a boxed equation in another variable")."""
    a, b = _solved_for(gold), _solved_for(prediction)
    return a is not None and b is not None and a != b


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


def recalled_text(text: str, gold: str, gold_parsed: list, prediction: list, options: GraderOptions) -> str | None:
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
    if prediction and mv_verify(gold_parsed, prediction) and passes_guards(gold_parsed, prediction, options.guards,
                                                                           gold):
        return rewritten_text
    return None


def _mv_verify_one(a: Any, b: Any) -> bool:
    return mv_verify([a], [b])


def mixed_number_reading(text: str, options: GraderOptions):
    """The value of the mixed number the answer is (``2 2/3``: 8/3; :mod:`~trl_explore.rewards.guards`), or None."""
    if options.mode != "math_verify" or not ("mixed_number" in options.guards or options.recall):
        return None
    return mixed_number_answer(text, locate_answer(text)) if has_mixed_number(text) else None

