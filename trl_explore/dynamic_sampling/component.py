"""DAPO's dynamic sampling as a :class:`~trl_explore.driver.components.Component` (one hook: ``select_groups``).

Paper: Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale", arXiv 2503.14476, §3.2
(the constraint ``0 < |{o_i : is_equivalent(a, o_i)}| < G`` of Eq. 11). The driver does the resampling
(``trl_explore.driver.resampling``); this component only says which groups are informative.
"""

from __future__ import annotations

import torch

from trl_explore.driver.components import Component, GroupSelection
from trl_explore.dynamic_sampling.filtering import flat_groups
from trl_explore.dynamic_sampling.options import DynamicSamplingOptions


class DynamicSamplingComponent(Component):
    """Refuses the flat groups of each training generation round (``filtering.flat_groups`` on the option's metric);
    the driver refills the batch with groups of new prompts, up to ``dynamic_sampling_max_gen_batches`` rounds.

    Metrics: ``dynamic_sampling/flat_group_frac`` (flat groups of TRL's own generation, all processes: the batch
    without dynamic sampling) and ``dynamic_sampling/flat_group_frac_resampled`` (of the further rounds); the
    driver's ``resample/*`` (rounds, extra completions and seconds, cap reached) and ``frac_reward_zero_std_trained``
    (flat groups left in the trained batch).
    """

    name = "dynamic_sampling"
    options_class = DynamicSamplingOptions
    tags = ("dapo", "dynamic-sampling")
    console_keys = ("dynamic_sampling/flat_group_frac", "resample/generation_rounds")

    def values(self, batch) -> torch.Tensor:
        """``[N]`` the values flatness is judged on (every process's rows): the weighted total reward, or one reward
        function's column (``dynamic_sampling_metric``).

        Raises:
            ValueError: a metric that is neither ``"reward"`` nor a reward function's name.
        """
        metric = self.options.dynamic_sampling_metric
        if metric == "reward":
            return batch.rewards
        if metric not in batch.reward_func_names:
            raise ValueError(f"DynamicSamplingOptions.dynamic_sampling_metric={metric!r} is neither 'reward' nor one "
                             f"of the reward functions {list(batch.reward_func_names)}")
        return batch.rewards_per_func[:, batch.reward_func_names.index(metric)]

    def select_groups(self, batch):
        if batch.mode != "train":
            return None
        opts, group = self.options, batch.rollout.num_generations
        flat = flat_groups(self.values(batch), group, opts.dynamic_sampling_tolerance)  # [all groups], every process
        name = "flat_group_frac" if batch.round == 0 else "flat_group_frac_resampled"
        self.log_metric(name, flat.float().mean().item(), "none", batch.mode)  # gathered values: the same everywhere
        start, stop, _ = batch.process_slice.indices(batch.rewards_per_func.shape[0])
        local = flat[start // group:stop // group]
        return GroupSelection(keep=~local, max_rounds=opts.dynamic_sampling_max_gen_batches,
                              on_cap=opts.dynamic_sampling_on_cap)
