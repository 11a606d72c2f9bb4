"""Tests for trl_explore/ase/routing.py and trl_explore/ase/importance.py (SPEC §3.2, §3.5, §3.8)."""

import inspect
import math

import pytest
import torch

from trl_explore.ase.importance import truncated_importance_weights
from trl_explore.ase.routing import balanced_uniform_routes, per_route_accuracy

# ---------------------------------------------------------------------------------------------
# balanced_uniform_routes
# ---------------------------------------------------------------------------------------------


def test_paper_default_two_rollouts_per_route():
    routes = balanced_uniform_routes(num_prompts=2, num_generations=8, num_routes=3)
    assert routes.dtype == torch.long
    assert routes.tolist() == [0, 0, 1, 1, 2, 2, 3, 3] * 2


def test_remainder_goes_to_the_lowest_routes_clean_first():
    assert balanced_uniform_routes(1, 6, 3).tolist() == [0, 0, 1, 1, 2, 3]
    assert balanced_uniform_routes(1, 5, 3).tolist() == [0, 0, 1, 2, 3]
    assert balanced_uniform_routes(1, 2, 3).tolist() == [0, 1]  # N < K + 1: routes 2, 3 unused
    assert balanced_uniform_routes(2, 3, 0).tolist() == [0] * 6  # K = 0: GRPO
    assert balanced_uniform_routes(0, 8, 3).tolist() == []


def test_remainder_with_generator_is_balanced_per_prompt_and_seeded():
    routes = balanced_uniform_routes(60, 6, 3, generator=torch.Generator().manual_seed(0))
    again = balanced_uniform_routes(60, 6, 3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(routes, again)
    groups = routes.reshape(60, 6)
    extra_per_route = torch.zeros(4, dtype=torch.long)
    for group in groups:
        counts = torch.bincount(group, minlength=4)
        assert sorted(counts.tolist()) == [1, 1, 2, 2]
        assert torch.equal(group, group.sort().values)  # contiguous blocks
        extra_per_route += counts - 1
    assert (extra_per_route > 0).all()  # every route, not only 0 and 1, gets extras
    # no remainder: the generator changes nothing
    plain = balanced_uniform_routes(3, 8, 3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(plain, balanced_uniform_routes(3, 8, 3))


@pytest.mark.parametrize(
    "args, match",
    [((-1, 8, 3), "num_prompts"), ((1, 0, 3), "num_generations"), ((1, 8, -1), "num_routes")],
)
def test_routes_reject_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        balanced_uniform_routes(*args)


# ---------------------------------------------------------------------------------------------
# per_route_accuracy
# ---------------------------------------------------------------------------------------------


def test_per_route_accuracy_hand_values_and_empty_route():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0])
    routes = torch.tensor([0, 0, 1, 1, 3, 3, 3])
    accuracy, counts = per_route_accuracy(rewards, routes, num_routes=3)
    assert counts.tolist() == [2, 2, 0, 2 + 1]
    assert torch.allclose(accuracy, torch.tensor([0.5, 1.0, 0.0, 1 / 3]))
    assert not torch.isnan(accuracy).any()  # route 2 has no rows: 0.0 placeholder, counts say so


def test_per_route_accuracy_threshold_matches_the_bank():
    from trl_explore.ase.bank import CORRECT_THRESHOLD

    assert inspect.signature(per_route_accuracy).parameters["threshold"].default == CORRECT_THRESHOLD
    accuracy, _ = per_route_accuracy(torch.tensor([0.5, 0.6]), torch.tensor([0, 0]), num_routes=0)
    assert accuracy.tolist() == [0.5]  # 0.5 is incorrect, 0.6 correct


def test_per_route_accuracy_bad_inputs():
    with pytest.raises(ValueError, match="0..num_routes=3"):
        per_route_accuracy(torch.ones(2), torch.tensor([0, 4]), 3)
    with pytest.raises(ValueError, match="same length"):
        per_route_accuracy(torch.ones(3), torch.tensor([0, 1]), 3)
    with pytest.raises(ValueError, match="NaN"):
        per_route_accuracy(torch.tensor([1.0, float("nan")]), torch.tensor([0, 1]), 3)


# ---------------------------------------------------------------------------------------------
# truncated_importance_weights
# ---------------------------------------------------------------------------------------------


def test_truncated_weights_hand_values():
    current = torch.tensor([[0.5, 0.2, 0.9], [0.7, 0.1, 0.3]]).log()
    behaviour = torch.tensor([[0.25, 0.4, 0.3], [0.7, 0.1, 0.3]]).log()
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    weights = truncated_importance_weights(current, behaviour, mask, cap=2.0)
    # ratios 0.5/0.25 = 2, 0.2/0.4 = 0.5, 0.9/0.3 = 3 -> capped at 2; row 2 is a clean row
    assert torch.allclose(weights[0], torch.tensor([2.0, 0.5, 2.0]), atol=1e-6)
    assert weights[1].tolist() == [1.0, 1.0, 0.0]  # exactly 1 where equal, 0 where masked
    assert weights.dtype == torch.float32
    # another cap
    capped = truncated_importance_weights(current, behaviour, mask, cap=1.5)
    assert torch.allclose(capped[0], torch.tensor([1.5, 0.5, 1.5]), atol=1e-6)


def test_truncated_weights_do_not_overflow_and_are_detached():
    current = torch.tensor([[0.0, -200.0]], requires_grad=True)
    behaviour = torch.tensor([[-1000.0, 0.0]])
    weights = truncated_importance_weights(current, behaviour, torch.ones(1, 2, dtype=torch.bool))
    assert weights.tolist() == [[2.0, 0.0]]  # exp(1000) would be inf; exp(-200) underflows to 0
    assert not weights.requires_grad


def test_truncated_weights_ignore_garbage_at_masked_positions():
    current = torch.tensor([[-1.0, float("nan"), -float("inf")]])
    behaviour = torch.tensor([[-1.0, -2.0, -float("inf")]])
    weights = truncated_importance_weights(current, behaviour, torch.tensor([[1.0, 0.0, 0.0]]))
    assert weights.tolist() == [[1.0, 0.0, 0.0]]


def test_truncated_weights_accept_low_precision_log_probs():
    current = torch.tensor([[-0.5, -1.0]], dtype=torch.bfloat16)
    weights = truncated_importance_weights(current, current.clone(), torch.ones(1, 2))
    assert weights.dtype == torch.float32 and weights.tolist() == [[1.0, 1.0]]


def test_truncated_weights_bad_inputs():
    logp = torch.zeros(2, 3)
    mask = torch.ones(2, 3)
    with pytest.raises(ValueError, match="logp_behaviour has shape"):
        truncated_importance_weights(logp, torch.zeros(2, 4), mask)
    with pytest.raises(ValueError, match="mask has shape"):
        truncated_importance_weights(logp, logp, torch.ones(3, 2))
    with pytest.raises(ValueError, match="logp_current must be 2-D"):
        truncated_importance_weights(torch.zeros(3), torch.zeros(3), torch.ones(3))
    with pytest.raises(ValueError, match="only 0 and 1"):
        truncated_importance_weights(logp, logp, 2 * mask)
    for cap in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="cap"):
            truncated_importance_weights(logp, logp, mask, cap=cap)
    broken = logp.clone()
    broken[1, 2] = float("nan")
    with pytest.raises(ValueError, match="logp_behaviour contains NaN or inf"):
        truncated_importance_weights(logp, broken, mask)
    broken[1, 2] = float("inf")
    with pytest.raises(ValueError, match="logp_current contains NaN or inf"):
        truncated_importance_weights(broken, logp, mask)


def test_routed_importance_weights_by_hand():
    from trl_explore.ase.importance import routed_importance_weights

    # row 0 clean, row 1 steered, row 2 offline (NaN behaviour log-probs, not steered); cap 2
    current = torch.log(torch.tensor([[0.5, 0.5], [0.6, 0.3], [0.2, 0.2]]))
    behaviour = torch.log(torch.tensor([[0.1, 0.1], [0.2, 0.6], [1.0, 1.0]]))
    behaviour[2] = float("nan")
    mask = torch.tensor([[1, 1], [1, 1], [1, 0]])
    weights, clipped = routed_importance_weights(current, behaviour, mask, torch.tensor([False, True, False]), cap=2.0)
    # steered row: min(0.6 / 0.2, 2) = 2 (clipped), min(0.3 / 0.6, 2) = 0.5; every other row exactly 1
    assert torch.allclose(weights, torch.tensor([[1.0, 1.0], [2.0, 0.5], [1.0, 1.0]]))
    assert clipped.tolist() == [[False, False], [True, False], [False, False]]
