"""OGER's pure functions on values worked out by hand (Eq. 3-8, §3.2, LUFFY policy shaping)."""

import math

import pytest
import torch

from trl_explore.oger.entropy import entropy_from_logits, last_token_values
from trl_explore.oger.exploration import cosine_similarity_matrix, divergence, exploration_reward
from trl_explore.oger.policy_shaping import aggregate_token_loss, policy_shaping_per_token_loss
from trl_explore.oger.replacement import offline_completion_ids, sample_offline_indices, select_replacements


def test_cosine_and_divergence_hand_values():
    online = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    offline = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    s = cosine_similarity_matrix(online, offline)
    r = 1 / math.sqrt(2)
    assert torch.allclose(s, torch.tensor([[1.0, 0.0], [0.0, 1.0], [r, r]]), atol=1e-6)
    # D_i = 1 - mean_j s_ij: 1 - 0.5, 1 - 0.5, 1 - r
    assert torch.allclose(divergence(online, offline), torch.tensor([0.5, 0.5, 1 - r]), atol=1e-6)


def test_divergence_opposite_and_zero_vector():
    d = divergence(torch.tensor([[-3.0, 0.0], [0.0, 0.0]]), torch.tensor([[1.0, 0.0]]))
    assert torch.allclose(d, torch.tensor([2.0, 1.0]))  # opposite: 1 - (-1); zero vector: similarity 0, no NaN


def test_divergence_errors():
    with pytest.raises(ValueError, match="M >= 1"):
        divergence(torch.ones(2, 3), torch.zeros(0, 3))
    with pytest.raises(ValueError, match="embedding sizes differ"):
        divergence(torch.ones(2, 3), torch.ones(1, 4))


def test_exploration_reward_eq7_eq8():
    div = torch.tensor([0.4, 0.4, 0.8, 0.3])
    ent = torch.tensor([0.0, math.log(2), 1.0, 0.0])
    r_m = torch.tensor([1.0, 1.0, 0.0, 1.0])
    off = torch.tensor([False, False, False, True])
    r = exploration_reward(div, ent, r_m, off)
    # row 0: 0.4 * e^0 * 1; row 1: 0.4 * 1/2; row 2: incorrect -> 0; row 3: offline -> 0
    assert torch.allclose(r, torch.tensor([0.4, 0.2, 0.0, 0.0]))
    # "w/o Refinement": D * R_m
    r = exploration_reward(div, ent, r_m, off, entropy_refinement=False)
    assert torch.allclose(r, torch.tensor([0.4, 0.4, 0.0, 0.0]))


def test_exploration_reward_ignores_nan_on_gated_rows_but_not_on_active_ones():
    r = exploration_reward(torch.tensor([0.5, float("nan")]), torch.tensor([0.0, float("nan")]),
                           torch.tensor([1.0, 1.0]), torch.tensor([False, True]))
    assert torch.equal(r, torch.tensor([0.5, 0.0]))
    with pytest.raises(ValueError, match=r"online rows \[0\]"):
        exploration_reward(torch.tensor([float("nan")]), torch.tensor([0.0]), torch.tensor([1.0]),
                           torch.tensor([False]))


def test_select_replacements_lowest_divergence_and_ties():
    d = torch.tensor([0.3, 0.1, 0.5, 0.1, 0.9])
    assert select_replacements(d, 1).tolist() == [1]  # tie between 1 and 3: lower index
    assert select_replacements(d, 2).tolist() == [1, 3]
    assert select_replacements(d, 3).tolist() == [0, 1, 3]
    assert select_replacements(d, 0).tolist() == []
    with pytest.raises(ValueError, match="num_replacements"):
        select_replacements(d, 6)
    with pytest.raises(ValueError, match="unknown replacement rule"):
        select_replacements(d, 1, rule="highest")


def test_select_replacements_random_is_seeded():
    d = torch.zeros(8)
    a = select_replacements(d, 3, "random", torch.Generator().manual_seed(0))
    b = select_replacements(d, 3, "random", torch.Generator().manual_seed(0))
    assert a.tolist() == b.tolist() and len(set(a.tolist())) == 3


def test_sample_offline_indices():
    g = torch.Generator().manual_seed(0)
    picks = sample_offline_indices(3, 2, g)
    assert len(set(picks)) == 2 and all(0 <= p < 3 for p in picks)
    picks = sample_offline_indices(2, 5, torch.Generator().manual_seed(1))
    assert sorted(picks[:2]) == [0, 1] and sorted(picks[2:4]) == [0, 1]  # each used once per pass
    with pytest.raises(ValueError, match="has none"):
        sample_offline_indices(0, 1)


def test_offline_completion_ids_truncates_and_ends_with_eos():
    assert offline_completion_ids([5, 6, 7], 10, eos_token_id=2) == [5, 6, 7, 2]
    assert offline_completion_ids([5, 6, 7, 8, 9], 3, eos_token_id=2) == [5, 6, 2]
    assert offline_completion_ids([5, 2], 10, eos_token_id=2) == [5, 2]  # no double EOS
    assert offline_completion_ids([], 4, eos_token_id=2) == [2]


def test_policy_shaping_value_and_gradient():
    gamma = 0.1
    p = torch.tensor([[0.5, 0.1]])
    logp = p.log().requires_grad_(True)
    adv = torch.tensor([2.0])
    loss = policy_shaping_per_token_loss(logp, adv, gamma)
    # -A p/(p+gamma): -2*0.5/0.6, -2*0.1/0.2
    assert torch.allclose(loss, torch.tensor([[-2 * 0.5 / 0.6, -1.0]]))
    loss.sum().backward()
    # d/dlogp = -A * gamma * p / (p + gamma)^2
    expected = torch.tensor([[-2 * 0.1 * 0.5 / 0.36, -2 * 0.1 * 0.1 / 0.04]])
    assert torch.allclose(logp.grad, expected)
    with pytest.raises(ValueError, match="gamma"):
        policy_shaping_per_token_loss(logp, adv, 0.0)


def test_aggregate_token_loss_matches_trl_normalisers():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    kw = dict(num_rows=4, max_completion_length=5, token_normalizer=torch.tensor(6.0), accumulation_steps=2.0)
    # grpo: row means (1.5, 4) summed / 4 rows / 2 accumulation
    assert aggregate_token_loss(loss, mask, "grpo", **kw).item() == pytest.approx((1.5 + 4) / 4 / 2)
    assert aggregate_token_loss(loss, mask, "bnpo", **kw).item() == pytest.approx(7 / 6 / 2)
    assert aggregate_token_loss(loss, mask, "dr_grpo", **kw).item() == pytest.approx(7 / 20 / 2)
    assert aggregate_token_loss(loss, mask, "dapo", **kw).item() == pytest.approx(7 / 6)
    assert aggregate_token_loss(loss, mask, "luspo", **kw).item() == pytest.approx(7 / 4 / 2)
    with pytest.raises(ValueError, match="unknown loss_type"):
        aggregate_token_loss(loss, mask, "ppo", **kw)


def test_entropy_from_logits_hand_values():
    inf = float("inf")
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, -inf, -inf, -inf], [0.0, 0.0, -inf, -inf]])
    assert torch.allclose(entropy_from_logits(logits), torch.tensor([math.log(4), 0.0, math.log(2)]))


def test_last_token_values():
    per_step = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert last_token_values(per_step, torch.tensor([3, 1])).tolist() == [3.0, 4.0]
    with pytest.raises(ValueError, match="rows \\[1\\]"):
        last_token_values(per_step, torch.tensor([1, 0]))


def test_entropy_bonus_correction_by_hand():
    from trl_explore.oger.policy_shaping import entropy_bonus_correction

    entropies = torch.tensor([[1.0, 3.0], [2.0, 6.0]])
    all_mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])  # tokens 1, 3, 2: mean 2
    online_mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])  # tokens 1, 3: mean 2 -> no correction
    assert entropy_bonus_correction(entropies, all_mask, online_mask).item() == pytest.approx(0.0)
    online_mask = torch.tensor([[0.0, 1.0], [0.0, 0.0]])  # token 3 only: 2 - 3 = -1
    assert entropy_bonus_correction(entropies, all_mask, online_mask).item() == pytest.approx(-1.0)


def test_high_entropy_terms_by_hand():
    """One rule for both kinds of tokens: below the threshold a token gets neither the shaping term nor the bonus."""
    from trl_explore.oger.policy_shaping import entropy_bonus_correction, high_entropy_terms

    shaping = torch.tensor([[-0.5, -0.25], [-1.0, -2.0]])
    all_mask = torch.tensor([[1.0, 1.0], [1.0, 1.0]])
    online_mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])  # row 1 is a teacher row
    entropies = torch.tensor([[1.0, 3.0], [2.0, 6.0]])
    assert high_entropy_terms(shaping, all_mask, online_mask) == (shaping, all_mask, online_mask)  # quantile 1
    high = torch.tensor([[False, True], [False, True]])  # H >= 2.5: 3 (online) and 6 (teacher)
    masked, bonus_all, bonus_online = high_entropy_terms(shaping, all_mask, online_mask, high)
    assert masked.tolist() == [[0.0, -0.25], [0.0, -2.0]]
    assert bonus_all.tolist() == [[0.0, 1.0], [0.0, 1.0]] and bonus_online.tolist() == [[0.0, 1.0], [0.0, 0.0]]
    # TRL's bonus: mean over the high online tokens = 3; corrected: mean over every high token = (3 + 6) / 2 = 4.5
    assert entropy_bonus_correction(entropies, bonus_all, bonus_online).item() == pytest.approx(1.5)
