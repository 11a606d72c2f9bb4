"""DAPO's dynamic sampling (Yu et al. 2025, arXiv 2503.14476, §3.2) and the driver's batch-level resampling."""

import logging

import pytest
import torch

from trl_explore import (
    ASEComponent,
    ASEOptions,
    DynamicSamplingComponent,
    DynamicSamplingConfig,
    DynamicSamplingOptions,
    DynamicSamplingTrainer,
    ExplorationConfig,
    ExplorationTrainer,
    OGERComponent,
    OGEROptions,
)
from trl_explore.driver.resampling import choose_groups, merge_rounds
from trl_explore.dynamic_sampling.filtering import flat_groups
from trl_explore.testing import DOUBLING_TEACHERS, doubling_dataset, tiny_training_args


def test_flat_groups_exact_equality_tolerance_and_nan():
    values = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.5, 0.5 + 1e-7, float("nan"), float("nan"),
                           float("nan"), 1.0])
    assert flat_groups(values, 2).tolist() == [True, False, False, False, True, False]
    assert flat_groups(values, 2, tolerance=1e-6).tolist() == [True, False, False, True, True, False]
    with pytest.raises(ValueError, match="whole groups"):
        flat_groups(values, 5)
    with pytest.raises(ValueError, match="tolerance"):
        flat_groups(values, 2, tolerance=-1.0)


def test_choose_groups_takes_kept_groups_first_then_refused_ones():
    keeps = [torch.tensor([False, True, False]), torch.tensor([True, False, True])]
    assert choose_groups(keeps, 3) == ([(0, 1), (1, 0), (1, 2)], 3)
    assert choose_groups([torch.tensor([False, True]), torch.tensor([False, False])], 2) == ([(0, 1), (0, 0)], 1)


def test_merge_rounds_pads_prompts_left_and_completions_right():
    a = {"prompt_ids": torch.tensor([[7, 1], [7, 2]]), "completion_ids": torch.tensor([[3], [4]]),
         "advantages": torch.tensor([0.5, -0.5]), "num_items_in_batch": torch.tensor(2), "names": ["a0", "a1"]}
    b = {"prompt_ids": torch.tensor([[5], [6]]), "completion_ids": torch.tensor([[8, 9], [1, 2]]),
         "advantages": torch.tensor([1.0, -1.0]), "num_items_in_batch": torch.tensor(4), "names": ["b0", "b1"]}
    merged = merge_rounds([a, b], [(0, 1), (1, 0)], pad_token_id=0)
    assert merged["prompt_ids"].tolist() == [[7, 2], [0, 5]]
    assert merged["completion_ids"].tolist() == [[4, 0], [8, 9]]
    assert merged["advantages"].tolist() == [-0.5, 1.0]
    assert merged["names"] == ["a1", "b0"]
    assert merged["num_items_in_batch"].item() == 2  # round 0's; the driver recounts it


def flat_on_p0(completions, problem_id, **kwargs):
    """1 for every completion of p0 (a flat group), parity of the length elsewhere (mixed groups)."""
    return [1.0 if p == "p0" else float(len(c[0]["content"]) % 2 == 0) for c, p in zip(completions, problem_id)]


def always_one(completions, **kwargs):
    return [1.0] * len(completions)


def _history(trainer, key):
    return [e[key] for e in trainer.state.log_history if key in e]


def _ds_trainer(tmp_path, tokenizer, model, reward=flat_on_p0, dataset=None, **overrides):
    args = DynamicSamplingConfig(**tiny_training_args(tmp_path, **{"per_device_train_batch_size": 8, **overrides}))
    return DynamicSamplingTrainer(model, reward_funcs=[reward], args=args, processing_class=tokenizer,
                                  train_dataset=dataset if dataset is not None else doubling_dataset(2))


def test_flat_groups_are_refilled_until_the_batch_is_informative(tmp_path, smollm2_tokenizer, make_tiny_lm):
    trainer = _ds_trainer(tmp_path, smollm2_tokenizer, make_tiny_lm(), dataset=doubling_dataset(4),
                          dynamic_sampling_max_gen_batches=8)
    trainer.train()
    assert _history(trainer, "frac_reward_zero_std_trained") == [0.0, 0.0]  # every trained group is informative
    # a step whose first round held a flat group (p0's, always) resampled, one without did not; at least one did
    flat = _history(trainer, "dynamic_sampling/flat_group_frac")
    rounds, extra = _history(trainer, "resample/generation_rounds"), _history(trainer, "resample/extra_completions")
    assert [r >= 2 for r in rounds] == [f > 0 for f in flat] and any(r >= 2 for r in rounds)
    assert all((c >= 8) == (r >= 2) for c, r in zip(extra, rounds))
    assert _history(trainer, "resample/cap_reached") == [0.0, 0.0]


def test_the_cap_is_logged_and_the_flat_groups_leave_the_objective(tmp_path, smollm2_tokenizer, make_tiny_lm, caplog):
    trainer = _ds_trainer(tmp_path, smollm2_tokenizer, make_tiny_lm(), reward=always_one, max_steps=1,
                          dynamic_sampling_max_gen_batches=2)
    with caplog.at_level(logging.WARNING, logger="trl_explore.driver.resampling"):
        trainer.train()
    assert "cap of 2 generation rounds was reached" in caplog.text
    assert _history(trainer, "resample/generation_rounds") == [2.0]
    assert _history(trainer, "resample/cap_reached") == [1.0]
    assert _history(trainer, "loss") == [0.0]  # every row dropped: no term at all


def test_the_cap_raises_with_on_cap_error(tmp_path, smollm2_tokenizer, make_tiny_lm):
    trainer = _ds_trainer(tmp_path, smollm2_tokenizer, make_tiny_lm(), reward=always_one, max_steps=1,
                          dynamic_sampling_max_gen_batches=2, dynamic_sampling_on_cap="error")
    with pytest.raises(RuntimeError, match="raise the cap"):
        trainer.train()


def test_options_are_checked():
    with pytest.raises(ValueError, match="dynamic_sampling_on_cap"):
        DynamicSamplingOptions(dynamic_sampling_on_cap="skip")
    with pytest.raises(ValueError, match="tolerance"):
        DynamicSamplingOptions(dynamic_sampling_tolerance=-0.1)


def test_a_resumed_run_inside_a_resampled_generation_is_exact(tmp_path, smollm2_tokenizer, make_tiny_lm):
    kwargs = {"dataset": doubling_dataset(4), "steps_per_generation": 2, "per_device_train_batch_size": 4,
              "max_steps": 3, "dynamic_sampling_max_gen_batches": 4}
    full = _ds_trainer(tmp_path / "full", smollm2_tokenizer, make_tiny_lm(), save_strategy="steps", save_steps=1,
                       **kwargs)
    full.train()
    assert max(_history(full, "resample/generation_rounds")) >= 2
    resumed = _ds_trainer(tmp_path / "resumed", smollm2_tokenizer, make_tiny_lm(seed=1), **kwargs)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-1"))  # inside a generation
    for (name, a), b in zip(full.model.named_parameters(), resumed.model.parameters()):
        assert torch.equal(a, b), name


def test_composes_with_oger_and_ase(tmp_path, smollm2_tokenizer, make_tiny_lm):
    """OGER puts teacher rows into the groups of every round (refilled ones too); ASE plans routes for them."""
    args = ExplorationConfig(**tiny_training_args(tmp_path, per_device_train_batch_size=6, num_generations=6,
                                                  max_completion_length=16))
    seen = []

    class Watch(DynamicSamplingComponent):
        def select_groups(self, batch):
            seen.append((batch.round, batch.rollout.owner, batch.output["ase_route"].tolist()))
            return super().select_groups(batch)

    trainer = ExplorationTrainer(
        make_tiny_lm(), reward_funcs=[flat_on_p0], args=args, processing_class=smollm2_tokenizer,
        train_dataset=doubling_dataset(2, DOUBLING_TEACHERS),
        components=[OGERComponent(OGEROptions(embedding_model="embedded")),
                    ASEComponent(ASEOptions(num_vectors=2, pca_dim=4, kmeans_n_init=2, min_pairs_per_cluster=1)),
                    Watch(DynamicSamplingOptions(dynamic_sampling_max_gen_batches=4))])
    trainer.train()
    later = [s for s in seen if s[0] > 0]
    assert later, "no resampling round ran"
    for _, owners, routes in later:
        assert "oger" in owners  # teacher rows in the refilled groups
        assert all(r == -1 for r, o in zip(routes, owners) if o == "oger")  # ASE: the offline route on them
    assert _history(trainer, "frac_reward_zero_std_trained")


@pytest.mark.slow
def test_two_processes_resample_together_and_resume_exactly(tmp_path):
    import json
    from pathlib import Path

    from trl_explore.testing import run_two_cpu_processes

    script = Path(__file__).parent / "scripts" / "dynamic_sampling_two_process.py"
    result = run_two_cpu_processes(script, tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["rounds"] == ranks[1]["rounds"] and max(ranks[0]["rounds"]) >= 2
    for r in ranks:
        assert r["max_weight_diff"] == 0.0
        assert all(v == 0.0 for v in r["zero_std_trained"])
        assert r["losses"]["3"] == r["resumed_losses"]["3"]
