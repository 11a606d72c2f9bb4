"""DynamicsProbe: its pure functions on hand values, and the probe on real (tiny) training steps of every trainer on
the ladder."""

import pytest
import torch

from trl_explore.evaluation.probes import DynamicsProbe, group_outcomes, online_token_mean, within_group_disagreement


def test_online_token_mean_leaves_out_offline_rows_and_padding():
    values = torch.tensor([[1.0, 2.0, 9.0], [4.0, 4.0, 4.0], [0.5, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    total, count = online_token_mean(values, mask, torch.tensor([False, True, False]))
    assert total.item() == pytest.approx(3.5) and count.item() == 3  # (1 + 2 + 0.5) over 3 tokens
    total, count = online_token_mean(values, mask)
    assert total.item() == pytest.approx(15.5) and count.item() == 6


def test_online_rows_leave_out_teacher_and_rewritten_rows():
    from trl_explore.evaluation.probes import online_rows

    owner = [None, "oger", "exgrpo", None]
    offline = [False, True, False, True]
    assert online_rows(owner, offline) == [True, False, False, False]
    with pytest.raises(ValueError, match="differ in length"):
        online_rows(owner, offline[:2])


def test_group_outcomes_on_hand_values():
    # two groups of 4: [1, 0, teacher 1, 1] (online 1, 0, 1: mixed) and [1, 1, 1, nan] (all correct, one unscored)
    correct = [1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, float("nan")]
    online = [True, True, False, True, True, True, True, True]
    out = group_outcomes(correct, online, 4)
    assert out["accuracy"] == pytest.approx(5 / 6) and out["failed_ratio"] == pytest.approx(1 / 6)
    assert out["mixed_groups"] == 0.5 and out["all_correct_groups"] == 0.5 and out["all_wrong_groups"] == 0.0
    assert group_outcomes([0.0, 0.0], [False, False], 2) == {}
    with pytest.raises(ValueError, match="multiple of group_size=4"):
        group_outcomes([1.0] * 6, [True] * 6, 4)


def test_within_group_disagreement_pools_pairs_of_online_rows():
    answers = ["1", "2", "T", "1", "5", "5", None, "6"]
    online = [True, True, False, True, True, True, True, True]
    # group 1 online: 1, 2, 1 -> pairs (1,2) (1,1) (2,1): 2 of 3 differ; group 2: 5, 5, 6 -> 2 of 3 differ
    assert within_group_disagreement(answers, online, 4) == pytest.approx(4 / 6)
    assert within_group_disagreement(["1", None], [True, True], 2) is None


def _ladder_train(n=4):
    from trl_explore.data.ladder import ladder_dataset

    return ladder_dataset(levels=["one_digit"], train_size=n, validation_size=0, test_size=0, max_length=23)["train"]


def _args(config_cls, tmp_path, **extra):
    from trl_explore.testing import tiny_training_args

    return config_cls(**tiny_training_args(tmp_path / "out", per_device_train_batch_size=8, num_generations=8,
                                           max_completion_length=24, **extra))


def _logged(trainer):
    return {k: v for entry in trainer.state.log_history for k, v in entry.items() if k.startswith("dynamics/")}


def _check_common(logged):
    for key in ("online_entropy", "all_entropy", "online_accuracy", "failed_ratio", "online_length",
                "teacher_token_prob", "mixed_groups", "all_correct_groups"):
        assert f"dynamics/{key}" in logged, key
    assert logged["dynamics/online_accuracy"] + logged["dynamics/failed_ratio"] == pytest.approx(1.0)
    assert 0.0 < logged["dynamics/teacher_token_prob"] < 1.0
    assert logged["dynamics/online_entropy"] > 0 and 0 < logged["dynamics/online_length"] <= 24


@pytest.mark.slow
def test_probe_on_grpo_and_oger_steps_on_the_ladder(tmp_path, make_tiny_lm, smollm2_tokenizer):
    """Plain GRPO (the driver with the probe only): every online row counts, so the online entropy is TRL's. OGER
    with the probe: the teacher row leaves the online entropy, which then differs from the all-token one."""
    from trl_explore import OGERConfig
    from trl_explore.driver import ExplorationTrainer
    from trl_explore.driver.config import ExplorationConfig
    from trl_explore.oger.component import OGERComponent
    from trl_explore.oger.options import OGEROptions

    grpo = ExplorationTrainer(make_tiny_lm(), args=_args(ExplorationConfig, tmp_path / "grpo"),
                              train_dataset=_ladder_train(), processing_class=smollm2_tokenizer,
                              components=[DynamicsProbe()])
    grpo.train()
    logged = _logged(grpo)
    _check_common(logged)
    assert logged["dynamics/online_entropy"] == pytest.approx(logged["dynamics/all_entropy"], rel=1e-5)
    trl_entropy = next(e["entropy"] for e in grpo.state.log_history if "entropy" in e)
    assert logged["dynamics/all_entropy"] == pytest.approx(trl_entropy, rel=1e-4)

    args = _args(OGERConfig, tmp_path / "oger", embedding_model="embedded")
    peaked = make_tiny_lm()
    with torch.no_grad():  # logits 4x larger (tied embeddings): per-token entropies far from log V and far apart
        peaked.get_input_embeddings().weight.mul_(4.0)
    oger = ExplorationTrainer(peaked, args=args, train_dataset=_ladder_train(),
                              processing_class=smollm2_tokenizer,
                              components=[OGERComponent(OGEROptions.from_config(args)), DynamicsProbe()])
    oger.train()
    logged = _logged(oger)
    _check_common(logged)
    assert abs(logged["dynamics/online_entropy"] - logged["dynamics/all_entropy"]) > 1e-4  # 5e-4 measured


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["ase", "oger_ase"])
def test_probe_on_ase_and_oger_ase_steps_on_the_ladder(tmp_path, make_tiny_lm, smollm2_tokenizer, preset):
    from trl_explore.ase.component import ASEComponent
    from trl_explore.ase.options import ASEOptions
    from trl_explore.driver import ExplorationTrainer
    from trl_explore.oger.component import OGERComponent
    from trl_explore.oger.options import OGEROptions

    if preset == "ase":
        from trl_explore import ASEConfig as config_cls
    else:
        from trl_explore.oger_ase import OGERASEConfig as config_cls
    extra = {"embedding_model": "embedded"} if preset == "oger_ase" else {}
    args = _args(config_cls, tmp_path, min_pairs_per_cluster=1, max_steps=3, **extra)
    parts = [ASEComponent(ASEOptions.from_config(args))]
    if preset == "oger_ase":
        parts.insert(0, OGERComponent(OGEROptions.from_config(args)))
    trainer = ExplorationTrainer(make_tiny_lm(), args=args, train_dataset=_ladder_train(8),
                                 processing_class=smollm2_tokenizer, components=[*parts, DynamicsProbe()])
    trainer.train()
    _check_common(_logged(trainer))
