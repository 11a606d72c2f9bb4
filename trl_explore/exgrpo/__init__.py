"""ExGRPO: learning to reason from experience (Zhan et al. 2025): a replay buffer of the policy's own correct
trajectories, bucketed by pass rate and replayed with a shaped importance weight.

The pure maths is in ``experience``, the buffer in ``buffer``; ``ExGRPOOptions`` and ``ExGRPOConfig`` are loaded on
first access (the config imports TRL).
"""

from trl_explore.utils.lazy import lazy_exports

_LAZY = {
    "ExGRPOComponent": "trl_explore.exgrpo.component",
    "ExGRPOConfig": "trl_explore.exgrpo.config",
    "ExGRPOOptions": "trl_explore.exgrpo.options",
    "ExGRPOTrainer": "trl_explore.exgrpo.trainer",
    "ExperienceBuffer": "trl_explore.exgrpo.buffer",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _LAZY)
