"""What to sample and what comes back: :class:`SamplingPlan`, :class:`Steering`, :class:`Generations`.

Plain values shared by every backend (:mod:`~trl_explore.sampling.hf`, :mod:`~trl_explore.sampling.vllm`) and every
caller (evaluation, the offline builder's teachers, the demo solve-rate script). Importing this module loads nothing
heavy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SamplingPlan:
    """How the completions of a set of prompts are sampled.

    Attributes:
        num_samples: samples per prompt ``n`` (>= 1).
        temperature: sampling temperature (0: greedy, which needs ``num_samples == 1``).
        top_p: nucleus mass in ``(0, 1]`` (1: off).
        top_k: top-k cut (0: off; ``None``: the backend's default, which for transformers is the model's
            ``generation_config.top_k``, 50 unless the checkpoint sets it, and for vLLM off).
        max_new_tokens: cap on completion tokens.
        system_prompt: system message text, or ``None`` for none (read by the evaluation's prompt builder,
            :func:`~trl_explore.evaluation.protocols.build_messages`; the generators take finished chat prompts).
        user_template: user message with a ``{problem}`` field and an ``{instruction}`` field (same reader).

    Raises:
        ValueError: a field out of range (the message names it).
    """

    num_samples: int
    temperature: float
    top_p: float = 1.0
    top_k: int | None = 0
    max_new_tokens: int = 256
    system_prompt: str | None = None
    user_template: str = "{problem}\n\n{instruction}"

    def __post_init__(self):
        if isinstance(self.num_samples, bool) or not isinstance(self.num_samples, int) or self.num_samples < 1:
            raise ValueError(f"num_samples must be an integer >= 1, got {self.num_samples!r}")
        finite = isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)
        if not (finite and self.temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if self.temperature == 0 and self.num_samples > 1:
            raise ValueError("temperature 0 (greedy decoding) gives identical samples: use num_samples=1")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.top_k is not None and self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0: off) or None (the backend's default), got {self.top_k!r}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens!r}")
        if "{problem}" not in self.user_template:
            raise ValueError(f"user_template must contain '{{problem}}', got {self.user_template!r}")


@dataclass(frozen=True)
class Steering:
    """An intervention active while the transformers backend samples (e.g. ASE's inference-time steering, ^S).

    The sampling stack knows nothing of what the intervention does: its owner gives the route of every sample and a
    context manager to enter around each ``generate`` call (ASE's is built by
    :func:`trl_explore.ase.inference.steering_for`).

    Attributes:
        routes: ``routes(num_prompts, num_samples) -> list[list[int]]``, the route of each sample, ``[prompt][sample]``
            (0: clean). Recorded in :class:`Generations` and in the per-sample records of an evaluation.
        context: ``context(route_ids) -> context manager``; ``route_ids`` is a CPU ``LongTensor[B]`` with the route of
            each row of one ``generate`` batch, in row order. Entered around that batch's ``generate``.
        key: a JSON-able identity of the intervention (e.g. ``[layer, digest of the vectors, strength]``), part of
            the partial-file fingerprint, so that batches sampled under one intervention are never read back under
            another.
    """

    routes: Callable[[int, int], list[list[int]]]
    context: Callable[[Any], AbstractContextManager]
    key: Any


@dataclass
class Generations:
    """Completions of ``P`` prompts, ``n`` each (lists indexed ``[prompt][sample]``).

    Attributes:
        texts: decoded completions (special tokens removed).
        token_ids: completion token ids (up to and including EOS when generation stopped on it).
        prompt_ids: the prompt token ids of each prompt, as the backend rendered it.
        truncated: ``True`` when the completion hit ``max_new_tokens`` without EOS.
        routes: steering route of each sample (0: clean).
        seconds: wall time of the generation.
    """

    texts: list[list[str]]
    token_ids: list[list[list[int]]]
    prompt_ids: list[list[int]]
    truncated: list[list[bool]]
    routes: list[list[int]]
    seconds: float = 0.0
