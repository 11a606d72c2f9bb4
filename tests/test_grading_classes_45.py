"""Issue 45 item 4: the grader's next classes, on cases written for this issue (each class with both labels).

Fixed where a rule decides without new false positives: a retraction by a restated other value, prose cut off
mid-sentence, a boxed equation in another variable, ``a % b`` read as a percent, the letters "inf" inside a word in
the extracted answer. Before the fix the default mode scored 9 of these 13 wrong answers as correct (Math-Verify
itself: 10). The classes left out of scope, and why, are in docs/grading.md ("Not decided by a rule")."""

import pytest

from trl_explore.rewards.grading import GraderOptions, extract, grade

# (completion, gold, correct?)
CLASSES = {
    "retraction": [
        ("The answer is 5. Wait, actually it is 6.", "5", False),
        ("So x = 12. Hmm, no, I made an error: x = 14.", "12", False),
        ("So x = 12. Hmm, no, I made an error: x = 14.", "14", True),  # before: the error note refuted 14 too
        ("The result is 9. But wait, that is wrong.", "9", False),
        ("The answer is 7. Let me double-check: 3 + 4 = 7. Yes, 7.", "7", True),
        ("The answer is 7. Wait, actually it is 7, since 3 + 4 = 7.", "7", True),  # a correction that confirms
        ("Final answer: 20. Correction: the total is 24.", "20", False),
    ],
    "cut_off": [
        ("First compute 6 * 7 = 42, then subtract the 5 apples that", "42", False),
        ("Adding the two sides gives 15, and dividing by", "15", False),
        ("We have 2 + 2 = 4. Then the total cost becomes 4 times the price of", "4", False),
        ("Step 1: 9 - 3 = 6.\nStep 2: 6 / 2 = 3.\nSo the answer is 3.", "3", True),
        ("The total is 3 + 4 = 7", "7", True),  # no period, but a sentence can end on a number
        ("The answer is \\boxed{42}. Next we consider the case of", "42", True),  # a boxed answer stands
    ],
    "equation_variable": [
        ("Hence \\boxed{y = 3}.", "x = 3", False),
        ("Therefore \\boxed{b=-2}", "a=-2", False),
        ("Thus \\boxed{t = 1/2}", "s = \\frac{1}{2}", False),
        ("So \\boxed{x = 3}.", "x = 3", True),
        ("So \\boxed{3}.", "x = 3", True),  # a bare value: Math-Verify's verdict
        ("We find \\boxed{x = 3}.", "3", True),
    ],
    "percent_operator": [
        ("The answer is 12 % 5.", "12", False),
        ("The answer is 17 % 4.", "17", False),
        ("The answer is 12 % (5).", "12", False),
        ("The answer is 12%.", "12", True),
        ("The rate is 12% of the price, so the answer is 12%.", "12\\%", True),
    ],
}
CASES = [(cls, *case) for cls, cases in CLASSES.items() for case in cases]


@pytest.mark.parametrize("cls,completion,gold,correct", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_default_mode(cls, completion, gold, correct):
    assert grade(completion, gold, GraderOptions(), terminated=True) is correct


@pytest.mark.parametrize("completion,gold", [
    ("The answer is 5. Wait, actually it is 6.", "5"),
    ("The answer is 12 % 5.", "12"),
    ("Hence \\boxed{y = 3}.", "x = 3"),
])
def test_strict_mode_refuses_them_too(completion, gold):
    assert grade(completion, gold, GraderOptions(mode="strict"), terminated=True) is False


def test_each_rule_is_a_switchable_guard():
    without = GraderOptions(guards=frozenset(GraderOptions().guards - {"equation_variable"}))
    assert grade("Hence \\boxed{y = 3}.", "x = 3", without) is True  # Math-Verify's verdict (right-hand sides)
    without = GraderOptions(guards=frozenset(GraderOptions().guards - {"unterminated"}))
    assert grade("Adding the two sides gives 15, and dividing by", "15", without) is True
    without = GraderOptions(guards=frozenset(GraderOptions().guards - {"retraction"}))
    assert grade("The answer is 5. Wait, actually it is 6.", "5", without) is True


def test_inf_inside_a_word_stays_letters_in_the_extracted_answer():
    assert extract("There are \\boxed{\\text{infinitely many solutions}}.") == "\\text{infinitely many solutions}"
    assert grade("There are \\boxed{\\text{infinitely many solutions}}.", "\\text{infinitely many solutions}")
    assert not grade("The equation has infinitely many solutions.", "5")
