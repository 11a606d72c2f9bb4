"""``ExGRPOTrainer``: the ExGRPO preset of :class:`~trl_explore.driver.ExplorationTrainer` (one component: ExGRPO).

Paper: Zhan et al. 2025, "ExGRPO: Learning to Reason from Experience", arXiv 2510.02245. The trainer-side wiring is
:class:`~trl_explore.exgrpo.component.ExGRPOComponent`; the maths lives in :mod:`trl_explore.exgrpo.experience`.
"""

from __future__ import annotations

from trl_explore.defaults import resolve_model_and_config
from trl_explore.driver import ExplorationTrainer
from trl_explore.exgrpo.component import ExGRPOComponent
from trl_explore.exgrpo.config import ExGRPOConfig
from trl_explore.exgrpo.options import ExGRPOOptions


class ExGRPOTrainer(ExplorationTrainer):
    """GRPO with ExGRPO's experience replay.

    The training dataset needs, per row, a `prompt` and the gold `answer` (for the default verifiable reward, the first
    reward function, which also decides which rollouts are correct); a `problem_id` column keys the buffer (else a
    hash of the prompt). No offline column is read: the replayed trajectories are the policy's own.

    Args:
        model: as for `GRPOTrainer`; the string `"embedded"` selects the bundled SmolLM2-135M-Instruct.
        reward_funcs: default `[math_reward]` (the verifiable reward R_m).
        args: an [`ExGRPOConfig`].
        Other arguments are passed to `GRPOTrainer`.

    Attributes:
        exgrpo: the :class:`~trl_explore.exgrpo.component.ExGRPOComponent` (``exgrpo.buffer``: the replay buffer).
    """

    def __init__(self, model, reward_funcs=None, args: ExGRPOConfig | None = None, **kwargs):
        model, args = resolve_model_and_config(model, args, ExGRPOConfig, "ExGRPO")
        component = ExGRPOComponent(ExGRPOOptions.from_config(args))
        super().__init__(model, reward_funcs, args=args, components=[component], **kwargs)

    @property
    def exgrpo(self) -> ExGRPOComponent:
        return self.component("exgrpo")
