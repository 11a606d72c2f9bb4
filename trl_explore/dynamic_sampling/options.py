"""Options of DAPO's dynamic sampling (:class:`DynamicSamplingOptions`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trl_explore.driver.config import ComponentOptions

ON_CAP = ("drop", "error")
"""What happens when the cap on generation rounds is reached with too few informative groups."""


@dataclass
class DynamicSamplingOptions(ComponentOptions):
    r"""
    Options of DAPO's dynamic sampling (Yu et al. 2025, "DAPO", arXiv 2503.14476, §3.2): refuse groups whose rewards
    all agree and refill the batch with groups of new prompts until it holds ``B`` informative ones. Peers:
    verl's DAPO recipe (``algorithm.filter_groups``: ``enable``, ``metric``, ``max_num_gen_batches``), NeMo-RL
    (``use_dynamic_sampling``, ``dynamic_sampling_max_gen_batches``), SkyRL (``dynamic_sampling.type`` "filter",
    ``max_sample_batches``).

    Parameters:
        dynamic_sampling_metric (`str`, defaults to `"reward"`):
            The value whose agreement makes a group flat: `"reward"` (the weighted sum of the reward functions, as
            TRL's advantages see it: a flat group has advantage 0) or the name of one reward function (TRL's
            `reward_func_names`, e.g. `"math_verify"` for DAPO's accuracy; verl's `metric: acc`).
        dynamic_sampling_tolerance (`float`, defaults to `0.0`):
            The largest spread (max - min) within a group that still counts as flat: 0 is exact equality (no float
            noise decides); a positive value for graded rewards (`filtering.flat_groups`).
        dynamic_sampling_max_gen_batches (`int`, defaults to `3`):
            Generation rounds per training batch, the first included (verl `max_num_gen_batches`, NeMo-RL
            `dynamic_sampling_max_gen_batches`, SkyRL `max_sample_batches`); `<= 0`: no cap (as in verl).
        dynamic_sampling_on_cap (`str`, defaults to `"drop"`):
            At the cap with too few informative groups: `"drop"` fills the batch with flat groups, taken out of the
            objective (their rows count in no normaliser), and logs a warning; `"error"` raises, as verl and NeMo-RL
            do.
    """

    section = "Dynamic sampling options (trl_explore.dynamic_sampling.DynamicSamplingOptions)"

    dynamic_sampling_metric: str = field(
        default="reward",
        metadata={"help": "Flat groups are judged on 'reward' (the weighted total TRL's advantages use) or on the "
                          "reward function of that name (DAPO: the verifier)."},
    )
    dynamic_sampling_tolerance: float = field(
        default=0.0, metadata={"help": "Largest within-group spread counted as flat; 0 = exact equality."}
    )
    dynamic_sampling_max_gen_batches: int = field(
        default=3, metadata={"help": "Generation rounds per batch, the first included (verl max_num_gen_batches); "
                                     "<= 0: no cap."}
    )
    dynamic_sampling_on_cap: str = field(
        default="drop", metadata={"help": "At the cap: 'drop' (fill with flat groups, dropped from the objective; "
                                          "logged) or 'error' (verl / NeMo-RL).", "choices": list(ON_CAP)}
    )

    def validate(self) -> None:
        tol = self.dynamic_sampling_tolerance
        if not (isinstance(tol, (int, float)) and math.isfinite(tol) and tol >= 0):
            raise self.error(f"dynamic_sampling_tolerance must be a finite number >= 0, got {tol!r}")
        if self.dynamic_sampling_on_cap not in ON_CAP:
            raise self.error(f"dynamic_sampling_on_cap={self.dynamic_sampling_on_cap!r}; valid: {', '.join(ON_CAP)}")
        if not isinstance(self.dynamic_sampling_max_gen_batches, int):
            raise self.error(f"dynamic_sampling_max_gen_batches must be an int, got "
                             f"{self.dynamic_sampling_max_gen_batches!r}", TypeError)

    def apply(self, args) -> None:
        group = getattr(args, "num_generations", None)
        if group is not None and group < 2:
            raise self.error(f"num_generations={group}: a group of one is always flat; use at least 2")
