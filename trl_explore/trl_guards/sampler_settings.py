"""The distribution a GRPO trainer's rollouts are sampled from, in one place: :class:`SamplerSettings`,
:func:`effective_sampler`, :func:`processed_logits`, :func:`check_reproducible`.

TRL builds its sampler from ``GRPOConfig.temperature``, ``top_p``, ``top_k``, ``min_p`` and ``repetition_penalty``,
then lets ``GRPOConfig.generation_kwargs`` override any of them: ``GRPOTrainer.__init__`` updates the dict it builds
its ``GenerationConfig`` from with ``generation_kwargs`` (HF ``generate``), and ``VLLMGeneration`` updates its
``SamplingParams`` the same way (vLLM). Whatever reads "the distribution a completion token was drawn from" (OGER's
``H_last``, ASE-GRPO's behaviour log-probs, the driver's behaviour forward) reads it here, never from
``GRPOConfig.temperature`` alone.

Each setting, and how the package handles it:

==============================  ===========================================================================
setting (config or kwargs)      handling
==============================  ===========================================================================
``temperature``                 reproduced: ``logits / T``, with the effective ``T``; ``T <= 0`` (greedy) refused
``top_k``, ``top_p``, ``min_p``  reproduced: the truncated, renormalised distribution the token was drawn from
                                (tokens outside the kept set have probability 0), with transformers' own
                                logits warpers, in the order of the backend: transformers ``generate``
                                applies temperature, top-k, top-p, min-p; vLLM applies temperature, min-p,
                                top-k, top-p (the two differ only when min-p is combined with top-k/top-p)
``suppress_tokens``             reproduced: those tokens get probability 0 (TRL sets it for VLMs)
``repetition_penalty != 1``     refused: it depends on every earlier token ``generate`` saw, the batch's left
                                padding included, which a teacher-forced forward on re-padded rows cannot
                                reproduce
the keys of                     refused: they change the next-token distribution (greedy or beam search,
:data:`NOT_REPRODUCED`          n-gram and word bans, minimum lengths, penalties, logit biases, constrained
                                decoding, ...) in ways not reproduced here
any other key                   no effect on the next-token distribution (``max_new_tokens``, ``seed``, ``stop``,
                                ``vllm_xargs``, ``cache_implementation``, ...)
==============================  ===========================================================================

Refusing is the job of the parts that need the distribution (:func:`check_reproducible`, called by
``OGEROptions.apply`` and ``ASEOptions.apply``); TRL itself accepts every setting.

Which distribution each number is (all in nats):

* TRL's ``old_per_token_logps``, the log-probs of its loss, its ``entropy`` metric, entropy mask and entropy bonus:
  ``log_softmax(logits / GRPOConfig.temperature)``: the config's temperature only (TRL's fused LM head is built with
  it), never the ``generation_kwargs`` one, and no truncation.
* vLLM's ``sampling_per_token_logps`` (``logprobs_mode="processed_logprobs"``), OGER's ``H_last`` and ASE-GRPO's
  behaviour log-probs on the HF path: the processed distribution of this module (:func:`processed_logits`).

The two agree exactly when :meth:`SamplerSettings.matches_trl` holds (the default: temperature 1, no truncation).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping

import torch

logger = logging.getLogger(__name__)

CONFIG_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
"""The ``GRPOConfig`` fields of TRL's sampler (``generation_kwargs`` may override each)."""

REPRODUCED = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "suppress_tokens")
"""The settings :class:`SamplerSettings` carries (``repetition_penalty`` only to be refused when it is not 1)."""

NOT_REPRODUCED: dict[str, str] = {
    # transformers GenerationConfig fields that add a logits processor (GenerationMixin._get_logits_processor) or
    # change the decoding strategy; tests/test_sampler_settings.py checks the list against the installed transformers
    "do_sample": "do_sample=False decodes greedily",
    "num_beams": "beam search does not sample from the next-token distribution",
    "guidance_scale": "classifier-free guidance mixes in a second forward",
    "typical_p": "typical sampling truncates the distribution (not reproduced)",
    "epsilon_cutoff": "epsilon sampling truncates the distribution (not reproduced)",
    "eta_cutoff": "eta sampling truncates the distribution (not reproduced)",
    "top_h": "top-H sampling truncates the distribution (not reproduced)",
    "no_repeat_ngram_size": "n-gram bans depend on the earlier tokens",
    "encoder_no_repeat_ngram_size": "n-gram bans depend on the encoder input",
    "encoder_repetition_penalty": "a penalty over the encoder input",
    "bad_words_ids": "word bans depend on the earlier tokens",
    "sequence_bias": "sequence biases depend on the earlier tokens",
    "begin_suppress_tokens": "tokens banned at the first step only",
    "min_length": "the end-of-sequence token is banned below a minimum length",
    "min_new_tokens": "the end-of-sequence token is banned below a minimum length",
    "forced_bos_token_id": "a forced token is not sampled",
    "forced_eos_token_id": "a forced token is not sampled",
    "exponential_decay_length_penalty": "a length-dependent bias on the end-of-sequence token",
    "watermarking_config": "watermarking biases the logits",
    # vLLM SamplingParams fields that change the distribution
    "presence_penalty": "a penalty over the earlier tokens",
    "frequency_penalty": "a penalty over the earlier tokens",
    "logit_bias": "logit biases (not reproduced)",
    "allowed_token_ids": "an allow-list of tokens (not reproduced)",
    "bad_words": "word bans depend on the earlier tokens",
    "min_tokens": "the end-of-sequence token is banned below a minimum length",
    "logits_processors": "custom logits processors",
    "structured_outputs": "constrained decoding masks the distribution",
    "guided_decoding": "constrained decoding masks the distribution",
    "vllm_structured_outputs_regex": "constrained decoding masks the distribution",
}
"""Settings that change the next-token distribution in a way :func:`processed_logits` does not reproduce, with why."""

_OFF = {"do_sample": (True, None), "num_beams": (1, None), "guidance_scale": (1.0, None), "typical_p": (1.0, None),
        "epsilon_cutoff": (0.0, None), "eta_cutoff": (0.0, None), "no_repeat_ngram_size": (0, None),
        "encoder_no_repeat_ngram_size": (0, None), "encoder_repetition_penalty": (1.0, None),
        "presence_penalty": (0.0, None), "frequency_penalty": (0.0, None), "min_length": (0, None),
        "min_new_tokens": (0, None), "min_tokens": (0, None)}
"""Values of :data:`NOT_REPRODUCED` settings that leave the distribution unchanged (everything else counts as set;
an empty list or dict counts as unset)."""


@dataclasses.dataclass(frozen=True)
class SamplerSettings:
    """The effective next-token sampler of a trainer's rollouts (module docstring: how each setting is handled).

    Attributes:
        temperature: ``T`` (default 1.0); the logits are divided by it.
        top_k: keep the ``k`` most likely tokens; 0 = off (default).
        top_p: keep the smallest set of most likely tokens whose probability reaches ``p``; 1.0 = off (default).
        min_p: keep the tokens with probability ``>= min_p * max probability``; 0.0 = off (default).
        repetition_penalty: 1.0 = off (default); any other value is refused by :func:`check_reproducible`.
        suppress_tokens: token ids that are never sampled (default none).
        backend: ``"transformers"`` (HF ``generate``) or ``"vllm"``: the order of the truncations.
        not_reproduced: ``(name, value)`` of the set :data:`NOT_REPRODUCED` settings (refused).
        origin: ``(name, where)``: where each setting that is not at its default was read (``"GRPOConfig.top_k"``,
            ``"generation_kwargs['top_k']"``), for error messages.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    suppress_tokens: tuple[int, ...] = ()
    backend: str = "transformers"
    not_reproduced: tuple[tuple[str, object], ...] = ()
    origin: tuple[tuple[str, str], ...] = ()

    @property
    def truncates(self) -> bool:
        """True when top-k, top-p, min-p or suppressed tokens give some tokens probability 0."""
        return self.top_k > 0 or self.top_p < 1.0 or self.min_p > 0.0 or bool(self.suppress_tokens)

    def matches_trl(self, trl_temperature: float) -> bool:
        """True when this sampler's distribution is ``softmax(logits / trl_temperature)``, the one TRL's own
        log-probs and entropies are of (``trl_temperature``: ``GRPOConfig.temperature``)."""
        return (self.temperature == trl_temperature and not self.truncates and self.repetition_penalty == 1.0
                and not self.not_reproduced)

    def where(self, name: str) -> str:
        """Where setting ``name`` was read (``"generation_kwargs['top_k']"``, ``"GRPOConfig.top_k"``)."""
        default = f"GRPOConfig.{name}" if name in CONFIG_FIELDS else f"generation_kwargs[{name!r}]"
        return dict(self.origin).get(name, default)

    def unreproducible(self) -> list[tuple[str, object, str]]:
        """``(name, value, why)`` of every setting :func:`processed_logits` does not reproduce."""
        problems = []
        if not self.temperature > 0:
            problems.append(("temperature", self.temperature, "a temperature <= 0 decodes greedily"))
        if self.repetition_penalty != 1.0:
            problems.append(("repetition_penalty", self.repetition_penalty,
                             "it depends on every earlier token generate saw, the batch's left padding included"))
        problems += [(name, value, NOT_REPRODUCED[name]) for name, value in self.not_reproduced]
        return problems


def _is_set(name: str, value) -> bool:
    if value is None or (isinstance(value, (list, tuple, dict, set)) and not value):
        return False
    return value not in _OFF.get(name, ())


def sampler_settings(values: Mapping, backend: str = "transformers", origin: Mapping | None = None) -> SamplerSettings:
    """:class:`SamplerSettings` from generation settings (a ``GenerationConfig`` / ``SamplingParams`` kwargs dict).

    ``None`` means "off" for the truncations (as in transformers and vLLM). Keys outside :data:`REPRODUCED` and
    :data:`NOT_REPRODUCED` are ignored (they do not change the next-token distribution).

    Args:
        values: setting name -> value.
        backend: ``"transformers"`` or ``"vllm"``.
        origin: setting name -> where it was read, for error messages.

    Raises:
        ValueError: an unknown ``backend``.
    """
    if backend not in ("transformers", "vllm"):
        raise ValueError(f"backend must be 'transformers' or 'vllm', got {backend!r}")

    def number(name, default, kind):
        value = values.get(name)
        return default if value is None else kind(value)

    settings = {"temperature": number("temperature", 1.0, float), "top_k": number("top_k", 0, int),
                "top_p": number("top_p", 1.0, float), "min_p": number("min_p", 0.0, float),
                "repetition_penalty": number("repetition_penalty", 1.0, float),
                "suppress_tokens": tuple(int(i) for i in values.get("suppress_tokens") or ())}
    settings["top_k"] = max(settings["top_k"], 0)  # vLLM: -1 = off
    not_reproduced = tuple((k, v) for k, v in values.items() if k in NOT_REPRODUCED and _is_set(k, v))
    defaults, origin = SamplerSettings(), dict(origin or {})
    changed = [k for k in settings if settings[k] != getattr(defaults, k)] + [k for k, _ in not_reproduced]
    where = tuple((k, origin[k]) for k in changed if k in origin)
    return SamplerSettings(**settings, backend=backend, not_reproduced=not_reproduced, origin=where)


def effective_sampler(source) -> SamplerSettings:
    """The sampler the rollouts of a trainer (or of a training config) are drawn from.

    Args:
        source: a ``GRPOTrainer`` or a ``GRPOConfig``. From a trainer generating with transformers: the dict TRL built
            its ``GenerationConfig`` from (``trainer.generation_kwargs``, ``generation_kwargs`` merged in). Otherwise
            (a config, or vLLM): the config's ``temperature``, ``top_p``, ``top_k``, ``min_p``,
            ``repetition_penalty`` updated with ``generation_kwargs`` (TRL's rule on both backends, as
            ``VLLMGeneration`` builds its ``SamplingParams``), plus ``vllm_structured_outputs_regex`` with vLLM.

    Returns:
        :class:`SamplerSettings`.
    """
    args = getattr(source, "args", source)
    use_vllm = bool(getattr(args, "use_vllm", False))
    fields = CONFIG_FIELDS
    overrides = dict(getattr(args, "generation_kwargs", None) or {})
    built = getattr(source, "generation_kwargs", None) if source is not args and not use_vllm else None
    if isinstance(built, dict):  # TRL's own dict: exactly what `generate` gets
        values = dict(built)
    else:
        values = {**{name: getattr(args, name, None) for name in fields}, **overrides}
    if use_vllm and getattr(args, "vllm_structured_outputs_regex", None):
        values["vllm_structured_outputs_regex"] = args.vllm_structured_outputs_regex
    origin = {name: f"GRPOConfig.{name}" for name in (*fields, "vllm_structured_outputs_regex")}
    origin.update({name: f"generation_kwargs[{name!r}]" for name in overrides})
    return sampler_settings(values, "vllm" if use_vllm else "transformers", origin)


def check_reproducible(settings: SamplerSettings, reader: str, fix: str = "") -> None:
    """Refuse a sampler that ``reader`` cannot reproduce.

    Args:
        settings: the effective sampler (:func:`effective_sampler`).
        reader: what needs the distribution, e.g. ``"OGER's last-token entropy H_last (OGEROptions)"``.
        fix: what else the user can do (appended to the message).

    Raises:
        ValueError: naming the first setting that is not reproduced, where it was read, why, and the fix.
    """
    problems = settings.unreproducible()
    if not problems:
        return
    name, value, why = problems[0]
    others = f" (also: {', '.join(settings.where(n) for n, _, _ in problems[1:])})" if len(problems) > 1 else ""
    raise ValueError(
        f"{settings.where(name)}={value!r} changes the distribution the completions are sampled from, and {reader} "
        f"cannot reproduce it: {why}{others}. Supported: temperature > 0, top_k, top_p, min_p, suppress_tokens"
        f"{'; ' + fix if fix else ''}"
    )


def trl_temperature_note(settings: SamplerSettings, trl_temperature: float) -> str | None:
    """A one-line note when the sampler's temperature differs from TRL's (``GRPOConfig.temperature``): TRL's loss,
    ``old_per_token_logps`` and entropies then use another temperature than the sampler. None when they agree."""
    if settings.temperature == trl_temperature:
        return None
    return (f"{settings.where('temperature')}={settings.temperature} overrides GRPOConfig.temperature="
            f"{trl_temperature} for sampling only: TRL's loss, old_per_token_logps, entropies and entropy mask use "
            f"{trl_temperature}, while OGER's H_last and ASE-GRPO's behaviour log-probs use {settings.temperature}")


def _warpers(settings: SamplerSettings) -> list:
    from transformers import MinPLogitsWarper, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    temperature = [TemperatureLogitsWarper(settings.temperature)] if settings.temperature != 1.0 else []
    top_k = [TopKLogitsWarper(settings.top_k)] if settings.top_k > 0 else []
    top_p = [TopPLogitsWarper(settings.top_p)] if settings.top_p < 1.0 else []
    min_p = [MinPLogitsWarper(settings.min_p)] if settings.min_p > 0.0 else []
    if settings.backend == "vllm":  # vLLM's sampler: temperature, min-p (argmax-invariant processors), top-k/top-p
        return temperature + min_p + top_k + top_p
    return temperature + top_k + top_p + min_p  # transformers' GenerationMixin._get_logits_processor order


def processed_logits(logits: torch.Tensor, settings: SamplerSettings) -> torch.Tensor:
    """The scores the sampler draws from: ``softmax(processed_logits(logits))`` is the next-token distribution.

    Float32 (as ``generate`` casts its logits before processing), suppressed tokens and tokens outside the
    top-k / top-p / min-p set at ``-inf``, the rest divided by the temperature; transformers' own logits warpers
    (``TemperatureLogitsWarper``, ``TopKLogitsWarper``, ``TopPLogitsWarper``, ``MinPLogitsWarper``), in the order of
    ``settings.backend``. At the defaults (temperature 1, nothing truncated) this is ``logits.float()``.

    Args:
        logits: ``[..., V]`` raw next-token logits of the policy.
        settings: the sampler (:func:`effective_sampler`).

    Returns:
        ``[..., V]`` float32 scores.

    Raises:
        ValueError: a setting :func:`check_reproducible` refuses (the same message without a reader).
    """
    check_reproducible(settings, "processed_logits")
    scores = logits.float()
    if settings.temperature == 1.0 and not settings.truncates:
        return scores
    shape = scores.shape
    scores = scores.reshape(-1, shape[-1])
    if settings.suppress_tokens:
        scores = scores.index_fill(1, torch.tensor(settings.suppress_tokens, device=scores.device), float("-inf"))
    for warper in _warpers(settings):
        scores = warper(None, scores)  # the warpers read the scores only (input_ids unused)
    return scores.reshape(shape)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats of ``softmax(logits)`` over the last dimension.

    Args:
        logits: ``[..., V]`` unnormalised scores; ``-inf`` entries (masked tokens) are allowed.

    Returns:
        ``[...]`` float32 entropies, in ``[0, log V]``.
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    # 0 * log 0 := 0 for masked tokens (p == 0, logp == -inf)
    return -(p * torch.where(p > 0, logp, torch.zeros_like(logp))).sum(-1)


def token_logps_and_entropy(scores: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log p(token), H)`` in nats under ``softmax(scores)``.

    Args:
        scores: ``[..., V]`` processed scores (:func:`processed_logits`).
        tokens: ``[...]`` token ids.

    Returns:
        ``[...]`` float32 log-probs (``-inf`` for a token outside the kept set) and ``[...]`` float32 entropies.
    """
    logps = torch.log_softmax(scores.float(), dim=-1).gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)
    return logps, entropy_from_logits(scores)
