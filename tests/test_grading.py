"""The grader's classes: Math-Verify's semantics by default, guard-rails that only remove false positives, recall
rules that only add true positives, the modes, and the worker pool. Compared with Math-Verify and TRL themselves."""

import math_verify
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trl_explore.rewards.grading import (
    GUARDS,
    MODES,
    GoldAnswerError,
    GraderOptions,
    collapsed_by_rounding,
    grade,
    read_gold,
)
from trl_explore.rewards.math_verify_reward import MathVerifyReward, grade_batch, verify_answer

DEFAULT = GraderOptions()


def math_verify_verdict(gold, completion):
    """Math-Verify called with its defaults: the reference."""
    return bool(math_verify.verify(math_verify.parse(gold), math_verify.parse(completion)))


# (gold, completion, expected, Math-Verify's own verdict, the class that explains a difference)
CLASS_CASES = [
    # guard "float_collapse": 6-decimal rounding equates tiny values
    (r"$\frac{1}{2^{99}}$", r"\boxed{\frac{1}{2^{98}}}", False, True, "float_collapse"),
    (r"$\frac{1}{2004!}$", r"\boxed{\frac{1}{2006!}}", False, True, "float_collapse"),
    (r"$\frac{1}{3}$", r"\boxed{0.333333}", True, True, None),  # 6 significant digits still agree
    (r"$\frac{1}{2^{99}}$", r"\boxed{2^{-99}}", True, True, None),  # equal values stay equal
    # guard "interval_vs_set": an interval is not a set written \{...\}
    (r"$\{1,2\}$", r"\boxed{(1,2)}", False, True, "interval_vs_set"),
    (r"$(1,2)$", r"\boxed{\{1,2\}}", False, True, "interval_vs_set"),
    # guard "chained_equality": the plain-text gold a=b=c is not the tuple (c, c)
    ("a=b=c", r"\boxed{(c, c)}", False, False, None),
    # guard "unclosed_box": a completion cut off inside its answer has no answer
    ("42", r"so the answer is \boxed{42", False, False, None),
    # recall: interval against inequality, both directions
    ("$(1, 3]$", r"so the solution set is \boxed{1 < x \le 3}.", True, False, "recall"),
    (r"$[\sqrt{2},+\infty)$", r"\boxed{m \geq \sqrt{2}}", True, False, "recall"),
    (r"$x > 2$", r"\boxed{(2, \infty)}", True, True, None),  # Math-Verify relates these itself
    ("$(1, 3]$", r"\boxed{1 < x < 3}", False, False, None),  # not the same set
    # recall: \mathrm{e}
    (r"$1 - \frac{1}{\mathrm{e}}$", r"\boxed{1 - \frac{1}{e}}", True, False, "recall"),
    # recall: chained equalities
    ("a=b=c", r"Equality holds if and only if \boxed{a=b=c}.", True, False, "plain-text gold"),
    ("a=b=c", r"\boxed{c=a=b}", True, False, "recall"),
    ("a=b=c", r"\boxed{a=b}", False, False, None),
    # recall: \fbox
    ("42", r"\fbox{42}", True, False, "recall"),
    # guard "operator_fragment": not the leading number of an unboxed operator expression; recall: the whole of it
    ("2", "So the answer is 2^(3).", False, True, "operator_fragment"),
    ("3", "The answer is 3*(4+1).", False, True, "operator_fragment"),
    ("8", "So the answer is 2^(3).", True, False, "recall"),
    # Math-Verify's semantics kept: bold after an answer phrase, several boxes joined, unanchored numbers
    ("73", "The final answer is **73**.", True, True, None),
    ("(2, 2), (6, 2)", r"\boxed{(2, 2)} and \boxed{(6, 2)}", True, False, "plain-text gold"),
    (r"$(2, 2), (6, 2)$", r"\boxed{(2, 2)} and \boxed{(6, 2)}", True, True, None),
    (r"$\frac{10}{9}$", r"\frac{10}{9}", True, True, None),
    (r"$28\%$", "28 percent", True, True, None),
    (r"$(1,\frac{9}{2})$", "$(1,4.5)$", True, True, None),
    # plain-text golds: this package's reading where Math-Verify reads only a part
    ("2^(n-1)", r"\boxed{2}", False, True, "plain-text gold"),
    ("x=6, y=5", r"\boxed{(6, 5)}", True, False, "plain-text gold"),
    ("x=6, y=5", r"\boxed{(5, 6)}", False, False, None),
]


@pytest.mark.parametrize("gold, completion, expected, reference, why", CLASS_CASES)
def test_grader_classes_against_math_verify(gold, completion, expected, reference, why):
    assert math_verify_verdict(gold, completion) is reference
    assert grade(completion, gold) is expected
    if why is None:
        assert expected is reference


@pytest.mark.parametrize("guard", GUARDS)
def test_each_guard_switches_off_alone(guard):
    cases = [c for c in CLASS_CASES if c[4] == guard]
    others = GraderOptions(guards=frozenset(GUARDS) - {guard})
    for gold, completion, _, reference, _ in cases:
        assert grade(completion, gold) is False
        assert grade(completion, gold, others) is reference  # Math-Verify's verdict comes back
    if guard == "chained_equality":
        assert grade(r"\boxed{(c, c)}", "a=b=c", others) is True  # version 0.1's reading of the gold
    if guard == "unclosed_box":
        # Math-Verify reads an answer inside a box that never closes
        assert math_verify_verdict("$5$", r"\boxed{\frac{10}{2}") is True
        assert grade(r"\boxed{\frac{10}{2}", "$5$") is False
        assert grade(r"\boxed{\frac{10}{2}", "$5$", others) is True


def test_recall_switches_off():
    no_recall = GraderOptions(recall=False)
    for gold, completion, _, _, why in CLASS_CASES:
        if why == "recall":
            assert grade(completion, gold, no_recall) is False


def test_collapsed_by_rounding_on_hand_values():
    import sympy

    assert collapsed_by_rounding(sympy.Rational(1, 2**98), sympy.Rational(1, 2**99))
    assert not collapsed_by_rounding(sympy.Rational(1, 3), sympy.Float("0.333333"))  # relative error 1e-6
    assert not collapsed_by_rounding(sympy.Integer(28), sympy.Rational(28, 100))  # not close: not a rounding effect
    assert not collapsed_by_rounding(sympy.Rational(1, 2**98), sympy.Rational(2, 2**99))  # equal


# --------------------------------------------------------------------------------------------------
# Differential test: generated (gold, completion) pairs; the default verdict equals Math-Verify's
# --------------------------------------------------------------------------------------------------


@st.composite
def answer_pairs(draw):
    """A gold in one of Math-Verify's usual forms and a completion that states the same or another answer."""
    kind = draw(st.sampled_from(["integer", "decimal", "fraction", "percent", "interval", "set", "tuple",
                                 "equation", "matrix", "sqrt", "several_boxes"]))  # fmt: skip
    a, b = draw(st.integers(-50, 50)), draw(st.integers(1, 30))
    same = draw(st.booleans())
    a2, b2 = (a, b) if same else (a + draw(st.sampled_from([1, -1, 7])), b)
    render = {
        "integer": lambda x, y: (f"{x}", f"{x}"),
        "decimal": lambda x, y: (f"{x}.{y}", f"{x}.{y}"),
        "fraction": lambda x, y: (rf"\frac{{{x}}}{{{y}}}", rf"\dfrac{{{x}}}{{{y}}}"),
        "percent": lambda x, y: (rf"{abs(x)}\%", rf"{abs(x)}\%"),
        "interval": lambda x, y: (f"({x}, {x + y}]", rf"\left({x}, {x + y}\right]"),
        "set": lambda x, y: (rf"\{{{x}, {x + y}\}}", rf"\{{{x + y}, {x}\}}"),
        "tuple": lambda x, y: (f"({x}, {y})", f"({x},{y})"),
        "equation": lambda x, y: (f"x = {x}", f"x={x}"),
        "matrix": lambda x, y: (rf"\begin{{pmatrix}} {x} & {y} \end{{pmatrix}}",
                                rf"\begin{{pmatrix}}{x}&{y}\end{{pmatrix}}"),
        "sqrt": lambda x, y: (rf"{y}\sqrt{{{abs(x) + 2}}}", rf"{y} \sqrt{{{abs(x) + 2}}}"),
        "several_boxes": lambda x, y: (f"{x}, {x + y}", None),
    }[kind]
    gold_latex, _ = render(a, b)
    _, predicted_latex = render(a2, b2)
    bare_gold = gold_latex if kind in ("integer", "decimal") else f"${gold_latex}$"
    gold = draw(st.sampled_from([f"${gold_latex}$", bare_gold]))
    if kind == "several_boxes":
        completion = rf"The solutions are \boxed{{{a2}}} and \boxed{{{a2 + b2}}}."
    else:
        wrapper = draw(st.sampled_from([
            "{}", "$\\boxed{{{}}}$", "The final answer is ${}$.",
            "Work... so the answer is \\boxed{{{}}}. I hope it is correct.",
            "Final Answer: $\\boxed{{{}}}$", "**Answer:** ${}$", "Thus \\[ {} \\]",
            "we find $y = 3$ and then \\boxed{{{}}}",
        ]))  # fmt: skip
        completion = wrapper.format(predicted_latex)
    return gold, completion


@settings(max_examples=250, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(answer_pairs())
def test_default_verdicts_equal_math_verify_on_generated_pairs(pair):
    gold, completion = pair
    # none of the generated kinds falls in a guard or recall class, so the verdict is Math-Verify's
    assert grade(completion, gold) is math_verify_verdict(gold, completion)


# --------------------------------------------------------------------------------------------------
# Modes
# --------------------------------------------------------------------------------------------------

TRL_CASES = [
    (r"\frac{1}{3}", r"My answer is \boxed{\frac{1}{3}}"),
    (r"\frac{1}{3}", r"My answer is \boxed{\frac{1}{2}}"),
    ("42", "The answer is 42."),  # TRL reads LaTeX only: no plain number
    ("42", "The final answer is $42$."),
    ("42", "We find 42 apples"),
    (r"$x^2$", r"so $x^2$ and then \boxed{x^2}"),
    ("7", r"first \boxed{7} then the final answer is $8$"),  # boxed first
    ("5", r"\boxed{5} and \boxed{6}"),
]


@pytest.mark.parametrize("gold, completion", TRL_CASES)
def test_trl_mode_matches_trl_accuracy_reward(gold, completion):
    from trl.rewards import accuracy_reward

    expected = accuracy_reward([[{"role": "assistant", "content": completion}]], [gold])[0]
    reward = MathVerifyReward(mode="trl")
    assert reward(completions=[completion], answer=[gold]) == [expected]  # plain text accepted
    assert reward(completions=[[{"role": "assistant", "content": completion}]], answer=[gold]) == [expected]


def test_boxed_mode_reads_only_the_last_box():
    boxed = GraderOptions(mode="boxed")
    assert grade(r"\boxed{3} ... \boxed{42}", "42", boxed) is True
    assert grade(r"\boxed{42} ... \boxed{3}", "42", boxed) is False
    assert grade("The final answer is $42$.", "42", boxed) is False  # no box, no answer
    assert grade(r"\boxed{42", "42", boxed) is False
    assert grade(r"\boxed{2^(n-1)}", "2^(n-1)", boxed) is True  # ASCII maths in the box


def test_modes_and_guards_are_validated():
    assert MODES == ("math_verify", "trl", "strict", "boxed")
    with pytest.raises(ValueError, match="mode=.lenient. is not a grader mode"):
        GraderOptions(mode="lenient")
    with pytest.raises(ValueError, match="unknown grader guards \\['nan'\\]"):
        MathVerifyReward(guards=["nan"])
    with pytest.raises(ValueError, match="num_workers"):
        MathVerifyReward(num_workers=0)


# --------------------------------------------------------------------------------------------------
# Worker pool
# --------------------------------------------------------------------------------------------------


def test_two_workers_give_the_same_verdicts_as_one():
    completions = [rf"\boxed{{{i % 7}}}" for i in range(40)] + [r"\boxed{9^{9^{9}}}"]
    golds = [str(i % 5) for i in range(40)] + ["2"]
    one = grade_batch(completions, golds, num_workers=1, timeout_seconds=2)
    two = grade_batch(completions, golds, num_workers=2, timeout_seconds=2)
    assert one == two == [i % 7 == i % 5 for i in range(40)] + [False]


def test_batch_marks_unparseable_golds_none():
    assert grade_batch([r"\boxed{1}", r"\boxed{1}"], ["1", "No integer solutions"]) == [True, None]
    with pytest.raises(ValueError, match="2 completions for 1 gold answers"):
        grade_batch(["a", "b"], ["1"])


# Cases a reviewer found against the first version of the grader: each now has its right verdict.
REVIEW_CASES = [
    ("$5$", "The answer is **5**. Wait, I made an error: recomputing gives 6.", False),  # bold recall: only at the end
    ("$5$", r"\fbox{5}. Wait, recomputing, we get $6$.", False),  # \fbox recall: only at the end
    ("42", r"so \fbox{42}.", True),
    ("$(1, 3)$", r"\boxed{1 < x < 3}", False),  # (1, 3) may be a point: no interval recall
    ("ln 2", r"\boxed{2ln}", False),  # a function name without brackets is not read as variables
    ("2^2^3", r"\boxed{64}", False),  # a chained power is not read as (2^2)^3 ...
    ("2^2^3", r"\boxed{2^{2^{3}}}", True),  # ... Math-Verify's reading (2^(2^3)) is kept
    ("5!!", r"\boxed{120!}", False),  # no double factorial read as (5!)!
    ("x = 2 (or x = 3)", r"\boxed{2}", False),  # "(or ...)" is not a note to drop
    ("a=b=c", r"\boxed{c}", False),  # a chain of equalities is not its last term
    ("a=b=c", r"\boxed{a=c}", False),
    ("a=b=c", r"\boxed{b=a=c}", True),
    (r"$x = \frac{1}{2^{99}}$", r"\boxed{\frac{1}{2^{98}}}", False),  # float_collapse inside an equation
    (r"$x = \frac{1}{2^{99}}$", r"\boxed{2^{-99}}", True),
    (r"$\text{Yes}$", r"The answer is $\text{Yes}$.", True),  # a LaTeX yes is read by Math-Verify
    ("2^{n-1}", r"\boxed{2}", False),  # bare LaTeX that Math-Verify reads in part: read whole
    ("2^{n-1}", r"\boxed{2^{n-1}}", True),
    ("2π", r"\boxed{2}", False),  # unicode pi
    ("2π", r"\boxed{2\pi}", True),
]


@pytest.mark.parametrize("gold, completion, expected", REVIEW_CASES)
def test_review_cases(gold, completion, expected):
    assert grade(completion, gold) is expected


def test_boxed_mode_yes_no_needs_a_box_and_trl_mode_keeps_math_verify_verdict():
    assert grade("The answer is Yes.", "Yes", GraderOptions(mode="boxed")) is False
    assert grade(r"\boxed{Yes}", "Yes", GraderOptions(mode="boxed")) is True
    # parity with TRL: no guard applies in the trl mode
    assert grade(r"\boxed{\frac{1}{2^{98}}}", r"$\frac{1}{2^{99}}$", GraderOptions(mode="trl")) is True


def test_bad_gold_and_option_types_are_named():
    with pytest.raises(TypeError, match="guards must be a list of guard names"):
        grade_batch(["a"], ["1"], guards="float_collapse")
    with pytest.raises(ValueError, match="the gold answer of row 1 is a list"):
        grade_batch(["a", "b"], ["1", [1, 2]])
    with pytest.raises(ValueError, match="one gold answer per completion, got one string"):
        MathVerifyReward()(completions=["a"], answer="5")
    with pytest.raises(ValueError, match="column 'problem_id' must hold one id per completion"):
        MathVerifyReward()(completions=["a", "b"], answer=["5", "6"], problem_id=[7])
    assert grade_batch((c for c in [r"\boxed{5}"]), [b"5"]) == [True]  # any iterable; bytes decoded


# --------------------------------------------------------------------------------------------------
# Golds from your own data: a mixed number means its value; a mark for a missing answer is no gold
# --------------------------------------------------------------------------------------------------

# (gold, completion, verdict). Before the fix the gold "3 3/4" was read as 3: \boxed{3} was right, its value wrong.
MIXED_NUMBER_GOLD_CASES = [
    ("3 3/4", r"\boxed{15/4}", True),
    ("3 3/4", r"\boxed{3.75}", True),
    ("3 3/4", r"\boxed{3 3/4}", True),
    ("3 3/4", r"\boxed{3\frac{3}{4}}", True),
    ("3 3/4", "Adding the two jugs gives 3 3/4 litres.", True),  # the mixed_number guard reads the answer alike
    ("3 3/4", r"\boxed{3}", False),  # the whole part alone
    ("3 3/4", r"\boxed{3/4}", False),  # the fraction alone
    ("3 3/4", r"\boxed{9/4}", False),  # not the product 3 * 3/4
    ("-1 2/5", r"\boxed{-\frac{7}{5}}", True),
    ("-1 2/5", r"\boxed{-1.4}", True),
    ("-1 2/5", r"\boxed{7/5}", False),
    ("$12 5/8$", r"\boxed{\frac{101}{8}}", True),  # a dollar-wrapped plain mixed number too
    ("12 5/8", r"\boxed{12}", False),
    ("0 1/3", r"\boxed{\frac13}", True),
]


@pytest.mark.parametrize("gold, completion, expected", MIXED_NUMBER_GOLD_CASES)
def test_a_mixed_number_gold_means_its_value(gold, completion, expected):
    assert verify_answer(completion, gold) is expected


@pytest.mark.parametrize("mode", ["strict", "boxed", "trl"])
def test_a_mixed_number_gold_means_its_value_in_every_mode(mode):
    assert verify_answer(r"\boxed{2.5}", "2 1/2", mode=mode) is True
    assert verify_answer(r"\boxed{1}", "2 1/2", mode=mode) is False  # 2 * 1/2, the old reading
    assert verify_answer(r"\boxed{2}", "2 1/2", mode=mode) is False


def without_cups(gold: str) -> list[str]:
    """A gold normaliser of the kind docs/own-data.md shows: the unit dropped."""
    return [gold.removesuffix(" cups")]


def test_a_mixed_number_is_read_after_the_gold_normaliser():
    options = GraderOptions(gold_normalizer=without_cups)
    assert grade(r"\boxed{\frac{9}{4}}", "2 1/4 cups", options) is True
    assert grade(r"\boxed{2}", "2 1/4 cups", options) is False


@pytest.mark.parametrize("gold", ["6 7/4", "6 0/4", "y = 4 1/3", "1 1/2, 2 1/2", "2 1/4 cups"])
def test_a_whole_number_next_to_a_fraction_that_is_not_one_mixed_number_is_refused(gold):
    # an improper or zero fraction, or a mixed number inside more text: no reading of it is certain (Math-Verify read
    # a part of each: "6 7/4" as 7, "y = 4 1/3" as 1)
    with pytest.raises(GoldAnswerError, match="whole number next to a fraction"):
        read_gold(gold)
    assert grade_batch([r"\boxed{1}"], [gold]) == [None]


MISSING_ANSWER_MARKS = ["n/a", "N/A", "N / a", "NA", "NA.", r"\text{N/A}", "$n/a$", "TBD", r"\text{TBD}", "todo",
                        "NaN", "null"]  # fmt: skip


@pytest.mark.parametrize("gold", MISSING_ANSWER_MARKS)
def test_a_mark_for_a_missing_answer_is_not_a_gold(gold):
    # before: "n/a" and "N/A" were read as n divided by a ("\boxed{n/a}" was right), "NA" as N times A, "\text{TBD}"
    # as a text answer
    with pytest.raises(GoldAnswerError, match="marks a missing answer"):
        read_gold(gold)
    assert grade_batch([r"\boxed{n/a}", r"\boxed{0}"], [gold, gold]) == [None, None]


@pytest.mark.parametrize("gold", ["", "  ", "-", "?", "...", "none", "None", "unknown", "#N/A"])
def test_other_non_answers_stay_refused(gold):
    with pytest.raises(GoldAnswerError):
        read_gold(gold)


# golds that state a value, some close to a missing-answer mark or a mixed number: each still read, and right
READABLE_GOLDS = [
    ("a/n", r"\boxed{\frac{a}{n}}"),
    ("na", r"\boxed{an}"),  # lowercase: the product n * a, not "NA"
    ("x", r"\boxed{x}"),
    ("0", r"\boxed{0}"),
    ("-17", r"\boxed{-17}"),
    ("0.125", r"\boxed{\frac{1}{8}}"),
    ("5/8", r"\boxed{0.625}"),
    (r"\frac{5}{8}", r"\boxed{5/8}"),
    (r"\sqrt{7}", r"\boxed{\sqrt{7}}"),
    ("[2, 9)", r"\boxed{[2, 9)}"),
    ("(4, -3)", r"\boxed{(4, -3)}"),
    ("y = 11", r"\boxed{11}"),
    ("x=2, y=7", r"\boxed{(2, 7)}"),
    (r"5\frac{1}{3}", r"\boxed{16/3}"),  # a LaTeX mixed number: Math-Verify's own reading
    ("2/3 + 1/6", r"\boxed{5/6}"),
]


@pytest.mark.parametrize("gold, completion", READABLE_GOLDS)
def test_golds_that_state_a_value_are_still_read(gold, completion):
    assert verify_answer(completion, gold) is True
