"""``DynamicSamplingTrainer``: the dynamic-sampling preset of :class:`~trl_explore.driver.ExplorationTrainer`.

Paper: Yu et al. 2025, "DAPO", arXiv 2503.14476, §3.2. The component is
:class:`~trl_explore.dynamic_sampling.component.DynamicSamplingComponent`; the resampling loop is the driver's
(``trl_explore.driver.resampling``).
"""

from __future__ import annotations

from trl_explore.defaults import resolve_model_and_config
from trl_explore.driver import ExplorationTrainer
from trl_explore.dynamic_sampling.component import DynamicSamplingComponent
from trl_explore.dynamic_sampling.config import DynamicSamplingConfig


class DynamicSamplingTrainer(ExplorationTrainer):
    """GRPO with DAPO's dynamic sampling (one component).

    Args:
        model: as for `GRPOTrainer`; `"embedded"` selects the bundled SmolLM2-135M-Instruct.
        reward_funcs: default `[math_reward]` (the verifiable reward R_m).
        args: a [`DynamicSamplingConfig`].
        Other arguments are passed to `GRPOTrainer`.
    """

    def __init__(self, model, reward_funcs=None, args: DynamicSamplingConfig | None = None, **kwargs):
        model, args = resolve_model_and_config(model, args, DynamicSamplingConfig, "DynamicSampling")
        super().__init__(model, reward_funcs, args=args, components=[DynamicSamplingComponent()], **kwargs)
