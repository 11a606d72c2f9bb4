"""Configuration of :class:`~trl_explore.OGERTrainer`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trl import GRPOConfig

from trl_explore.oger.embedding import EMBEDDING_DTYPES, LONG_TEXT_MODES
from trl_explore.oger.replacement import REPLACEMENT_RULES
from trl_explore.rewards.modes import MODES, check_grader_mode

LAST_TOKEN_CHOICES = ("final_token", "before_eos")


@dataclass
class OGERConfig(GRPOConfig):
    r"""
    Configuration for [`OGERTrainer`]: GRPO plus OGER's offline-guided exploration reward, divergence-aware
    hybrid replacement and LUFFY-style policy shaping ("OGER: A Robust Offline-Guided Exploration Reward
    for Hybrid Reinforcement Learning", §3 and App. B).

    What changes with respect to [`~trl.GRPOConfig`]: each prompt's group of `num_generations` completions
    becomes a hybrid group in which `num_replacements` online completions (the ones closest to the teachers)
    are replaced by offline teacher trajectories; online completions get the exploration reward
    `D * exp(-H_last) * R_m` on top of the verifiable reward; offline tokens are trained with policy shaping.
    Defaults follow the paper where it says something: 8 generations, temperature 1.0, entropy bonus 0.01,
    no KL (`beta=0`), one replacement.

    Parameters:
        embedding_model (`str`, defaults to `"BAAI/bge-large-en-v1.5"`):
            Sentence-embedding model for Eq. 1 (the paper's). `"embedded"` selects the bundled
            all-MiniLM-L6-v2 (offline demo).
        embedding_batch_size (`int`, defaults to `32`):
            Batch size of the embedding model.
        embedding_long_text_mode (`str`, defaults to `"truncate"`):
            `"truncate"` (paper) embeds the first `max_seq_length` tokens of a trajectory; `"chunk_mean"`
            averages the embeddings of consecutive windows.
        embedding_dtype (`str`, defaults to `"auto"`):
            Precision of the embedder's matrix products: `"float32"`, `"bfloat16"` or `"float16"` (autocast;
            embeddings are float32 either way), or `"auto"`: the training precision (`bf16=True` -> bfloat16,
            `fp16=True` -> float16, otherwise float32). On CHAMP answers bfloat16 is 1.76x faster on a CPU with
            bf16 instructions and moves the divergence by at most 1.8e-3 (`trl_explore.oger.embedding`).
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
            Which distribution defines `H_last`: `"final_token"`, the one that produced the final completion
            token (EOS included when the completion stopped); `"before_eos"`, the one that produced the last
            token before a final EOS (the answer's closing token).
        policy_shaping_gamma (`float`, defaults to `0.1`):
            `gamma` of the shaping function `f(p) = p / (p + gamma)` for offline tokens (LUFFY).
        loss_remove_clip (`bool`, defaults to `False`):
            Remove PPO ratio clipping on on-policy tokens, as LUFFY does. Default keeps TRL's clipping, the
            safer choice when `num_iterations > 1` or with vLLM's off-policy drift.
        offline_completions_column (`str`, defaults to `"offline_completions"`):
            Dataset column with each prompt's teacher trajectories (list of str).
        offline_teachers_column (`str`, defaults to `"offline_teachers"`):
            Dataset column with the teacher name of each trajectory (list of str, optional).
        offline_embeddings_column (`str`, defaults to `"offline_embeddings"`):
            Optional column with precomputed offline embeddings (`[M, d]` per row); when absent, offline
            texts are embedded on first use and cached.
        grader_mode (`str`, defaults to `"math_verify"`):
            How the verifiable reward `R_m` reads a completion's final answer (`trl_explore.rewards.grading`):
            `"math_verify"` (Math-Verify's semantics plus guard-rails), `"trl"`, `"strict"` or `"boxed"`. Used by the
            default reward functions; the offline builder and the evaluation take the same option.
        vllm_enforce_eager (`bool`, defaults to `False`):
            Build the colocated vLLM engine with `enforce_eager=True` (no torch.compile / CUDA graphs): faster to
            start (CPU, tests), slower to decode.

    vLLM (`use_vllm=True`): the online completions come from vLLM; the offline rows that replace some of them carry
    no vLLM log-probs, so TRL's `vllm_importance_sampling_correction` gives them a ratio of exactly 1 (and they are
    trained by policy shaping, which takes the behaviour probability as 1). `H_last` is read from the no-grad
    policy forward TRL makes after vLLM generation (`old_per_token_logps`, on by default with vLLM), at the
    sampling temperature; with that forward switched off, one extra forward computes it.
    """

    embedding_model: str = field(
        default="BAAI/bge-large-en-v1.5",
        metadata={"help": "Sentence-embedding model (Eq. 1). 'embedded' = bundled all-MiniLM-L6-v2."},
    )
    embedding_batch_size: int = field(default=32, metadata={"help": "Batch size of the embedding model."})
    embedding_long_text_mode: str = field(
        default="truncate",
        metadata={"help": "Long trajectories: 'truncate' (paper) or 'chunk_mean'.", "choices": list(LONG_TEXT_MODES)},
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
        metadata={"help": "Which completions to replace.", "choices": list(REPLACEMENT_RULES)},
    )
    use_exploration_reward: bool = field(
        default=True, metadata={"help": "False = 'w/o Reward' ablation (the OGER reward gets weight 0)."}
    )
    entropy_refinement: bool = field(
        default=True, metadata={"help": "False = 'w/o Refinement' ablation (no exp(-H_last) factor)."}
    )
    last_token: str = field(
        default="final_token",
        metadata={"help": "Distribution defining H_last.", "choices": list(LAST_TOKEN_CHOICES)},
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

    vllm_enforce_eager: bool = field(
        default=False, metadata={"help": "Build the colocated vLLM engine eagerly (no torch.compile / CUDA graphs)."}
    )
    grader_mode: str = field(
        default="math_verify",
        metadata={"help": "How R_m reads answers: 'math_verify' (Math-Verify's semantics + guard-rails, default), "
                          "'trl' (as trl.rewards.accuracy_reward), 'strict' (anchored, precision first) or 'boxed'.",
                  "choices": list(MODES)},
    )

    # Paper defaults that differ from GRPOConfig's (App. B): entropy bonus 0.01.
    entropy_coef: float = field(
        default=0.01, metadata={"help": "Entropy bonus coefficient (OGER App. B: 0.01)."}
    )

    def __post_init__(self):
        super().__post_init__()
        check_grader_mode(self.grader_mode)
        if isinstance(self.num_replacements, bool) or not isinstance(self.num_replacements, int):
            raise TypeError(f"num_replacements must be an int, got {self.num_replacements!r}")
        if self.num_replacements < 0 or self.num_replacements >= self.num_generations:
            raise ValueError(
                f"num_replacements must be in [0, num_generations - 1] = [0, {self.num_generations - 1}], "
                f"got {self.num_replacements}: a group needs at least one online completion"
            )
        if self.replacement_rule not in REPLACEMENT_RULES:
            raise ValueError(f"replacement_rule must be one of {REPLACEMENT_RULES}, got {self.replacement_rule!r}")
        if self.embedding_long_text_mode not in LONG_TEXT_MODES:
            raise ValueError(
                f"embedding_long_text_mode must be one of {LONG_TEXT_MODES}, got {self.embedding_long_text_mode!r}"
            )
        if self.embedding_dtype not in ("auto", *EMBEDDING_DTYPES):
            raise ValueError(f"embedding_dtype must be 'auto' or one of {EMBEDDING_DTYPES}, got {self.embedding_dtype!r}")
        if self.last_token not in LAST_TOKEN_CHOICES:
            raise ValueError(f"last_token must be one of {LAST_TOKEN_CHOICES}, got {self.last_token!r}")
        if not (math.isfinite(self.policy_shaping_gamma) and self.policy_shaping_gamma > 0):
            raise ValueError(f"policy_shaping_gamma must be a finite number > 0, got {self.policy_shaping_gamma}")
        for name in ("use_exploration_reward", "entropy_refinement", "loss_remove_clip"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        # Groups are chosen from on each process: a process must hold whole groups (SPEC §5).
        per_process = self.per_device_train_batch_size * self.steps_per_generation
        if per_process % self.num_generations != 0:
            raise ValueError(
                f"OGER replaces completions within each prompt's group, so every process must hold whole groups: "
                f"per_device_train_batch_size * steps_per_generation = {self.per_device_train_batch_size} * "
                f"{self.steps_per_generation} = {per_process} must be a multiple of num_generations = "
                f"{self.num_generations}"
            )
        if self.do_eval and self.eval_strategy != "no":
            num_eval = self.num_generations_eval or self.num_generations
            if self.per_device_eval_batch_size % num_eval != 0:
                raise ValueError(
                    f"per_device_eval_batch_size ({self.per_device_eval_batch_size}) must be a multiple of the "
                    f"eval group size ({num_eval}) so that each process holds whole groups"
                )

    @property
    def resolved_embedding_dtype(self) -> str:
        """The embedder's forward precision, ``embedding_dtype`` with ``"auto"`` resolved from ``bf16`` / ``fp16``."""
        if self.embedding_dtype != "auto":
            return self.embedding_dtype
        return "bfloat16" if self.bf16 else "float16" if self.fp16 else "float32"
