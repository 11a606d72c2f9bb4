"""OGER + ASE-GRPO in one run: offline-guided exploration and activation-space exploration, composed.

:class:`OGERASETrainer` is the driver with two components, in this order: ``OGERComponent``, ``ASEComponent``.
Semantics of the composition (each one tested in ``tests/test_oger_ase.py``):

* The online completions of each prompt are routed: the clean route plus K steering routes (ASE, balanced).
* ``H_last`` (OGER Eq. 6) comes from the distribution that sampled each token, the route's: HF ``generate`` records
  it under the steering hook; with vLLM a teacher-forced forward under the same steering computes it.
* OGER's divergence and ``H_last`` are computed for every online row, on every route.
* Replacement takes the lowest-divergence rows of each group across all routes (OGER §3.2).
* A replaced row has route ``-1``: no behaviour log-probs (NaN, so no importance-sampling correction), importance
  weight 1, no steering offset; it leaves TRL's objective and is trained by policy shaping (LUFFY).
* ASE's contrast pairs leave offline rows out (``include_offline_in_bank=False``); the option puts them in, with
  their clean readouts.
* Both methods' metrics (``oger/*``, ``ase/*``) and per-completion columns (``is_offline``, ``teacher``,
  ``divergence``, ``last_token_entropy``, ``route``) are logged.
* The bank (checkpoint folder ``steering_bank/``), the replacement draws and the routes (functions of the seed and
  the step) resume exactly; with several processes each holds whole groups and all hold process 0's bank.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trl_explore.ase import setup as ase_setup
from trl_explore.ase.bank import SteeringVectorBank
from trl_explore.ase.component import ASEComponent
from trl_explore.ase.config import ASEConfig
from trl_explore.defaults import resolve_model_and_config
from trl_explore.driver import ExplorationTrainer
from trl_explore.oger import setup as oger_setup
from trl_explore.oger.component import OGERComponent
from trl_explore.oger.config import OGERConfig
from trl_explore.oger.embedding import TrajectoryEncoder


@dataclass
class OGERASEConfig(OGERConfig, ASEConfig):
    r"""
    Configuration for [`OGERASETrainer`]: every option of [`OGERConfig`] and of [`ASEConfig`], plus
    `include_offline_in_bank`. Where the two differ on a GRPO default, OGER's wins (entropy bonus 0.01); both use
    no KL. Each process must hold whole groups (OGER's replacement works within a group).

    Parameters:
        include_offline_in_bank (`bool`, defaults to `False`):
            Let the offline (teacher) rows of the hybrid groups form ASE's correct-vs-incorrect contrast pairs.
            Default: only online rows do, as in ASE-GRPO alone.

    Raises:
        ValueError: options of the two methods that contradict each other (see `__post_init__`).
    """

    include_offline_in_bank: bool = field(
        default=False, metadata={"help": "Let offline (teacher) rows form ASE's contrast pairs (default: online only)."}
    )

    def __post_init__(self):
        super().__post_init__()
        if self.include_offline_in_bank and self.num_replacements == 0:
            raise ValueError(
                "include_offline_in_bank=True but num_replacements=0: no offline row ever enters a group; set "
                "num_replacements >= 1 or leave include_offline_in_bank False"
            )
        if self.include_offline_in_bank and self.bank_control == "unstructured_random":
            raise ValueError("include_offline_in_bank=True with bank_control='unstructured_random', which has no bank")
        if self.use_vllm and not self.steer_prompt and self.entropy_refinement:
            raise ValueError(
                "use_vllm=True with steer_prompt=False and entropy_refinement=True: H_last of a steered rollout is then "
                "recomputed by a teacher-forced forward, which can only steer every position; set steer_prompt=True "
                "or entropy_refinement=False"
            )


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

    Raises:
        ValueError / NotImplementedError: everything `OGERTrainer` and `ASEGRPOTrainer` raise at construction.
    """

    _tag_names = ["trl", "grpo", "oger", "ase-grpo", "activation-steering", "trl-explore"]
    _name = "OGER + ASE-GRPO"

    def __init__(self, model, reward_funcs=None, args: OGERASEConfig | None = None,
                 encoder: TrajectoryEncoder | None = None, bank: SteeringVectorBank | None = None, **kwargs):
        model, args = resolve_model_and_config(model, args, OGERASEConfig, "OGER-ASE")
        if not isinstance(args, OGERASEConfig):
            raise TypeError(f"OGERASETrainer needs an OGERASEConfig, got {type(args).__name__}")
        reward_funcs = oger_setup.prepare(args, reward_funcs, kwargs.get("train_dataset"))
        reward_funcs = ase_setup.prepare(model, args, reward_funcs, kwargs, name="OGERASETrainer")
        oger, ase = OGERComponent(encoder), ASEComponent(bank, include_offline_in_bank=args.include_offline_in_bank)
        with ase_setup.engine_context(args):
            super().__init__(model, reward_funcs, args=args, components=[oger, ase], **kwargs)
        self.oger, self.ase, self.encoder = oger, ase, oger.encoder
        self.bank, self.steerer, self.vllm_steerer = ase.bank, ase.steerer, ase.vllm_steerer
        self.bank_diagnostics = ase.bank_diagnostics


__all__ = ["OGERASEConfig", "OGERASETrainer"]
