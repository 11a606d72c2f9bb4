"""``OGERTrainer``: the OGER preset of :class:`~trl_explore.driver.ExplorationTrainer` (one component: OGER).

Paper: "OGER: A Robust Offline-Guided Exploration Reward for Hybrid Reinforcement Learning" (§3). The method's
trainer-side wiring is :class:`~trl_explore.oger.component.OGERComponent`; its maths lives in the pure modules of
``trl_explore.oger``.
"""

from __future__ import annotations

from trl_explore.defaults import resolve_model_and_config
from trl_explore.driver import ExplorationTrainer
from trl_explore.oger.component import OGERComponent
from trl_explore.oger.config import OGERConfig
from trl_explore.oger.embedding import TrajectoryEncoder
from trl_explore.oger.options import OGEROptions


class OGERTrainer(ExplorationTrainer):
    """GRPO with OGER (offline-guided exploration reward) on multi-teacher offline data.

    The training dataset needs, per row, a `prompt`, the gold `answer` (for the default verifiable reward)
    and the prompt's teacher trajectories in `args.offline_completions_column` (a list of str, possibly
    empty: such prompts keep all their online completions). `trl_explore.data` builds such datasets.

    Args:
        model: as for `GRPOTrainer`; the string `"embedded"` selects the bundled SmolLM2-135M-Instruct.
        reward_funcs: default `[math_reward, OGERRewardFunction()]`, weighted `[1, 1]` (Eq. 8), or
            `[1, 0]` when `args.use_exploration_reward` is False (the "w/o Reward" ablation).
        args: an [`OGERConfig`].
        encoder: a `TrajectoryEncoder` to use instead of building one from `args.embedding_model`.
        Other arguments are passed to `GRPOTrainer`.

    Attributes:
        oger: the :class:`~trl_explore.oger.component.OGERComponent` (``oger.encoder``: the embedder).

    Raises:
        ValueError: at construction, a row without the offline column or with a non-string or empty trajectory.
            A process that does not hold whole groups is refused earlier, when the `OGERConfig` is built
            (`OGEROptions.apply`).
    """

    def __init__(self, model, reward_funcs=None, args: OGERConfig | None = None,
                 encoder: TrajectoryEncoder | None = None, **kwargs):
        model, args = resolve_model_and_config(model, args, OGERConfig, "OGER")
        component = OGERComponent(OGEROptions.from_config(args), encoder)
        super().__init__(model, reward_funcs, args=args, components=[component], **kwargs)

    @property
    def oger(self) -> OGERComponent:
        return self.component("oger")
