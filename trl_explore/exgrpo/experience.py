"""ExGRPO's maths as pure functions (Zhan et al. 2025, "ExGRPO: Learning to Reason from Experience", arXiv 2510.02245).

ExGRPO keeps the correct trajectories of earlier steps and replays them beside fresh rollouts:

1. **Collection** (§3.1): after a step, a prompt whose group of ``K`` rollouts holds ``k`` correct ones, ``0 < k < K``,
   stores its correct trajectories (with the behaviour log-probs they were sampled with) under its latest correct
   count ``k``. The paper states the pass rate ``Acc(q) = k / K``; the authors' code keys the buckets by ``k`` itself
   and keeps ``experience_lbound = 0 < k <= experience_rbound = 7`` for ``K = 8`` (:func:`collectable`).
2. **Retirement**: a prompt whose ``K`` rollouts are all correct is retired, dropped from the buffer and never
   replayed again (:func:`retired`).
3. **Bucket sampling**: replayed prompts are drawn across buckets with weights from a Gaussian over the correct
   count centred on the medium pass rate, ``w(k) = N(k; K / 2, sigma = 1)`` (:func:`bucket_weights`; the authors'
   ``exp_bucket_manager=normal``), a multinomial over the non-empty buckets, capped at each bucket's size, the excess
   redistributed, without replacement inside a bucket (:func:`allocate_draws`).
4. **Trajectory choice**: of a replayed prompt's stored trajectories, the one with the lowest mean token entropy under
   the *current* policy (:func:`mean_token_entropy`, :func:`lowest_entropy_index`; the authors' ``exp_metric=ent``,
   ``exp_select_mode=argmin``).
5. **Mixing**: a fraction ``rho = 0.5`` of a batch's prompts are replayed prompts (``experience_ratio=0.5``), each
   with ``K - 1`` fresh rollouts and one replayed trajectory (:func:`num_replayed_groups`); replay starts after the
   first step whose batch pass rate exceeds 0.35 (``experience_start_sratio``, :func:`replay_starts`).
6. **Objective** (§3.2): a replayed token is trained with the shaped importance weight ``f(w) = w / (w + gamma)``,
   ``w = pi_theta(o_t) / pi_behaviour(o_t)`` with the behaviour log-probs recorded when the trajectory was collected
   (``exp_is_correct=True``), ``gamma = 0.1`` (``off_policy_reshape=p_div_p_0.1``) and no clipping: the per-token
   loss ``-A * f(w)`` (:func:`replay_per_token_loss`). :func:`replay_advantage_scale` gives the advantage factor with
   which TRL's own clipped objective has exactly that gradient.

Sources, and what could not be confirmed: the paper's text was read through public summaries (the arXiv HTML page's
abstract, papernotes.org and themoonlight.io reviews: buckets by ``Acc(q) = k / K`` with Easy/Medium/Hard examples,
low-entropy selection, mixed-policy objective with importance weighting and shaping, retired set); every number above
comes from the authors' code, github.com/ElliottYan/LUFFY, folder ``ExGRPO/`` (``exp_scripts/run_exgrpo.sh``,
``verl/verl/mix_src/experience/*.py``, ``mix_trainer_experience.py``, ``mix_core_alg.py``). Where the paper's text
and its code could differ (the Gaussian's ``sigma`` in units of correct rollouts rather than of pass rate), the code
is followed.
"""

from __future__ import annotations

import math

import torch

from trl_explore.utils.registry import Registry


def _normal(num_correct: torch.Tensor, num_generations: int, sigma: float) -> torch.Tensor:
    mean = num_generations / 2
    return torch.exp(-((num_correct - mean) ** 2) / (2 * sigma**2)) / math.sqrt(2 * math.pi * sigma**2)


def _uniform(num_correct: torch.Tensor, num_generations: int, sigma: float) -> torch.Tensor:
    return torch.ones_like(num_correct)


BUCKET_WEIGHTINGS = Registry("bucket_weighting", kind="bucket weighting")
"""How replayed prompts are drawn across the buckets (:func:`bucket_weights`)."""
BUCKET_WEIGHTINGS.register("normal", _normal,
                           help="Gaussian over the correct count, N(k; K/2, sigma), as the paper; default")
BUCKET_WEIGHTINGS.register("uniform", _uniform, help="every bucket alike (no prioritisation; an ablation)")

TRAJECTORY_SELECTIONS = Registry("trajectory_selection", kind="trajectory selection")
"""Which of a replayed prompt's stored trajectories is replayed."""
TRAJECTORY_SELECTIONS.register("lowest_entropy", help="the lowest mean token entropy under the current policy, as "
                                                      "the paper; default")
TRAJECTORY_SELECTIONS.register("random", help="one drawn uniformly at random (an ablation)")


def group_correct_counts(correct: torch.Tensor, num_generations: int) -> torch.Tensor:
    """The number of correct rollouts in each group: ``k`` of the pass rate ``Acc = k / K`` (ExGRPO §3.1).

    Args:
        correct: ``[G * K]`` bool (or 0/1), one per rollout, the ``K = num_generations`` rollouts of a prompt
            consecutive (TRL's order).
        num_generations: ``K``, the group size.

    Returns:
        ``[G]`` LongTensor, each in ``[0, K]``.

    Raises:
        ValueError: ``len(correct)`` is not a multiple of ``K``.
    """
    if correct.numel() % num_generations != 0:
        raise ValueError(f"{correct.numel()} rollouts do not form whole groups of {num_generations}")
    return correct.reshape(-1, num_generations).long().sum(dim=1)


def collectable(num_correct: torch.Tensor, num_generations: int) -> torch.Tensor:
    """Whether a group's correct trajectories enter the buffer: ``0 < k < K`` (partly solved; the authors' code keeps
    ``0 < k <= 7`` for ``K = 8``). ``[G]`` counts in, ``[G]`` bool out."""
    return (num_correct > 0) & (num_correct < num_generations)


def retired(num_correct: torch.Tensor, num_generations: int) -> torch.Tensor:
    """Whether a prompt is retired: every one of its ``K`` rollouts is correct (``k = K``). ``[G]`` counts in,
    ``[G]`` bool out."""
    return num_correct == num_generations


def bucket_weights(num_correct: torch.Tensor, num_generations: int, weighting: str = "normal",
                   sigma: float = 1.0) -> torch.Tensor:
    """Unnormalised sampling weight of each bucket (ExGRPO §3.1, "experience selection").

    ``"normal"`` (paper): the Gaussian density ``N(k; K / 2, sigma^2) = exp(-(k - K/2)^2 / (2 sigma^2)) /
    sqrt(2 pi sigma^2)`` of the bucket's correct count ``k``, ``sigma`` in units of correct rollouts (authors' code:
    1). It favours prompts the policy solves about half the time. ``"uniform"``: 1 for every bucket.

    Args:
        num_correct: ``[m]`` the buckets' correct counts ``k`` (float or int).
        num_generations: ``K``.
        weighting: a name of :data:`BUCKET_WEIGHTINGS`.
        sigma: the Gaussian's standard deviation (``> 0``), in correct rollouts.

    Returns:
        ``[m]`` float weights (``> 0``).

    Raises:
        ValueError: an unknown weighting or ``sigma <= 0``.
    """
    if not (math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"bucket sigma must be a finite number > 0, got {sigma}")
    return BUCKET_WEIGHTINGS[BUCKET_WEIGHTINGS.check(weighting)](num_correct.double(), num_generations, sigma)


def allocate_draws(weights: torch.Tensor, sizes: torch.Tensor, num_draws: int,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """How many prompts to draw from each bucket (the authors' ``WeightedBucketSampler.sample``).

    A multinomial of ``num_draws`` over the non-empty buckets with probabilities proportional to ``weights``; a bucket
    asked for more than it holds gives all it holds, and each excess draw goes, one at a time, to a bucket with room
    drawn in proportion to its weight (uniformly when those weights are all 0).

    Args:
        weights: ``[m]`` non-negative bucket weights (:func:`bucket_weights`).
        sizes: ``[m]`` prompts in each bucket.
        num_draws: prompts wanted (``>= 0``).
        generator: the random stream.

    Returns:
        ``[m]`` LongTensor of counts, each ``<= sizes``, summing to ``min(num_draws, sizes.sum())``.

    Raises:
        ValueError: shapes differ, a negative weight or size, or ``num_draws < 0``.
    """
    weights, sizes = weights.double().flatten(), sizes.long().flatten()
    if weights.shape != sizes.shape:
        raise ValueError(f"weights {tuple(weights.shape)} and sizes {tuple(sizes.shape)} differ")
    if (weights < 0).any() or (sizes < 0).any() or num_draws < 0:
        raise ValueError("bucket weights, sizes and the number of draws must be >= 0")
    counts = torch.zeros_like(sizes)
    total = int(sizes.sum())
    if num_draws >= total:
        return sizes.clone()
    if num_draws == 0:
        return counts
    live = (weights * (sizes > 0)).clone()
    if live.sum() == 0:
        live = (sizes > 0).double()
    wanted = torch.multinomial(live / live.sum(), num_draws, replacement=True, generator=generator)
    counts = torch.bincount(wanted, minlength=sizes.numel())
    excess = int((counts - sizes).clamp(min=0).sum())
    counts = torch.minimum(counts, sizes)
    for _ in range(excess):  # num_draws < total: a bucket with room always exists
        room = counts < sizes
        p = weights * room
        p = p if p.sum() > 0 else room.double()
        counts[int(torch.multinomial(p / p.sum(), 1, generator=generator))] += 1
    return counts


def num_replayed_groups(num_groups: int, ratio: float, num_eligible: int) -> int:
    """Groups of a batch that get a replayed trajectory: ``min(num_eligible, floor(ratio * num_groups))`` (authors'
    code: ``int(train_batch_size * experience_ratio)`` prompts, fewer when the buffer holds fewer)."""
    return max(0, min(num_eligible, int(math.floor(ratio * num_groups + 1e-9))))


def replay_starts(batch_pass_rate: float, threshold: float) -> bool:
    """Whether replay switches on after a step: the batch's fraction of correct rollouts exceeds ``threshold``
    (strictly; authors' code: ``experience_start_sratio = 0.35``)."""
    return batch_pass_rate > threshold


def mean_token_entropy(entropies: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean token entropy of each trajectory (nats): ``sum_t H_t m_t / max(sum_t m_t, 1)``.

    Args:
        entropies: ``[B, T]`` the policy's entropy at each completion token (nats).
        mask: ``[B, T]`` 0/1, the trajectory's tokens.

    Returns:
        ``[B]`` mean entropies (0 for an empty row).
    """
    mask = mask.to(entropies.dtype)
    return (entropies * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


def lowest_entropy_index(mean_entropies: torch.Tensor) -> int:
    """Index of the trajectory to replay: the lowest mean entropy, the lower index among ties (``[n]`` in, ``n >= 1``).

    Raises:
        ValueError: no trajectory.
    """
    if mean_entropies.numel() == 0:
        raise ValueError("no stored trajectory to choose from")
    values = mean_entropies.flatten()
    return int(torch.nonzero(values == values.min())[0])


def shaped_importance_weights(per_token_logps: torch.Tensor, behaviour_logps: torch.Tensor,
                              gamma: float = 0.1) -> torch.Tensor:
    """ExGRPO's shaped importance weight of replayed tokens, ``f(w) = w / (w + gamma)``,
    ``w = exp(log pi_theta - log pi_behaviour)`` (§3.2; authors' ``off_policy_reshape=p_div_p_0.1``).

    Args:
        per_token_logps: ``[B, T]`` log-probs (nats) of the replayed tokens under the current policy.
        behaviour_logps: ``[B, T]`` log-probs they were sampled with (recorded at collection).
        gamma: shaping constant (``> 0``; paper 0.1).

    Returns:
        ``[B, T]`` values in ``(0, 1)``, differentiable through ``per_token_logps``.

    Raises:
        ValueError: ``gamma <= 0``.
    """
    if not (math.isfinite(gamma) and gamma > 0):
        raise ValueError(f"policy shaping gamma must be a finite number > 0, got {gamma}")
    w = torch.exp(per_token_logps - behaviour_logps)
    return w / (w + gamma)


def replay_per_token_loss(per_token_logps: torch.Tensor, behaviour_logps: torch.Tensor, advantages: torch.Tensor,
                          gamma: float = 0.1) -> torch.Tensor:
    """Per-token loss of replayed tokens, ``-A * f(w)`` (no clipping; §3.2). ``advantages``: ``[B]``, ``[B, 1]`` or
    ``[B, T]``; the other inputs as :func:`shaped_importance_weights`. Returns ``[B, T]``, unmasked."""
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    return -advantages * shaped_importance_weights(per_token_logps, behaviour_logps, gamma)


def replay_advantage_scale(per_token_logps: torch.Tensor, behaviour_logps: torch.Tensor, old_logps: torch.Tensor,
                           gamma: float = 0.1) -> torch.Tensor:
    """The factor ``c_t`` by which a replayed token's advantage is multiplied so that TRL's objective on it has the
    gradient of ExGRPO's ``-A * f(w_t)``.

    TRL's per-token term is ``-A' r_t`` (inside its clip range), ``r_t = exp(log pi_theta - old_logps)``, with gradient
    ``-A' r_t`` per unit of log-prob; ExGRPO's term ``-A f(w_t)`` has gradient ``-A f'(w_t) w_t = -A gamma w_t /
    (w_t + gamma)^2``. Hence ``c_t = gamma w_t / ((w_t + gamma)^2 r_t)``, detached. With one update per generation
    (``num_iterations = 1``) TRL's ``old_logps`` equal the current log-probs, ``r_t = 1`` and the clip never acts.

    Args:
        per_token_logps: ``[B, T]`` current log-probs (nats).
        behaviour_logps: ``[B, T]`` recorded behaviour log-probs (with ``importance_correction=False``: the current
            ones, ``w = 1``).
        old_logps: ``[B, T]`` TRL's ``old_per_token_logps`` for the rows (the current log-probs when TRL has none).
        gamma: shaping constant (``> 0``).

    Returns:
        ``[B, T]`` positive factors, no gradient.
    """
    if not (math.isfinite(gamma) and gamma > 0):
        raise ValueError(f"policy shaping gamma must be a finite number > 0, got {gamma}")
    logps = per_token_logps.detach()
    w = torch.exp(logps - behaviour_logps.detach())
    r = torch.exp(logps - old_logps.detach())
    return gamma * w / ((w + gamma) ** 2 * r)
