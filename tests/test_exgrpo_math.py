"""ExGRPO's maths (trl_explore.exgrpo.experience), its replay buffer and its options, on hand-worked numbers."""

import json
import math
import types

import pytest
import torch

from trl_explore.exgrpo.buffer import ExperienceBuffer, Trajectory
from trl_explore.exgrpo.experience import (
    allocate_draws,
    bucket_weights,
    collectable,
    group_correct_counts,
    lowest_entropy_index,
    mean_token_entropy,
    num_replayed_groups,
    replay_advantage_scale,
    replay_per_token_loss,
    replay_starts,
    retired,
    shaped_importance_weights,
)
from trl_explore.exgrpo.options import ExGRPOOptions


# ---------------------------------------------------------------------------------------------------- pass rates
def test_correct_counts_collection_and_retirement():
    correct = torch.tensor([1, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1], dtype=torch.bool)
    k = group_correct_counts(correct, 4)
    assert k.tolist() == [3, 0, 4]
    assert collectable(k, 4).tolist() == [True, False, False]  # 0 < k < K
    assert retired(k, 4).tolist() == [False, False, True]  # k = K
    with pytest.raises(ValueError, match="whole groups of 4"):
        group_correct_counts(correct[:5], 4)


def test_bucket_weights_gaussian_over_the_correct_count():
    k = torch.tensor([1.0, 3.0, 4.0, 7.0])
    peak = 1 / math.sqrt(2 * math.pi)  # N(0; 0, 1) = 0.3989423
    expected = [peak * math.exp(-4.5), peak * math.exp(-0.5), peak, peak * math.exp(-4.5)]
    assert torch.allclose(bucket_weights(k, 8), torch.tensor(expected, dtype=torch.float64))
    assert bucket_weights(k, 8)[2].item() == pytest.approx(0.3989423, abs=1e-7)
    assert bucket_weights(k, 8)[1].item() == pytest.approx(0.2419707, abs=1e-7)
    # sigma 2, k = 2 of K = 8: exp(-(2-4)^2 / 8) / sqrt(8 pi) = 0.6065307 / 5.0132565 = 0.1209854
    assert bucket_weights(torch.tensor([2.0]), 8, sigma=2.0).item() == pytest.approx(0.1209854, abs=1e-7)
    assert bucket_weights(k, 8, "uniform").tolist() == [1.0, 1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="bucket_weighting='linear'"):
        bucket_weights(k, 8, "linear")
    with pytest.raises(ValueError, match="sigma"):
        bucket_weights(k, 8, sigma=0.0)


def test_allocate_draws_caps_and_redistributes():
    g = torch.Generator().manual_seed(0)
    # asking for as many as there are (or more): every prompt
    assert allocate_draws(torch.tensor([1.0, 2.0]), torch.tensor([2, 3]), 5, g).tolist() == [2, 3]
    assert allocate_draws(torch.tensor([1.0, 2.0]), torch.tensor([2, 3]), 9, g).tolist() == [2, 3]
    assert allocate_draws(torch.tensor([1.0, 2.0]), torch.tensor([2, 3]), 0, g).tolist() == [0, 0]
    # one non-empty bucket takes every draw
    assert allocate_draws(torch.tensor([1.0, 5.0, 1.0]), torch.tensor([0, 4, 0]), 3, g).tolist() == [0, 3, 0]
    # all the weight on a bucket of 1: the multinomial asks it for 3, it gives 1, the 2 left go to the other
    # bucket (weight 0, but the only one with room)
    assert allocate_draws(torch.tensor([1.0, 0.0]), torch.tensor([1, 5]), 3, g).tolist() == [1, 2]
    for seed in range(20):  # any draw: counts within the sizes and summing to the request
        counts = allocate_draws(torch.tensor([0.2, 0.4, 0.1]), torch.tensor([1, 2, 6]), 4,
                                torch.Generator().manual_seed(seed))
        assert counts.sum().item() == 4 and (counts <= torch.tensor([1, 2, 6])).all()
    with pytest.raises(ValueError, match="differ"):
        allocate_draws(torch.tensor([1.0]), torch.tensor([1, 2]), 1)


def test_mixing_count_and_delayed_start():
    assert num_replayed_groups(8, 0.5, 10) == 4  # rho * groups
    assert num_replayed_groups(8, 0.5, 3) == 3  # fewer prompts in the buffer
    assert num_replayed_groups(5, 0.5, 10) == 2  # floor(2.5)
    assert num_replayed_groups(4, 0.0, 4) == 0
    assert num_replayed_groups(3, 1.0, 3) == 3
    assert replay_starts(0.36, 0.35) and not replay_starts(0.35, 0.35)


# ---------------------------------------------------------------------------------------------------- entropy choice
def test_lowest_mean_entropy_trajectory():
    entropies = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    assert mean_token_entropy(entropies, mask).tolist() == [1.5, 4.0, 0.0]  # an empty row counts as 0
    assert lowest_entropy_index(torch.tensor([0.5, 0.2, 0.2, 0.9])) == 1  # ties: the lower index
    with pytest.raises(ValueError, match="no stored trajectory"):
        lowest_entropy_index(torch.tensor([]))


# ---------------------------------------------------------------------------------------------------- objective
def test_shaped_importance_weight_and_loss():
    logps = torch.log(torch.tensor([[0.5, 0.1]]))
    behaviour = torch.log(torch.tensor([[0.25, 0.4]]))
    # w = 2 -> 2 / 2.1 = 0.9523810; w = 0.25 -> 0.25 / 0.35 = 0.7142857
    f = shaped_importance_weights(logps, behaviour, 0.1)
    assert torch.allclose(f, torch.tensor([[0.9523810, 0.7142857]]))
    loss = replay_per_token_loss(logps, behaviour, torch.tensor([2.0]), 0.1)
    assert torch.allclose(loss, torch.tensor([[-1.9047619, -1.4285714]]))
    with pytest.raises(ValueError, match="gamma"):
        shaped_importance_weights(logps, behaviour, 0.0)


def test_advantage_scale_gives_trl_objective_the_shaped_gradient():
    logps = torch.log(torch.tensor([[0.5, 0.1]])).requires_grad_()
    behaviour = torch.log(torch.tensor([[0.25, 0.4]]))
    advantages = torch.tensor([[2.0]])
    # d(-A f(w)) / d log p = -A gamma w / (w + gamma)^2: w = 2 -> -2 * 0.2 / 4.41 = -0.0907029;
    # w = 0.25 -> -2 * 0.025 / 0.1225 = -0.4081633
    (grad_paper,) = torch.autograd.grad(replay_per_token_loss(logps, behaviour, advantages).sum(), logps)
    assert torch.allclose(grad_paper, torch.tensor([[-0.0907029, -0.4081633]]))
    for old in (logps.detach(), torch.log(torch.tensor([[0.25, 0.2]]))):  # r = 1, then r = 2 and 0.5
        scale = replay_advantage_scale(logps, behaviour, old)
        assert not scale.requires_grad
        ratio = torch.exp(logps - old)  # TRL's per-token ratio; -A' r inside the clip range
        (grad_trl,) = torch.autograd.grad((-(advantages * scale) * ratio).sum(), logps)
        assert torch.allclose(grad_trl, grad_paper)
    # r = 1: c = gamma w / (w + gamma)^2 = 0.2 / 4.41 = 0.0453515 and 0.025 / 0.1225 = 0.2040816
    assert torch.allclose(replay_advantage_scale(logps, behaviour, logps), torch.tensor([[0.0453515, 0.2040816]]))


# ---------------------------------------------------------------------------------------------------- buffer
def _t(*ids, logps=None):
    return Trajectory(tuple(ids), None if logps is None else tuple(logps))


def test_buffer_collects_partly_solved_groups_and_retires_solved_ones():
    buffer = ExperienceBuffer(num_generations=4)
    a, b, c = _t(1, 2, logps=[-0.5, -0.25]), _t(3), _t(4, 5)
    assert buffer.record_group("p", [a, b, a, c], [True, False, True, False]) == "collected"
    assert buffer.num_correct("p") == 2 and buffer.trajectories("p") == [a]  # the same ids are stored once
    d = _t(6, logps=[-1.0])
    assert buffer.record_group("p", [a, d, d, c], [True, True, True, False]) == "collected"  # a is replayed
    assert buffer.num_correct("p") == 3 and buffer.trajectories("p") == [a, d]  # moved to bucket 3, d added
    assert buffer.record_group("p", [b, b, c, c], [False] * 4) == "unchanged"  # no correct rollout: kept as it was
    assert buffer.num_correct("p") == 3
    assert buffer.record_group("q", [a, b, c, d], [True, False, False, False], collect=False) == "unchanged"
    assert "q" not in buffer  # before replay starts, nothing is collected
    e = _t(7)
    outcome = buffer.record_group("p", [a, e, c, c], [True, True, False, False], storable=[True, False, True, True])
    assert outcome == "collected"
    assert buffer.num_correct("p") == 2 and buffer.trajectories("p") == [a, d]  # e counts in k, is not stored
    assert buffer.record_group("p", [a, a, a, a], [True] * 4) == "retired"
    assert "p" not in buffer and buffer.retired == {"p"}
    assert buffer.record_group("p", [a, b, c, d], [True, False, False, False]) == "ignored"  # retired for good
    with pytest.raises(ValueError, match="'p': a group has 4 rollouts"):
        buffer.record_group("p", [a], [True])
    with pytest.raises(ValueError, match="2 tokens has 1 behaviour"):
        _t(1, 2, logps=[-1.0])


def test_a_group_whose_only_correct_rows_are_not_storable_adds_no_empty_entry():
    """huggingface/trl#6804's class: OGER's teacher row is a group's only correct one. Before the fix the prompt
    entered the buffer with 0 trajectories and replay crashed on an empty candidate list."""
    buffer = ExperienceBuffer(num_generations=4)
    teacher, b, c, d = _t(1), _t(2), _t(3), _t(4)
    outcome = buffer.record_group("p", [teacher, b, c, d], [True, False, False, False],
                                  storable=[False, True, True, True])
    assert outcome == "unchanged" and "p" not in buffer and len(buffer) == 0 and buffer.num_trajectories() == 0
    assert buffer.draw(["p"], 1, torch.Generator().manual_seed(0)) == []
    # a held prompt keeps its trajectories and moves to the new bucket
    assert buffer.record_group("p", [b, c, teacher, d], [True, False, True, False]) == "collected"
    buffer.record_group("p", [teacher, b, c, d], [True, False, False, True], storable=[False, True, True, False])
    assert buffer.num_correct("p") == 2 and buffer.trajectories("p") == [b, teacher]
    # an empty entry written by an older version is dropped on load, never drawn
    state = buffer.state_dict()
    state["entries"].append({"key": "empty", "num_correct": 1, "trajectories": []})
    restored = ExperienceBuffer(num_generations=4)
    restored.load_state_dict(state)
    assert restored.keys() == ["p"]


def test_buffer_draws_by_bucket():
    buffer = ExperienceBuffer(num_generations=4)
    x = _t(9)
    for key, k in (("a", 2), ("b", 2), ("c", 1)):
        buffer.record_group(key, [x] * 4, [True] * k + [False] * (4 - k))
    assert buffer.bucket_sizes() == {1: 1, 2: 2}
    g = torch.Generator().manual_seed(0)
    assert buffer.draw(["c", "zz", "b", "a"], 5, g) == ["c", "b", "a"]  # all held candidates, in candidate order
    assert buffer.draw(["a", "b", "c"], 0, g) == []
    # sigma 0.1: the medium bucket (k = 2 = K/2) has weight 3.99, k = 1 has 8e-22: one draw comes from k = 2
    draws = {tuple(buffer.draw(["a", "b", "c"], 1, torch.Generator().manual_seed(s), sigma=0.1)) for s in range(10)}
    assert draws == {("a",), ("b",)}


def _filled_buffer():
    buffer = ExperienceBuffer(num_generations=4)
    lp = torch.tensor([-0.1, -2.3, -0.7]).tolist()  # float32 values
    buffer.record_group("p1", [_t(1, 2, 3, logps=lp), _t(4), _t(5), _t(6)], [True, False, False, False])
    buffer.record_group("p2", [_t(7, logps=[-0.3]), _t(8, logps=[-1e-8]), _t(9), _t(10)],
                        [True, True, False, False])
    buffer.record_group("p3", [_t(11)] * 4, [True] * 4)
    buffer.record_group("p4", [_t(12), _t(13), _t(14), _t(15)], [True, True, True, False])
    buffer.started = True
    return buffer


def test_buffer_state_round_trip_is_exact():
    buffer = _filled_buffer()
    state = buffer.state_dict()
    restored = ExperienceBuffer(num_generations=4)
    restored.load_state_dict(json.loads(json.dumps(state)))  # through JSON, as a checkpoint writes it
    assert restored.state_dict() == state
    assert restored.started and restored.retired == {"p3"} and restored.keys() == ["p1", "p2", "p4"]
    assert restored.trajectories("p2") == buffer.trajectories("p2")
    assert torch.equal(torch.tensor(restored.trajectories("p1")[0].behaviour_logps, dtype=torch.float32),
                       torch.tensor([-0.1, -2.3, -0.7]))
    for seed in range(5):  # the restored buffer draws what the saved one draws
        assert (restored.draw(["p4", "p1", "p2"], 2, torch.Generator().manual_seed(seed))
                == buffer.draw(["p4", "p1", "p2"], 2, torch.Generator().manual_seed(seed)))
    with pytest.raises(ValueError, match="num_generations=8"):
        ExperienceBuffer(num_generations=8).load_state_dict(state)
    with pytest.raises(ValueError, match="version"):
        restored.load_state_dict({**state, "version": 99})


# ---------------------------------------------------------------------------------------------------- options
def test_options_defaults_are_the_papers_and_are_checked():
    options = ExGRPOOptions()
    assert (options.replay_ratio, options.replay_start_pass_rate, options.bucket_weighting, options.bucket_sigma,
            options.trajectory_selection, options.importance_correction, options.policy_shaping_gamma) == (
        0.5, 0.35, "normal", 1.0, "lowest_entropy", True, 0.1)
    with pytest.raises(ValueError, match="ExGRPOOptions: replay_ratio must be a number in"):
        ExGRPOOptions(replay_ratio=1.5)
    with pytest.raises(ValueError, match="trajectory_selection='max'"):
        ExGRPOOptions(trajectory_selection="max")
    with pytest.raises(ValueError, match="policy_shaping_gamma must be a finite number > 0"):
        ExGRPOOptions(policy_shaping_gamma=0)
    args = types.SimpleNamespace(num_generations=4, per_device_train_batch_size=4, steps_per_generation=1,
                                 loss_type="dapo", importance_sampling_level="token")
    options.apply(args)
    with pytest.raises(ValueError, match="must be a multiple of num_generations = 4"):
        options.apply(types.SimpleNamespace(**{**vars(args), "per_device_train_batch_size": 6}))
    with pytest.raises(ValueError, match="loss_type='cispo'"):
        options.apply(types.SimpleNamespace(**{**vars(args), "loss_type": "cispo"}))
    with pytest.raises(ValueError, match="importance_sampling_level='sequence'"):
        options.apply(types.SimpleNamespace(**{**vars(args), "importance_sampling_level": "sequence"}))


def test_config_carries_the_authors_defaults_and_parses_the_options():
    from trl import TrlParser

    from trl_explore.exgrpo import ExGRPOConfig

    (config,) = TrlParser((ExGRPOConfig,)).parse_args_into_dataclasses(
        ["--output_dir", "out", "--bf16", "false", "--num_generations", "4", "--per_device_train_batch_size", "8",
         "--replay_ratio", "0.25", "--bucket_weighting", "uniform"])
    assert (config.loss_type, config.scale_rewards, config.entropy_coef, config.beta, config.temperature) == (
        "dr_grpo", "none", 0.001, 0.0, 1.0)
    assert ExGRPOOptions.from_config(config) == ExGRPOOptions(replay_ratio=0.25, bucket_weighting="uniform")
    with pytest.raises(ValueError, match="ExGRPOConfig: loss_type='sapo' is not supported"):
        ExGRPOConfig(output_dir="out", bf16=False, num_generations=4, per_device_train_batch_size=8,
                     loss_type="sapo")


def test_card_lists_fields_of_the_config():
    import dataclasses

    from trl_explore.exgrpo import ExGRPOComponent, ExGRPOConfig

    card = ExGRPOComponent.card
    assert card.paper_url == "https://arxiv.org/abs/2510.02245" and "2510.02245" in card.citation
    assert set(card.hyperparameters) <= {f.name for f in dataclasses.fields(ExGRPOConfig)}
