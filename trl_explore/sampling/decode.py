"""A decoder for small batches on a CPU: what ``model.generate`` samples, with less work per token.

:func:`decode` samples completions for a batch of prompts, as HF ``generate`` does with ``do_sample=True`` (or
greedily), from the same next-token distribution (:func:`trl_explore.trl_guards.sampler_settings.processed_logits`:
temperature,
top-k, top-p, min-p, suppressed tokens) and from the same random generator (torch's global one, so a run's seed and
its saved random states fix the samples, as they fix ``generate``'s). :func:`fast_generate` wraps it in
``generate``'s signature and output layout, so a caller of ``generate`` (TRL's rollout path, the evaluation's
:class:`~trl_explore.sampling.hf.TransformersGenerator`) switches by calling it instead. Where it does less work:

* **one prefill per prompt**: the rows of a batch that hold the same prompt (TRL repeats each prompt
  ``num_generations`` times; an evaluation samples ``k`` times) share one prompt forward, whose cache is then copied
  to each row; and the tokens that begin every prompt of the batch (a system prompt, a worked example) are run once
  for the whole batch.
* **finished rows leave the batch**: ``generate`` decodes every row until the longest one ends; here a row that has
  sampled an end-of-sequence token is dropped from the batch and its cache (a compaction, done once an eighth of
  the batch has finished, so its copy stays small against the decoding it saves).
* **a cache that grows in place**: keys and values are written into a buffer allocated once for the whole call,
  where transformers' ``DynamicCache`` concatenates the whole cache at every token.

What it gives up against ``generate``: the samples are not ``generate``'s samples for the same seed (a row's draw
depends on which rows are still in the batch), only the same distribution, and the same samples again for the same
random state. What it does not do (:func:`unsupported_reason`; :func:`fast_generate` then calls ``generate``):
beam search, and any setting that changes the next-token distribution beyond those above (repetition penalty,
n-gram bans, minimum lengths, ...); encoder-decoder models, models with recurrent or linear-attention layers, and
inputs other than token ids (images).

**Per-row interventions** (ASE-GRPO's steering): a forward hook that adds something per row (``[B, 1, d]``) must
know which rows a forward holds, since rows are shared at prefill and dropped later. The decoder says it through
:func:`current_rows` (the caller's row of each row of the forward, and whether the forward reads prompt tokens), and
an intervention whose rows must not share a prefill (different steering routes change the prompt's cache) declares
per-row keys with :func:`row_keys` around the call.

Measured speed against ``generate``: ``benchmarks/generation.py`` and docs/performance.md.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from trl_explore.trl_guards.sampler_settings import SamplerSettings, processed_logits, sampler_settings

COMPACT_FRACTION = 1 / 8
"""Finished rows are dropped from the batch (and its cache) once they are at least this fraction of it."""

_ATTENTION_LAYERS = ("full_attention", "sliding_attention", "chunked_attention")
"""``config.layer_types`` values whose cache is keys and values along the sequence (what the decoder's cache holds;
a sliding window is applied by the model's attention mask, so keeping every position stays correct)."""


@dataclass(frozen=True)
class ActiveRows:
    """The rows of the forward pass that is running (:func:`current_rows`).

    Attributes:
        index: ``LongTensor[b]``: for each row of the forward, its row in the caller's batch (the ``input_ids`` row
            of :func:`fast_generate`).
        prefill: True while the forward reads prompt tokens, False for the one-token decoding steps.
    """

    index: torch.Tensor
    prefill: bool


DrawObserver = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int], None]
"""``observer(rows, logits, tokens, step)``, called by :func:`decode` at each decoding step for the rows still
sampling: ``rows`` ``LongTensor[b]`` (the caller's rows), ``logits`` ``[b, V]`` (the model's raw last-position logits,
its dtype and device), ``tokens`` ``LongTensor[b]`` (the tokens drawn from them), ``step`` (0 for each row's first
token). A row stops being observed after the step that drew its end-of-sequence token."""

_DRAW_OBSERVERS: contextvars.ContextVar[tuple[DrawObserver, ...]] = contextvars.ContextVar(
    "trl_explore_draw_observers", default=())

_ACTIVE_ROWS: contextvars.ContextVar[ActiveRows | None] = contextvars.ContextVar("trl_explore_active_rows",
                                                                                   default=None)
_ROW_KEYS: contextvars.ContextVar[torch.Tensor | None] = contextvars.ContextVar("trl_explore_row_keys", default=None)


def current_rows() -> ActiveRows | None:
    """The rows of the forward pass :func:`decode` is running, or None outside it (e.g. in ``generate``, whose
    forwards hold the caller's rows in order)."""
    return _ACTIVE_ROWS.get()


@contextlib.contextmanager
def row_keys(keys: torch.Tensor) -> Iterator[None]:
    """Declare a key per row of the batch sampled inside the context: rows with different keys never share a
    forward's prompt tokens (:func:`decode`'s shared prefill). ASE-GRPO's steering declares its route ids.

    Args:
        keys: ``LongTensor[B]``, one key per row of the caller's batch.
    """
    token = _ROW_KEYS.set(torch.as_tensor(keys).reshape(-1).cpu())
    try:
        yield
    finally:
        _ROW_KEYS.reset(token)


@contextlib.contextmanager
def observe_draws(observer: DrawObserver) -> Iterator[None]:
    """Inside: :func:`decode` calls ``observer`` at each decoding step (:data:`DrawObserver`), e.g. to keep the logits
    that produced each row's last token (OGER's ``H_last``) or the log-prob of each drawn token (ASE-GRPO's behaviour
    log-probs). Hooks on the model cannot follow rows that the decoder shares and drops; an observer is told them."""
    token = _DRAW_OBSERVERS.set((*_DRAW_OBSERVERS.get(), observer))
    try:
        yield
    finally:
        _DRAW_OBSERVERS.reset(token)


@contextlib.contextmanager
def _rows(index: torch.Tensor, prefill: bool) -> Iterator[None]:
    token = _ACTIVE_ROWS.set(ActiveRows(index, prefill))
    try:
        yield
    finally:
        _ACTIVE_ROWS.reset(token)


def _growing_layer_class():
    """A transformers cache layer whose keys and values live in a buffer allocated once (``capacity`` positions),
    written in place at each step; the cache's ``keys`` / ``values`` are views of its filled part."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        def __init__(self, capacity: int):
            super().__init__()
            self.capacity = capacity
            self.length = 0

        def lazy_initialization(self, key_states, value_states, *args, **kwargs):
            batch, heads, _, dim = key_states.shape
            self.device = key_states.device
            self.key_buffer = key_states.new_empty((batch, heads, self.capacity, dim))
            self.value_buffer = value_states.new_empty((batch, heads, self.capacity, value_states.shape[-1]))
            self.length = 0
            self._views()
            self.is_initialized = True

        def _views(self):
            self.keys = self.key_buffer[:, :, : self.length]
            self.values = self.value_buffer[:, :, : self.length]

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            end = self.length + key_states.shape[-2]
            if end > self.capacity:
                raise RuntimeError(f"decode: the cache holds {self.capacity} positions, {end} were asked for")
            self.key_buffer[:, :, self.length : end] = key_states
            self.value_buffer[:, :, self.length : end] = value_states
            self.length = end
            self._views()
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.length if self.is_initialized else 0

        def batch_select_indices(self, indices):
            if self.is_initialized:
                self.key_buffer = self.key_buffer[indices.to(self.device)]
                self.value_buffer = self.value_buffer[indices.to(self.device)]
                self._views()

        def batch_repeat_interleave(self, repeats: int):
            if self.is_initialized:
                self.key_buffer = self.key_buffer.repeat_interleave(repeats, dim=0)
                self.value_buffer = self.value_buffer.repeat_interleave(repeats, dim=0)
                self._views()

        def reorder_cache(self, beam_idx):
            self.batch_select_indices(beam_idx)

        def crop(self, tokens_to_remove: int):
            raise NotImplementedError("decode's cache is not cropped")

    return GrowingLayer


def _cache_argument(model) -> str:
    """The name of the forward's cache argument: ``cache`` (transformers 5.24 and newer), else ``past_key_values``."""
    import inspect

    inner = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    try:
        parameters = inspect.signature(inner.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in parameters and "past_key_values" not in parameters else "past_key_values"


def _new_cache(capacity: int):
    from transformers import DynamicCache

    cache = DynamicCache()
    cache.layer_class_to_replicate = functools.partial(_growing_layer_class(), capacity)
    return cache


def unsupported_reason(model, sampler: SamplerSettings | None = None, extra_inputs: Sequence[str] = ()) -> str | None:
    """Why :func:`decode` cannot sample for this model and sampler (None: it can).

    Args:
        model: the causal LM.
        sampler: the sampler (None: greedy).
        extra_inputs: names of inputs other than ``input_ids`` / ``attention_mask`` (images, token types, ...).
    """
    config = getattr(model, "config", None)
    if config is None:
        return "the model has no config"
    if getattr(config, "is_encoder_decoder", False):
        return "an encoder-decoder model"
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    layer_types = getattr(text, "layer_types", None) or ()
    if any(t not in _ATTENTION_LAYERS for t in layer_types):
        return f"layers of type {sorted(set(layer_types) - set(_ATTENTION_LAYERS))}"
    if extra_inputs:
        return f"inputs other than token ids: {sorted(extra_inputs)}"
    if sampler is not None:
        if sampler.unreproducible():
            return f"sampler settings {[name for name, _, _ in sampler.unreproducible()]}"
    return None


def draw(probs: torch.Tensor) -> torch.Tensor:
    """One token per row from ``probs`` by inverting its cumulative distribution: ``u ~ U[0, total)`` from torch's
    global generator (one number a row), the first token whose cumulative probability exceeds ``u``. The same
    distribution as ``torch.multinomial(probs, 1)`` (what ``generate`` calls), which draws an exponential number for
    every entry: on a 49,152-word vocabulary that was 9% of a rollout's decoding time on a 2-core CPU.

    Args:
        probs: ``[B, V]`` float32 probabilities (rows summing to 1 up to rounding; zeros never drawn).

    Returns:
        ``LongTensor[B]``.
    """
    cumulative = probs.cumsum(-1)
    u = torch.rand((probs.shape[0], 1), device=probs.device, dtype=cumulative.dtype) * cumulative[:, -1:]
    # right=True: the first index whose cumulative value is > u, a token of positive probability; u rounded up to the
    # total (r * total, r just below 1) would pass the end: the row's last token of positive probability then
    tokens = torch.searchsorted(cumulative, u, right=True).squeeze(1)
    last = probs.shape[1] - 1 - (probs > 0).flip(-1).int().argmax(-1)
    return torch.minimum(tokens, last)


@torch.no_grad()
def decode(model, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, eos_token_ids: Sequence[int],
           sampler: SamplerSettings | None) -> list[list[int]]:
    """Sample one completion per prompt row.

    Args:
        model: a causal LM (transformers ``PreTrainedModel``), run as it is (its dtype, its device; an autocast
            context around the call applies).
        prompts: ``B`` prompts, token ids without padding; rows may repeat a prompt (they then share its prefill).
        max_new_tokens: the token cap per completion (>= 1).
        eos_token_ids: the ids that end a completion (it ends with the first one sampled, included).
        sampler: the next-token sampler (:class:`~trl_explore.trl_guards.sampler_settings.SamplerSettings`); None
            decodes greedily (argmax).

    Returns:
        ``B`` completions (token ids), each ending with its end-of-sequence token or cut at ``max_new_tokens``.

    Raises:
        ValueError: an empty prompt, ``max_new_tokens < 1``, no ``eos_token_ids``, or a sampler it cannot reproduce
            (:func:`unsupported_reason`).
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not eos_token_ids:
        raise ValueError("decode needs at least one end-of-sequence token id")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("decode: every prompt needs at least one token")
    reason = unsupported_reason(model, sampler)
    if reason is not None:
        raise ValueError(f"decode cannot sample here: {reason}")
    num_rows = len(prompts)
    if num_rows == 0:
        return []
    device = next(model.parameters()).device
    keys = _ROW_KEYS.get()
    if keys is not None and len(keys) != num_rows:
        raise ValueError(f"row_keys gave {len(keys)} keys for a batch of {num_rows} rows")
    row_key = [None] * num_rows if keys is None else keys.tolist()

    # one prefill per distinct (prompt, key); the representative row of each is its first row
    distinct: dict[tuple, int] = {}
    first_row: list[int] = []
    of_row: list[int] = []
    for row, (prompt, key) in enumerate(zip(prompts, row_key)):
        ident = (tuple(prompt), key)
        if ident not in distinct:
            distinct[ident] = len(first_row)
            first_row.append(row)
        of_row.append(distinct[ident])
    unique = [list(prompts[r]) for r in first_row]

    # the tokens every distinct prompt begins with, run once (only when no row keys tell the rows apart)
    common = 0
    if len(set(row_key)) == 1:
        limit = min(len(p) for p in unique) - 1  # each prompt keeps >= 1 token of its own for the last logits
        first = unique[0]
        while common < limit and all(p[common] == first[common] for p in unique):
            common += 1
    suffix_width = max(len(p) - common for p in unique)
    cache = _new_cache(common + suffix_width + max_new_tokens)
    with_cache = {_cache_argument(model): cache, "use_cache": True}
    representative = torch.tensor(first_row, dtype=torch.long)
    if common > 0:
        with _rows(representative[:1], prefill=True):
            model(input_ids=torch.tensor([unique[0][:common]], device=device), logits_to_keep=1, **with_cache)
        cache.batch_repeat_interleave(len(unique))
    ids = torch.zeros((len(unique), suffix_width), dtype=torch.long)
    mask = torch.zeros((len(unique), common + suffix_width), dtype=torch.long)
    mask[:, :common] = 1
    for i, prompt in enumerate(unique):
        tail = prompt[common:]
        ids[i, suffix_width - len(tail) :] = torch.tensor(tail)
        mask[i, common + suffix_width - len(tail) :] = 1
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    with _rows(representative, prefill=True):
        out = model(input_ids=ids.to(device), attention_mask=mask.to(device),
                    position_ids=positions[:, common:].to(device), logits_to_keep=1, **with_cache)
    expand = torch.tensor(of_row, dtype=torch.long)
    logits = out.logits[:, -1][expand.to(device)]
    cache.batch_select_indices(expand)
    mask = mask[expand]
    next_position = mask.sum(1)  # the position of each row's next token
    completions: list[list[int]] = [[] for _ in range(num_rows)]
    rows = torch.arange(num_rows)  # the caller's row of each row in the batch
    done = torch.zeros(num_rows, dtype=torch.bool)  # per row in the batch: finished, not yet dropped
    eos = torch.tensor(sorted({int(t) for t in eos_token_ids}))
    for step in range(max_new_tokens):
        if sampler is None:
            tokens = logits.float().argmax(-1)
        else:
            tokens = draw(torch.softmax(processed_logits(logits, sampler), dim=-1))
        tokens = tokens.cpu()
        observers = _DRAW_OBSERVERS.get()
        if observers:
            live = (~done).nonzero().squeeze(1)
            for observer in observers:
                observer(rows[live], logits[live.to(logits.device)], tokens[live], step)
        for row, token, finished in zip(rows.tolist(), tokens.tolist(), done.tolist()):
            if not finished:
                completions[row].append(token)
        done |= torch.isin(tokens, eos)
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        if int(done.sum()) >= max(1, COMPACT_FRACTION * len(rows)):
            keep = (~done).nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            rows, tokens, mask, next_position = rows[keep], tokens[keep], mask[keep], next_position[keep]
            done = done[keep]
        mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype)], dim=1)
        with _rows(rows, prefill=False):
            out = model(input_ids=tokens[:, None].to(device), attention_mask=mask.to(device),
                        position_ids=next_position[:, None].to(device), **with_cache)
        next_position = next_position + 1
        logits = out.logits[:, -1]
    return completions


def generation_sampler(model, generation_config=None, **kwargs) -> tuple[SamplerSettings | None, dict]:
    """The sampler and the remaining settings of a ``generate`` call, as ``generate`` resolves them (the call's
    ``generation_config`` and keyword settings over the model's ``generation_config``, over transformers' defaults:
    ``GenerationMixin._prepare_generation_config``).

    Returns:
        ``(sampler or None for greedy, resolved settings as a dict)``; the dict holds ``max_new_tokens``,
        ``eos_token_id``, ``pad_token_id``, ``num_beams``, ``num_return_sequences`` and the rest of the resolved
        ``GenerationConfig``.
    """
    config, _ = model._prepare_generation_config(generation_config, **kwargs)
    values = config.to_dict()
    if not values.get("do_sample", False):
        return None, values
    return sampler_settings(values, "transformers"), values


def fast_generate(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                  generation_config=None, **kwargs) -> torch.Tensor:
    """``model.generate(input_ids, attention_mask, generation_config, **kwargs)``, sampled by :func:`decode` where it
    can (:func:`unsupported_reason`), by ``generate`` itself otherwise.

    Args:
        model: a causal LM.
        input_ids: ``LongTensor[B, W]``, left-padded prompts.
        attention_mask: ``[B, W]``, 1 on prompt tokens (default: every position).
        generation_config: as ``generate``'s; keyword settings (``max_new_tokens``, ``do_sample``, ``temperature``,
            ...) override it, as in ``generate``.

    Returns:
        ``LongTensor[B, W + T]``: the prompts as given, then each row's completion, right-padded with the pad token
        to the longest one (``T`` tokens), as ``generate`` returns them (a row ends at its first end-of-sequence
        token, included).
    """
    settings = {k: v for k, v in kwargs.items() if k not in ("pad_token_id", "eos_token_id")}
    generation_inputs = {k for k, v in settings.items() if torch.is_tensor(v)}
    try:
        sampler, resolved = generation_sampler(model, generation_config, **kwargs)
    except (AttributeError, TypeError, ValueError):  # a transformers without that resolution: generate decides
        sampler, resolved = None, None
    reason = "transformers could not resolve the settings" if resolved is None else unsupported_reason(
        model, sampler, sorted(generation_inputs))
    if reason is None:
        eos = resolved.get("eos_token_id")
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        if (resolved.get("num_beams") or 1) > 1 or (resolved.get("num_return_sequences") or 1) > 1:
            reason = "beam search or several sequences per row"
        elif resolved.get("max_new_tokens") is None:
            reason = "no max_new_tokens"
        elif not eos:
            reason = "no end-of-sequence token"
    if reason is not None:  # the class's generate: `model.generate` may be this function (generate_replaced)
        return type(model).generate(model, input_ids=input_ids, attention_mask=attention_mask,
                                    generation_config=generation_config, **kwargs)
    pad = resolved.get("pad_token_id")
    pad = eos[0] if pad is None else pad
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    prompts = [row[m.bool()].tolist() for row, m in zip(input_ids.cpu(), attention_mask.cpu())]
    completions = decode(model, prompts, max_new_tokens=int(resolved["max_new_tokens"]), eos_token_ids=eos,
                         sampler=sampler)
    width = max(len(c) for c in completions)
    out = torch.full((len(prompts), width), int(pad), dtype=input_ids.dtype)
    for i, completion in enumerate(completions):
        out[i, : len(completion)] = torch.tensor(completion, dtype=input_ids.dtype)
    return torch.cat([input_ids, out.to(input_ids.device)], dim=1)


def _is_fsdp_generate(model) -> bool:
    """Whether ``model.generate`` is FSDP2's wrapper of the class's ``generate``: transformers' ``Trainer`` registers
    it (``torch.distributed.fsdp.register_fsdp_forward_method``) so the root's parameters are gathered around
    generation. ``functools.wraps`` leaves the wrapped bound method in ``__wrapped__``."""
    wrapped = getattr(vars(model).get("generate"), "__wrapped__", None)
    return getattr(wrapped, "__func__", None) is getattr(type(model), "generate", None)


@contextlib.contextmanager
def generate_replaced(model) -> Iterator[None]:
    """Inside: ``model.generate`` is :func:`fast_generate` on that model object (an instance attribute; what was there
    before comes back on exit). A model object that already has its own ``generate`` attribute (a nested call, a
    user's patch) is left alone, except FSDP2's registration of the class's ``generate`` (:func:`_is_fsdp_generate`):
    there :func:`fast_generate` is registered the same way, so FSDP gathers the root's parameters around it as it
    would around ``generate`` (without this, FSDP2 runs sampled with transformers' ``generate`` and DDP runs with the
    decoder: other random draws)."""
    before = vars(model).get("generate")
    fsdp = before is not None and _is_fsdp_generate(model)
    if before is not None and not fsdp:
        yield
        return
    model.generate = functools.partial(fast_generate, model)
    if fsdp:
        from torch.distributed.fsdp import register_fsdp_forward_method

        register_fsdp_forward_method(model, "generate")  # wraps the partial just set in FSDP's pre/post-forward
    try:
        yield
    finally:
        if fsdp:
            model.generate = before
        else:
            del model.generate


def rollout_sampling(trainer) -> contextlib.ExitStack:
    """The context of a ``GRPOTrainer``'s HF rollouts: one ``torch.autocast`` around the call in the CPU bfloat16
    tier (:func:`trl_explore.precision.generation_autocast`), and :func:`fast_generate` in place of ``generate``.

    TRL's HF path (``GRPOTrainer._generate_single_turn``) pads the prompts, gathers the weights, calls
    ``unwrapped_model.generate`` and masks after the first end-of-sequence token; only that ``generate`` is replaced
    (:func:`generate_replaced` on ``trainer.accelerator.unwrap_model(trainer.model_wrapped)``, the object TRL
    unwraps), so everything around the call stays TRL's. The decoder is not used with transformers' paged generation
    or with ``trainer.args.fast_decode`` false or absent (a plain ``GRPOConfig``); nothing is entered with vLLM.
    """
    from trl_explore.precision import generation_autocast

    stack = contextlib.ExitStack()
    if getattr(trainer, "use_vllm", False):
        return stack
    stack.enter_context(generation_autocast(trainer.args, trainer.accelerator.device))
    if getattr(trainer.args, "fast_decode", False) and not getattr(trainer, "use_transformers_continuous_batching",
                                                                   False):
        stack.enter_context(generate_replaced(trainer.accelerator.unwrap_model(trainer.model_wrapped)))
    return stack
