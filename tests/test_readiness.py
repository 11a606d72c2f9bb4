"""The readiness check (trl_explore.readiness): its figures and advice on hand-made verdicts, the check on a tiny
model with known verifiers, and the "nothing is learned" watch during training."""

import logging

import pytest
import torch

from trl_explore.readiness import (
    NOTHING_LEARNED,
    NothingLearnedWatch,
    ReadinessArguments,
    check_readiness,
    nothing_learned_signals,
    readiness_advice,
    readiness_figures,
    readiness_lines,
    update_streaks,
)
from trl_explore.testing import doubling_dataset, tiny_training_args

T, F = True, False


def test_figures_on_hand_made_groups():
    # 3 prompts x 4: a mixed group (2 right), an all-right group, an all-wrong group
    correct = torch.tensor([[T, F, T, F], [T, T, T, T], [F, F, F, F]])
    truncated = torch.tensor([[F, F, F, T], [F, F, F, F], [T, T, T, F]])
    lengths = torch.tensor([[10, 20, 30, 96], [5, 5, 5, 5], [96, 96, 96, 8]])
    figures = readiness_figures(correct, truncated, lengths)
    assert (figures.num_prompts, figures.group_size) == (3, 4)
    assert figures.pass_rate == pytest.approx(6 / 12)
    assert figures.mixed_fraction == pytest.approx(1 / 3)
    assert figures.all_correct_fraction == pytest.approx(1 / 3)
    assert figures.all_wrong_fraction == pytest.approx(1 / 3)
    assert figures.truncated_fraction == pytest.approx(4 / 12)
    assert figures.mean_length == pytest.approx((156 + 20 + 296) / 12)
    assert readiness_advice(figures, 96) == []
    assert readiness_lines(figures, [], 2.4) == [
        "readiness check (3 training prompts x 4 completions in 2 s): pass rate 0.50, mixed groups 0.33 (all right "
        "0.33, all wrong 0.33), cut off at the cap 0.33, mean length 39 tokens",
        "verdict: the run can learn (1 of 3 groups mix right and wrong answers)"]


def test_a_run_that_cannot_learn_gets_each_warning_with_its_fix():
    none_right = readiness_figures(torch.zeros(2, 4, dtype=torch.bool), torch.ones(2, 4, dtype=torch.bool),
                                   torch.full((2, 4), 96))
    advice = readiness_advice(none_right, 96)
    assert len(advice) == 2
    assert advice[0].startswith("100% of the completions were cut off at max_completion_length=96 tokens")
    assert advice[1].startswith("no completion was correct") and "raise --max_completion_length" in advice[1]
    all_right = readiness_figures(torch.ones(2, 4, dtype=torch.bool), torch.zeros(2, 4, dtype=torch.bool),
                                  torch.full((2, 4), 10))
    assert readiness_advice(all_right, 96) == [
        "every completion was correct: every group has equal rewards and nothing is left to learn; pick harder "
        "problems"]
    split = readiness_figures(torch.tensor([[T, T], [F, F]]), torch.zeros(2, 2, dtype=torch.bool),
                              torch.full((2, 2), 10))
    assert readiness_advice(split, 96)[0].startswith("no group mixes correct and wrong completions")
    assert readiness_lines(split, ["x"])[2] == "WARNING: x"


def test_figures_refuse_mismatched_shapes():
    with pytest.raises(ValueError, match=r"one \[P, G\] shape"):
        readiness_figures(torch.ones(2, 4), torch.ones(2, 3), torch.ones(2, 4))


def test_readiness_arguments_are_checked():
    with pytest.raises(ValueError, match="ReadinessArguments.readiness_prompts must be an integer >= 1, got 0"):
        ReadinessArguments(readiness_prompts=0)


def _trainer(tmp_path, tokenizer, model, reward, **overrides):
    from trl_explore import ExplorationConfig, ExplorationTrainer

    args = ExplorationConfig(**tiny_training_args(tmp_path, **overrides))
    return ExplorationTrainer(model, reward_funcs=[reward], args=args, train_dataset=doubling_dataset(2),
                              processing_class=tokenizer)


def test_the_check_on_a_tiny_model_with_known_verifiers(tmp_path, smollm2_tokenizer, make_tiny_lm):
    seen = []

    def parity(completions, **kwargs):  # trl_explore.testing.parity_reward, recording what it grades
        texts = [c[0]["content"] for c in completions]
        seen.append((texts, kwargs["answer"], kwargs["problem_id"]))
        return [float(len(t) % 2 == 0) for t in texts]

    trainer = _trainer(tmp_path, smollm2_tokenizer, make_tiny_lm(), parity)
    rng_state = torch.get_rng_state()
    report = check_readiness(trainer, doubling_dataset(2), num_prompts=8)  # only 2 rows: 2 groups of 4
    assert torch.equal(torch.get_rng_state(), rng_state)  # the run's first rollouts draw as if no check had run
    texts, answers, ids = seen[-1]
    assert answers == ["0"] * 4 + ["2"] * 4 and ids == ["p0"] * 4 + ["p1"] * 4  # the rows' columns, per completion
    expected = torch.tensor([len(t) % 2 == 0 for t in texts]).view(2, 4)
    figures = report.figures
    assert (figures.num_prompts, figures.group_size) == (2, 4)
    assert figures.pass_rate == pytest.approx(expected.float().mean().item())
    mixed = (expected.any(1) & ~expected.all(1)).float().mean().item()
    assert figures.mixed_fraction == pytest.approx(mixed)
    # a random 2-layer policy over a 49k vocabulary never draws the end token in 8 tokens: all cut off at the cap
    assert (figures.truncated_fraction, figures.mean_length) == (1.0, 8.0)
    assert report.advice[0].startswith("100% of the completions were cut off at max_completion_length=8 tokens")

    never = _trainer(tmp_path, smollm2_tokenizer, make_tiny_lm(), lambda completions, **k: [0.0] * len(completions))
    report = check_readiness(never, doubling_dataset(2))
    assert report.figures.pass_rate == 0 and report.advice[1].startswith("no completion was correct")
    assert report.lines[0].startswith("readiness check (2 training prompts x 4 completions in ")


def test_signals_and_streaks_on_hand_made_logs():
    logs = {"completions/clipped_ratio": 1.0, "frac_reward_zero_std": 0.5, "rewards/oger_reward/mean": 0.0}
    assert nothing_learned_signals(logs) == {"all_clipped": True, "zero_variance": False, "no_oger_reward": True}
    streaks = update_streaks({"all_clipped": 2, "zero_variance": 4, "no_ase_bank": 1},
                             nothing_learned_signals(logs))
    assert streaks == {"all_clipped": 3, "zero_variance": 0, "no_ase_bank": 1, "no_oger_reward": 1}


class _State:
    global_step = 5
    is_world_process_zero = True


def test_the_watch_warns_once_after_patience_steps(caplog):
    watch = NothingLearnedWatch(patience=2)
    with caplog.at_level(logging.WARNING, logger="trl_explore.readiness"):
        for _ in range(4):
            watch.on_log(None, _State(), None, logs={"completions/clipped_ratio": 1.0, "loss": 0.0})
        watch.on_log(None, _State(), None, logs={"eval_loss": 1.0})  # evaluation logs are skipped
    assert [r.getMessage() for r in caplog.records] == [
        f"nothing is learned for 2 logged steps (up to step 5): {NOTHING_LEARNED['all_clipped']}"]
    assert watch.streaks == {"all_clipped": 4}


@pytest.mark.slow
def test_run_training_prints_the_readiness_check_and_warns_during_training(tmp_path, tiny_model_dir, capsys, caplog,
                                                                           load_script):
    """The training scripts' run_training on a saved tiny model: the check's lines before training (a random policy
    is cut off at the cap and never right: two warnings) and the watch's one warning after 1 logged step."""
    import pathlib

    from trl_explore import ASEConfig, ASEGRPOTrainer
    from trl_explore.cli import run_training

    root = pathlib.Path(__file__).resolve().parents[1]
    argv = ["--model_name_or_path", str(tiny_model_dir), "--output_dir", str(tmp_path / "out"), "--max_steps", "2",
            "--per_device_train_batch_size", "4", "--num_generations", "4", "--num_vectors", "1",
            "--max_completion_length", "8", "--ladder_levels", "one_digit", "--max_train_samples", "4",
            "--use_cpu", "true", "--log_completions", "false", "--eval_heldout", "false", "--readiness_prompts", "2",
            "--readiness_patience", "1", "--save_strategy", "no", "--report_to", "none"]
    with caplog.at_level(logging.WARNING, logger="trl_explore.readiness"):
        run_training(ASEGRPOTrainer, ASEConfig, root / "recipes" / "ase_grpo_smollm2_ladder_cpu.yaml", "t", argv=argv,
                     script_cls=load_script("examples/train_ase_grpo.py").ScriptArguments)
    printed = capsys.readouterr().out
    assert "[t] readiness check: sampling 2 training prompts x 4 (--readiness_check false skips it) ..." in printed
    assert "[t] readiness check (2 training prompts x 4 completions in " in printed
    assert "[t] WARNING: 100% of the completions were cut off at max_completion_length=8 tokens" in printed
    assert "[t] WARNING: no completion was correct" in printed
    warned = [r.getMessage() for r in caplog.records if r.name == "trl_explore.readiness"]
    assert any(NOTHING_LEARNED["all_clipped"] in m for m in warned)
    assert len([m for m in warned if NOTHING_LEARNED["all_clipped"] in m]) == 1  # once, though it held twice
