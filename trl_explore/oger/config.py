"""Configuration of :class:`~trl_explore.OGERTrainer`: a ``GRPOConfig`` with OGER's options."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl_explore.driver.config import ExplorationConfig
from trl_explore.oger.options import OGEROptions


@dataclass
class OGERConfig(OGEROptions, ExplorationConfig):
    r"""
    Configuration for [`OGERTrainer`]: [`ExplorationConfig`] (TRL's `GRPOConfig` plus `grader_mode` and
    `vllm_enforce_eager`) with every option of [`OGEROptions`] ("OGER: A Robust Offline-Guided Exploration Reward for
    Hybrid Reinforcement Learning", §3 and App. B).

    What changes with respect to [`~trl.GRPOConfig`]: each prompt's group of `num_generations` completions becomes a
    hybrid group in which `num_replacements` online completions (the ones closest to the teachers) are replaced by
    offline teacher trajectories; online completions get the exploration reward `D * exp(-H_last) * R_m` on top of the
    verifiable reward; offline tokens are trained with policy shaping. Defaults follow the paper where it says
    something: temperature 1.0, entropy bonus 0.01 (the one GRPO default changed here), no KL (`beta=0`), one
    replacement. The options themselves are documented on [`OGEROptions`].

    vLLM (`use_vllm=True`): the online completions come from vLLM; the offline rows that replace some of them carry
    no vLLM log-probs, so TRL's `vllm_importance_sampling_correction` gives them a ratio of exactly 1 (and they are
    trained by policy shaping, which takes the behaviour probability as 1). `H_last` is read from the no-grad
    policy forward TRL makes after vLLM generation (`old_per_token_logps`, on by default with vLLM), at the
    sampling temperature; with that forward switched off, one extra forward computes it.
    """

    # The paper's default that differs from GRPOConfig's (App. B): entropy bonus 0.01.
    entropy_coef: float = field(default=0.01, metadata={"help": "Entropy bonus coefficient (OGER App. B: 0.01)."})

    @property
    def resolved_embedding_dtype(self) -> str:
        """The embedder's forward precision, ``embedding_dtype`` with ``"auto"`` resolved from ``bf16`` / ``fp16``."""
        return self.embedding_precision(self)
