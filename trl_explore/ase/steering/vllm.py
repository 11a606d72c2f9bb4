"""vLLM backend of activation steering for ASE-GRPO (SPEC §3.2, §4; issue "vLLM rollouts").

A vLLM engine flattens the batch into one token dimension (``[num_tokens, d]``), may compile the model with
``torch.compile`` and may replay CUDA graphs. A Python forward hook added to a built engine is silently
skipped by compiled code, so this backend puts the steering INSIDE the traced forward of decoder block
``layer`` instead:

* :func:`steerable_vllm` is a context manager around the construction of the engine (``LLM(...)``; TRL builds
  it in ``GRPOTrainer.__init__``). When vLLM has loaded the model, and before it compiles or captures
  anything, the class of block ``layer`` is swapped for a subclass whose ``forward`` adds
  ``table[route_of_token]`` to the block's hidden-state output and counts its own calls in a buffer. The
  table ``[R, d]`` (row 0 = 0, the clean route), the per-token routes ``[max_tokens]`` and the call counter
  are persistent buffers: compiled graphs and CUDA graphs read them at fixed addresses, and this module only
  ever updates them in place (``copy_``, ``fill_``). An eager engine (``enforce_eager=True``) can also be made
  steerable after it is built.
* :class:`VLLMActivationSteeringGenerator` fills the table (``alpha * vectors``) when a :meth:`steering`
  context opens (so a new bank or a weight sync is always picked up) and sets the route of every token
  before each forward pass of the engine:

  - **per-request routes** (one ``generate`` call for all routes): each request carries its route in
    ``SamplingParams.extra_args`` and a wrapper of the model runner's ``_model_forward`` writes the route of
    every scheduled token from the runner's batch order (``input_batch.req_ids``, ``query_start_loc``) into
    the buffer. This needs vLLM's V1 GPU/CPU model runner.
  - **one call per route** (any runner): the prompts are split by route and each group is generated with
    the buffer filled with its route.

  Requests of different routes never share prefix-cache entries: the prompts of steered routes get a
  ``cache_salt`` naming the route and the context (a steered prompt's KV cache depends on the vector).

Route semantics are the HF backend's (:class:`~trl_explore.ase.steering.hf.ActivationSteeringGenerator`):
vLLM decoder blocks return ``(hidden_states, residual)`` and the residual stream after the block is their
sum, so adding ``alpha * v`` to ``hidden_states`` adds it to the stream, like adding it to an HF block's
output. With ``steer_prompt=False`` only tokens at positions ``>= prompt length`` (the completion tokens fed
back) are steered: the prefill, hence the first completion token, stays clean.

The behaviour log-probs are vLLM's own sampled-token log-probs (``SamplingParams(logprobs=0)``; TRL uses
``logprobs_mode="processed_logprobs"`` so temperature applies): they come from the steered forward pass.
The readouts are taken by the trainer from its own (HF) forward; no second engine and no replay.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from trl_explore.ase.steering.base import SteeringBackend, check_alpha, check_layer_index, check_routes
from trl_explore.trl_guards.vllm_engine import vllm_model_runner

logger = logging.getLogger(__name__)

ROUTE_KEY = "trl_explore_route"
"""Key of a request's route in ``SamplingParams.extra_args``."""

TABLE_BUFFER = "trl_explore_steering_table"  # [R, d] in the block's dtype; row 0 stays 0 (clean route)
ROUTES_BUFFER = "trl_explore_steering_routes"  # [max_tokens] int64, route of each token of the current forward
CALLS_BUFFER = "trl_explore_steering_calls"  # [1] int64, incremented by the steered block at every forward

pending_slot = threading.local()  # steering slots requested by an open `steerable_vllm` context


# ------------------------------------------------------------------ the steered block
_steered_classes: dict[type, type] = {}


def _steered_forward(self, *args, **kwargs):
    """Forward of a steered vLLM decoder block: the block's own forward, then ``hidden += table[route]``."""
    output = self._trl_explore_base_forward(*args, **kwargs)
    hidden = output[0] if isinstance(output, tuple) else output
    if hidden.dim() != 2:  # e.g. model_impl="transformers" blocks return [1, num_tokens, d]: routes would broadcast
        raise RuntimeError(
            f"vLLM steering expects decoder blocks with [num_tokens, d] outputs (vLLM's own model implementation), "
            f"got shape {tuple(hidden.shape)}; use vllm_model_impl='vllm'"
        )
    table = getattr(self, TABLE_BUFFER)
    offsets = table[getattr(self, ROUTES_BUFFER)[: hidden.shape[0]]]  # [num_tokens, d]; route 0 reads the zero row
    getattr(self, CALLS_BUFFER).add_(1)
    hidden = hidden + offsets
    return (hidden, *output[1:]) if isinstance(output, tuple) else hidden


def _steered_class(cls: type) -> type:
    """A subclass of the decoder-block class ``cls`` whose forward adds the steering offsets (cached)."""
    if cls not in _steered_classes:
        _steered_classes[cls] = type(
            f"Steered{cls.__name__}",
            (cls,),
            {"forward": _steered_forward, "_trl_explore_base_forward": cls.forward},
        )
    return _steered_classes[cls]


def vllm_decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder blocks of a vLLM model (``model.model.layers`` for Llama, Qwen2, Mistral, ...).

    Raises:
        ValueError: no decoder-block list found (the message names the model class).
    """
    for path in ("model.layers", "language_model.model.layers", "model.language_model.layers", "layers"):
        module = model
        for part in path.split("."):
            module = getattr(module, part, None)
            if module is None:
                break
        if isinstance(module, nn.ModuleList):
            return module
    raise ValueError(f"cannot find the decoder layers of vLLM model {type(model).__name__}")


def install_steering_slot(model: nn.Module, layer: int, max_routes: int, max_tokens: int) -> nn.Module:
    """Make decoder block ``layer`` of a (not yet compiled) vLLM model steerable; returns the block.

    Swaps the block's class for a steered subclass and registers three non-persistent buffers on it, on the
    block's device: the offset table ``[max_routes, d]`` (block dtype, zero), the per-token routes
    ``[max_tokens]`` (int64, zero) and the call counter ``[1]`` (int64). With all routes 0 the block's output
    is unchanged bit for bit (``x + 0 == x``). Idempotent.

    Args:
        model: the vLLM ``nn.Module`` (``model_runner.model``).
        layer: index of the steered block.
        max_routes: rows of the table (clean route + the largest number of distinct vectors per call).
        max_tokens: the largest number of tokens of one forward pass (``max_num_batched_tokens`` or more).

    Raises:
        ValueError: ``layer`` out of range, or the block's hidden size cannot be found.
    """
    layers = vllm_decoder_layers(model)
    check_layer_index(layer, len(layers))
    block = layers[layer]
    if hasattr(block, TABLE_BUFFER):
        return block
    hidden_size = _hidden_size(model)
    reference = next(block.parameters())
    block.__class__ = _steered_class(type(block))
    device = reference.device
    table = torch.zeros(max_routes, hidden_size, dtype=reference.dtype, device=device)
    block.register_buffer(TABLE_BUFFER, table, persistent=False)
    block.register_buffer(ROUTES_BUFFER, torch.zeros(max_tokens, dtype=torch.long, device=device), persistent=False)
    block.register_buffer(CALLS_BUFFER, torch.zeros(1, dtype=torch.long, device=device), persistent=False)
    return block


def _hidden_size(model: nn.Module) -> int:
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "get_text_config"):
        config = config.get_text_config()
    size = getattr(config, "hidden_size", None)
    if size is None:
        embed = getattr(getattr(model, "model", model), "embed_tokens", None)
        size = getattr(embed, "embedding_dim", None)
    if size is None:
        raise ValueError(f"cannot find the hidden size of vLLM model {type(model).__name__}")
    return int(size)


def runner_max_tokens(runner) -> int:
    """Length of the route buffer for a model runner: its largest forward pass (``max_num_tokens``, else the
    scheduler's ``max_num_batched_tokens``) plus 64 tokens of margin for padded batch sizes."""
    return int(getattr(runner, "max_num_tokens", 0) or runner.scheduler_config.max_num_batched_tokens) + 64


def runner_classes() -> list[type]:
    """vLLM model-runner classes whose ``load_model`` builds the model (those importable in this vLLM)."""
    classes = []
    for module, name in (
        ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner"),
        ("vllm.v1.worker.cpu_model_runner", "CPUModelRunner"),
        ("vllm.v1.worker.gpu.model_runner", "GPUModelRunner"),
        ("vllm.v1.worker.xpu_model_runner", "XPUModelRunner"),
    ):
        with contextlib.suppress(Exception):
            classes.append(getattr(__import__(module, fromlist=[name]), name))
    return classes


@contextmanager
def steerable_vllm(layer: int = 0, max_routes: int = 64) -> Iterator[None]:
    """Make the vLLM engines built inside this context steerable at decoder block ``layer``.

    Wraps the model runners' ``load_model`` for the duration of the context: right after vLLM has built and
    loaded the model, and before it compiles, warms up or captures graphs, :func:`install_steering_slot` runs
    on it. Disables vLLM's on-disk compile cache inside the context (``VLLM_DISABLE_COMPILE_CACHE=1``), so a
    graph compiled from an unpatched model can never be reused. Only engines whose model runner lives in this
    process are reached (colocate mode, ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` or ``external_launcher``);
    in server mode the vLLM plugin of ``trl_explore.ase.steering.vllm_server`` does the same in the server.

    Args:
        layer: decoder block to steer (ASEConfig.steering_layer).
        max_routes: table rows: 1 (clean) + the most distinct vectors used in one generate call
            (K for a bank; the per-process batch size for the ``unstructured_random`` control).

    Yields:
        None.
    """
    classes = runner_classes()
    originals = {cls: cls.__dict__.get("load_model") for cls in classes}

    def wrap(cls, original_for_lookup):
        def load_model(self, *args, **kwargs):
            result = original_for_lookup(self, *args, **kwargs)
            slot = getattr(pending_slot, "slot", None)
            if slot is not None and getattr(self, "model", None) is not None:
                install_steering_slot(self.model, slot["layer"], slot["max_routes"], runner_max_tokens(self))
            return result

        return load_model

    previous_env = os.environ.get("VLLM_DISABLE_COMPILE_CACHE")
    pending_slot.slot = {"layer": layer, "max_routes": max_routes}
    os.environ["VLLM_DISABLE_COMPILE_CACHE"] = "1"
    try:
        for cls in classes:
            if originals[cls] is not None:  # patch only classes that define load_model themselves
                cls.load_model = wrap(cls, originals[cls])
        yield
    finally:
        for cls in classes:
            if originals[cls] is not None:
                cls.load_model = originals[cls]
        pending_slot.slot = None
        if previous_env is None:
            os.environ.pop("VLLM_DISABLE_COMPILE_CACHE", None)
        else:
            os.environ["VLLM_DISABLE_COMPILE_CACHE"] = previous_env


def runner_exposes_batch_layout(runner) -> bool:
    """Whether a vLLM model runner exposes what per-request routes need (vLLM's V1 GPU / CPU model runner)."""
    return all(hasattr(runner, a) for a in ("_model_forward", "input_batch", "requests", "query_start_loc"))


def write_token_routes(runner, buffer: torch.Tensor, route_of) -> None:
    """Fill ``buffer`` (``[max_tokens]`` int64) with the table row of every token of the runner's next forward pass.

    Tokens are laid out request after request in the runner's batch order (``input_batch.req_ids``), request ``i``
    owning ``query_start_loc[i]:query_start_loc[i + 1]``; padding tokens and clean requests get row 0.

    Args:
        runner: a vLLM V1 model runner, between ``_prepare_inputs`` and the model call.
        buffer: the steered block's route buffer (written in place).
        route_of: ``route_of(req_id, request_state) -> (row, steer_prompt)``; with ``steer_prompt`` False only the
            request's tokens at positions ``>= prompt length`` get the row.
    """
    batch = runner.input_batch
    num_reqs = batch.num_reqs
    bounds = runner.query_start_loc.np[: num_reqs + 1].tolist()
    computed = batch.num_computed_tokens_cpu[:num_reqs].tolist()
    routes = torch.zeros(buffer.shape[0], dtype=torch.long)
    for i, req_id in enumerate(batch.req_ids[:num_reqs]):
        state = runner.requests.get(req_id)
        row, steer_prompt = route_of(req_id, state)
        if row == 0:
            continue
        start, end = bounds[i], bounds[i + 1]
        if not steer_prompt:  # only positions >= prompt length (tokens fed back from the completion)
            prompt_len = len(state.prompt_token_ids or ())
            start = max(start, start + prompt_len - computed[i])
        if start < end:
            routes[start:end] = row
    buffer.copy_(routes, non_blocking=True)


def _is_eager(llm) -> bool:
    config = llm.llm_engine.vllm_config
    if config.model_config.enforce_eager:
        return True
    mode = getattr(config.compilation_config, "mode", None)
    return mode is not None and int(mode) == 0


class VLLMActivationSteeringGenerator(SteeringBackend):
    """Route-steered rollouts in a colocated vLLM engine (SPEC §4 ``ActivationSteeringGenerator``, vLLM path).

    Route ``s`` in ``1..K`` adds ``alpha * v_s`` to the hidden-state output of decoder block ``layer`` for
    every token of the rollouts of that route (prompt included unless ``steer_prompt=False``); route 0 is
    clean and leaves the output unchanged bit for bit. Works in eager and compiled (and CUDA-graph) modes:
    the steering is part of the traced forward (see the module docstring). Usage::

        with steerable_vllm(layer=0, max_routes=K + 1):
            llm = LLM(model=path, ...)                       # or TRL's colocate engine
        steerer = VLLMActivationSteeringGenerator(llm, layer=0, alpha=0.5)
        with steerer.steering(route_ids, bank):              # route_ids: LongTensor[B], bank: Tensor[K, d]
            outputs = llm.generate(prompts, sampling_params)  # B prompts, in route_ids order

    Args:
        llm: a vLLM ``LLM`` whose engine runs in this process. In compiled mode it must have been built inside
            :func:`steerable_vllm` with the same ``layer``; an eager engine is made steerable here.
        layer: steered decoder block (default 0).
        alpha: default steering strength (default 0.5, SPEC §3.4).
        steer_prompt: steer the prompt tokens too (default True, as the HF backend).
        per_request_routes: None (default) = one ``generate`` call for all routes when the model runner allows
            it, else one call per route; False forces one call per route; True requires per-request routes.
        tp_group: the tensor-parallel process group when TRL gathers the prompts of ``tp`` ranks into each
            ``generate`` call (colocate mode with ``vllm_tensor_parallel_size > 1``); routes are gathered the
            same way.
        max_routes: table rows if the slot is installed here (eager engines only; default 64).

    Attributes:
        hook_calls: steered-block executions during the last :meth:`steering` context (read from the in-graph
            counter, so compiled and graph-captured passes count; a compiled graph may count one pass more than
            once, so the check is ``hook_calls >= forward_calls``).
        forward_calls: model forward passes seen by the runner wrapper in that context (None in one-call-per-route
            mode without a runner wrapper).

    Raises:
        RuntimeError: the engine is compiled and was not built inside :func:`steerable_vllm`, the runner is not
            in this process, or ``per_request_routes=True`` and the runner does not expose its batch layout.
        ValueError: bad ``layer`` / ``alpha`` / ``steer_prompt``.
    """

    def __init__(
        self,
        llm,
        *,
        layer: int = 0,
        alpha: float = 0.5,
        steer_prompt: bool = True,
        per_request_routes: bool | None = None,
        tp_group=None,
        max_routes: int = 64,
    ) -> None:
        super().__init__(layer=layer, alpha=alpha, steer_prompt=steer_prompt)
        self.llm = llm
        self.tp_group = tp_group
        self.runner = vllm_model_runner(llm)
        layers = vllm_decoder_layers(self.runner.model)
        check_layer_index(layer, len(layers))
        if getattr(self.runner, "_trl_explore_block", None) is not None:
            raise RuntimeError(
                "this engine was made steerable by the server plugin (TRL_EXPLORE_STEERING_LAYER is set in this "
                "process): unset it for colocate mode"
            )
        block = layers[layer]
        if not hasattr(block, TABLE_BUFFER):
            if not _is_eager(llm):
                raise RuntimeError(
                    f"this vLLM engine is compiled and decoder block {layer} has no steering slot: build the engine "
                    "inside `trl_explore.ase.steering.vllm.steerable_vllm(layer=...)` (hooks added to a compiled "
                    "engine are silently skipped), or use enforce_eager=True"
                )
            block = install_steering_slot(self.runner.model, layer, max_routes, runner_max_tokens(self.runner))
        self.block = block
        self.max_routes = getattr(block, TABLE_BUFFER).shape[0]
        self.hidden_size = getattr(block, TABLE_BUFFER).shape[1]
        supported = runner_exposes_batch_layout(self.runner)
        if per_request_routes and not supported:
            raise RuntimeError(
                f"per_request_routes=True but vLLM's {type(self.runner).__name__} does not expose its batch layout "
                "(input_batch, requests, query_start_loc); use per_request_routes=None for one call per route"
            )
        self.per_request_routes = supported if per_request_routes is None else bool(per_request_routes)
        self.forward_calls: int | None = None
        self._wrapped = supported
        self._active = False
        self._salt = ""  # prefix-cache salt of the open steering context
        if supported:
            self._wrap_model_forward()

    # -------------------------------------------------------------- per-token routes
    def _wrap_model_forward(self) -> None:
        """Wrap the runner's ``_model_forward`` once per runner; the wrapper serves whichever steerer of this engine
        has a :meth:`steering` context open (at most one: ``runner._trl_explore_active``)."""
        runner = self.runner
        if getattr(runner, "_trl_explore_wrapped", False):
            return
        original = runner._model_forward
        runner._trl_explore_active = None

        def _model_forward(*args, **kwargs):
            active = runner._trl_explore_active
            if active is not None:
                active._write_token_routes()
            return original(*args, **kwargs)

        runner._model_forward = _model_forward
        runner._trl_explore_wrapped = True

    def _write_token_routes(self) -> None:
        """Write the route of every token of the forward pass about to run into the route buffer."""
        self.forward_calls = (self.forward_calls or 0) + 1
        if not self.per_request_routes:
            return  # one call per route: the buffer already holds the route of the whole call

        def route_of(req_id, state):
            params = getattr(state, "sampling_params", None)
            return int((getattr(params, "extra_args", None) or {}).get(ROUTE_KEY, 0)), self.steer_prompt

        write_token_routes(self.runner, getattr(self.block, ROUTES_BUFFER), route_of)

    # -------------------------------------------------------------- steering context
    @contextmanager
    def steering(self, route_ids: torch.Tensor, vectors: torch.Tensor, alpha: float | None = None) -> Iterator[None]:
        """Steer the ``llm.generate`` calls made inside this context; prompt ``i`` gets route ``route_ids[i]``.

        Fills the table with ``alpha * vectors`` (in place) and wraps ``llm.generate`` on the instance; both are
        undone on exit (table and routes back to zero), also when the body raises.

        Args:
            route_ids: ``LongTensor[B]``, values in ``0..K``; ``B`` = number of prompts of each ``generate`` call
                (TRL's colocate mode: one prompt per rollout), or ``B * tp`` after TRL's tensor-parallel gather.
            vectors: ``Tensor[K, d]`` with ``K + 1 <= max_routes``.
            alpha: steering strength (default ``self.alpha``).

        Raises:
            RuntimeError: a context is already active; (inside) a ``generate`` call with a number of prompts that
                is not ``B``, or a list of sampling params; (on a normal exit) a non-clean route was requested but
                the steered block did not run on every forward pass.
            ValueError / TypeError: see :func:`~trl_explore.ase.steering.base.check_routes`; ``K + 1 > max_routes``.
        """
        if self._active:
            raise RuntimeError("a steering context is already active on this VLLMActivationSteeringGenerator")
        if getattr(self.runner, "_trl_explore_active", None) is not None:
            raise RuntimeError(
                "another VLLMActivationSteeringGenerator has a steering context open on this vLLM engine; "
                "close it first (one steering context per engine)"
            )
        check_routes(route_ids, vectors, self.hidden_size)
        alpha = self.alpha if alpha is None else check_alpha(alpha)
        if vectors.shape[0] + 1 > self.max_routes:
            raise ValueError(
                f"{vectors.shape[0]} vectors do not fit the vLLM steering table of {self.max_routes} rows "
                "(1 clean + vectors); build the engine with a larger `max_routes`"
            )
        table = getattr(self.block, TABLE_BUFFER)
        calls = getattr(self.block, CALLS_BUFFER)
        fresh = torch.zeros_like(table)
        fresh[1 : vectors.shape[0] + 1] = (alpha * vectors.detach().float()).to(device=table.device, dtype=table.dtype)
        table.copy_(fresh)
        routes = route_ids.tolist()
        self._salt = f"trl-explore-steer-{uuid.uuid4().hex}"  # fresh per context: never reuses another's cache
        calls_before = int(calls.item())
        self.forward_calls = 0 if self._wrapped else None
        llm, original = self.llm, self.llm.generate
        previous = llm.__dict__.get("generate")  # an instance attribute someone else set, restored on exit

        def generate(prompts, sampling_params=None, *args, **kwargs):
            return self._generate(original, routes, prompts, sampling_params, *args, **kwargs)

        llm.generate = generate
        self._active = True
        if self._wrapped:
            self.runner._trl_explore_active = self
        try:
            yield
        finally:
            self._active = False
            if self._wrapped:
                self.runner._trl_explore_active = None
            if previous is None:
                llm.__dict__.pop("generate", None)  # back to the class method
            else:
                llm.generate = previous
            table.zero_()
            getattr(self.block, ROUTES_BUFFER).zero_()
            self.hook_calls = int(calls.item()) - calls_before
        steered = bool((route_ids != 0).any())
        if steered and self._wrapped and self.hook_calls > 0 and self.forward_calls == 0:
            raise RuntimeError(
                "vLLM steering: the engine ran forward passes in this context but the route writer never did; the "
                "routes were not applied"
            )
        self._raise_if_not_fired(route_ids, "vLLM steering", self.forward_calls)

    def _routes_for(self, routes: list[int], num_prompts: int) -> list[int]:
        if num_prompts == len(routes):
            return routes
        if self.tp_group is not None:
            world = torch.distributed.get_world_size(group=self.tp_group)
            if num_prompts == len(routes) * world:
                gathered = [None] * world
                torch.distributed.all_gather_object(gathered, routes, group=self.tp_group)
                return [r for part in gathered for r in part]
        raise RuntimeError(f"steering was set up for {len(routes)} rollouts but generate got {num_prompts} prompts")

    def _generate(self, original, routes, prompts, sampling_params, *args, **kwargs):
        from vllm import SamplingParams

        if isinstance(prompts, (str, dict)) or not isinstance(prompts, Sequence):
            prompts = [prompts]
        prompts = list(prompts)
        if not isinstance(sampling_params, SamplingParams):
            raise RuntimeError("steered vLLM generation needs one SamplingParams for all prompts (as TRL passes)")
        routes = self._routes_for(routes, len(prompts))
        prompts = [self._salted(prompt, route) for prompt, route in zip(prompts, routes)]
        if self.per_request_routes:
            params = []
            for route in routes:
                sp = sampling_params.clone()
                sp.extra_args = {**(sp.extra_args or {}), ROUTE_KEY: route}
                params.append(sp)
            return original(prompts, params, *args, **kwargs)
        # one generate call per route, the route buffer filled with that route
        if not self.steer_prompt and any(routes):
            raise RuntimeError("steer_prompt=False needs per-request routes (vLLM's V1 model runner)")
        outputs = [None] * len(prompts)
        route_buffer = getattr(self.block, ROUTES_BUFFER)
        for route in sorted(set(routes)):
            rows = [i for i, r in enumerate(routes) if r == route]
            route_buffer.fill_(route)
            try:
                for i, out in zip(rows, original([prompts[i] for i in rows], sampling_params, *args, **kwargs)):
                    outputs[i] = out
            finally:
                route_buffer.zero_()
        return outputs

    def _salted(self, prompt, route: int):
        if route == 0:
            return prompt  # the clean prompt cache is shared with unsteered generation, as it should be
        if isinstance(prompt, str):
            prompt = {"prompt": prompt}
        if not isinstance(prompt, dict):
            raise RuntimeError(f"steered vLLM generation expects str or dict prompts, got {type(prompt).__name__}")
        salt = f"{self._salt}-route{route}"  # at most 128 characters, no "/" (vLLM's salt rules)
        return {**prompt, "cache_salt": salt if "cache_salt" not in prompt else f"{prompt['cache_salt']}-{salt}"}

    def score(self, *args, **kwargs):
        """Not available with vLLM: the behaviour log-probs come with the sample (``SamplingParams(logprobs=0)``)
        and ASE-GRPO reads the block readouts from the trainer's own forward.

        Raises:
            NotImplementedError: always; use the HF backend's ``score`` for a teacher-forced replay.
        """
        raise NotImplementedError(
            "VLLMActivationSteeringGenerator.score: vLLM returns the sampled-token log-probs of the steered forward "
            "(logprobs=0); for a teacher-forced replay use the HF ActivationSteeringGenerator"
        )
