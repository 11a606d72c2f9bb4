"""Issue 30, item 4: an unboxed answer that is an operator expression is read whole or not at all, never as its first
number. A differential test against the installed Math-Verify on the same strings: where the verdicts differ, the
row says why (Math-Verify stops reading at the operator and grades the leading number)."""

import math_verify
import pytest

from trl_explore.rewards.grading import GUARDS, GraderOptions, extract, grade


def math_verify_verdict(gold, completion):
    return bool(math_verify.verify(math_verify.parse(gold), math_verify.parse(completion)))


FRAGMENT = "Math-Verify reads the leading number of an operator expression"
WHOLE = "the whole expression equals the gold; Math-Verify read only its leading number"
# (completion, gold, Math-Verify's verdict, ours, why they differ or None)
DIFFERENTIAL = [
    # the cases: a power with a parenthesised exponent, a product with a bracket
    ("So the answer is 2^(3).", "2", True, False, FRAGMENT),
    ("So the answer is 2^(3).", "8", False, True, WHOLE),
    ("The answer is 3*(4+1).", "3", True, False, FRAGMENT),
    ("The answer is 3*(4+1).", "15", False, True, WHOLE),
    # scientific notation (e-notation and "x 10^")
    ("The answer is 1.5e-3.", "1.5", True, False, FRAGMENT),
    ("The answer is 1.5e-3.", "0.0015", False, True, WHOLE),
    ("The answer is 2.5E3.", "2.5", True, False, FRAGMENT),
    ("The answer is 1.2 x 10^3.", "1.2", True, False, FRAGMENT),
    ("The answer is 1.2 x 10^3.", "1200", False, True, WHOLE),
    (r"The answer is 1.2 \times 10^3.", "1.2", True, False, FRAGMENT),
    (r"The answer is 1.2 \times 10^3.", "1200", False, True, WHOLE),
    # the percent sign after an operator expression: (3/8)% is not read as 3; it has no certain reading, so none
    ("The answer is 3/8%.", "3", True, False, FRAGMENT),
    ("The answer is 3/8%.", "3/8", False, False, None),
    # a power with a symbolic exponent
    ("The answer is 2^n.", "2", True, False, FRAGMENT),
    ("The answer is 2^n.", "2^n", True, True, None),  # Math-Verify reads the plain-text gold 2^n as 2 as well
    ("The answer is 2^(n-1).", "2", True, False, FRAGMENT),
    ("The answer is 2^(n-1).", "2^(n-1)", True, True, None),  # the gold is read as 2 by Math-Verify as well
    # more of the class: a quotient with a bracket, a fractional power, a product without a sign, a subscript
    ("The answer is 10/(2+3).", "10", True, False, FRAGMENT),
    ("The answer is 10/(2+3).", "2", False, True, WHOLE),
    ("The answer is 4^(1/2).", "4", True, False, FRAGMENT),
    ("The answer is 4^(1/2).", "2", False, True, WHOLE),
    ("The answer is 3(4+1).", "3", True, False, FRAGMENT),
    ("The answer is 3(4+1).", "15", False, True, WHOLE),
    ("The answer is -2^(3).", "-2", True, False, FRAGMENT),
    ("The answer is -2^(3).", "-8", False, True, WHOLE),
    ("So x = 2^(3), which is what we wanted.", "8", True, True, None),
    # unchanged: Math-Verify reads these whole already, or the answer is a plain number
    ("The answer is 2^3.", "8", True, True, None),
    ("The answer is 2**3.", "8", True, True, None),
    ("The answer is 6/3.", "2", True, True, None),
    ("The answer is (2+3)*4.", "20", True, True, None),
    ("The answer is 7.", "7", True, True, None),
    ("The answer is 3.14159.", "3.14159", True, True, None),
    ("The answer is 45%.", "45", True, True, None),  # Math-Verify's percent semantics: 45 and 0.45
    (r"The answer is 12.5\%.", "12.5", True, True, None),
    ("The answer is 2^(3) = 8.", "8", True, True, None),
    ("So the answer is 2^(3), which is 8.", "8", True, True, None),
    (r"The answer is $2^{3}$.", "8", True, True, None),
    (r"So the answer is \boxed{2^{3}}.", "8", True, True, None),
    ("Answer: 2^(3)", "8", True, True, None),
    ("The answer is 5cm.", "5", True, True, None),  # a unit or an implicit product: left to Math-Verify
]


@pytest.mark.parametrize("completion, gold, reference, ours, why", DIFFERENTIAL)
def test_operator_expressions_against_math_verify(completion, gold, reference, ours, why):
    assert math_verify_verdict(gold, completion) is reference  # the installed Math-Verify still reads it so
    assert grade(completion, gold) is ours, why
    if why is None:
        assert ours is reference


@pytest.mark.parametrize("completion, answer", [
    ("So the answer is 2^(3).", "2^(3)"), ("The answer is 1.5e-3.", "1.5e-3"), ("The answer is 2^n.", "2^n"),
    ("The answer is 1.2 x 10^3.", "1.2 x 10^3"), ("The answer is 3/8%.", None),
])
def test_the_extracted_answer_is_the_whole_expression_or_none(completion, answer):
    assert extract(completion) == answer


def test_the_guard_alone_reads_nothing_and_recall_reads_the_whole():
    no_guard = GraderOptions(guards=frozenset(GUARDS) - {"operator_fragment"})
    no_recall = GraderOptions(recall=False)
    assert grade("So the answer is 2^(3).", "2", no_guard) is True  # Math-Verify's reading comes back
    assert grade("So the answer is 2^(3).", "2", no_recall) is False  # the guard: not the fragment...
    assert grade("So the answer is 2^(3).", "8", no_recall) is False  # ...and, without recall, not the whole either
    assert grade("So the answer is 2^(3).", "8") is True


@pytest.mark.parametrize("mode", ["strict", "boxed"])
def test_the_other_precision_modes_never_read_the_fragment(mode):
    assert grade("So the answer is 2^(3).", "2", GraderOptions(mode=mode)) is False
