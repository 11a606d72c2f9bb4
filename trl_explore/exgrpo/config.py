"""Configuration of the ExGRPO trainer: a ``GRPOConfig`` with ExGRPO's options and the authors' training defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl_explore.driver.config import ExplorationConfig
from trl_explore.exgrpo.options import ExGRPOOptions


@dataclass
class ExGRPOConfig(ExGRPOOptions, ExplorationConfig):
    r"""
    Configuration of ExGRPO: [`ExplorationConfig`] (TRL's `GRPOConfig` plus `grader_mode` and `vllm_enforce_eager`)
    with every option of [`ExGRPOOptions`] (Zhan et al. 2025, "ExGRPO: Learning to Reason from Experience", arXiv
    2510.02245).

    What changes with respect to [`~trl.GRPOConfig`]: correct trajectories of partly solved prompts are kept in a
    replay buffer; once the batch pass rate has passed `replay_start_pass_rate`, up to `replay_ratio` of each batch's
    groups have one rollout replaced by a stored trajectory, trained with the shaped importance weight. The GRPO
    defaults changed here are the authors' (`ExGRPO/exp_scripts/run_exgrpo.sh`): entropy bonus 0.001, advantages
    not divided by the group's standard deviation (`grpo_use_std=False` -> `scale_rewards="none"`) and a loss summed
    over tokens and divided by a constant (`loss_remove_token_mean=True` -> `loss_type="dr_grpo"`); no KL (`beta=0`,
    TRL's default) and temperature 1.0 (TRL's default). The authors also remove PPO clipping
    (`loss_remove_clip=True`); TRL keeps it, which changes nothing at one update per generation (`num_iterations=1`,
    the ratio is then 1).
    """

    entropy_coef: float = field(default=0.001, metadata={"help": "Entropy bonus coefficient (ExGRPO: 0.001)."})
    scale_rewards: str = field(
        default="none",
        metadata={"help": "Advantage scaling: 'group', 'batch' or 'none' (ExGRPO: none, no division by the std)."},
    )
    loss_type: str = field(
        default="dr_grpo",
        metadata={"help": "TRL loss; ExGRPO sums token losses over a constant length ('dr_grpo')."},
    )
