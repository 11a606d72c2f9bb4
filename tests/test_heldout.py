"""The ladder as an embedded benchmark and the held-out evaluation API (trl_explore.evaluation.heldout)."""

import json

import numpy as np
import pytest

from trl_explore.evaluation import benchmarks as bm
from trl_explore.evaluation.heldout import (
    HeldoutEvalArguments,
    HeldoutResult,
    compare_heldout,
    evaluate_heldout,
    format_change_line,
    heldout_problems,
    heldout_table,
    save_heldout,
)


def _result(correct, answers, greedy=None, ids=None, prompt_format="training"):
    ids = ids or tuple(f"ladder:one_digit:{i}" for i in range(len(correct)))
    return HeldoutResult("ladder", "test", ("one_digit",), tuple(ids), 1.0, tuple(map(tuple, correct)),
                         tuple(map(tuple, answers)), None if greedy is None else tuple(greedy),
                         None if greedy is None else tuple("0" for _ in greedy), 12.0, 0.0, 1.0,
                         prompt_format=prompt_format)


def test_ladder_is_a_registered_embedded_benchmark_on_its_test_split():
    assert bm.benchmark_spec("Ladder").name == "ladder"
    test = bm.load_benchmark("ladder", ladder_kwargs={"levels": ["one_digit", "two_digit"]})
    validation = bm.load_benchmark("ladder", ladder_split="validation", ladder_kwargs={"levels": ["one_digit"]})
    assert len(test) == 128 and len(validation) == 64  # 64 problems per level and split (ladder_dataset defaults)
    assert {pid.split(":")[1] for pid in test["problem_id"]} == {"one_digit", "two_digit"}
    assert not set(test["problem_id"]) & set(validation["problem_id"])
    row = test[0]
    assert row["grading"] == "math" and row["domain"] == "math" and row["benchmark"] == "ladder"
    assert row["prompt"][-1]["role"] == "user" and row["problem"] == row["prompt"][-1]["content"]
    from trl_explore.data.loading import load_split

    rows = load_split("ladder", "test", levels=["one_digit", "two_digit"])
    assert test["problem_id"] == rows["problem_id"] and test["answer"] == rows["answer"]  # same rows, same order


def test_heldout_problems_takes_the_first_rows_and_refuses_too_many():
    rows = heldout_problems("ladder", "validation", ["word"], 5)
    assert len(rows) == 5 and all(pid.startswith("ladder:word:") for pid in rows["problem_id"])
    with pytest.raises(ValueError, match="holds 64 problems.*ask for at most 64"):
        heldout_problems("ladder", "test", ["word"], 65)


def test_heldout_problems_in_the_neutral_format_are_the_same_problems_asked_otherwise():
    training = heldout_problems("ladder", "test", ["one_digit", "two_digit"], 4)
    neutral = heldout_problems("ladder", "test", ["one_digit", "two_digit"], 4, prompt_format="neutral")
    assert neutral["problem_id"] == training["problem_id"] and neutral["answer"] == training["answer"]
    assert training["problem_id"] == ["ladder:one_digit:4-3", "ladder:two_digit:51-39", "ladder:two_digit:22+44",
                                      "ladder:one_digit:25/5"]
    assert neutral["problem"] == ["Compute 4 - 3. Put the final answer in \\boxed{}.",
                                  "Compute 51 - 39. Put the final answer in \\boxed{}.",
                                  "Compute 22 + 44. Put the final answer in \\boxed{}.",
                                  "Compute 25 ÷ 5. Put the final answer in \\boxed{}."]
    assert neutral["prompt"][0] == [{"role": "user", "content": neutral["problem"][0]}]
    assert training["problem"][0] == "What is 4 - 3? Solve the problem. Give the final answer in \\boxed{}."
    assert [m["role"] for m in training["prompt"][0]] == ["user", "assistant", "user"]  # the worked example first
    with pytest.raises(ValueError, match="neutral prompt format is the ladder's"):
        heldout_problems("champ", "test", None, 2, prompt_format="neutral")
    with pytest.raises(ValueError, match="unknown held-out prompt_format 'plain'"):
        heldout_problems("ladder", "test", None, 2, prompt_format="plain")


def test_result_aggregates_on_hand_values():
    r = _result([[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]],
                [["3", "4", None, "4"], ["7", "7", "7", "7"], ["1", "2", "1", "1"]], greedy=[True, True, False])
    assert r.num_problems == 3 and r.num_samples == 4
    assert r.mean == pytest.approx((0.25 + 1 + 0) / 3)
    assert r.pass_at(4) == pytest.approx(2 / 3)
    # pass@2 of the first problem: 1 - C(3, 2) / C(4, 2) = 1 - 3/6
    assert r.pass_at(2) == pytest.approx((0.5 + 1 + 0) / 3)
    assert r.greedy_accuracy == pytest.approx(2 / 3)
    assert r.distinct_answer_fraction == pytest.approx(2 / 3)  # problems 1 and 3 differ, problem 2 does not
    # pairs without None: problem 1: (3,4),(3,4),(4,4) -> 2 of 3 differ; 2: 0 of 6; 3: 3 of 6 differ
    assert r.answer_disagreement == pytest.approx(5 / 15)
    level = {"problems": 3, "mean": pytest.approx(r.mean), "greedy": pytest.approx(2 / 3)}
    assert r.per_level() == {"one_digit": level}
    back = HeldoutResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back == r


def test_compare_heldout_differences_and_intervals():
    before = _result([[0, 0], [0, 1], [1, 1], [0, 0]], [["1", "2"], ["1", "1"], ["5", "5"], ["3", "3"]],
                     greedy=[False, False, True, False])
    after = _result([[1, 1], [1, 1], [1, 1], [0, 1]], [["1", "1"], ["1", "1"], ["5", "5"], ["3", "4"]],
                    greedy=[True, True, True, False])
    out = compare_heldout(before, after, num_resamples=2000)
    diff, low, high = out["mean"]
    assert diff == pytest.approx(np.mean([1.0, 0.5, 0.0, 0.5]))
    assert low <= diff <= high and 0.0 <= low  # every per-problem change is >= 0
    assert out["greedy"][0] == pytest.approx(0.5)
    assert out["pass"][0] == pytest.approx(0.5)  # pass@2 per problem: 0, 1, 1, 0 -> 1, 1, 1, 1
    assert out["distinct"][0] == pytest.approx(0.0)  # one problem stops differing, another starts
    with pytest.raises(ValueError, match="same problems"):
        compare_heldout(before, _result([[1, 1]] * 4, [["1", "1"]] * 4, ids=list("abcd")))


def test_table_shows_before_after_and_the_interval():
    before = _result([[0, 0], [0, 1]], [["1", "2"], ["1", "1"]], greedy=[False, True])
    after = _result([[1, 1], [1, 1]], [["1", "1"], ["1", "1"]], greedy=[True, True])
    lines = heldout_table(before, after, compare_heldout(before, after, num_resamples=100))
    text = "\n".join(lines)
    assert "2 problems (one_digit), k = 2 samples at T = 1 + 1 greedy" in lines[0]
    mean_line = next(line for line in lines if line.startswith("mean@2"))
    assert "0.250" in mean_line and "1.000" in mean_line and mean_line.endswith("+0.750")  # 2 problems: no interval
    assert lines[1].endswith("change (too few problems for an interval: 2 < 10)")
    assert "greedy accuracy" in text and "pairwise answer disagreement" in text
    alone = heldout_table(before)
    assert len(alone) == len(lines) and "+" not in alone[2]
    assert alone[1].split() == ["before"] and alone[2].split() == ["mean@2", "(sampled", "accuracy)", "0.250"]
    assert all(line == line.rstrip() for line in alone)  # the table before training: no empty after/change columns
    assert lines[0].startswith("held-out ladder test split, training format (chat, one worked example): 2 problems")
    neutral = [_result([[0, 1], [0, 1]], [["1", "2"], ["1", "1"]], prompt_format=p) for p in ("neutral",) * 2]
    assert "neutral format (no worked example, rephrased):" in heldout_table(*neutral)[0]
    with pytest.raises(ValueError, match="one prompt format before and after; got 'training' and 'neutral'"):
        heldout_table(before, neutral[1])


def test_format_change_line_reads_each_interval():
    line = format_change_line((0.113, 0.062, 0.168), (0.036, -0.01, 0.08), 4)
    assert line == ("mean@4 change, training format +0.113 [+0.062, +0.168] (interval clear of 0); neutral format "
                    "+0.036 [-0.010, +0.080] (interval includes 0)")
    assert format_change_line((-0.1, -0.2, -0.05), (0.0, 0.0, 0.0), 2).count("interval clear of 0") == 1
    assert format_change_line((0.113, 0.062, 0.168), (0.036, -0.01, 0.08), 4, num_problems=4) == (
        "mean@4 change, training format +0.113; neutral format +0.036 (too few problems for an interval: 4 < 10)")


def test_save_heldout_puts_each_labels_neutral_evaluation_under_it(tmp_path):
    before = _result([[0, 0], [0, 1]], [["1", "2"], ["1", "1"]])
    after = _result([[1, 1], [0, 1]], [["1", "1"], ["1", "1"]])
    n_before = _result([[0, 0], [0, 0]], [["5", "2"], [None, "1"]], prompt_format="neutral")
    save_heldout(tmp_path, {"before": before, "after": after}, {"before": n_before})
    saved = json.loads((tmp_path / "heldout_eval.json").read_text())
    assert set(saved) == {"before", "after"} and set(saved["before"]) == {"summary", "result", "neutral"}
    assert set(saved["after"]) == {"summary", "result"}  # no neutral evaluation of "after" given
    assert saved["before"]["summary"]["prompt_format"] == "training"
    assert saved["before"]["neutral"]["summary"]["prompt_format"] == "neutral"
    assert saved["before"]["neutral"]["summary"]["mean"] == 0.0 and saved["after"]["summary"]["mean"] == 0.75
    assert HeldoutResult.from_dict(saved["before"]["neutral"]["result"]) == n_before
    old = {k: v for k, v in before.to_dict().items() if k != "prompt_format"}  # a file written before the field
    assert HeldoutResult.from_dict(old).prompt_format == "training"


def test_options_are_checked():
    with pytest.raises(ValueError, match="eval_samples must be an integer >= 1"):
        HeldoutEvalArguments(eval_samples=0)
    with pytest.raises(ValueError, match="eval_temperature must be > 0"):
        HeldoutEvalArguments(eval_temperature=0.0)
    with pytest.raises(ValueError, match="eval_benchmark"):
        HeldoutEvalArguments(eval_benchmark="aime2024")


def test_evaluate_heldout_on_a_tiny_model(tiny_model, smollm2_tokenizer, tmp_path):
    tiny_model.train()
    r = evaluate_heldout(tiny_model, smollm2_tokenizer, split="validation", levels=["one_digit"], num_problems=3,
                         num_samples=2, max_new_tokens=4, batch_size=4)
    assert tiny_model.training  # put back in its mode
    assert r.num_problems == 3 and r.num_samples == 2 and len(r.greedy_correct) == 3
    assert r.problem_ids == tuple(heldout_problems("ladder", "validation", ["one_digit"], 3)["problem_id"])
    assert 0 < r.mean_num_tokens <= 4 and r.seconds > 0
    assert r.mean == pytest.approx(np.mean(r.correct))
    again = evaluate_heldout(tiny_model, smollm2_tokenizer, split="validation", levels=["one_digit"], num_problems=3,
                             num_samples=2, max_new_tokens=4, batch_size=4)
    assert again.answers == r.answers  # the same seed gives the same samples
    save_heldout(tmp_path, {"before": r, "after": again})
    saved = json.loads((tmp_path / "heldout_eval.json").read_text())
    assert saved["before"]["summary"]["num_problems"] == 3
    assert HeldoutResult.from_dict(saved["after"]["result"]) == again


def test_seed_problem_bootstrap_interval_on_hand_values():
    from trl_explore.evaluation.metrics import seed_problem_bootstrap_interval

    a = np.array([[0.0, 0.5], [0.5, 0.0]])  # two seeds, two problems: mean 0.25
    b = np.array([[1.0, 1.0], [0.5, 1.0], [1.0, 0.5]])  # mean 5/6
    diff, low, high = seed_problem_bootstrap_interval(a, b, num_resamples=4000)
    assert diff == pytest.approx(5 / 6 - 0.25)
    # every draw lies between the smallest and the largest possible difference
    assert 0.0 <= low <= diff <= high <= 1.0
    same = seed_problem_bootstrap_interval(a, a, num_resamples=200)
    assert same[0] == 0.0 and same[1] < 0 < same[2]
    constant = seed_problem_bootstrap_interval([1.0, 1.0, 1.0], [2.0, 2.0], num_resamples=50)
    assert constant == (1.0, 1.0, 1.0)  # per-seed scalars (one problem column), no spread
    with pytest.raises(ValueError, match="same problems"):
        seed_problem_bootstrap_interval(np.zeros((2, 3)), np.zeros((2, 4)))


def test_seed_paired_bootstrap_interval_on_hand_values():
    from trl_explore.evaluation.metrics import seed_paired_bootstrap_interval, seed_problem_bootstrap_interval

    # seeds differ a lot (0.1 ... 0.85) and both methods share that; the treated runs are 0.04-0.06 better everywhere
    a = np.array([[0.1, 0.2], [0.5, 0.6], [0.8, 0.9]])
    shift = np.array([[0.04, 0.06], [0.06, 0.04], [0.05, 0.05]])
    diff, low, high = seed_paired_bootstrap_interval(a, a + shift, num_resamples=4000)
    assert diff == pytest.approx(0.05)
    # every draw averages entries of `shift`, so the interval lies within [0.04, 0.06]: it excludes 0
    assert 0.04 <= low <= diff <= high <= 0.06 and low < high
    # unpaired, the seed-to-seed spread (seed means 0.15, 0.55, 0.85) swamps the 0.05: the interval includes 0
    unpaired = seed_problem_bootstrap_interval(a, a + shift, num_resamples=4000)
    assert unpaired[0] == pytest.approx(0.05) and unpaired[1] < 0 < unpaired[2]
    # a constant shift: every draw is the shift, a degenerate interval
    assert seed_paired_bootstrap_interval(a, a + 0.25, num_resamples=100) == pytest.approx((0.25, 0.25, 0.25))
    # per-run scalars [S]: a bootstrap over seeds only; differences 1, 2, 3 -> mean 2, draws within [1, 3]
    diff, low, high = seed_paired_bootstrap_interval([5.0, 0.0, 9.0], [6.0, 2.0, 12.0], num_resamples=2000)
    assert diff == pytest.approx(2.0) and 1.0 <= low < 2.0 < high <= 3.0
    assert seed_paired_bootstrap_interval(a, a, num_resamples=50) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="same, non-empty shape"):
        seed_paired_bootstrap_interval(np.zeros((2, 3)), np.zeros((3, 3)))  # different seeds: not paired
    with pytest.raises(ValueError, match="same, non-empty shape"):
        seed_paired_bootstrap_interval(np.zeros((0, 2)), np.zeros((0, 2)))
    with pytest.raises(ValueError, match="finite"):
        seed_paired_bootstrap_interval([0.0, np.nan], [0.0, 1.0])
    with pytest.raises(ValueError, match="confidence"):
        seed_paired_bootstrap_interval(a, a, confidence=1.0)
    with pytest.raises(ValueError, match="num_resamples"):
        seed_paired_bootstrap_interval(a, a, num_resamples=0)


def test_evaluator_runs_on_a_trainer_and_reads_unchanged_weights_back(tiny_model, smollm2_tokenizer, tmp_path,
                                                                     monkeypatch):
    """HeldoutEvaluator on a trainer-like object: the first evaluation is stored under the cache folder, a second one
    of the same weights is read back (same verdicts, ``cached``), and changed weights are evaluated again."""
    import types

    import torch
    from accelerate import Accelerator

    from trl_explore.evaluation.heldout import weights_digest
    from trl_explore.evaluation.heldout_evaluator import HeldoutEvaluator

    monkeypatch.setenv("TRL_EXPLORE_CACHE", str(tmp_path / "cache"))
    trainer = types.SimpleNamespace(model=tiny_model, processing_class=smollm2_tokenizer,
                                    accelerator=Accelerator(cpu=True), max_completion_length=4,
                                    args=types.SimpleNamespace(grader_mode="math_verify"))
    options = HeldoutEvalArguments(eval_heldout=True, eval_split="validation", eval_problems=2, eval_samples=2,
                                   eval_batch_size=4, eval_neutral_format=False)
    evaluator = HeldoutEvaluator(trainer, options, levels=["one_digit"])
    assert evaluator.formats == ("training",)
    torch.manual_seed(11)
    rng_state = torch.get_rng_state()
    first = evaluator("before")
    assert torch.equal(torch.get_rng_state(), rng_state)  # training's next rollouts draw as if none had run
    assert not first.cached and first.levels == ("one_digit",) and first.num_problems == 2
    assert len(list((tmp_path / "cache" / "heldout").glob("*.json"))) == 1
    again = evaluator("again")
    assert again.cached and again.correct == first.correct and again.answers == first.answers
    digest = weights_digest(tiny_model)
    with torch.no_grad():
        next(tiny_model.parameters()).add_(1.0)
    assert weights_digest(tiny_model) != digest
    changed = evaluator("after")
    assert not changed.cached and len(list((tmp_path / "cache" / "heldout").glob("*.json"))) == 2
    assert set(evaluator.results) == {"before", "again", "after"}
    assert len(evaluator.change_tables()) == len(heldout_table(first, changed))  # one table, no format line


def test_evaluator_asks_both_formats_and_prints_a_table_for_each(tiny_model, smollm2_tokenizer, tmp_path,
                                                                 monkeypatch):
    """With eval_neutral_format (the default) every evaluation is made in both prompt formats on the same problems:
    two tables, then the line that sets the two mean@k changes side by side; on CHAMP only the training format."""
    import types

    import torch
    from accelerate import Accelerator

    from trl_explore.evaluation.heldout_evaluator import HeldoutEvaluator

    monkeypatch.setenv("TRL_EXPLORE_CACHE", str(tmp_path / "cache"))
    trainer = types.SimpleNamespace(model=tiny_model, processing_class=smollm2_tokenizer,
                                    accelerator=Accelerator(cpu=True), max_completion_length=4,
                                    args=types.SimpleNamespace(grader_mode="math_verify"))
    options = HeldoutEvalArguments(eval_heldout=True, eval_split="validation", eval_problems=2, eval_samples=2,
                                   eval_batch_size=4)
    assert options.eval_neutral_format  # on by default
    evaluator = HeldoutEvaluator(trainer, options, levels=["one_digit"])
    assert evaluator.formats == ("training", "neutral")
    before = evaluator("before")
    assert before is evaluator.results["before"] is evaluator.by_format["training"]["before"]
    neutral = evaluator.by_format["neutral"]["before"]
    assert neutral.prompt_format == "neutral" and before.prompt_format == "training"
    assert neutral.problem_ids == before.problem_ids and not neutral.cached
    assert len(list((tmp_path / "cache" / "heldout").glob("*.json"))) == 2  # one cache entry per format
    with torch.no_grad():
        next(tiny_model.parameters()).add_(1.0)
    evaluator("after")
    assert set(evaluator.by_format["neutral"]) == {"before", "after"}
    lines = evaluator.before_tables()
    assert len(lines) == 2 * len(heldout_table(before))
    assert "training format" in lines[0] and "neutral format" in lines[len(lines) // 2]
    tables = evaluator.change_tables()
    after_t, after_n = evaluator.results["after"], evaluator.by_format["neutral"]["after"]
    assert tables[:-1] == [*heldout_table(before, after_t, compare_heldout(before, after_t)),
                           *heldout_table(neutral, after_n, compare_heldout(neutral, after_n))]
    assert tables[-1] == format_change_line(compare_heldout(before, after_t)["mean"],
                                            compare_heldout(neutral, after_n)["mean"], 2, before.num_problems)
    champ = HeldoutEvaluator(trainer, HeldoutEvalArguments(eval_heldout=True, eval_benchmark="champ"))
    assert champ.formats == ("training",)
