"""``OGERTrainer``: the OGER preset of :class:`~trl_explore.driver.ExplorationTrainer` (one component: OGER).

Paper: "OGER: A Robust Offline-Guided Exploration Reward for Hybrid Reinforcement Learning" (§3). The method's
trainer-side wiring is :class:`~trl_explore.oger.component.OGERComponent`; its maths lives in the pure modules of
``trl_explore.oger``. This file builds the default rewards, checks the data and starts the driver.
"""

from __future__ import annotations

import textwrap

from trl_explore.defaults import resolve_model_and_config
from trl_explore.driver import ExplorationTrainer
from trl_explore.oger import setup as oger_setup
from trl_explore.oger.component import OGERComponent
from trl_explore.oger.config import OGERConfig
from trl_explore.oger.embedding import TrajectoryEncoder
from trl_explore.vllm_engine import engine_options, use_reload_weights_on_cpu


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

    Raises:
        ValueError: at the first batch, if a row lacks the offline column or holds a non-string
            trajectory, or if a process does not hold whole groups.
    """

    _tag_names = ["trl", "grpo", "oger", "trl-explore"]
    _name = "OGER"
    _paper = {
        "title": "OGER: A Robust Offline-Guided Exploration Reward for Hybrid Reinforcement Learning",
        # docstyle-ignore
        "citation": textwrap.dedent("""\
            @article{ma2025oger,
                title  = {{OGER: A Robust Offline-Guided Exploration Reward for Hybrid Reinforcement Learning}},
                author = {Xinyu Ma and Mingzhou Xu and Xuebo Liu and Chang Jin and Qiang Wang and Derek F. Wong and Min Zhang},
                year   = 2026,
            }"""),
    }

    def __init__(self, model, reward_funcs=None, args: OGERConfig | None = None, encoder: TrajectoryEncoder | None = None, **kwargs):
        model, args = resolve_model_and_config(model, args, OGERConfig, "OGER")
        reward_funcs = oger_setup.prepare(args, reward_funcs, kwargs.get("train_dataset"))
        component = OGERComponent(encoder)
        with engine_options(enforce_eager=True if args.use_vllm and args.vllm_enforce_eager else None):
            super().__init__(model, reward_funcs, args=args, components=[component], **kwargs)
        if self.use_vllm:
            use_reload_weights_on_cpu(self.vllm_generation)
        self.oger = component
        self.encoder = component.encoder

    def _offline_for_group(self, rows, group, need_embeddings: bool = True):
        """The group's teacher trajectories, names and embeddings (see ``OGERComponent.offline_for_group``)."""
        return self.oger.offline_for_group(rows, group, need_embeddings)
