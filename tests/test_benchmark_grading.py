"""Tests for trl_explore/rewards/benchmark_grading.py: letters, free-form answers and verdicts per grading."""

import pytest

from trl_explore.rewards.benchmark_grading import extract_choice_letter, grade_completion


@pytest.mark.parametrize(
    "text, num_choices, expected",
    [
        (r"so the result is \boxed{C}", 4, "C"),
        (r"\boxed{(B)}", 4, "B"),
        (r"\boxed{\text{D}}", 4, "D"),
        (r"\boxed{A. 12}", 4, "A"),
        ("Thinking... The answer is (B).", 4, "B"),
        ("Answer: C", 4, "C"),
        ("final answer: **D**", 4, "D"),
        ("The correct option is A, since ...", 4, "A"),
        ("First I thought the answer is A. Actually the answer is C.", 4, "C"),
        ("Reasoning here.\n(B)", 4, "B"),
        ("Reasoning here.\nB.", 4, "B"),
        ("the answer is a prime number", 4, None),  # lower-case article, not a letter
        ("The answer is E.", 4, None),  # beyond the options
        ("The answer is J", 10, "J"),  # MMLU-Pro has ten options
        (r"\boxed{12}", 4, None),
        ("I do not know.", 4, None),
        ("", 4, None),
    ],
)
def test_extract_choice_letter(text, num_choices, expected):
    assert extract_choice_letter(text, num_choices) == expected


def test_extract_choice_letter_rejects_bad_option_count():
    with pytest.raises(ValueError, match="num_choices"):
        extract_choice_letter("A", 1)


def test_grade_completion_by_grading():
    assert grade_completion(r"... \boxed{\frac{10}{12}}", r"\frac{5}{6}", "math") == (r"\frac{10}{12}", True)
    assert grade_completion(r"... \boxed{7}", "4", "math") == ("7", False)
    assert grade_completion(r"so x = 4 \boxed{4}", "4", "math", grader_mode="boxed") == ("4", True)
    assert grade_completion("so x = 4", "4", "math", grader_mode="boxed") == (None, False)
    assert grade_completion("The answer is (B).", "B", "multiple_choice", 4) == ("B", True)
    assert grade_completion("The answer is (C).", "B", "multiple_choice", 4) == ("C", False)
    assert grade_completion("So the answer is False.", "False", "exact_match")[1] is True
    assert grade_completion("the answer is (A).", "(A)", "exact_match")[1] is True
    assert grade_completion(r"\boxed{A}", "(A)", "exact_match")[1] is True
    assert grade_completion("the answer is (B).", "(A)", "exact_match")[1] is False
    with pytest.raises(ValueError, match="unknown grading"):
        grade_completion("x", "1", "fuzzy")
