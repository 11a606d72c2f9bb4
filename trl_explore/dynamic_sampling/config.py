"""Configuration of the dynamic-sampling preset: a ``GRPOConfig`` with DAPO's dynamic sampling options."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl_explore.driver.config import ExplorationConfig
from trl_explore.dynamic_sampling.options import DynamicSamplingOptions


@dataclass
class DynamicSamplingConfig(DynamicSamplingOptions, ExplorationConfig):
    r"""
    Configuration of GRPO with DAPO's dynamic sampling (Yu et al. 2025, "DAPO", arXiv 2503.14476, §3.2):
    [`ExplorationConfig`] with every option of [`DynamicSamplingOptions`].

    What changes with respect to [`~trl.GRPOConfig`]: groups whose rewards all agree are refused and the batch is
    refilled with groups of new prompts (at most `dynamic_sampling_max_gen_batches` generation rounds). DAPO's
    token-level loss is TRL's default (`loss_type="dapo"`); its clip-higher is set here (`epsilon_high=0.28`, the
    paper's §3.1); its overlong reward shaping (§3.4) is not part of this preset.
    """

    epsilon_high: float = field(default=0.28, metadata={"help": "Upper clip epsilon (DAPO clip-higher: 0.28)."})
