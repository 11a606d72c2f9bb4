"""Tests for trl_explore/ase/bank.py: the steering-vector bank of ASE-GRPO (SPEC §3.1, §3.4, §3.6)."""

import json
import math
import os

import pytest
import torch

from trl_explore.ase.bank import (
    CORRECT_THRESHOLD,
    SteeringVectorBank,
    applied_strength,
    bank_metrics,
    cluster_candidates,
    contrast_pairs,
    cosine_matrix,
    ema_update,
    match_to_previous,
    mean_pairwise_cosine,
    pair_differences,
    random_directions_like,
    random_unit_vectors,
    shuffle_pair_labels,
)

HIDDEN = 32
PLANTED_NORMS = (2.0, 4.0, 7.0)


def make_bank(**kwargs) -> SteeringVectorBank:
    """A small, fast bank: one scikit-learn thread (the CI CPUs are shared), few K-means restarts."""
    kwargs = {"hidden_size": HIDDEN, "num_vectors": 3, "kmeans_n_init": 4, "num_threads": 1, **kwargs}
    return SteeringVectorBank(**kwargs)


def planted_directions(seed: int = 0) -> torch.Tensor:
    """Three orthonormal directions in R^HIDDEN, fixed (independent of the data seed)."""
    q, _ = torch.linalg.qr(torch.randn(HIDDEN, 3, generator=torch.Generator().manual_seed(seed)))
    return q.T.contiguous()  # [3, HIDDEN]


def planted_step(data_seed: int, num_problems: int = 12, noise: float = 0.1):
    """Rollouts whose within-problem differences lie along one of 3 planted directions.

    Problem p uses direction c = p % 3 with norm PLANTED_NORMS[c]: correct rollouts sit at
    base_p + norm/2 * u_c, incorrect ones at base_p - norm/2 * u_c, plus Gaussian noise. So every
    contrast a_pos - a_neg is norm * u_c + noise. Rows: 4 correct then 4 incorrect per problem.
    """
    generator = torch.Generator().manual_seed(data_seed)
    directions = planted_directions()
    rows, problem_ids, rewards = [], [], []
    for p in range(num_problems):
        c = p % 3
        base = 3.0 * torch.randn(HIDDEN, generator=generator)
        for correct in (1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0):
            sign = 1.0 if correct else -1.0
            shift = sign * PLANTED_NORMS[c] / 2 * directions[c]
            rows.append(base + shift + noise * torch.randn(HIDDEN, generator=generator))
            problem_ids.append(f"problem-{p}")
            rewards.append(correct)
    return torch.stack(rows), problem_ids, torch.tensor(rewards)


def pairs_step(differences: list[tuple[float, ...]]):
    """One problem per difference: a correct row equal to the difference and an incorrect zero row."""
    activations, problem_ids, rewards = [], [], []
    for i, diff in enumerate(differences):
        activations += [torch.tensor(diff), torch.zeros(len(diff))]
        problem_ids += [i, i]
        rewards += [1.0, 0.0]
    return torch.stack(activations), problem_ids, torch.tensor(rewards)


# ---------------------------------------------------------------------------------------------
# Pure functions
# ---------------------------------------------------------------------------------------------


def test_contrast_pairs_all_pairs_within_problem_in_documented_order():
    ids = ["a", "a", "a", "b", "b", "c", "a"]
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0])
    pairs = contrast_pairs(ids, rewards)
    # a: positives rows 0, 6; negatives rows 1, 2. b: (3, 4). c has no negative.
    assert pairs.tolist() == [[0, 1], [0, 2], [6, 1], [6, 2], [3, 4]]


def test_contrast_pairs_threshold_is_strict():
    assert CORRECT_THRESHOLD == 0.5
    pairs = contrast_pairs([0, 0, 0], torch.tensor([0.5, 0.51, 0.0]))
    assert pairs.tolist() == [[1, 0], [1, 2]]  # 0.5 is incorrect


def test_contrast_pairs_no_pairs_is_empty():
    pairs = contrast_pairs([0, 0, 1, 1], torch.tensor([1.0, 1.0, 0.0, 0.0]))
    assert pairs.shape == (0, 2) and pairs.dtype == torch.long


def test_contrast_pairs_cap_samples_with_generator_and_keeps_order():
    ids = [0, 0, 0, 0, 1, 1]
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    all_pairs_a = torch.tensor([[0, 2], [0, 3], [1, 2], [1, 3]])
    pairs = contrast_pairs(ids, rewards, max_pairs_per_problem=2, generator=torch.Generator().manual_seed(7))
    keep = torch.randperm(4, generator=torch.Generator().manual_seed(7))[:2].sort().values
    # problem 0 has 4 pairs > cap: the seeded subset, in order; problem 1 (1 pair) is untouched
    assert pairs.tolist() == all_pairs_a[keep].tolist() + [[4, 5]]


def test_contrast_pairs_bad_inputs():
    with pytest.raises(ValueError, match="problem_ids"):
        contrast_pairs([0, 1], torch.tensor([1.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="rewards"):
        contrast_pairs([0, 1], torch.tensor([1.0, float("nan")]))
    with pytest.raises(ValueError, match="rewards must be 1-D"):
        contrast_pairs([0, 1], torch.ones(2, 1))
    with pytest.raises(TypeError, match="hashable"):
        contrast_pairs([[0], [0]], torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="max_pairs_per_problem"):
        contrast_pairs([0, 0], torch.tensor([1.0, 0.0]), max_pairs_per_problem=0)


def test_pair_differences_is_pos_minus_neg():
    activations = torch.tensor([[1.0, 2.0], [0.5, -1.0], [3.0, 3.0]])
    pairs = torch.tensor([[0, 1], [2, 1]])
    assert pair_differences(activations, pairs).tolist() == [[0.5, 3.0], [2.5, 4.0]]


def test_cluster_candidates_means_in_original_space():
    # Two clear groups; candidates are the unnormalised group means in the original space.
    diffs = torch.tensor([[10.0, 0.0, 1.0], [12.0, 0.0, -1.0], [0.0, 5.0, 0.0], [0.0, 7.0, 0.0]])
    candidates, labels = cluster_candidates(diffs, 2, pca_dim=64, kmeans_n_init=2, num_threads=1)
    assert labels[0] == labels[1] and labels[2] == labels[3] and labels[0] != labels[2]
    assert candidates[labels[0]].tolist() == [11.0, 0.0, 0.0]
    assert candidates[labels[2]].tolist() == [0.0, 6.0, 0.0]


def test_cluster_candidates_rejects_too_few_rows():
    with pytest.raises(ValueError, match="num_clusters=3"):
        cluster_candidates(torch.ones(2, 4), 3)


def test_hungarian_matching_differs_from_greedy_and_ema_on_hand_values():
    previous = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    candidates = torch.tensor([[2.0, 1.0], [3.0, -2.0]])
    # cos(prev0, c0) = 2/sqrt5 = .894, cos(prev0, c1) = 3/sqrt13 = .832,
    # cos(prev1, c0) = 1/sqrt5 = .447, cos(prev1, c1) = -2/sqrt13 = -.555.
    cos = cosine_matrix(previous, candidates)
    assert torch.allclose(cos, torch.tensor([[2 / 5**0.5, 3 / 13**0.5], [1 / 5**0.5, -2 / 13**0.5]]))
    # Greedy takes the best entry (prev0, c0) first, then (prev1, c1): total .339.
    # The optimum is prev0 <- c1, prev1 <- c0: total 1.279.
    perm = match_to_previous(previous, candidates)
    assert perm.tolist() == [1, 0]
    updated = ema_update(previous, candidates[perm], beta=0.5)
    assert updated.tolist() == [[2.0, -1.0], [1.0, 1.0]]
    assert ema_update(previous, candidates[perm], beta=0.25).tolist() == [[2.5, -1.5], [1.5, 1.0]]


def test_cosine_matrix_zero_vector_gives_zero():
    assert cosine_matrix(torch.zeros(1, 3), torch.ones(2, 3)).tolist() == [[0.0, 0.0]]


def test_mean_pairwise_cosine_hand_value():
    # three unit vectors at 120 degrees: every pairwise cosine is -1/2 (the paper's lower bound)
    vectors = torch.tensor([[1.0, 0.0], [-0.5, 3**0.5 / 2], [-0.5, -(3**0.5) / 2]])
    assert mean_pairwise_cosine(vectors) == pytest.approx(-0.5, abs=1e-6)
    assert mean_pairwise_cosine(torch.tensor([[1.0, 0.0], [1.0, 1.0]])) == pytest.approx(2**-0.5)


def test_shuffle_pair_labels_negates_the_rows_drawn_by_the_generator():
    diffs = torch.arange(24, dtype=torch.float32).reshape(8, 3) + 1
    shuffled, swapped = shuffle_pair_labels(diffs, torch.Generator().manual_seed(3))
    expected_swapped = torch.rand(8, generator=torch.Generator().manual_seed(3)) < 0.5
    assert torch.equal(swapped, expected_swapped)
    assert 0 < swapped.sum() < 8  # the seed swaps some rows, not all: the check means something
    assert torch.equal(shuffled[swapped], -diffs[swapped])
    assert torch.equal(shuffled[~swapped], diffs[~swapped])


def test_random_directions_like_keeps_norms_changes_directions():
    candidates = torch.tensor([[3.0] + [0.0] * 63, [0.0, 0.5] + [0.0] * 62])
    randomised = random_directions_like(candidates, torch.Generator().manual_seed(0))
    assert torch.allclose(randomised.norm(dim=1), torch.tensor([3.0, 0.5]), rtol=1e-6)
    assert (cosine_matrix(randomised, candidates).diagonal().abs() < 0.6).all()


def test_random_unit_vectors_are_unit_and_seeded():
    a = random_unit_vectors(5, 16, torch.Generator().manual_seed(1))
    b = random_unit_vectors(5, 16, torch.Generator().manual_seed(1))
    assert a.shape == (5, 16) and a.dtype == torch.float32
    assert torch.equal(a, b)
    assert torch.allclose(a.norm(dim=1), torch.ones(5), atol=1e-6)


# ---------------------------------------------------------------------------------------------
# The bank
# ---------------------------------------------------------------------------------------------


def test_planted_directions_are_recovered():
    bank = make_bank()
    diagnostics = bank.update(*planted_step(data_seed=0))
    assert diagnostics["skipped"] == 0.0
    assert diagnostics["num_pairs"] == 12 * 16
    vectors = bank.pending_vectors
    assert vectors.shape == (3, HIDDEN) and vectors.dtype == torch.float32
    # K-means numbers clusters arbitrarily: match bank rows to planted directions first.
    planted = planted_directions() * torch.tensor(PLANTED_NORMS)[:, None]
    perm = match_to_previous(planted, vectors)
    cos = cosine_matrix(planted, vectors[perm]).diagonal()
    assert (cos > 0.95).all(), cos
    # natural norm, not normalised: each vector keeps its planted length
    assert torch.allclose(vectors[perm].norm(dim=1), torch.tensor(PLANTED_NORMS), rtol=0.05)
    shares = torch.tensor([diagnostics[f"cluster_share/{k}"] for k in range(3)])
    assert torch.allclose(shares, torch.full((3,), 1 / 3))
    assert "temporal_alignment" not in diagnostics  # first estimate: nothing to compare with
    assert diagnostics["inter_cluster_alignment"] == pytest.approx(0.0, abs=0.05)  # orthogonal


def test_second_update_matches_and_smooths_on_hand_values():
    # K = 2 in 2-D with exact differences: first bank {(1,0), (0,1)}, then candidates
    # {(2,1), (3,-2)} whose optimal matching is not the greedy one (see the pure-function test).
    bank = SteeringVectorBank(hidden_size=2, num_vectors=2, ema_beta=0.5, kmeans_n_init=2, num_threads=1)
    bank.update(*pairs_step([(1.0, 0.0), (1.0, 0.0), (0.0, 1.0), (0.0, 1.0)]))
    assert bank.activate()
    first = bank.vectors.clone()
    assert sorted(first.tolist()) == [[0.0, 1.0], [1.0, 0.0]]  # first estimate taken as is

    diagnostics = bank.update(*pairs_step([(2.0, 1.0), (2.0, 1.0), (3.0, -2.0), (3.0, -2.0)]))
    expected = {(1.0, 0.0): [2.0, -1.0], (0.0, 1.0): [1.0, 1.0]}
    for k in range(2):
        assert bank.pending_vectors[k].tolist() == expected[tuple(first[k].tolist())]
    assert diagnostics["temporal_alignment"] == pytest.approx((3 / 13**0.5 + 1 / 5**0.5) / 2, abs=1e-6)
    assert diagnostics["inter_cluster_alignment"] == pytest.approx(1 / 10**0.5, abs=1e-6)
    assert diagnostics["cluster_share/0"] == diagnostics["cluster_share/1"] == 0.5
    assert diagnostics["mean_vector_norm"] == pytest.approx((5**0.5 + 2**0.5) / 2, abs=1e-6)


def test_pending_becomes_active_only_on_activate():
    bank = make_bank()
    assert bank.vectors is None and bank.pending_vectors is None
    assert bank.activate() is False  # nothing to promote

    bank.update(*planted_step(0))
    assert bank.vectors is None  # not active before the optimizer step
    first = bank.pending_vectors.clone()
    assert bank.activate() is True
    assert torch.equal(bank.vectors, first) and bank.pending_vectors is None

    bank.update(*planted_step(1))
    assert torch.equal(bank.vectors, first)  # steering still uses the old bank
    second = bank.pending_vectors.clone()
    bank.activate()
    assert torch.equal(bank.vectors, second)
    assert (bank.num_updates, bank.num_activations, bank.num_skipped_updates) == (2, 2, 0)


def test_ema_basis_is_the_latest_estimate_even_before_activation():
    with_activation, without_activation = make_bank(), make_bank()
    for bank, activate in ((with_activation, True), (without_activation, False)):
        bank.update(*planted_step(0))
        if activate:
            bank.activate()
        bank.update(*planted_step(1))
    assert torch.equal(with_activation.pending_vectors, without_activation.pending_vectors)
    assert without_activation.vectors is None


@pytest.mark.parametrize(
    "differences",
    [
        [],  # no pairs at all
        [(1.0,) * HIDDEN, (2.0,) * HIDDEN],  # 2 pairs < K = 3
        [(1.0,) * HIDDEN] * 5,  # 5 identical pairs: K-means cannot fill 3 clusters
    ],
    ids=["no-pairs", "fewer-pairs-than-K", "fewer-distinct-pairs-than-K"],
)
def test_skipped_update_keeps_the_bank_and_counts(differences):
    bank = make_bank()
    bank.update(*planted_step(0))
    bank.activate()
    active = bank.vectors.clone()
    if differences:
        step = pairs_step(differences)
    else:  # every rollout correct: no incorrect partner
        step = (torch.ones(4, HIDDEN), [0, 0, 1, 1], torch.ones(4))
    diagnostics = bank.update(*step)
    clustered = {"smallest_cluster": 0.0} if len(differences) >= 3 else {}  # K-means ran, one cluster empty
    assert diagnostics == {"num_pairs": float(len(differences)), "skipped": 1.0, **clustered}
    assert bank.num_skipped_updates == 1 and bank.num_updates == 1
    assert bank.pending_vectors is None and torch.equal(bank.vectors, active)
    assert bank.activate() is False and torch.equal(bank.vectors, active)


def _clusters_of(sizes):
    """Pairs along the unit axes e0, e1, e2 (norms 10, 10.5, ...), ``sizes[c]`` of them on axis c."""
    differences = []
    for c, size in enumerate(sizes):
        for i in range(size):
            diff = [0.0] * HIDDEN
            diff[c] = 10.0 + 0.5 * i
            differences.append(tuple(diff))
    return pairs_step(differences)


def test_min_pairs_per_cluster_skips_an_update_with_a_small_cluster():
    step = _clusters_of([4, 4, 1])  # K-means: clusters of 4, 4 and 1 pairs
    loose, strict = make_bank(), make_bank(min_pairs_per_cluster=2)
    built = loose.update(*step)
    assert (built["skipped"], built["smallest_cluster"]) == (0.0, 1.0)
    lonely = [v for v in loose.pending_vectors if v[2] != 0]  # the one-pair cluster's vector: that raw difference
    assert len(lonely) == 1 and lonely[0][2] == 10.0 and lonely[0].norm() == 10.0
    diagnostics = strict.update(*step)
    assert diagnostics == {"num_pairs": 9.0, "skipped": 1.0, "smallest_cluster": 1.0}
    assert strict.pending_vectors is None and strict.num_skipped_updates == 1
    # clusters of 2 each pass; 5 pairs cannot fill 3 clusters of 2, so K-means does not even run
    assert strict.update(*_clusters_of([2, 2, 2]))["skipped"] == 0.0
    assert strict.update(*_clusters_of([2, 2, 1])) == {"num_pairs": 5.0, "skipped": 1.0}
    assert strict.num_skipped_updates == 2 and strict.config()["min_pairs_per_cluster"] == 2


def test_applied_strength_on_hand_values():
    vectors = torch.tensor([[3.0, 4.0], [0.0, 0.5]])  # norms 5 and 0.5
    hidden = torch.tensor([[6.0, 8.0], [0.0, 2.0], [5.0, 0.0], [0.0, 4.0]])  # norms 10, 2, 5, 4: median 4.5
    strength = applied_strength(vectors, 0.5, hidden)
    assert strength.dtype == torch.float64
    assert torch.allclose(strength, torch.tensor([0.5 * 5 / 4.5, 0.5 * 0.5 / 4.5], dtype=torch.float64))
    assert applied_strength(vectors, 0.5, hidden[:3]).tolist() == [0.5, 0.05]  # odd N: the middle norm, 5
    with pytest.raises(ValueError, match="share d"):
        applied_strength(vectors, 0.5, torch.ones(3, 4))
    with pytest.raises(ValueError, match="empty"):
        applied_strength(vectors, 0.5, torch.zeros(0, 2))
    with pytest.raises(ValueError, match="median norm"):
        applied_strength(vectors, 0.5, torch.zeros(3, 2))
    with pytest.raises(ValueError, match="alpha"):
        applied_strength(vectors, float("nan"), hidden)
    metrics = bank_metrics({"num_pairs": 9.0, "skipped": 0.0, "smallest_cluster": 2.0, "applied_strength/1": 0.25})
    assert metrics == {"ase/smallest_cluster": 2.0, "ase/route_1_applied_strength": 0.25}


def test_low_precision_activations_are_computed_in_float32():
    activations, ids, rewards = planted_step(0)
    half = activations.to(torch.bfloat16)
    a, b = make_bank(), make_bank()
    a.update(half, ids, rewards)
    b.update(half.float(), ids, rewards)
    assert a.pending_vectors.dtype == torch.float32
    assert torch.equal(a.pending_vectors, b.pending_vectors)


def test_max_pairs_per_problem_bounds_the_pairs():
    bank = make_bank(max_pairs_per_problem=5)
    diagnostics = bank.update(*planted_step(0))
    assert diagnostics["num_pairs"] == 12 * 5


# ---------------------------------------------------------------------------------------------
# Controls (SPEC §3.6)
# ---------------------------------------------------------------------------------------------


def test_reversed_control_is_exactly_the_negated_bank():
    plain, reversed_ = make_bank(control="none"), make_bank(control="reversed")
    for data_seed in (0, 1):  # the second update exercises matching + EMA
        d_plain = plain.update(*planted_step(data_seed))
        d_reversed = reversed_.update(*planted_step(data_seed))
        assert torch.equal(reversed_.pending_vectors, -plain.pending_vectors)
        for key in ("cluster_share/0", "cluster_share/1", "cluster_share/2", "temporal_alignment"):
            assert d_reversed.get(key) == d_plain.get(key)  # same clusters, same geometry


def test_random_directions_control_keeps_norms_and_cluster_assignments_only():
    seed = 5
    plain, randomised = make_bank(control="none", seed=seed), make_bank(control="random_directions", seed=seed)
    d_plain = plain.update(*planted_step(0))
    d_random = randomised.update(*planted_step(0))
    candidates = plain.pending_vectors  # first estimate = the candidates as is
    vectors = randomised.pending_vectors
    assert torch.allclose(vectors.norm(dim=1), candidates.norm(dim=1), rtol=1e-5)
    assert (cosine_matrix(vectors, candidates).diagonal().abs() < 0.6).all()
    assert all(d_random[f"cluster_share/{k}"] == d_plain[f"cluster_share/{k}"] for k in range(3))
    # Exactly the documented draws: one K-means seed, then one randn(K, d) from the bank's generator.
    generator = torch.Generator().manual_seed(seed)
    torch.randint(0, 2**31 - 1, (1,), generator=generator)
    assert torch.equal(vectors, random_directions_like(candidates, generator))


def test_shuffled_labels_control_flips_pairs_with_the_seeded_generator():
    # K = 1 and six identical contrasts x: the single candidate is mean(sign_i) * x, where sign_i
    # is -1 for the pairs the bank's generator swaps (its first draw, as no cap binds).
    x = tuple(float(i + 1) for i in range(HIDDEN))
    seed = 2  # swaps pairs 1 and 3 of 6
    bank = make_bank(num_vectors=1, control="shuffled_labels", seed=seed)
    bank.update(*pairs_step([x] * 6))
    swapped = torch.rand(6, generator=torch.Generator().manual_seed(seed)) < 0.5
    assert 0 < swapped.sum() < 6 and swapped.sum() != 3  # a draw that makes the check meaningful
    sign = 1.0 - 2.0 * swapped.float()
    expected = (sign[:, None] * torch.tensor(x)).mean(dim=0)
    assert torch.allclose(bank.pending_vectors[0], expected, atol=1e-6)
    # without the control, the candidate is x itself
    plain = make_bank(num_vectors=1, seed=seed)
    plain.update(*pairs_step([x] * 6))
    assert torch.equal(plain.pending_vectors[0], torch.tensor(x))


def test_unstructured_random_control_has_no_bank_and_per_rollout_unit_vectors():
    bank = make_bank(control="unstructured_random", seed=3)
    diagnostics = bank.update(*planted_step(0))
    assert diagnostics == {"num_pairs": 12 * 16}
    assert bank.vectors is None and bank.pending_vectors is None
    assert bank.num_updates == 0 and bank.num_skipped_updates == 0
    vectors = bank.random_rollout_vectors(8)
    assert vectors.shape == (8, HIDDEN)
    assert torch.allclose(vectors.norm(dim=1), torch.ones(8), atol=1e-6)
    assert not torch.equal(bank.random_rollout_vectors(8), vectors)  # fresh vectors each call
    replay = make_bank(control="unstructured_random", seed=3)
    assert torch.equal(replay.random_rollout_vectors(8), vectors)  # seeded
    assert bank.random_rollout_vectors(0).shape == (0, HIDDEN)


# ---------------------------------------------------------------------------------------------
# State: round trips
# ---------------------------------------------------------------------------------------------


def assert_same_state(a: SteeringVectorBank, b: SteeringVectorBank):
    sa, sb = a.state_dict(), b.state_dict()
    for key in ("active", "pending"):
        assert (sa[key] is None) == (sb[key] is None)
        if sa[key] is not None:
            assert torch.equal(sa[key], sb[key])
    assert torch.equal(sa["generator_state"], sb["generator_state"])
    for key in ("num_updates", "num_skipped_updates", "num_activations"):
        assert sa[key] == sb[key]


@pytest.mark.parametrize("control", ["none", "random_directions"])
def test_state_dict_and_save_load_round_trip_exactly(tmp_path, control):
    original = make_bank(control=control, seed=11)
    original.update(*planted_step(0))
    original.activate()
    original.update(*pairs_step([(1.0,) * HIDDEN]))  # a skipped update: counter > 0
    original.update(*planted_step(1))  # pending bank waiting for activation

    # A different seed: the saved generator state must take over (the knob itself stays 999).
    from_state = make_bank(control=control, seed=999)
    from_state.load_state_dict(original.state_dict())
    assert_same_state(original, from_state)

    original.save(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["steering_bank.json", "steering_bank.safetensors"]
    with open(tmp_path / "steering_bank.json") as f:
        assert json.load(f)["num_skipped_updates"] == 1
    from_disk = SteeringVectorBank.load(tmp_path)
    assert_same_state(original, from_disk)
    assert from_disk.config() == original.config()

    # The next steps give bit-identical vectors with or without the round trip.
    for bank in (original, from_state, from_disk):
        bank.activate()
        bank.update(*planted_step(2))
    assert torch.equal(from_state.pending_vectors, original.pending_vectors)
    assert torch.equal(from_disk.pending_vectors, original.pending_vectors)
    assert torch.equal(from_disk.vectors, original.vectors)


def test_save_load_of_an_empty_bank(tmp_path):
    bank = make_bank()
    bank.save(tmp_path)
    loaded = SteeringVectorBank.load(tmp_path)
    assert loaded.vectors is None and loaded.pending_vectors is None
    assert loaded.config() == bank.config()


def test_load_state_dict_rejects_other_shapes():
    state = make_bank().state_dict()
    with pytest.raises(ValueError, match="num_vectors"):
        make_bank(num_vectors=2).load_state_dict(state)
    with pytest.raises(ValueError, match="hidden_size"):
        SteeringVectorBank(hidden_size=HIDDEN + 1).load_state_dict(state)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"hidden_size": 0}, "hidden_size"),
        ({"num_vectors": 0}, "num_vectors"),
        ({"pca_dim": 0}, "pca_dim"),
        ({"ema_beta": 1.5}, "ema_beta"),
        ({"kmeans_n_init": 0}, "kmeans_n_init"),
        ({"max_pairs_per_problem": 0}, "max_pairs_per_problem"),
        ({"min_pairs_per_cluster": 0}, "min_pairs_per_cluster"),
        ({"control": "random"}, "control"),
        ({"num_threads": 0}, "num_threads"),
    ],
)
def test_constructor_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_bank(**kwargs)


def test_update_rejects_bad_activations_and_labels():
    bank = make_bank()
    activations, ids, rewards = planted_step(0)
    with pytest.raises(ValueError, match="hidden_size=32"):
        bank.update(activations[:, :-1], ids, rewards)
    with pytest.raises(ValueError, match="hidden_size=32"):
        bank.update(activations[0], ids, rewards)
    with pytest.raises(ValueError, match="floating point"):
        bank.update(activations.long(), ids, rewards)
    for bad in (float("nan"), float("inf")):
        broken = activations.clone()
        broken[5, 3] = bad
        with pytest.raises(ValueError, match=r"NaN or inf in rows \[5\]"):
            bank.update(broken, ids, rewards)
    with pytest.raises(ValueError, match="rewards"):
        bank.update(activations, ids, rewards[:-1])
    with pytest.raises(ValueError, match="problem_ids"):
        bank.update(activations, ids[:-1], rewards)
    assert bank.num_updates == 0 and bank.num_skipped_updates == 0  # errors change no state
    assert not math.isnan(bank.update(activations, ids, rewards)["inter_cluster_alignment"])
