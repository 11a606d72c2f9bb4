"""ExGRPO's options (:class:`ExGRPOOptions`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trl_explore.driver.config import ComponentOptions
from trl_explore.exgrpo.experience import BUCKET_WEIGHTINGS, TRAJECTORY_SELECTIONS

SUPPORTED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
"""TRL losses whose per-token term is ``-min(r A, clip(r) A)``: the replayed rows' advantage factor
(:func:`~trl_explore.exgrpo.experience.replay_advantage_scale`) gives them ExGRPO's gradient."""


@dataclass
class ExGRPOOptions(ComponentOptions):
    r"""
    Options of ExGRPO (Zhan et al. 2025, "ExGRPO: Learning to Reason from Experience", arXiv 2510.02245, §3): a
    buffer of earlier correct trajectories, bucketed by their prompt's latest correct count and replayed beside fresh
    rollouts with a shaped importance weight. Defaults are the authors' (`ExGRPO/exp_scripts/run_exgrpo.sh` in
    github.com/ElliottYan/LUFFY); the maths is in `trl_explore.exgrpo.experience`.

    Parameters:
        replay_ratio (`float`, defaults to `0.5`):
            rho, the fraction of a batch's prompt groups that get a replayed trajectory (authors'
            `experience_ratio=0.5`); fewer when fewer prompts of the batch are in the buffer.
        replay_start_pass_rate (`float`, defaults to `0.35`):
            Replay (and collection) starts after the first step whose fraction of correct rollouts exceeds this
            (authors' `experience_start_sratio=0.35`); 0 starts after the first step with any correct rollout.
        bucket_weighting (`str`, defaults to `"normal"`):
            How replayed prompts are drawn across buckets: `"normal"` (paper: a Gaussian over the correct count
            centred on K/2) or `"uniform"` (an ablation).
        bucket_sigma (`float`, defaults to `1.0`):
            The Gaussian's standard deviation, in correct rollouts (authors' code: 1).
        trajectory_selection (`str`, defaults to `"lowest_entropy"`):
            Which stored trajectory of a prompt is replayed: `"lowest_entropy"` (paper: the lowest mean token
            entropy under the current policy) or `"random"` (an ablation).
        importance_correction (`bool`, defaults to `True`):
            Weigh replayed tokens by `w = pi_theta / pi_behaviour` with the behaviour log-probs recorded at collection
            (authors' `exp_is_correct=True`); False takes the current policy as the behaviour (`w = 1` at the
            first update).
        policy_shaping_gamma (`float`, defaults to `0.1`):
            gamma of the shaping `f(w) = w / (w + gamma)` of replayed tokens (authors' `p_div_p_0.1`).

    A rollout is correct when the first reward function (the verifiable reward R_m) gives more than the shared option
    `ExplorationConfig.correct_threshold` (default 0.5; `trl_explore.rewards.correctness`, the rule OGER and
    ASE-GRPO read too): buckets, retirement and the replay start use it.

    Checks against the training configuration (`apply`): groups of at least 2, whole groups on every process,
    `loss_type` one of `grpo`, `bnpo`, `dr_grpo`, `dapo` and token-level importance sampling (the replayed tokens'
    gradient is set through TRL's per-token ratio).
    """

    section = "ExGRPO options (trl_explore.ExGRPOOptions)"

    replay_ratio: float = field(
        default=0.5, metadata={"help": "rho: fraction of a batch's groups given a replayed trajectory (paper: 0.5)."}
    )
    replay_start_pass_rate: float = field(
        default=0.35, metadata={"help": "Replay starts after a step whose pass rate exceeds this (paper: 0.35)."}
    )
    bucket_weighting: str = field(
        default="normal",
        metadata={"help": "Drawing across buckets: " + BUCKET_WEIGHTINGS.describe() + ".",
                  "choices": list(BUCKET_WEIGHTINGS)},
    )
    bucket_sigma: float = field(
        default=1.0, metadata={"help": "Std of the bucket Gaussian, in correct rollouts (paper code: 1)."}
    )
    trajectory_selection: str = field(
        default="lowest_entropy",
        metadata={"help": "Which stored trajectory is replayed: " + TRAJECTORY_SELECTIONS.describe() + ".",
                  "choices": list(TRAJECTORY_SELECTIONS)},
    )
    importance_correction: bool = field(
        default=True, metadata={"help": "Importance ratio to the recorded behaviour log-probs (paper: on)."}
    )
    policy_shaping_gamma: float = field(
        default=0.1, metadata={"help": "gamma of the replayed-token shaping f(w) = w / (w + gamma)."}
    )

    def validate(self) -> None:
        for name in ("replay_ratio", "replay_start_pass_rate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise self.error(f"{name} must be a number in [0, 1], got {value!r}")
        BUCKET_WEIGHTINGS.check(self.bucket_weighting)
        TRAJECTORY_SELECTIONS.check(self.trajectory_selection)
        for name in ("bucket_sigma", "policy_shaping_gamma"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value)
                                                                                       and value > 0):
                raise self.error(f"{name} must be a finite number > 0, got {value!r}")
        if not isinstance(self.importance_correction, bool):
            raise self.error(f"importance_correction must be a bool, got {self.importance_correction!r}",
                             TypeError)

    def apply(self, args) -> None:
        if args.num_generations < 2:
            raise self.error(f"a group needs at least 2 rollouts (a replayed one replaces one of them); "
                             f"num_generations={args.num_generations}")
        per_process = args.per_device_train_batch_size * args.steps_per_generation
        if per_process % args.num_generations != 0:
            raise self.error(
                f"ExGRPO replays into whole groups, so every process must hold whole groups: "
                f"per_device_train_batch_size * steps_per_generation = {args.per_device_train_batch_size} * "
                f"{args.steps_per_generation} = {per_process} must be a multiple of num_generations = "
                f"{args.num_generations}"
            )
        if args.loss_type not in SUPPORTED_LOSS_TYPES:
            raise self.error(f"loss_type={args.loss_type!r} is not supported with ExGRPO's replayed rows; use one of "
                             f"{', '.join(SUPPORTED_LOSS_TYPES)}")
        if args.importance_sampling_level != "token":
            raise self.error(f"importance_sampling_level={args.importance_sampling_level!r}: ExGRPO weighs replayed "
                             f"tokens one by one; use 'token'")
