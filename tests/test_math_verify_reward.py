"""Tests for the verifiable math reward R_m (trl_explore/rewards/math_verify_reward.py).

Every expected value below was worked out by hand. The file takes 11-15 s on 2 busy CPU cores
(about half that on idle ones): the math-verify worker process starts twice (0.5-1.5 s each; the
timeout test kills it once), and the CHAMP sweep parses its 162 distinct gold answers (~3 s).
"""

import logging
import threading
import time

import pytest

from trl_explore.data.champ_answers import gold_alternatives, strip_note, unwrap_phrase
from trl_explore.rewards.ascii_math import (
    ascii_answer_to_latex,
    ascii_to_latex,
    looks_like_latex,
    nesting_depth,
    yes_no_word,
)
from trl_explore.rewards.grading import read_gold
from trl_explore.rewards.math_verify_reward import (
    GoldAnswerError,
    MathVerifyReward,
    completion_text,
    extract_answer,
    last_boxed_content,
    math_reward,
    parse_gold,
    verify_answer,
)

CHAMP = gold_alternatives  # CHAMP's phrasing rules for its golds: these cases were written with them in the grader


def own_forms(gold):
    """This package's plain-text reading of a gold, before Math-Verify: one LaTeX string per alternative."""
    forms = []
    for alternative in gold_alternatives(gold):
        word = yes_no_word(alternative)
        forms.append(word or (alternative if looks_like_latex(alternative) else ascii_answer_to_latex(alternative)))
    return forms


# --------------------------------------------------------------------------------------------------
# Pure string functions
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so \boxed{42}.", "42"),
        (r"\boxed{1} then \boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # the LAST box
        (r"\fbox{ 7 }", "7"),
        (r"\boxed {x^{2}}", "x^{2}"),  # space before the brace
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),  # escaped braces do not close the box
        (r"\boxed{42", None),  # never closed (truncated completion)
        (r"\boxed{}", None),  # empty
        ("no box at all", None),
        ("\\boxed{" + "1" * 1001 + "}", None),  # longer than _MAX_ANSWER_CHARS
    ],
)
def test_last_boxed_content(text, expected):
    assert last_boxed_content(text) == expected


def test_nesting_depth():
    assert nesting_depth("x") == 0
    assert nesting_depth(r"\frac{(a+1)}{2}") == 2
    assert nesting_depth("[(1)] ((2))") == 2
    assert nesting_depth(")))(") == 1  # stray closers do not go below zero


@pytest.mark.parametrize(
    "completion, expected",
    [
        ("plain", "plain"),
        ([{"role": "assistant", "content": "a"}], "a"),
        ([{"role": "assistant", "content": "a"}, {"role": "user", "content": "u"}], "a"),  # last ASSISTANT one
        ([{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}], "b"),
        ([{"role": "assistant", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]}], "xy"),
        ([{"role": "user", "content": "u"}], ""),
        ([{"role": "assistant", "content": None}], ""),
        (None, ""),
        (b"\xff42", "\ufffd42"),
    ],
)
def test_completion_text(completion, expected):
    assert completion_text(completion) == expected


@pytest.mark.parametrize(
    "ascii_maths, latex",
    [
        ("2^(n-1)", "2^{n-1}"),
        ("n(n-3)/2", "n(n-3)/2"),
        ("(2n)!/(2^n*n!)", r"(2n)!/(2^{n} \cdot n!)"),
        ("C(n+1, 2m+1)", r"\binom{n+1}{2m+1}"),
        ("2^floor(n/2)*floor(n/2)!", r"2^{\lfloor n/2 \rfloor} \cdot \lfloor n/2 \rfloor!"),
        ("sqrt(3)/3", r"\sqrt{3}/3"),
        ("sum_(i=1)^n i^3", r"\sum_{i=1}^{n}  i^{3}"),
        ("[-1, 1)", "[-1, 1)"),
        ("x^2-xy", "x^{2}-xy"),  # a two-letter run is a product of variables
        ("1±sqrt(2)", r"1\pm \sqrt{2}"),
        ("n>=2", r"n \geq 2"),
        ("1.5e-3", r"1.5 \cdot 10^{-3}"),  # scientific notation, not Euler's e
    ],
)
def test_ascii_to_latex(ascii_maths, latex):
    assert ascii_to_latex(ascii_maths) == latex


@pytest.mark.parametrize(
    "text, message",
    [
        ("No integer solutions", "unknown word 'No'"),
        ("x(n)<y(n-1) for all n", "unknown word 'for'"),
        ("x(x-1)...(x-9)", "unexpected character '.'"),
        ("2^(n-1", "unbalanced bracket"),
        ("C(5)", "needs two arguments"),
        ("1; 2", "unexpected character ';'"),
    ],
)
def test_ascii_to_latex_refuses(text, message):
    with pytest.raises(ValueError, match=message):
        ascii_to_latex(text)


def test_strip_note_unwrap_phrase_yes_no_word():
    assert strip_note("100 (i.e., all values)") == "100"
    assert strip_note("0 (none of the values)") == "0"
    assert strip_note("((-1)^(n+1)+n+1)/(n+2) (i.e., 1 if n odd, n/(n+2) if even)") == "((-1)^(n+1)+n+1)/(n+2)"
    assert strip_note("(x=8, y=2), (x=2, y=8)") == "(x=8, y=2), (x=2, y=8)"  # maths, not a note
    assert unwrap_phrase("-3 is the only possible value") == "-3"
    assert unwrap_phrase("The limit exists and is equal to (a+3b)/2") == "(a+3b)/2"
    assert unwrap_phrase("The only possible value for the limit is sqrt(a)") == "sqrt(a)"
    assert unwrap_phrase("At most 0 integer-valued zeros") == "0"
    assert unwrap_phrase("Exactly one sequence") == "1"
    assert unwrap_phrase("n times") == "n"
    assert unwrap_phrase("No solutions") == "No solutions"  # not a count: left alone
    assert yes_no_word(r"\text{No}.") == "no"
    assert yes_no_word("$YES$") == "yes"
    assert yes_no_word("Not") is None


@pytest.mark.parametrize(
    "gold, forms",
    [
        ("C(10, 5), or equivalently 252", [r"\binom{10}{5}", "252"]),
        ("5/14, or approximately 35.7%", ["5/14"]),  # a rounded value is not accepted
        ("376 and 625", [r"\{376, 625\}"]),
        ("1, 4 and 9", [r"\{1, 4, 9\}"]),
        ("x=6, y=5", ["(6, 5)"]),  # one solution -> ordered tuple
        ("x=y=0", ["(0, 0)"]),
        ("x=0, y=2 and x=9, y=11", [r"\{(0, 2), (9, 11)\}"]),
        ("(x=8, y=2), (x=2, y=8)", [r"\{(8, 2), (2, 8)\}"]),
        ("x=16 and x=81", [r"\{16, 81\}"]),
        ("x=±1, ±2", [r"\{+1, -1, +2, -2\}"]),
        ("a(1±sqrt(2)), a(1±sqrt(5))/2", [r"\{a(1+\sqrt{2}), a(1-\sqrt{2}), a(1+\sqrt{5})/2, a(1-\sqrt{5})/2\}"]),
        ("f(x)=0", ["f(x)=0"]),  # not a letter on the left: left to math-verify
        ("0 is the only possible value", ["0"]),
        ("(x+1)(x^3−x^2+1)", ["(x+1)(x^{3}-x^{2}+1)"]),  # unicode minus
        ("No", ["no"]),
        (r"$\frac{1}{2}$", [r"$\frac{1}{2}$"]),  # LaTeX is kept as it is
        ("a=b=c", ["a=b=c"]),  # a chained equality stays one (guard "chained_equality"), not the tuple (c, c)
    ],
)
def test_gold_alternatives_and_ascii_reading(gold, forms):
    assert own_forms(gold) == forms


@pytest.mark.parametrize(
    "gold",
    [
        "",
        "   ",
        "No integer solutions",
        "1, 2, 3, ...",  # an infinite list is not the set {1, 2, 3}
        "Yes, and the sequence is 1/2^3, 1/2^6, ...",
        "1" * 1001,  # too long
        "(" * 11 + "1" + ")" * 11,  # nested too deep
    ],
)
def test_unreadable_gold_refuses(gold):
    with pytest.raises(GoldAnswerError):
        read_gold(gold)


# --------------------------------------------------------------------------------------------------
# Verification: hand-labelled (completion, gold, expected)
# --------------------------------------------------------------------------------------------------

VERIFY_CASES = [
    # partial-parse traps: math-verify's default parse reads "2^(n-1)" as 2
    (r"\boxed{2}", "2^(n-1)", False),
    (r"\boxed{2^{n-1}}", "2^(n-1)", True),
    (r"\boxed{2^(n-1)}", "2^(n-1)", True),  # ASCII maths in the box
    (r"\boxed{2^{n-1}}", "2", False),
    # unboxed: Math-Verify reads the number 2 at the start of 2^(n-1); the operator_fragment guard reads it whole
    # (issue 30; tests/test_grading_fragments.py compares with Math-Verify)
    ("The answer is 2^(n-1)", "2", False),
    ("The answer is 2^(n-1)", "2^(n-1)", True),
    (r"\boxed{n}", "n(n-3)/2", False),
    (r"\boxed{2}", "(2n)!/(2^n*n!)", False),
    # yes / no
    (r"\boxed{\text{No}}", "No", True),
    (r"\boxed{No}", "No", True),
    ("Therefore the answer is no.", "No", True),
    (r"\boxed{Yes}", "No", False),
    (r"\boxed{\text{yes}}", "Yes", True),
    (r"\boxed{0}", "No", False),
    # equivalent forms, LaTeX vs ASCII
    (r"\boxed{0.5}", r"\frac{1}{2}", True),
    (r"\boxed{\frac{1}{2}}", "0.5", True),
    (r"\boxed{\frac{n^2-3n}{2}}", "n(n-3)/2", True),
    (r"\boxed{\frac{n^2-3n}{3}}", "n(n-3)/2", False),
    (r"\boxed{\frac{1}{\sqrt{3}}}", "sqrt(3)/3", True),
    (r"\boxed{1 - 2^{-1/n}}", "1-1/2^(1/n)", True),
    (r"\boxed{2-2x}", "-2x+2", True),
    (r"\boxed{2x-2}", "-2x+2", False),
    (r"\boxed{2^{996}}", "2^997", False),
    # "A, or equivalently B" accepts either; "or approximately" does not
    (r"\boxed{252}", "C(10, 5), or equivalently 252", True),
    (r"\boxed{\binom{10}{5}}", "C(10, 5), or equivalently 252", True),
    (r"\boxed{251}", "C(10, 5), or equivalently 252", False),
    (r"\boxed{\frac{n(n+1)(2n+1)}{6}}", "sum_(i=1)^n i^2, or equivalently n(n+1)(2n+1)/6", True),
    (r"\boxed{\sum_{i=1}^{n} i^2}", "sum_(i=1)^n i^2, or equivalently n(n+1)(2n+1)/6", True),
    (r"\boxed{\frac{5}{14}}", "5/14, or approximately 35.7%", True),
    (r"\boxed{35.7\%}", "5/14, or approximately 35.7%", False),
    # binomials and factorials
    (r"\boxed{\binom{n+1}{2m+1}}", "C(n+1, 2m+1)", True),
    (r"\boxed{\binom{n+1}{2m}}", "C(n+1, 2m+1)", False),
    (r"\boxed{C(n+1, 2m+1)}", r"\binom{n+1}{2m+1}", False),  # Math-Verify reads no ASCII binomial (strict does)
    (r"\boxed{\frac{(2n)!}{2^n n!}}", "(2n)!/(2^n*n!)", True),
    (r"\boxed{\frac{(2n)!}{n!}}", "(2n)!/(2^n*n!)", False),
    (r"\boxed{\frac{(n-1)!}{2}}", "n!/(2n)", True),
    (r"\boxed{n!}", "n!/(2n)", False),
    (r"\boxed{2^{\lfloor n/2 \rfloor} \cdot \lfloor n/2 \rfloor!}", "2^floor(n/2)*floor(n/2)!", True),
    # intervals
    (r"\boxed{[-1, 1]}", "[-1, 1]", True),
    (r"\boxed{(-1, 1)}", "[-1, 1]", False),
    (r"\boxed{[-1, 1)}", "[-1, 1]", False),
    # answer sentences
    (r"\boxed{0}", "0 is the only possible value", True),
    (r"\boxed{2}", "2 inequalities", True),
    (r"\boxed{1}", "Exactly one", True),
    (r"\boxed{100}", "100 (i.e., all values)", True),
    (r"\boxed{\frac{2}{3}}", "The limit exists and is equal to 2/3", True),
    (r"\boxed{\frac{a+3b}{3}}", "The limit exists and is equal to (a+3b)/2", False),
    # sets and solutions
    (r"\boxed{625, 376}", "376 and 625", True),
    (r"\boxed{376}", "376 and 625", False),
    (r"\boxed{(6, 5)}", "x=6, y=5", True),
    (r"\boxed{x=6, y=5}", "x=6, y=5", True),
    (r"\boxed{(5, 6)}", "x=6, y=5", False),  # order matters for one solution
    (r"\boxed{(9, 11), (0, 2)}", "x=0, y=2 and x=9, y=11", True),  # but not between solutions
    (r"\boxed{(0, 2)}", "x=0, y=2 and x=9, y=11", False),
    (r"\boxed{x = \pm 1}", "x=±1", True),
    (r"\boxed{1}", "x=±1", False),
    (r"\boxed{\pm 1, \pm 2, \pm \frac{1}{2}}", "x=±1, ±2, ±1/2", True),
    # where the answer is read from
    ("So the final answer is $\\frac{1}{2}$.", "1/2", True),
    ("The answer is 42.", "42", True),
    (r"\boxed{41} no, wait: \boxed{42}", "42", False),  # several boxes are joined: {41, 42} (strict: the last one)
    (r"\boxed{42} no, wait: \boxed{41}", "42", False),
    (r"\fbox{42}", "42", True),
    ("x" * 100_000 + r"\boxed{42}", "42", True),
    # garbage never raises and never matches
    ("", "42", False),
    (None, "42", False),
    (r"\boxed{", "42", False),
    (r"\boxed{42", "42", False),  # truncated inside the box: no final answer
    ("\ufffd\ufffd \\boxed{\ufffd}", "42", False),
    ("}}}{{{ \\boxed{}", "42", False),
    ("{" * 100_000, "42", False),
    ("\\boxed{" + "(" * 400 + "42" + ")" * 400 + "}", "42", False),  # nested too deep to parse
]


@pytest.mark.parametrize("completion, gold, expected", VERIFY_CASES)
def test_verify_answer(completion, gold, expected):
    assert verify_answer(completion, gold, gold_normalizer=CHAMP) is expected


# Where the strict mode (version 0.1's rule, kept as an option) differs from the default on the cases above.
STRICT_CASES = [
    ("The answer is 2^(n-1)", "2", False),  # a number cut out of an expression is not an answer
    (r"\boxed{C(n+1, 2m+1)}", r"\binom{n+1}{2m+1}", True),  # ASCII maths in a box
    (r"\boxed{41} no, wait: \boxed{42}", "42", True),  # the LAST box
    (r"\boxed{42} no, wait: \boxed{41}", "42", False),
]


@pytest.mark.parametrize("completion, gold, expected", STRICT_CASES)
def test_verify_answer_strict_mode(completion, gold, expected):
    assert verify_answer(completion, gold, mode="strict", gold_normalizer=CHAMP) is expected


def test_enough_hand_labelled_cases():
    assert len(VERIFY_CASES) >= 40
    assert {expected for _, _, expected in VERIFY_CASES} == {True, False}


def test_verify_answer_unparseable_gold_raises():
    with pytest.raises(GoldAnswerError, match="No integer solutions"):
        verify_answer(r"\boxed{0}", "No integer solutions")
    with pytest.raises(GoldAnswerError):
        verify_answer(r"\boxed{0}", None)
    with pytest.raises(ValueError, match="timeout_seconds"):
        verify_answer(r"\boxed{0}", "0", timeout_seconds=0)


def test_verify_answer_numeric_gold():
    assert verify_answer(r"\boxed{42}", 42) is True


@pytest.mark.parametrize(
    "completion, expected",
    [
        (r"blah \boxed{\frac12} and \boxed{ 42 }", "42"),
        ("So the final answer is $\\frac{1}{2}$.", r"\frac{1}{2}"),
        ("The answer is 42.", "42"),
        ("The answer is No.", "No"),
        ("The answer is 2^(n-1)", None),  # a cut-off number is not an answer
        ("", None),
        (r"\boxed{42", None),
        ([{"role": "assistant", "content": r"\boxed{7}"}], "7"),
    ],
)
def test_extract_answer_strict_mode(completion, expected):
    assert extract_answer(completion, mode="strict") == expected


def test_extract_answer_default_mode():
    assert extract_answer(r"blah \boxed{\frac12}") == r"\frac{1}{2}"
    assert extract_answer("The answer is 42.") == "42"
    assert extract_answer(r"\boxed{42") is None  # unclosed_box guard
    assert extract_answer(r"\boxed{7} and \boxed{8}", mode="boxed") == "8"


def test_parse_gold():
    # Math-Verify reads "252" out of this one, equivalent to this package's reading: Math-Verify's reading is used
    parsed = parse_gold("C(10, 5), or equivalently 252", gold_normalizer=CHAMP)
    assert [str(value) for value in parsed] == ["252", "252"]
    # Math-Verify reads "2" out of "2^(n-1)": this package's whole reading is used instead (form, then its LaTeX)
    assert [str(value) for value in parse_gold("2^(n-1)")] == ["2**(n - 1)", "2^{n-1}"]
    assert parse_gold("Yes") == ["yes"]
    with pytest.raises(GoldAnswerError, match="unknown word"):
        parse_gold("The limit does not exist")


# --------------------------------------------------------------------------------------------------
# Timeouts and threads
# --------------------------------------------------------------------------------------------------


def test_pathological_input_returns_within_timeout():
    assert verify_answer(r"\boxed{1}", "1") is True  # worker up and warm: its start is not timed
    start = time.monotonic()
    # sympy would compute 9^(9^9), a 370-million-digit integer, inside one C call
    assert verify_answer(r"\boxed{9^{9^{9}}}", "2", timeout_seconds=1.0) is False
    # Without the timeout, Math-Verify was still computing after 90 s (stopped there). With it, about 1.7 s
    # here: the timeout, killing the worker, starting a new one. The bound is loose on purpose (a loaded CI
    # machine took 4 s); it is not a speed target.
    assert time.monotonic() - start < 30.0
    assert verify_answer(r"\boxed{3}", "3") is True  # a new worker takes over


def _raise_key_error():
    raise KeyError("boom")


def test_an_error_in_a_worker_is_reported_per_task_and_the_pool_survives():
    from trl_explore.rewards.math_verify_reward import _run

    assert _run(_raise_key_error, [()], 5.0, 1) == [("error", "KeyError('boom')")]
    assert verify_answer(r"\boxed{3}", "3") is True


def test_calls_from_a_non_main_thread():
    results = {}

    def score():
        results["verify"] = verify_answer(r"\boxed{\frac{1}{2}}", "1/2")
        results["reward"] = math_reward(completions=[r"\boxed{3}", r"\boxed{4}"], answer=["3", "3"])

    thread = threading.Thread(target=score)
    thread.start()
    thread.join(timeout=60)
    assert results == {"verify": True, "reward": [1.0, 0.0]}


# --------------------------------------------------------------------------------------------------
# The TRL reward function
# --------------------------------------------------------------------------------------------------


def test_reward_called_the_trl_way():
    rewards = math_reward(
        prompts=["p1", "p1", "p2"],
        completions=[r"... \boxed{2^{n-1}}", r"... \boxed{2}", "The answer is No."],
        completion_ids=[[1, 2], [3], [4]],
        answer=["2^(n-1)", "2^(n-1)", "No"],
        trainer_state=None,
        log_extra=None,
        log_metric=None,
    )
    assert rewards == [1.0, 0.0, 1.0]
    assert math_reward.__name__ == "math_reward"


def test_reward_conversational_completions_and_options():
    reward = MathVerifyReward(answer_column="solution", name="champ_reward", timeout_seconds=2.0,
                              gold_normalizer=CHAMP)
    completions = [
        [{"role": "assistant", "content": r"\boxed{\binom{10}{5}}"}],
        [{"role": "assistant", "content": r"\boxed{253}"}],
        [{"role": "user", "content": r"\boxed{252}"}],  # no assistant message: nothing to score
    ]
    gold = "C(10, 5), or equivalently 252"
    assert reward(prompts=None, completions=completions, solution=[gold] * 3) == [1.0, 0.0, 0.0]
    assert reward.__name__ == "champ_reward"


def test_the_docstring_points_at_champs_gold_normalizer():
    """``MathVerifyReward``'s docstring names ``GOLD_NORMALIZERS["champ"]`` for CHAMP's golds: it exists, it is CHAMP's
    phrasing rules, and a reward built with it scores a CHAMP-phrased gold that is not scored without it."""
    from trl_explore.data.gold_normalizers import GOLD_NORMALIZERS

    assert 'GOLD_NORMALIZERS["champ"]' in " ".join(MathVerifyReward.__doc__.split())
    assert GOLD_NORMALIZERS["champ"] is gold_alternatives
    gold = "5 is the only possible value"
    champ = MathVerifyReward(gold_normalizer=GOLD_NORMALIZERS["champ"])
    assert champ(completions=[r"\boxed{5}"], answer=[gold]) == [1.0]
    assert MathVerifyReward()(completions=[r"\boxed{5}"], answer=[gold]) == [None]  # prose without CHAMP's rules


def test_reward_missing_column_names_it():
    with pytest.raises(ValueError, match=r"'answer'.*\['problem', 'solution'\]"):
        math_reward(completions=["x"], solution=["1"], problem=["q"])
    with pytest.raises(ValueError, match="2 gold answers for 1 completions"):
        math_reward(completions=["x"], answer=["1", "2"])


def test_unparseable_gold_is_none_counted_and_logged_once(caplog):
    reward = MathVerifyReward()
    golds = ["No integer solutions", "No integer solutions", "4", "The limit does not exist"]
    with caplog.at_level(logging.WARNING, logger="trl_explore.rewards.math_verify_reward"):
        first = reward(completions=[r"\boxed{4}"] * 4, answer=golds, problem_id=["P7", "P7", "P1", "P12"])
        second = reward(completions=[r"\boxed{4}"], answer=["No integer solutions"], problem_id=["P7"])
    assert first == [None, None, 1.0, None]
    assert second == [None]
    assert reward.num_unparseable_gold == 4  # every row scored None
    logged = [record.getMessage() for record in caplog.records if "cannot be parsed" in record.getMessage()]
    assert len(logged) == 2  # once for P7, once for P12
    assert "'P7'" in logged[0] and "'P12'" in logged[1]


def test_unparseable_gold_without_ids_is_logged_once_per_gold_text(caplog):
    reward = MathVerifyReward()
    with caplog.at_level(logging.WARNING, logger="trl_explore.rewards.math_verify_reward"):
        assert reward(completions=["a", "b"], answer=["It is not possible"] * 2) == [None, None]
    assert reward.num_unparseable_gold == 2
    assert sum("It is not possible" in record.getMessage() for record in caplog.records) == 1


# --------------------------------------------------------------------------------------------------
# Every CHAMP gold answer parses whole or is a known, documented exception
# --------------------------------------------------------------------------------------------------

# Answers in words, which need a human or a model to judge; math-verify cannot check them.
CHAMP_UNPARSEABLE = {
    "P_Inequality_9": "relation with a quantifier: x(n)<y(n-1) for all n≥3",
    "P_Inequality_32": "relation with a quantifier: x(n)>y(n-1) for all n≥2",
    "P_Number-Theory_7": "No integer solutions",
    "P_Number-Theory_8": "No possible solutions",
    "P_Number-Theory_9": "No positive integer solutions",
    "P_Number-Theory_18": "No integer solutions",
    "P_Number-Theory_21": "No integer solutions",
    "P_Number-Theory_23": "No positive integer solutions",
    "P_Number-Theory_30": "No integer solutions",
    "P_Number-Theory_41": "No such values",
    "P_Number-Theory_47": "No such values",
    "P_Number-Theory_59": "Infinitely many solutions",
    "P_Number-Theory_62": "No such values",
    "P_Number-Theory_64": "No positive integer solutions",
    "P_Number-Theory_68": "No integer solutions",
    "P_Polynomial_46": "a product written with an ellipsis: x(x-1)(x-2)...(x-2022)",
    "P_Sequence_2": "Always greater than 20",
    "P_Sequence_5": "There are no prime numbers in the sequence",
    "P_Sequence_12": "The limit does not exist",
    "P_Sequence_13": "Such a sequence is not possible",
    "P_Sequence_17": "The sequence is not periodic",
    "P_Sequence_24": "The sequence does not exist",
    "P_Sequence_25": "It is not possible",
    "P_Sequence_36": "Monotonically increasing",
    "P_Sequence_38": "The sequence does not exist",
    "P_Sequence_43": "Yes, plus the sequence with an ellipsis",
    "P_Sequence_48": "The function is periodic, with a period of 8",
}


def test_every_champ_gold_parses_or_is_known_unparseable():
    champ_dataset = pytest.importorskip("champ_dataset")
    problems = champ_dataset.load("v0").problems
    assert len(problems) == 270
    parses = {}  # gold text -> parses whole (162 distinct answers)
    for answer in {problem.answer for problem in problems.values()}:
        try:
            parses[answer] = len(parse_gold(answer, timeout_seconds=30, gold_normalizer=CHAMP)) > 0
        except GoldAnswerError:
            parses[answer] = False
    unparseable = {problem_id for problem_id, problem in problems.items() if not parses[problem.answer]}
    assert unparseable == set(CHAMP_UNPARSEABLE)
    assert len(problems) - len(unparseable) == 243


def test_repeated_call_on_the_same_batch_reuses_the_rewards(monkeypatch):
    """OGERRewardFunction calls the verifier again on TRL's batch: no second verification."""
    import trl_explore.rewards.math_verify_reward as mvr

    reward = mvr.MathVerifyReward()
    completions = ["\\boxed{4}", "\\boxed{5}"]
    first = reward(completions=completions, answer=["4", "4"])
    calls = []
    monkeypatch.setattr(mvr, "grade_batch",
                        lambda completions, golds, **k: calls.append(completions) or [True] * len(golds))
    assert reward(completions=completions, answer=["4", "4"]) == first == [1.0, 0.0]
    assert calls == []
    assert reward(completions=["\\boxed{5}"], answer=["4"]) == [1.0]  # a new batch is verified (stubbed here)
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [
        # free text that merely mentions the gold value is not a final answer (false positives seen on CHAMP)
        ("We have 3 apples and 0 pears, and then we keep counting", "0", False),
        ("no idea", "No", False),
        ("... so there is only one possible solution to this paradox", "No", False),
        ("so we get x = 5 and then 7 more steps", "7", False),
        # an answer anchor makes unboxed text count
        ("The final answer is 42.", "42", True),
        ("Therefore, the answer is $2^{n-1}$.", "2^(n-1)", True),
        ("The answer is no.", "No", True),
    ],
)
def test_strict_mode_unboxed_text_needs_an_answer_anchor(completion, gold, expected):
    assert verify_answer(completion, gold, mode="strict", gold_normalizer=CHAMP) is expected


def test_default_mode_reads_unanchored_text_as_math_verify_does():
    # Math-Verify extracts without an anchor: the last number of free text counts (the strict mode refuses it)
    assert verify_answer("We have 3 apples and 0 pears, and then we keep counting", "0") is True
    assert verify_answer("We have 3 apples and 0 pears, and then we keep counting", "0", mode="strict") is False


def test_extract_answer_ignores_unanchored_words():
    assert extract_answer("no idea", mode="strict") is None
    assert extract_answer("The answer is 12.", mode="strict") == "12"


@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [
        ("Some work.\n\nTherefore, n mod 1982 is 0.", "0", True),
        ("Thus the smallest value is \\(\\frac{1}{3}\\), and this occurs when \\(a = b = c\\).", "1/3", True),
        # the concluding sentence must end the text, complete: a cut-off ramble that mentions the value is not one
        ("So we have two cases: x^2 + 1 = 0 or x^2 + 1 = 1.\n\nIf x^2 + 1 = 0, then n + 1 is always 0 modulo",
         "0", False),
        ("Therefore, the value is 0. But wait, let me check the other case", "0", False),
    ],
)
def test_strict_mode_concluding_sentence_rule(completion, gold, expected):
    assert verify_answer(completion, gold, mode="strict", gold_normalizer=CHAMP) is expected


def test_a_data_sets_phrasing_rules_reach_the_grader_only_as_its_gold_normalizer():
    gold = "0 is the only possible value"  # CHAMP's way of writing the answer 0
    with pytest.raises(GoldAnswerError):
        verify_answer(r"\boxed{0}", gold)  # the grader alone does not read English phrasing
    assert verify_answer(r"\boxed{0}", gold, gold_normalizer=CHAMP) is True
    assert MathVerifyReward(gold_normalizer=CHAMP)(completions=[r"\boxed{0}", r"\boxed{1}"], answer=[gold] * 2) == [
        1.0, 0.0]
