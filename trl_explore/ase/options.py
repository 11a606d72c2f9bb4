"""ASE-GRPO's options (:class:`ASEOptions`): the fields :class:`~trl_explore.ase.component.ASEComponent` reads."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trl_explore.ase.controls import BANK_CONTROLS, BANK_READOUTS, ROUTE_ALLOCATIONS
from trl_explore.driver.config import ComponentOptions
from trl_explore.trl_guards.sampler_settings import check_reproducible, effective_sampler


@dataclass
class ASEOptions(ComponentOptions):
    r"""
    Options of ASE-GRPO ("Exploration via Activation-Space Steering for Reinforcement Learning with Verifiable
    Rewards", §3 and App. B/D): the `num_generations` rollouts of each prompt are split evenly over a clean route and
    `num_vectors` steering routes; route `s` adds `steering_alpha * v_s` to the output of decoder block
    `steering_layer` while it generates. The bank `{v_1..v_K}` is re-estimated after every generation from the
    contrast between correct and incorrect rollouts of the same problem (block readouts at `readout_fraction` of each
    response, PCA + K-means, EMA), and the new bank is used only after the next optimizer step. The unsteered policy
    is trained; steered tokens carry the truncated importance weight `min(pi_unsteered / pi_steered, is_cap)`.
    Evaluation never steers. Defaults follow the paper: K = 3, alpha = 0.5, beta = 0.5, f = 0.25, block 0,
    c_IS = 2.0, PCA dimension 64.

    Parameters:
        num_vectors (`int`, defaults to `3`):
            K, the number of steering routes (bank size); with the clean route there are K + 1 routes, so
            `num_generations` must be at least K + 1. `num_generations = q * (K + 1) + r` gives every route
            `q` rollouts of each prompt and `r` randomly drawn routes one more (balanced-uniform allocation).
        steering_alpha (`float`, defaults to `0.5`):
            alpha, the steering strength (paper sweep 0.1-0.6).
        bank_ema_beta (`float`, defaults to `0.5`):
            beta of the bank update `v <- beta * v_old + (1 - beta) * v_new`, in [0, 1].
        steering_layer (`int`, defaults to `0`):
            Decoder block whose output is steered and read (paper: block 0).
        readout_fraction (`float`, defaults to `0.25`):
            f, the response-relative readout position `floor(f * len(response))`, in [0, 1].
        pca_dim (`int`, defaults to `64`):
            PCA dimension of the contrast vectors before K-means.
        kmeans_n_init (`int`, defaults to `16`):
            K-means restarts per bank update (the paper used 512 for its inference-time sweep; cost is linear).
        max_pairs_per_problem (`int` or `None`, defaults to `None`):
            Cap on the (correct, incorrect) pairs of one problem, drawn at random when it binds; `None` keeps
            all (at most `(N/2)^2` per problem).
        min_pairs_per_cluster (`int`, defaults to `4`):
            A bank update is skipped (the bank kept, `ase/skipped_updates` counted, a line logged) when a K-means
            cluster holds fewer pairs than this. Each vector is the mean difference of its cluster: from one or a
            few pairs it is about as large as the activations it is added to (a replay of the CPU demo's first
            update, 10 pairs in clusters of 3 to 4: vectors of norm 30 to 84 against a median readout norm of 43,
            `benchmarks/bank_readout_offset.py`). 4 halves the per-pair noise of a mean; with the paper's batches
            (128 prompts, up to 16 pairs each) clusters hold far more. 1 only requires every cluster to be
            non-empty. The paper gives no minimum. Watch `ase/route_<s>_applied_strength` to choose alpha.
        bank_readouts (`str`, defaults to `"clean"`):
            Which block-L readout a rollout contributes to the bank. `"clean"`: the unsteered block output along
            the rollout's tokens (what TRL's training forward computes). `"steered"`: the activation the rollout
            had while it was generated, `clean + alpha * v_route` (exact, since nothing upstream of block L is
            steered). With `"steered"`, a pair whose two rollouts ran on routes `s` and `s'` carries
            `alpha * (v_s - v_s')` in its difference: the bank's own vectors, not the trajectories, and the bank
            feeds on itself whenever correctness depends on the route. `"clean"` keeps what steering did to the
            trajectory (its tokens, read at `f * len`) and drops the injected offset; hence the default. The paper
            does not say which it uses.
        bank_control (`str`, defaults to `"none"`):
            The method (`"none"`) or a control of the paper's Table 4 / App. D.2: `"random_directions"`,
            `"shuffled_labels"`, `"reversed"`, `"unstructured_random"` (one unit random vector per rollout,
            every rollout steered, no bank).
        route_allocation (`str`, defaults to `"balanced_uniform"`):
            How a group's rollouts are split over the routes; `"balanced_uniform"` is the paper's.
        is_cap (`float`, defaults to `2.0`):
            c of the token-level truncated importance weight `min(pi_unsteered / pi_steered, c)` (verl's TIS).
        steer_prompt (`bool`, defaults to `True`):
            Add the offset at every position, prompt prefill included (the prompt's KV cache is steered and
            the first completion token already comes from the steered policy). `False` steers completion
            positions only.
        problem_id_column (`str`, defaults to `"problem_id"`):
            Dataset column identifying a problem; rollouts are paired within a problem. When absent, a stable
            hash of the prompt is used. Rows that share an id are one problem even when their prompts differ (e.g.
            rephrasings): their rollouts are paired with each other, and a one-time warning names two such rows.
        correctness_reward_index (`int`, defaults to `0`):
            Index in `reward_funcs` of the verifier reward `R_m` in {0, 1} that labels rollouts correct
            (`> 0.5`) or incorrect for the bank.
        include_offline_in_bank (`bool`, defaults to `False`):
            With a component that puts rows into the groups that were not sampled from the policy (OGER's teacher
            trajectories), let those rows form contrast pairs too (with their clean readouts). Default: only
            sampled rows do, as in ASE-GRPO alone.

    Behaviour log-probs and the sampler: with HF generation, the steered behaviour log-prob of a token is taken
    under the distribution it was drawn from, with the sampler's effective settings
    (`trl_explore.trl_guards.sampler_settings`):
    the temperature of `generation_kwargs` when it gives one (else `GRPOConfig.temperature`), and under `top_k` /
    `top_p` / `min_p` the truncated, renormalised distribution (as vLLM's `processed_logprobs`). Settings it cannot
    reproduce (`repetition_penalty != 1`, `do_sample=False`, `no_repeat_ngram_size`, ...) are refused when the config
    or the trainer is built. The numerator of the weight, TRL's `old_per_token_logps`, is of `softmax(logits /
    GRPOConfig.temperature)`, untruncated (TRL's convention, also that of its vLLM correction); under truncation the
    weight of a steered token therefore also carries `pi_T / mu_truncated` (at most 1 without steering), while clean
    rows keep weight 1.

    vLLM (`use_vllm=True`, colocate mode): the rollouts of all routes are generated in one vLLM call with the
    steering inside the engine, and vLLM's sampled-token log-probs are the steered (behaviour) ones. ASE's
    truncated importance weight is then exactly TRL's `vllm_importance_sampling_correction` in
    `"token_truncate"` mode with `vllm_importance_sampling_clip_max = is_cap`: when TRL's defaults
    (`"sequence_mask"`, 3.0) are left in place they are replaced by these (`apply`), and any other choice is an
    error. TRL applies the weight to every row, so clean rows are also corrected for the (small) vLLM-vs-trainer
    numerical mismatch, which the HF path does not need.
    """

    section = "ASE-GRPO options (trl_explore.ASEOptions)"

    num_vectors: int = field(default=3, metadata={"help": "K, number of steering routes (bank size)."})
    steering_alpha: float = field(default=0.5, metadata={"help": "alpha, steering strength (paper: 0.5)."})
    bank_ema_beta: float = field(default=0.5, metadata={"help": "beta of the bank EMA update, in [0, 1]."})
    steering_layer: int = field(default=0, metadata={"help": "Decoder block steered and read (paper: 0)."})
    readout_fraction: float = field(
        default=0.25, metadata={"help": "f, response-relative readout position, in [0, 1] (paper: 0.25)."}
    )
    pca_dim: int = field(default=64, metadata={"help": "PCA dimension before K-means (paper: 64)."})
    kmeans_n_init: int = field(default=16, metadata={"help": "K-means restarts per bank update."})
    max_pairs_per_problem: int | None = field(
        default=None, metadata={"help": "Cap on contrast pairs per problem (default: all)."}
    )
    min_pairs_per_cluster: int = field(
        default=4, metadata={"help": "Skip a bank update when a cluster holds fewer contrast pairs than this."}
    )
    bank_readouts: str = field(
        default="clean",
        metadata={"help": "Readouts the bank is built from: " + BANK_READOUTS.describe() + ".",
                  "choices": list(BANK_READOUTS)},
    )
    bank_control: str = field(
        default="none",
        metadata={"help": "The method ('none') or a control of the bank: " + BANK_CONTROLS.describe() + ".",
                  "choices": list(BANK_CONTROLS)},
    )
    route_allocation: str = field(
        default="balanced_uniform",
        metadata={"help": "Split of a group over the routes: " + ROUTE_ALLOCATIONS.describe() + ".",
                  "choices": list(ROUTE_ALLOCATIONS)},
    )
    is_cap: float = field(default=2.0, metadata={"help": "Cap c of the truncated importance weight (paper: 2.0)."})
    steer_prompt: bool = field(
        default=True, metadata={"help": "Steer the prompt prefill too (True) or completion positions only."}
    )
    problem_id_column: str = field(
        default="problem_id", metadata={"help": "Column identifying a problem (default: hash of the prompt)."}
    )
    correctness_reward_index: int = field(
        default=0, metadata={"help": "Index of the verifier reward R_m in reward_funcs."}
    )
    include_offline_in_bank: bool = field(
        default=False,
        metadata={"help": "Let offline (teacher) rows form contrast pairs (default: sampled rows only)."},
    )

    @property
    def control(self):
        """The :class:`~trl_explore.ase.controls.BankControl` entry of ``bank_control``."""
        return BANK_CONTROLS[self.bank_control]

    def validate(self) -> None:
        BANK_CONTROLS.check(self.bank_control)
        BANK_READOUTS.check(self.bank_readouts)
        ROUTE_ALLOCATIONS.check(self.route_allocation)
        if self.num_vectors < 1:
            raise ValueError(f"num_vectors must be >= 1, got {self.num_vectors}")
        if not math.isfinite(self.steering_alpha):
            raise ValueError(f"steering_alpha must be finite, got {self.steering_alpha}")
        if self.steering_alpha < 0:
            raise ValueError(f"steering_alpha must be >= 0, got {self.steering_alpha}; to steer against the bank's "
                             "directions use bank_control='reversed'")
        if not 0.0 <= self.bank_ema_beta <= 1.0:
            raise ValueError(f"bank_ema_beta must be in [0, 1], got {self.bank_ema_beta}")
        if self.steering_layer < 0:
            raise ValueError(f"steering_layer must be >= 0, got {self.steering_layer}")
        if not 0.0 <= self.readout_fraction <= 1.0:
            raise ValueError(f"readout_fraction must be in [0, 1], got {self.readout_fraction}")
        if self.pca_dim < 1:
            raise ValueError(f"pca_dim must be >= 1, got {self.pca_dim}")
        if self.kmeans_n_init < 1:
            raise ValueError(f"kmeans_n_init must be >= 1, got {self.kmeans_n_init}")
        if self.max_pairs_per_problem is not None and self.max_pairs_per_problem < 1:
            raise ValueError(f"max_pairs_per_problem must be >= 1 or None, got {self.max_pairs_per_problem}")
        if self.min_pairs_per_cluster < 1:
            raise ValueError(f"min_pairs_per_cluster must be >= 1, got {self.min_pairs_per_cluster}")
        if not (math.isfinite(self.is_cap) and self.is_cap > 0):
            raise ValueError(f"is_cap must be a finite number > 0, got {self.is_cap}")
        if self.correctness_reward_index < 0:
            raise ValueError(f"correctness_reward_index must be >= 0, got {self.correctness_reward_index}")
        if self.include_offline_in_bank and not BANK_CONTROLS[self.bank_control].estimates_bank:
            raise ValueError("include_offline_in_bank=True with bank_control='unstructured_random', which has no bank")

    def apply(self, args) -> None:
        if BANK_CONTROLS[self.bank_control].estimates_bank and args.num_generations < self.num_vectors + 1:
            raise ValueError(
                f"num_generations ({args.num_generations}) must be at least num_vectors + 1 ({self.num_vectors + 1}) "
                f"so that every prompt has a rollout on the clean route and on each of the {self.num_vectors} "
                f"steering routes; the paper uses num_generations=8 with num_vectors=3 (2 rollouts per route)"
            )
        if args.use_transformers_continuous_batching:
            raise NotImplementedError("ASE-GRPO does not support continuous batching (per-row steering needs "
                                      "`generate`)")
        if not args.use_vllm:  # the behaviour log-probs are recorded from generate's logits, processed as sampled
            try:
                check_reproducible(effective_sampler(args), "ASE-GRPO's behaviour log-probs (HF generation)",
                                   "or generate with vLLM (use_vllm=True), whose own processed log-probs are the "
                                   "behaviour log-probs")
            except ValueError as error:
                raise self.error(str(error)) from None
            return
        if args.vllm_model_impl == "transformers":
            raise ValueError(
                "ASE-GRPO steers vLLM's own model implementation (decoder blocks over a flat token dimension); "
                "vllm_model_impl='transformers' is not supported: use 'auto' or 'vllm'"
            )
        if not BANK_CONTROLS[self.bank_control].estimates_bank and args.vllm_mode == "colocate" and (
            args.vllm_tensor_parallel_size > 1
        ):
            raise NotImplementedError(
                "bank_control='unstructured_random' with vllm_tensor_parallel_size > 1: the per-rollout random "
                "vectors differ between the ranks of a tensor-parallel group; use tensor parallel size 1"
            )
        self._use_trl_importance_sampling(args)

    def _use_trl_importance_sampling(self, args) -> None:
        """With vLLM, ASE's token-level TIS is TRL's ``token_truncate`` correction capped at ``is_cap``."""
        if not args.vllm_importance_sampling_correction:
            raise ValueError(
                "ASE-GRPO with use_vllm=True needs vllm_importance_sampling_correction=True: the steered rollouts are "
                "corrected towards the unsteered policy by TRL's token_truncate importance sampling (ASE paper §3.3)"
            )
        mode, cap = args.vllm_importance_sampling_mode, args.vllm_importance_sampling_clip_max
        if (mode, cap) == ("sequence_mask", 3.0):  # TRL's defaults: replaced by ASE's token-level TIS
            args.vllm_importance_sampling_mode = "token_truncate"
            args.vllm_importance_sampling_clip_max = self.is_cap
        elif mode != "token_truncate" or cap != self.is_cap:
            raise ValueError(
                f"ASE-GRPO with vLLM uses TRL's importance sampling as its truncated IS weight: set "
                f"vllm_importance_sampling_mode='token_truncate' and vllm_importance_sampling_clip_max=is_cap "
                f"({self.is_cap}), or leave TRL's defaults; got mode={mode!r}, clip_max={cap}"
            )
        if args.vllm_importance_sampling_clip_min not in (None, 0.0):
            raise ValueError(
                "ASE-GRPO with vLLM: vllm_importance_sampling_clip_min must be None (the TIS weight is only capped "
                f"from above), got {args.vllm_importance_sampling_clip_min}"
            )
