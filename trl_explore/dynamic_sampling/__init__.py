"""DAPO's dynamic sampling (Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale", arXiv
2503.14476, §3.2): groups whose rewards all agree carry no gradient; they are refused and the batch is refilled with
groups of new prompts (the driver's batch-level resampling) until it holds enough informative groups.

The rule is in ``filtering`` (pure), the options in ``options``, the component in ``component``; the preset
``DynamicSamplingConfig`` / ``DynamicSamplingTrainer`` are loaded on first access (they import TRL).
"""

from trl_explore.utils.lazy import lazy_exports

_LAZY = {
    "DynamicSamplingComponent": "trl_explore.dynamic_sampling.component",
    "DynamicSamplingConfig": "trl_explore.dynamic_sampling.config",
    "DynamicSamplingOptions": "trl_explore.dynamic_sampling.options",
    "DynamicSamplingTrainer": "trl_explore.dynamic_sampling.trainer",
    "flat_groups": "trl_explore.dynamic_sampling.filtering",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _LAZY)
