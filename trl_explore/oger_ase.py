"""OGER + ASE-GRPO in one run: the preset of the two components, in this order: ``OGERComponent``, ``ASEComponent``.

Any composition also runs without this module: ``ExplorationTrainer(model, args=ExplorationConfig(...),
components=[OGERComponent(OGEROptions(...)), ASEComponent(ASEOptions(...))])``. What the preset adds: one config class
for ``TrlParser`` (every option of both methods; OGER's entropy bonus 0.01) and the checks of options that contradict
each other across the two methods.

Semantics of the composition (each one tested in ``tests/test_oger_ase.py``):

* The online completions of each prompt are routed: the clean route plus K steering routes (ASE, balanced).
* ``H_last`` (OGER Eq. 6) comes from the distribution that sampled each token, the route's: HF ``generate`` records
  it under the steering hook; with vLLM a teacher-forced forward under the same steering computes it.
* OGER's divergence and ``H_last`` are computed for every online row, on every route.
* Replacement takes the lowest-divergence rows of each group across all routes (OGER §3.2).
* A replaced row (``Rollout.offline``) has route ``-1``: no behaviour log-probs (NaN, so no importance-sampling
  correction), importance weight 1, no steering offset; it leaves TRL's objective and is trained by policy shaping
  (LUFFY).
* ASE's contrast pairs leave offline rows out (``include_offline_in_bank=False``); the option puts them in, with
  their clean readouts.
* Both methods' metrics (``oger/*``, ``ase/*``) and per-completion columns (``is_offline``, ``teacher``,
  ``divergence``, ``last_token_entropy``, ``route``) are logged.
* The bank (checkpoint folder ``steering_bank/``), the replacement draws and the routes (functions of the seed and
  the step) resume exactly; with several processes each holds whole groups and all hold process 0's bank.
"""

from __future__ import annotations

from dataclasses import dataclass

from trl_explore.ase.bank import SteeringVectorBank
from trl_explore.ase.component import ASEComponent
from trl_explore.ase.options import ASEOptions
from trl_explore.defaults import resolve_model_and_config
from trl_explore.driver import ExplorationTrainer
from trl_explore.oger.component import OGERComponent
from trl_explore.oger.config import OGERConfig
from trl_explore.oger.embedding import TrajectoryEncoder
from trl_explore.oger.options import OGEROptions


def check_composition(oger: OGEROptions, ase: ASEOptions, args) -> None:
    """Refuse OGER and ASE options that contradict each other.

    Raises:
        ValueError: ``include_offline_in_bank`` with no replacement; vLLM with prompt-unsteered routes and the entropy
            refinement (a teacher-forced forward can only steer every position).
    """
    if ase.include_offline_in_bank and oger.num_replacements == 0:
        raise ValueError(
            "include_offline_in_bank=True but num_replacements=0: no offline row ever enters a group; set "
            "num_replacements >= 1 or leave include_offline_in_bank False"
        )
    if args.use_vllm and not ase.steer_prompt and oger.entropy_refinement:
        raise ValueError(
            "use_vllm=True with steer_prompt=False and entropy_refinement=True: H_last of a steered rollout is then "
            "recomputed by a teacher-forced forward, which can only steer every position; set steer_prompt=True "
            "or entropy_refinement=False"
        )


@dataclass
class OGERASEConfig(ASEOptions, OGERConfig):
    r"""
    Configuration for [`OGERASETrainer`]: every option of [`OGERConfig`] (OGER's, with its entropy bonus 0.01) and of
    [`ASEOptions`]. Both methods use no KL. Each process must hold whole groups (OGER's replacement works within a
    group).

    Raises:
        ValueError: options of the two methods that contradict each other (:func:`check_composition`).
    """

    def __post_init__(self):
        super().__post_init__()
        check_composition(self, self, self)


class OGERASETrainer(ExplorationTrainer):
    """GRPO with OGER's hybrid groups and exploration reward and ASE-GRPO's steered rollouts, in one run.

    The dataset needs what both methods need: `prompt`, `answer`, the offline column (OGER) and optionally a
    problem id column (ASE).

    Args:
        model: as for `GRPOTrainer`; `"embedded"` selects the bundled SmolLM2-135M-Instruct.
        reward_funcs: default `[math_reward, OGERRewardFunction()]`; `reward_funcs[args.correctness_reward_index]`
            labels rollouts for the bank.
        args: an [`OGERASEConfig`].
        encoder: a `TrajectoryEncoder` (OGER); bank: a `SteeringVectorBank` to start from (ASE).

    Attributes:
        oger, ase: the two components.

    Raises:
        ValueError / NotImplementedError: everything `OGERTrainer` and `ASEGRPOTrainer` raise at construction.
    """

    def __init__(self, model, reward_funcs=None, args: OGERASEConfig | None = None,
                 encoder: TrajectoryEncoder | None = None, bank: SteeringVectorBank | None = None, **kwargs):
        model, args = resolve_model_and_config(model, args, OGERASEConfig, "OGER-ASE")
        oger = OGERComponent(OGEROptions.from_config(args), encoder)
        ase = ASEComponent(ASEOptions.from_config(args), bank)
        check_composition(oger.options, ase.options, args)
        super().__init__(model, reward_funcs, args=args, components=[oger, ase], **kwargs)

    @property
    def oger(self) -> OGERComponent:
        return self.component("oger")

    @property
    def ase(self) -> ASEComponent:
        return self.component("ase")


__all__ = ["OGERASEConfig", "OGERASETrainer", "check_composition"]
