"""OGER's options (:class:`OGEROptions`): the fields :class:`~trl_explore.oger.component.OGERComponent` reads."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trl_explore.driver.config import ComponentOptions
from trl_explore.oger.embedding import EMBEDDING_DTYPES, LONG_TEXT_MODES
from trl_explore.oger.replacement import REPLACEMENT_RULES
from trl_explore.trl_guards.sampler_settings import check_reproducible, effective_sampler
from trl_explore.utils.registry import Registry

LAST_TOKEN = Registry("last_token", kind="last-token rule")
"""Which next-token distribution defines ``H_last`` (OGER Eq. 6); an entry is True when a final EOS is skipped."""
LAST_TOKEN.register("final_token", False,
                    help="the one that produced the final completion token, EOS included; default")
LAST_TOKEN.register("before_eos", True, help="the one that produced the last token before a final EOS")


@dataclass
class OGEROptions(ComponentOptions):
    r"""
    Options of OGER ("OGER: A Robust Offline-Guided Exploration Reward for Hybrid Reinforcement Learning", §3 and
    App. B): multi-teacher hybrid groups, the exploration reward `D * exp(-H_last) * R_m` and policy shaping of the
    offline tokens. Defaults follow the paper where it says something (one replacement).

    Parameters:
        embedding_model (`str`, defaults to `"BAAI/bge-large-en-v1.5"`):
            Sentence-embedding model for Eq. 1 (the paper's); it must load as a `SentenceTransformer`. `"embedded"`
            selects the bundled all-MiniLM-L6-v2 (offline demo).
        embedding_batch_size (`int`, defaults to `32`):
            Batch size of the embedding model.
        embedding_long_text_mode (`str`, defaults to `"truncate"`):
            `"truncate"` (paper) embeds the first `max_seq_length` tokens of a trajectory; `"chunk_mean"` averages the
            embeddings of consecutive windows.
        embedding_dtype (`str`, defaults to `"auto"`):
            Precision of the embedder's matrix products: `"float32"`, `"bfloat16"` or `"float16"` (autocast;
            embeddings are float32 either way), or `"auto"`: the training precision (`bf16=True` -> bfloat16,
            `fp16=True` -> float16, otherwise float32). On CHAMP answers bfloat16 is 1.76x faster on a CPU with bf16
            instructions and moves the divergence by at most 1.8e-3 (`trl_explore.oger.embedding`).
        num_replacements (`int`, defaults to `1`):
            Online completions replaced per group (paper: 1; ablations 2 and 3). 0 disables replacement.
        replacement_rule (`str`, defaults to `"lowest_divergence"`):
            Which online completions are replaced: `"lowest_divergence"` (paper) or `"random"` (control).
        use_exploration_reward (`bool`, defaults to `True`):
            False is the paper's "w/o Reward" ablation (replacement and policy shaping only, i.e. LUFFY on
            multi-teacher data); the exploration reward is still computed and logged, with weight 0.
        entropy_refinement (`bool`, defaults to `True`):
            False is the paper's "w/o Refinement" ablation: `R_OGER = D * R_m` (no `exp(-H_last)`).
        last_token (`str`, defaults to `"final_token"`):
            Which distribution defines `H_last`: `"final_token"`, the one that produced the final completion token
            (EOS included when the completion stopped); `"before_eos"`, the one that produced the last token before a
            final EOS (the answer's closing token).
        policy_shaping_gamma (`float`, defaults to `0.1`):
            `gamma` of the shaping function `f(p) = p / (p + gamma)` for offline tokens (LUFFY).
        loss_remove_clip (`bool`, defaults to `False`):
            Remove PPO ratio clipping on on-policy tokens, as LUFFY does. Default keeps TRL's clipping, the safer
            choice when `num_iterations > 1` or with vLLM's off-policy drift.
        offline_completions_column (`str`, defaults to `"offline_completions"`):
            Dataset column with each prompt's teacher trajectories (list of str).
        offline_teachers_column (`str`, defaults to `"offline_teachers"`):
            Dataset column with the teacher name of each trajectory (list of str, optional).
        offline_embeddings_column (`str`, defaults to `"offline_embeddings"`):
            Optional column with precomputed offline embeddings (`[M, d]` per row); when absent, offline texts are
            embedded on first use and cached.

    Checks against the training configuration (`apply`): `num_replacements < num_generations` (a group keeps an
    online completion) and whole groups on every process (`per_device_train_batch_size * steps_per_generation` a
    multiple of `num_generations`; the eval batch a multiple of the eval group size); when `H_last` is computed, a
    sampler it can reproduce (below).

    `H_last` and the sampler: `H_last` is the entropy (nats) of the distribution the final token was drawn from, with
    the sampler's effective settings (`trl_explore.trl_guards.sampler_settings`): the temperature of
    `generation_kwargs` when it gives one (else `GRPOConfig.temperature`), and under `top_k` / `top_p` / `min_p` the
    truncated, renormalised distribution. Settings it cannot reproduce (`repetition_penalty != 1`, `do_sample=False`,
    `no_repeat_ngram_size`,
    ... in `generation_kwargs`) are refused when the config or the trainer is built, unless `entropy_refinement=False`.
    TRL's own log-probs, entropies and entropy mask use `GRPOConfig.temperature` only.

    Entropy masking, one rule for the online and the offline (teacher) tokens. With `top_entropy_quantile = q < 1`
    the threshold is the `(1 - q)`-quantile of the policy's entropies over every token of the hybrid batch (online
    and teacher tokens, all processes); a token at or above it is trained (TRL's objective for an online token, the
    shaping term for a teacher token) and enters the entropy bonus (`entropy_coef`); a token below it gets neither.
    At `q = 1` (TRL's default) every token is trained and the bonus is the mean entropy over every token, online
    and teacher alike.
    """

    section = "OGER options (trl_explore.OGEROptions)"

    embedding_model: str = field(
        default="BAAI/bge-large-en-v1.5",
        metadata={"help": "Sentence-embedding model (Eq. 1). 'embedded' = bundled all-MiniLM-L6-v2."},
    )
    embedding_batch_size: int = field(default=32, metadata={"help": "Batch size of the embedding model."})
    embedding_long_text_mode: str = field(
        default="truncate",
        metadata={"help": "Long trajectories: " + LONG_TEXT_MODES.describe() + ".", "choices": list(LONG_TEXT_MODES)},
    )
    embedding_dtype: str = field(
        default="auto",
        metadata={"help": "Embedder matmul precision: 'auto' (the training precision: bf16/fp16/float32), "
                          "'float32', 'bfloat16' or 'float16'.", "choices": ["auto", *EMBEDDING_DTYPES]},
    )
    num_replacements: int = field(
        default=1, metadata={"help": "Online completions replaced by offline ones per group (paper: 1)."}
    )
    replacement_rule: str = field(
        default="lowest_divergence",
        metadata={"help": "Which completions to replace: " + REPLACEMENT_RULES.describe() + ".",
                  "choices": list(REPLACEMENT_RULES)},
    )
    use_exploration_reward: bool = field(
        default=True, metadata={"help": "False = 'w/o Reward' ablation (the OGER reward gets weight 0)."}
    )
    entropy_refinement: bool = field(
        default=True, metadata={"help": "False = 'w/o Refinement' ablation (no exp(-H_last) factor)."}
    )
    last_token: str = field(
        default="final_token",
        metadata={"help": "Distribution defining H_last: " + LAST_TOKEN.describe() + ".", "choices": list(LAST_TOKEN)},
    )
    policy_shaping_gamma: float = field(
        default=0.1, metadata={"help": "gamma of the offline-token shaping f(p) = p / (p + gamma)."}
    )
    loss_remove_clip: bool = field(
        default=False, metadata={"help": "Remove PPO clipping on on-policy tokens (LUFFY). Default: keep it."}
    )
    offline_completions_column: str = field(
        default="offline_completions", metadata={"help": "Column with each prompt's offline trajectories."}
    )
    offline_teachers_column: str = field(
        default="offline_teachers", metadata={"help": "Column with the teacher of each offline trajectory."}
    )
    offline_embeddings_column: str = field(
        default="offline_embeddings", metadata={"help": "Optional column of precomputed offline embeddings."}
    )

    def validate(self) -> None:
        if isinstance(self.num_replacements, bool) or not isinstance(self.num_replacements, int):
            raise TypeError(f"num_replacements must be an int, got {self.num_replacements!r}")
        if self.num_replacements < 0:
            raise ValueError(f"num_replacements must be >= 0, got {self.num_replacements}")
        REPLACEMENT_RULES.check(self.replacement_rule)
        LONG_TEXT_MODES.check(self.embedding_long_text_mode)
        if self.embedding_dtype != "auto":
            EMBEDDING_DTYPES.check(self.embedding_dtype)
        LAST_TOKEN.check(self.last_token)
        if not (math.isfinite(self.policy_shaping_gamma) and self.policy_shaping_gamma > 0):
            raise ValueError(f"policy_shaping_gamma must be a finite number > 0, got {self.policy_shaping_gamma}")
        for name in ("use_exploration_reward", "entropy_refinement", "loss_remove_clip"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")

    def needs_last_token_entropy(self) -> bool:
        """True when training computes `H_last`: the refinement is on and a divergence is computed (for the reward,
        or for the lowest-divergence replacement)."""
        uses_divergence = self.num_replacements > 0 and REPLACEMENT_RULES[self.replacement_rule].uses_divergence
        return self.entropy_refinement and (self.use_exploration_reward or uses_divergence)

    def apply(self, args) -> None:
        if self.needs_last_token_entropy():  # H_last must be the entropy of the distribution the token was drawn from
            try:
                check_reproducible(effective_sampler(args), "OGER's last-token entropy H_last (Eq. 6)",
                                   "or set entropy_refinement=False (the 'w/o Refinement' ablation: no H_last)")
            except ValueError as error:
                raise self.error(str(error)) from None
        if self.num_replacements >= args.num_generations:
            raise ValueError(
                f"num_replacements must be in [0, num_generations - 1] = [0, {args.num_generations - 1}], "
                f"got {self.num_replacements}: a group needs at least one online completion"
            )
        # Groups are chosen from on each process: a process must hold whole groups (SPEC §5).
        per_process = args.per_device_train_batch_size * args.steps_per_generation
        if per_process % args.num_generations != 0:
            raise ValueError(
                f"OGER replaces completions within each prompt's group, so every process must hold whole groups: "
                f"per_device_train_batch_size * steps_per_generation = {args.per_device_train_batch_size} * "
                f"{args.steps_per_generation} = {per_process} must be a multiple of num_generations = "
                f"{args.num_generations}"
            )
        if args.do_eval and args.eval_strategy != "no":
            num_eval = args.num_generations_eval or args.num_generations
            if args.per_device_eval_batch_size % num_eval != 0:
                raise ValueError(
                    f"per_device_eval_batch_size ({args.per_device_eval_batch_size}) must be a multiple of the "
                    f"eval group size ({num_eval}) so that each process holds whole groups"
                )

    def embedding_precision(self, args) -> str:
        """The embedder's forward precision: ``embedding_dtype``, with ``"auto"`` resolved from ``args.bf16`` /
        ``args.fp16`` (the training precision)."""
        if self.embedding_dtype != "auto":
            return self.embedding_dtype
        return "bfloat16" if getattr(args, "bf16", False) else "float16" if getattr(args, "fp16", False) else "float32"
