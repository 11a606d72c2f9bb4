"""The guard-rails against hedged and unfinished answers and the new recall rules (trl_explore.rewards.guards).

The cases live in tests/data/grading_adversarial.jsonl, hand-labelled for this repository (label = the right verdict,
why = the reason); "tuned" cases were written with the guards, "held_out" ones after them, before running them.
"""

import json
import pathlib

import math_verify
import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trl_explore.oger.reward import OGERRewardFunction
from trl_explore.rewards.grading import GUARDS, GraderOptions, grade
from trl_explore.rewards.guards import (
    is_plain_number,
    locate_answer,
    mixed_number_answer,
    mixed_number_value,
    prompt_echo,
    retraction_after,
    rewrite_for_recall,
    single_valued,
)
from trl_explore.rewards.math_verify_reward import MathVerifyReward, grade_batch

CASES = [json.loads(line) for line in (pathlib.Path(__file__).parent / "data" / "grading_adversarial.jsonl").open()]
NEW_GUARDS = ("hedge", "unterminated", "retraction", "prompt_echo", "mixed_number")
# Cases the grader still gets wrong, each for a reason said in the case's "why"
KNOWN_MISSES = {
    "retraction-earlier-wrong": "the retraction refers to an earlier guess; the guard cannot tell",
    "ho-hedge-pair-gold": "Math-Verify reads no tuple from plain-text '(1, 2).' (its own semantics)",
}


def math_verify_verdict(gold, completion):
    return bool(math_verify.verify(math_verify.parse(gold), math_verify.parse(completion)))


def _grade(case, options=GraderOptions()):
    context = {"prompt": case.get("prompt"), "terminated": case.get("terminated")}
    return grade(case["completion"], case["gold"], options, **context)


def test_the_case_file_is_well_formed():
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids)) and len(CASES) >= 100
    for case in CASES:
        assert case["label"] in (0, 1) and case["why"] and case["set"] in ("tuned", "held_out")
        assert case["class"] in NEW_GUARDS + ("recall",)
    for cls in NEW_GUARDS + ("recall",):  # every class has cases of both labels
        assert {c["label"] for c in CASES if c["class"] == cls} == {0, 1}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_adversarial_case(case):
    if case["id"] in KNOWN_MISSES:
        pytest.xfail(KNOWN_MISSES[case["id"]])
    assert _grade(case) is bool(case["label"]), case["why"]


@pytest.mark.parametrize("guard", NEW_GUARDS)
def test_each_new_guard_only_turns_a_one_into_a_zero(guard):
    """Off, a guard gives back the verdict of the grader without it; every case it decides is a 1 made 0."""
    without = GraderOptions(guards=frozenset(GUARDS) - {guard})
    decided = 0
    for case in CASES:
        on, off = _grade(case), _grade(case, without)
        if on != off:  # (the recall half of mixed numbers is a recall rule: on or off here, 8/3 still matches)
            decided += 1
            assert (on, off) == (False, True), case["id"]
    assert decided >= 2


def test_recall_switches_off():
    no_recall = GraderOptions(recall=False)
    gained = [c for c in CASES if c["class"] == "recall" and c["label"] == 1]
    gained = [c for c in gained if not math_verify_verdict(c["gold"], c["completion"])]
    assert len(gained) >= 12
    for case in gained:
        assert _grade(case) is True and _grade(case, no_recall) is False, case["id"]


def test_guards_need_their_context():
    """Without a prompt the echo is Math-Verify's 1; without termination the cut-off text is too."""
    assert grade("The math solution for 9 + 8 is x.", "17") is True
    assert grade("The math solution for 9 + 8 is x.", "17", prompt="What is 9 + 8?") is False
    cut = "First 12 times 3 is 36, and then we add 5 to 36"
    assert grade(cut, "36") is True and grade(cut, "36", terminated=True) is True
    assert grade(cut, "36", terminated=False) is False


def test_the_trl_mode_keeps_math_verify_verdicts():
    trl = GraderOptions(mode="trl")
    assert grade("The answer is $5$. Wait, that is wrong.", "5", trl) is True
    assert grade(r"The answer is $\boxed{9 + 8}$", "17", trl, prompt="What is 9 + 8?") is True


def test_echo_in_the_boxed_and_strict_modes():
    for mode in ("boxed", "strict"):
        options = GraderOptions(mode=mode)
        assert grade(r"\boxed{9+8}", "17", options) is True
        assert grade(r"\boxed{9+8}", "17", options, prompt="What is 9+8?") is False
        assert grade(r"9 + 8 = 17. \boxed{17}", "17", options, prompt="What is 9+8?") is True


# --------------------------------------------------------------------------------------------------
# The pieces, on hand-made values
# --------------------------------------------------------------------------------------------------


def test_locate_answer_reads_what_math_verify_reads():
    for case in CASES:
        parsed = math_verify.parse(case["completion"])
        span = locate_answer(case["completion"])
        if not parsed or isinstance(parsed[0], str):
            continue
        assert span is not None and math_verify.verify([parsed[0]], [span.parsed]), case["id"]
    span = locate_answer("so the answer is 5 or 6.")
    assert (span.answer, span.anchored) == ("5", True)
    assert "so the answer is 5 or 6."[span.value_start : span.value_end] == "5"
    assert locate_answer("no numbers here") is None
    assert locate_answer("I get 7 apples").anchored is False


def test_mixed_number_answer_values():
    for text, value in [("The answer is 2 2/3", sympy.Rational(8, 3)), (r"\boxed{-1 1/2}", sympy.Rational(-3, 2)),
                        ("It takes 3 1/2 hours.", sympy.Rational(7, 2))]:  # fmt: skip
        assert mixed_number_answer(text, locate_answer(text)) == value
    for text in ["The answer is 2 5/3", "The answer is 2 + 2/3 = 8/3", "x^2 2/3", "The answer is 12/4"]:
        assert mixed_number_answer(text, locate_answer(text)) is None, text


def test_mixed_number_value_reads_only_text_that_is_one_mixed_number():
    # the reading of a plain-text gold: the same mixed numbers as in answers, and only when they are all of the text
    for text, value in [("4 2/5", sympy.Rational(22, 5)), ("-1 1/8", sympy.Rational(-9, 8)),
                        (" 10 3/7 ", sympy.Rational(73, 7)), ("0 5/6", sympy.Rational(5, 6))]:  # fmt: skip
        assert mixed_number_value(text) == value, text
    for text in ["4 7/5", "4 0/5", "4 2/5 kg", "z = 4 2/5", "2/5", "4", "4 2/5/3", "4.5 1/2", "4 2.5/6"]:
        assert mixed_number_value(text) is None, text


def test_prompt_echo_on_hand_cases():
    assert prompt_echo("9 + 8", "17", "What is 9 + 8?")
    assert prompt_echo(r"6 \times 7", "42", "Compute $6 \\cdot 7$.")  # one sign per operation
    assert prompt_echo("12/4", "3", "Calculate 12 / 4.")  # a fraction not in lowest terms
    assert not prompt_echo("3/4", "3/4", "Which is larger, 3/4 or 2/3?")  # in lowest terms: a value
    assert not prompt_echo("17", "17", "What is 9 + 8?")
    assert not prompt_echo("2^{10}", "1024", "What is 2^105 mod 10?")  # part of a longer number
    assert not prompt_echo(r"\sqrt{2}+1", r"\sqrt{2} + 1", r"Is $\sqrt{2}+1 > 2$?")  # written as the gold
    assert not prompt_echo("x", "17", "Solve x + 1 = 18.")  # a name is not an expression


def test_rewrites_for_recall():
    assert rewrite_for_recall(r"\boxed{2\,024\,000}", False) == r"\boxed{2024000}"
    assert rewrite_for_recall(r"\boxed{2,024\,000}", False) == r"\boxed{2024000}"
    assert rewrite_for_recall(r"\boxed{2,024,000}", False) == r"\boxed{2,024,000}"  # Math-Verify reads this one
    assert rewrite_for_recall(r"\boxed{32, 349}", False) == r"\boxed{32, 349}"
    assert rewrite_for_recall(r"\boxed{1.5e-3}", True) == r"\boxed{0.0015}"
    assert rewrite_for_recall(r"\boxed{1.5e-3}", False) == r"\boxed{1.5e-3}"  # maybe 1.5 e - 3
    assert rewrite_for_recall(r"\boxed{0.1\overline{6}}", False) == r"\boxed{1/6}"
    assert rewrite_for_recall(r"\boxed{0.\dot{1}4285\dot{7}}", False) == r"\boxed{1/7}"
    assert rewrite_for_recall(r"\boxed{2.\overline{9}}", False) == r"\boxed{3}"
    assert rewrite_for_recall(r"The answer is \textbf{(B)}.", False) == r"The answer is \boxed{(B)}."
    assert rewrite_for_recall(r"\textbf{(B)} is wrong, so C", False) == r"\textbf{(B)} is wrong, so C"
    assert rewrite_for_recall("The answer is **(D)**", False) == r"The answer is \boxed{D}"


def test_gold_kinds():
    assert is_plain_number([sympy.Rational(1, 1000), "0.001"]) and not is_plain_number([sympy.E - 3, "e-3"])
    assert not is_plain_number([sympy.Symbol("x"), "x"])
    assert single_valued([sympy.Integer(5), "5"]) and single_valued([sympy.Eq(sympy.Symbol("x"), 5), "x=5"])
    assert not single_valued([sympy.FiniteSet(5, 6), "5, 6"]) and not single_valued([sympy.Tuple(1, 2), "(1,2)"])


def test_retraction_windows():
    text = r"\boxed{5}. Then 6 fails. For 7 too. Finally, for 8 this is impossible."
    assert retraction_after(text, locate_answer(text)) is None  # "impossible" only counts within two sentences
    text = r"\boxed{5}. Much later: I made a mistake."
    assert retraction_after(text, locate_answer(text)) == "I made a mistake"  # a retraction counts anywhere after


# --------------------------------------------------------------------------------------------------
# Differential test: where no guard class applies, the default verdict with a prompt and termination known is
# Math-Verify's
# --------------------------------------------------------------------------------------------------


@st.composite
def worked_solutions(draw):
    """An arithmetic prompt and a completion that works it out (ladder style) or states a number, ended with EOS."""
    a, b = draw(st.integers(0, 99)), draw(st.integers(1, 99))
    op, value = draw(st.sampled_from([("+", a + b), ("-", a - b), ("*", a * b)]))
    stated = value if draw(st.booleans()) else value + draw(st.sampled_from([1, -1, 10]))
    prompt = draw(st.sampled_from(["What is {a} {op} {b}?", "Compute ${a} {op} {b}$.", "Evaluate {a}{op}{b}."]))
    completion = draw(st.sampled_from([
        "{a} {op} {b} = {s}.\nCheck: done.\n\\boxed{{{s}}}", "We compute {a} {op} {b} = {s}, so the answer is {s}.",
        "The final answer is ${s}$.", "{s}", "Step 1: {a} {op} {b}.\nStep 2: that is {s}.\n\\boxed{{{s}}}",
        "The answer is {s}, or equivalently {s}.0.",
    ]))  # fmt: skip
    fields = {"a": a, "b": b, "op": op, "s": stated}
    return prompt.format(**fields), completion.format(**fields), str(value)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(worked_solutions())
def test_worked_solutions_keep_math_verify_verdicts(solution):
    prompt, completion, gold = solution
    assert grade(completion, gold, prompt=prompt, terminated=True) is math_verify_verdict(gold, completion)


# --------------------------------------------------------------------------------------------------
# The reward function: prompts, completion ids and EOS ids
# --------------------------------------------------------------------------------------------------


class _Tokenizer:
    pad_token_id = 0


class _Trainer:
    """The attributes of a GRPOTrainer the reward reads (trl_explore.trl_guards.contract checks them in TRL's
    source)."""

    eos_token_ids = [2]
    _tokenizer = _Tokenizer()

    def _log_metric(self, name, value):
        pass


def test_reward_reads_termination_from_the_calling_trainer():
    reward = MathVerifyReward()
    cut = "First 12 times 3 is 36, and then we add 5 to 36"
    call = dict(prompts=["Multiply."] * 2, completions=[cut, cut], answer=["36"] * 2, completion_ids=[[5, 7], [5, 2]])
    assert reward(**call) == [1.0, 1.0]  # no EOS ids known: the guard does not judge
    assert reward(**call, log_metric=_Trainer()._log_metric) == [0.0, 1.0]  # the first did not end
    assert reward(**call) == [0.0, 1.0]  # the trainer's ids are kept
    assert MathVerifyReward(eos_token_ids=[7])(**call) == [1.0, 0.0]
    padded = {**call, "completion_ids": [[5, 0], [5, 7]]}
    assert MathVerifyReward(eos_token_ids=[5, 0])(**padded) == [1.0, 0.0]  # a pad id given as an ending


def test_reward_reads_prompts_and_checks_lengths():
    reward = MathVerifyReward()
    chat = [[{"role": "user", "content": "What is 9 + 8?"}]]
    assert reward(prompts=chat, completions=["The math solution for 9 + 8 is x."], answer=["17"]) == [0.0]
    assert reward(prompts=None, completions=["The math solution for 9 + 8 is x."], answer=["17"]) == [1.0]
    with pytest.raises(ValueError, match="1 completion_ids for 2 completions"):
        reward(completions=["1", "2"], answer=["1", "2"], completion_ids=[[1]])
    with pytest.raises(ValueError, match="1 prompts for 2 completions"):
        reward(prompts=["p"], completions=["1", "2"], answer=["1", "2"])
    with pytest.raises(ValueError, match="eos_token_ids must be token ids"):
        MathVerifyReward(eos_token_ids=["</s>"])
    assert grade_batch(["The math solution for 9 + 8 is x."], ["17"], prompts=["What is 9 + 8?"]) == [False]


def test_oger_reward_passes_the_trainer_on_to_its_verifier():
    verifier = MathVerifyReward()
    oger = OGERRewardFunction(verifier=verifier, entropy_refinement=False)
    cut = "First 12 times 3 is 36, and then we add 5 to 36"
    oger(prompts=["p"], completions=[cut], completion_ids=[[5, 7]], answer=["36"], oger_divergence=[0.5],
         log_metric=_Trainer()._log_metric)  # fmt: skip
    assert verifier._last_call[1] == [0.0]  # graded with the trainer's EOS ids: the completion did not end


def test_trl_calculate_rewards_passes_what_the_guards_need(smollm2_tokenizer, tiny_model, tmp_path):
    """TRL 1.16's own `_calculate_rewards`: the prompts reach the echo guard, and the trainer's EOS ids (through
    the bound `log_metric`) the termination guard."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2,
                      max_completion_length=8, report_to="none", bf16=False, use_cpu=True)  # fmt: skip
    data = Dataset.from_dict({"prompt": ["What is 9 + 8?"] * 2, "answer": ["17"] * 2})
    reward = MathVerifyReward()
    trainer = GRPOTrainer(tiny_model, reward_funcs=[reward], args=args, train_dataset=data,
                          processing_class=smollm2_tokenizer)  # fmt: skip
    eos = smollm2_tokenizer.eos_token_id
    texts = ["The math solution for 9 + 8 is x.", "So 9 + 8 is 17", "Adding gives 17", "Adding gives 17"]
    ids = [[5, eos], [5, eos], [5, 6], [5, eos]]
    inputs = [{"prompt": "What is 9 + 8?", "answer": "17"}] * 4
    rewards = trainer._calculate_rewards(inputs, ["What is 9 + 8?"] * 4, texts, ids)
    assert rewards[:, 0].tolist() == [0.0, 1.0, 0.0, 1.0]  # echo; worked; cut off without an anchor; ended
