"""Contrast pairs of ASE-GRPO's bank update (paper §3.2, App. D): within-problem (correct, incorrect) rollout pairs,
their CAA-style activation differences, and the shuffled-labels control. Pure functions of tensors."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

# A rollout is *correct* (positive) when its reward is strictly greater than CORRECT_THRESHOLD (0.5), the package's
# one correctness rule (trl_explore.rewards.correctness). The component hands the bank verdicts already read with
# ExplorationConfig.correct_threshold (1 correct, 0 wrong), which 0.5 splits without ambiguity.
from trl_explore.rewards.correctness import CORRECT_THRESHOLD


def contrast_pairs(
    problem_ids: Sequence[Hashable],
    rewards: torch.Tensor,
    *,
    threshold: float = CORRECT_THRESHOLD,
    max_pairs_per_problem: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Within-problem (correct, incorrect) index pairs (paper §3.2: within-problem pairing).

    Every correct rollout (``reward > threshold``) of a problem is paired with every incorrect one
    (``reward <= threshold``) of the same problem. Order of the result: problems in order of first
    appearance; inside a problem, positives in row order, and for each positive the negatives in row
    order.

    Args:
        problem_ids: ``B`` hashable ids; rows with equal ids belong to the same problem.
        rewards: ``Tensor[B]`` of verifier rewards (any real dtype).
        threshold: rewards strictly above it are correct. Default 0.5 (``CORRECT_THRESHOLD``).
        max_pairs_per_problem: if set and a problem has more pairs than this, keep a uniformly random
            subset of exactly this many (without replacement, drawn from ``generator``), kept in the
            order above. ``None`` (default) keeps all pairs (at most ``(N/2)^2`` per problem).
        generator: CPU ``torch.Generator`` for the capping draws (only used when a cap binds).

    Returns:
        ``LongTensor[P, 2]`` of row indices, column 0 the positive, column 1 the negative.
        ``P`` may be 0.

    Raises:
        ValueError: ``rewards`` not 1-D, length mismatch with ``problem_ids``, non-finite rewards,
            or ``max_pairs_per_problem < 1``.
        TypeError: an unhashable problem id.
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [B], got shape {tuple(rewards.shape)}")
    if len(problem_ids) != rewards.shape[0]:
        raise ValueError(
            f"problem_ids has {len(problem_ids)} entries but rewards has {rewards.shape[0]} rows"
        )
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards contains NaN or inf")
    if max_pairs_per_problem is not None and max_pairs_per_problem < 1:
        raise ValueError(f"max_pairs_per_problem must be >= 1 or None, got {max_pairs_per_problem}")

    correct = (rewards.detach().cpu() > threshold).tolist()
    rows_of: dict[Hashable, list[int]] = {}
    for row, pid in enumerate(problem_ids):
        try:
            rows_of.setdefault(pid, []).append(row)
        except TypeError as err:
            raise TypeError(f"problem_ids[{row}] = {pid!r} is not hashable") from err

    pairs: list[torch.Tensor] = []
    for rows in rows_of.values():
        pos = torch.tensor([r for r in rows if correct[r]], dtype=torch.long)
        neg = torch.tensor([r for r in rows if not correct[r]], dtype=torch.long)
        if len(pos) == 0 or len(neg) == 0:
            continue
        problem_pairs = torch.cartesian_prod(pos, neg).reshape(-1, 2)
        if max_pairs_per_problem is not None and len(problem_pairs) > max_pairs_per_problem:
            keep = torch.randperm(len(problem_pairs), generator=generator)[:max_pairs_per_problem]
            problem_pairs = problem_pairs[keep.sort().values]
        pairs.append(problem_pairs)
    if not pairs:
        return torch.zeros((0, 2), dtype=torch.long)
    return torch.cat(pairs)


def pair_differences(activations: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """CAA-style contrast vectors ``a_pos - a_neg`` (paper §3.2; Rimsky et al. 2024).

    Args:
        activations: ``Tensor[B, d]`` (float32 expected; see ``SteeringVectorBank.update``).
        pairs: ``LongTensor[P, 2]`` from ``contrast_pairs``.

    Returns:
        ``Tensor[P, d]``, same dtype as ``activations``.
    """
    return activations[pairs[:, 0]] - activations[pairs[:, 1]]


def shuffle_pair_labels(
    differences: torch.Tensor, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Shuffled-labels control: swap positive and negative of each pair with probability 1/2.

    Swapping the labels of a pair negates its difference, so this flips the sign of random rows
    (paper App. D: "randomly exchanged before PCA, K-means, and cluster-direction estimation").

    Args:
        differences: ``Tensor[P, d]`` of ``a_pos - a_neg``.
        generator: CPU ``torch.Generator``; exactly one ``torch.rand(P)`` draw is taken from it.

    Returns:
        ``(shuffled Tensor[P, d], swapped BoolTensor[P])`` where ``swapped[i]`` says row i was negated.
    """
    swapped = torch.rand(differences.shape[0], generator=generator) < 0.5
    sign = 1.0 - 2.0 * swapped.to(differences.dtype)
    return differences * sign[:, None], swapped
