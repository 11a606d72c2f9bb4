"""Configuration of :class:`~trl_explore.ASEGRPOTrainer`: a ``GRPOConfig`` with ASE-GRPO's options."""

from __future__ import annotations

from dataclasses import dataclass

from trl_explore.ase.options import ASEOptions
from trl_explore.driver.config import ExplorationConfig


@dataclass
class ASEConfig(ASEOptions, ExplorationConfig):
    r"""
    Configuration for [`ASEGRPOTrainer`]: [`ExplorationConfig`] (TRL's `GRPOConfig` plus `grader_mode` and
    `vllm_enforce_eager`) with every option of [`ASEOptions`] ("Exploration via Activation-Space Steering for
    Reinforcement Learning with Verifiable Rewards", §3 and App. B/D).

    GRPO's own defaults are the paper's: no KL (`beta=0`) and no entropy bonus (`entropy_coef=0`) ("we use neither
    KL loss nor entropy regularization"). The options themselves are documented on [`ASEOptions`].
    """
