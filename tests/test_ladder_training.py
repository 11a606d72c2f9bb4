"""Every trainer trains on ladder rows (tiny model), and the training scripts' held-out evaluation runs before and
after training (run_training with eval_heldout). Learning itself is shown by benchmarks/dynamics.py and the main
job."""

import pathlib

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _rows(n=4):
    from trl_explore.data.ladder import ladder_dataset

    return ladder_dataset(levels=["one_digit"], train_size=n, validation_size=0, test_size=0, max_length=23)["train"]


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["oger", "ase", "oger_ase"])
def test_each_preset_trainer_takes_two_steps_on_ladder_rows(preset, tmp_path, make_tiny_lm, smollm2_tokenizer):
    from trl_explore import ASEConfig, ASEGRPOTrainer, OGERASEConfig, OGERASETrainer, OGERConfig, OGERTrainer
    from trl_explore.testing import parity_reward, tiny_training_args

    trainer_cls, config_cls = {"oger": (OGERTrainer, OGERConfig), "ase": (ASEGRPOTrainer, ASEConfig),
                               "oger_ase": (OGERASETrainer, OGERASEConfig)}[preset]
    extra = {} if preset == "ase" else {"embedding_model": "embedded"}
    if preset != "oger":
        extra["min_pairs_per_cluster"] = 1
    args = config_cls(**tiny_training_args(tmp_path, per_device_train_batch_size=8, num_generations=8,
                                           max_completion_length=24, **extra))
    model = make_tiny_lm()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    # a random policy never solves a ladder problem: ASE alone would see rewards of 0 only, hence zero advantages and
    # no update; the parity verifier gives it mixed groups (OGER's teacher rows give the other presets their signal)
    reward = {"reward_funcs": [parity_reward]} if preset == "ase" else {}
    trainer = trainer_cls(model, args=args, train_dataset=_rows(), processing_class=smollm2_tokenizer, **reward)
    trainer.train()
    assert trainer.state.global_step == 2
    assert any(not torch.equal(p.detach(), before[n]) for n, p in model.named_parameters())
    logged = {k for entry in trainer.state.log_history for k in entry}
    if preset != "ase":
        assert {"oger/offline_fraction", "oger/failed_ratio"} <= logged
    if preset != "oger":
        assert "ase/rollout_time" in logged


@pytest.mark.slow
def test_run_training_prints_held_out_accuracy_before_and_after(tmp_path, tiny_model_dir, capsys, monkeypatch):
    """examples/train_oger.py's run_training on a saved tiny model: the held-out table is printed before training and
    with the summary after it, and heldout_eval.json is written; with --eval_neutral_format false, in the training
    format only."""
    import json

    from trl_explore import OGERConfig, OGERTrainer
    from trl_explore.cli import run_training

    monkeypatch.setenv("TRL_EXPLORE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    argv = ["--model_name_or_path", str(tiny_model_dir), "--output_dir", str(out), "--max_steps", "1",
            "--per_device_train_batch_size", "4", "--num_generations", "4", "--max_completion_length", "24",
            "--ladder_levels", "one_digit", "--max_train_samples", "4", "--use_cpu", "true", "--log_completions",
            "false", "--eval_problems", "10", "--eval_samples", "2", "--eval_split", "validation",
            "--eval_max_new_tokens", "4", "--save_only_model", "true", "--eval_neutral_format", "false"]
    run_training(OGERTrainer, OGERConfig, ROOT / "recipes" / "oger_smollm2_ladder_cpu.yaml", "t", argv=argv)
    printed = capsys.readouterr().out
    assert "[t] held-out evaluation before training" in printed
    assert "[t] held-out evaluation before and after training" in printed
    assert "[t] mean@2 (sampled accuracy)" in printed and "[95% paired bootstrap interval]" in printed
    assert "neutral format" not in printed and printed.count("training format (chat, one worked example)") == 2
    saved = json.loads((out / "heldout_eval.json").read_text())
    assert set(saved) == {"before", "after"} and saved["after"]["summary"]["num_problems"] == 10
    assert saved["before"]["summary"]["levels"] == ["one_digit"]  # the training levels by default
    assert "neutral" not in saved["before"] and "neutral" not in saved["after"]


@pytest.mark.slow
def test_main_job_prints_and_saves_both_prompt_formats_with_the_tiny_policy(tmp_path, capsys, monkeypatch):
    """The main job's recipe with TRL_EXPLORE_TINY_POLICY=1 (the policy alias "embedded" is a tiny random model): the
    held-out evaluation runs in the training and the neutral format by default; each gets its before table and its
    before/after table with intervals, one line sets the two mean@k changes side by side, and heldout_eval.json
    holds both formats on the same problems."""
    import json

    from trl_explore import OGERConfig, OGERTrainer
    from trl_explore.cli import run_training
    from trl_explore.evaluation.heldout import HeldoutResult

    monkeypatch.setenv("TRL_EXPLORE_TINY_POLICY", "1")
    monkeypatch.setenv("TRL_EXPLORE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    argv = ["--output_dir", str(out), "--max_steps", "1", "--per_device_train_batch_size", "4",
            "--num_generations", "4", "--max_completion_length", "24", "--ladder_levels", "one_digit",
            "--max_train_samples", "4", "--use_cpu", "true", "--log_completions", "false", "--eval_problems", "10",
            "--eval_samples", "2", "--eval_split", "validation", "--eval_max_new_tokens", "4",
            "--save_only_model", "true"]
    run_training(OGERTrainer, OGERConfig, ROOT / "recipes" / "oger_smollm2_ladder_cpu.yaml", "t", argv=argv)
    printed = capsys.readouterr().out
    before, after = printed.split("[t] held-out evaluation before and after training")
    for text in (before, after):  # one table per format before training, and one after it
        assert text.count("training format (chat, one worked example)") == 1
        assert text.count("neutral format (no worked example, rephrased):") == 1
    assert after.count("[95% paired bootstrap interval]") == 2 and after.count("mean@2 (sampled accuracy)") == 2
    assert "[t] mean@2 change, training format " in after and "; neutral format " in after
    saved = json.loads((out / "heldout_eval.json").read_text())
    assert set(saved) == {"before", "after"}
    for label in ("before", "after"):
        assert saved[label]["summary"]["prompt_format"] == "training"
        assert saved[label]["neutral"]["summary"]["prompt_format"] == "neutral"
        training = HeldoutResult.from_dict(saved[label]["result"])
        neutral = HeldoutResult.from_dict(saved[label]["neutral"]["result"])
        assert neutral.problem_ids == training.problem_ids and neutral.num_samples == training.num_samples == 2
