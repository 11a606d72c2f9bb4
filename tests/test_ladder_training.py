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
def test_run_training_prints_held_out_accuracy_before_and_after(tmp_path, make_tiny_lm, smollm2_tokenizer, capsys,
                                                              monkeypatch):
    """examples/train_oger.py's run_training on a saved tiny model: the held-out table is printed before training and
    with the summary after it, and heldout_eval.json is written."""
    import json

    from trl_explore import OGERConfig, OGERTrainer
    from trl_explore.cli import run_training

    monkeypatch.setenv("TRL_EXPLORE_CACHE", str(tmp_path / "cache"))
    model_dir = tmp_path / "tiny"
    make_tiny_lm().save_pretrained(model_dir)
    smollm2_tokenizer.save_pretrained(model_dir)
    out = tmp_path / "out"
    argv = ["--model_name_or_path", str(model_dir), "--output_dir", str(out), "--max_steps", "1",
            "--per_device_train_batch_size", "4", "--num_generations", "4", "--max_completion_length", "24",
            "--ladder_levels", "one_digit", "--max_train_samples", "4", "--use_cpu", "true", "--log_completions",
            "false", "--eval_problems", "3", "--eval_samples", "2", "--eval_split", "validation",
            "--eval_max_new_tokens", "4", "--save_only_model", "true"]
    run_training(OGERTrainer, OGERConfig, ROOT / "recipes" / "oger_smollm2_ladder_cpu.yaml", "t", argv=argv)
    printed = capsys.readouterr().out
    assert "[t] held-out evaluation before training" in printed
    assert "[t] held-out evaluation before and after training" in printed
    assert "[t] mean@2 (sampled accuracy)" in printed and "[95% paired bootstrap interval]" in printed
    saved = json.loads((out / "heldout_eval.json").read_text())
    assert set(saved) == {"before", "after"} and saved["after"]["summary"]["num_problems"] == 3
    assert saved["before"]["summary"]["levels"] == ["one_digit"]  # the training levels by default
