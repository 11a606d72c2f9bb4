"""``ASEGRPOTrainer``: the ASE-GRPO preset of :class:`~trl_explore.driver.ExplorationTrainer` (one component).

Paper: "Exploration via Activation-Space Steering for Reinforcement Learning with Verifiable Rewards" (§3, App. B and
D). The method's trainer-side wiring is :class:`~trl_explore.ase.component.ASEComponent` (routing, steering,
behaviour log-probs, readouts, bank updates, truncated importance weights); its maths lives in the pure modules of
``trl_explore.ase``.

Cost: no extra forward pass. The behaviour log-probs cost one log-softmax over the vocabulary per decoding step;
the readouts cost a ``[B, d]`` gather in a hook on TRL's forward. (``ActivationSteeringGenerator.score``, a
teacher-forced replay with the hook on, gives the same numbers for one extra no-grad forward over the batch; the
tests use it as the reference.)
"""

from __future__ import annotations

from trl_explore.ase.bank import SteeringVectorBank
from trl_explore.ase.component import BANK_DIR, ASEComponent
from trl_explore.ase.config import ASEConfig
from trl_explore.ase.options import ASEOptions
from trl_explore.defaults import resolve_model_and_config
from trl_explore.driver import ExplorationTrainer

__all__ = ["ASEGRPOTrainer", "BANK_DIR"]


class ASEGRPOTrainer(ExplorationTrainer):
    """GRPO with ASE (activation-space exploration): steered rollouts, unsteered policy, truncated IS.

    The training dataset needs a `prompt`, the gold `answer` for the default verifier reward and, optionally,
    a problem id column (`args.problem_id_column`; default: a hash of the prompt).

    Args:
        model: as for `GRPOTrainer`; the string `"embedded"` selects the bundled SmolLM2-135M-Instruct.
        reward_funcs: default `[math_reward]`; `reward_funcs[args.correctness_reward_index]` must be the
            verifier reward `R_m` in {0, 1} that labels rollouts for the bank.
        args: an [`ASEConfig`].
        bank: a `SteeringVectorBank` to start from (e.g. a saved one); default: an empty bank built from `args`.
        Other arguments are passed to `GRPOTrainer`.

    Attributes:
        ase: the :class:`~trl_explore.ase.component.ASEComponent`: ``ase.bank`` (the `SteeringVectorBank`, saved in
            `steering_bank/` with every checkpoint), ``ase.steerer`` (the `ActivationSteeringGenerator` bound to the
            policy), ``ase.vllm_steerer``, ``ase.bank_diagnostics`` (one dict per bank update).

    Logged metrics (paper Fig. 4-5, Table 6): `ase/rollout_time` (seconds of this process's generation call),
    `ase/route_{s}_accuracy` (share of R_m = 1 on route s, 0 = clean), `ase/answer_disagreement` (pairwise
    disagreement of the extracted answers within each group), `ase/is_weight_mean` and `ase/is_weight_clipped_frac`
    (over steered tokens), and per bank update `ase/num_pairs`, `ase/skipped_updates` (running count),
    `ase/cluster_share_{k}`, `ase/temporal_alignment`, `ase/inter_cluster_alignment`, `ase/vector_norm`,
    `ase/bank_update_time`. `log_completions` gets a `route` column.

    vLLM: `use_vllm=True` with `vllm_mode="colocate"` steers inside the colocated engine (eager or compiled); the
    engine is built steerable by `steerable_vllm` around TRL's construction, and `ase.vllm_steerer` is a
    `VLLMActivationSteeringGenerator`. With `vllm_mode="server"` the server must run with
    `TRL_EXPLORE_STEERING_LAYER=<steering_layer>` (the `trl_explore` vLLM plugin) and `ase.vllm_steerer` is a
    `ServerSteering` that sends each route's vector with its requests. Without vLLM, `ase.vllm_steerer` is None.

    Raises:
        NotImplementedError: continuous batching, tools, environments or a custom `rollout_func`.
        RuntimeError: server mode against a server that cannot steer.
    """

    def __init__(self, model, reward_funcs=None, args: ASEConfig | None = None, bank: SteeringVectorBank | None = None,
                 **kwargs):
        model, args = resolve_model_and_config(model, args, ASEConfig, "ASE-GRPO")
        component = ASEComponent(ASEOptions.from_config(args), bank)
        super().__init__(model, reward_funcs, args=args, components=[component], **kwargs)

    @property
    def ase(self) -> ASEComponent:
        return self.component("ase")
