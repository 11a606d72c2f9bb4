"""Steering through a vLLM server (TRL's server mode: ``vllm serve`` / ``trl vllm-serve``), both sides.

Server side — :func:`register`, a vLLM general plugin (entry point ``vllm.general_plugins``, loaded by every vLLM
process when ``trl_explore`` is installed next to the server). It does nothing unless the server is started with
``TRL_EXPLORE_STEERING_LAYER=<block>``; then, in each worker, the model gets the steering slot of
:func:`~trl_explore.ase.steering.vllm.install_steering_slot` before vLLM compiles it, and the runner writes the row
of every token before each forward pass. A request is steered when its ``SamplingParams.extra_args`` (the OpenAI
API's ``vllm_xargs``) hold ``trl_explore_steering_vector``: the offset ``alpha * v`` as a list of ``d`` floats. Rows
of the table are given to distinct vectors while requests use them (``TRL_EXPLORE_STEERING_MAX_VECTORS``, default
64). ``trl_explore_steer_prompt: false`` leaves the prompt clean. The worker method
``trl_explore_steering_status`` (called through the dev-mode ``/collective_rpc`` endpoint) reports the steered
layer, the hidden size, how many times the steered block ran and how many requests' vectors were refused (a bad
vector never takes the server down: its request runs unsteered and the client raises), so the client can prove
that steering happened where it should.

Client side — :class:`ServerSteering`, used by ``ASEGRPOTrainer`` in server mode. TRL's main process sends all
prompts in one ``VLLMClient.generate(prompts, n=num_generations)`` call; inside :meth:`ServerSteering.steering`
that call is split into one request per (route, rollouts-per-prompt) pair (:func:`routed_generate`), each with its
route's vector and a ``cache_salt``, sent concurrently, and the answers are put back in rollout order.
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import torch

from trl_explore.ase.steering.vllm import (
    CALLS_BUFFER,
    ROUTES_BUFFER,
    TABLE_BUFFER,
    install_steering_slot,
    runner_classes,
    runner_exposes_batch_layout,
    runner_max_tokens,
    write_token_routes,
)

logger = logging.getLogger(__name__)

ENV_LAYER = "TRL_EXPLORE_STEERING_LAYER"
ENV_MAX_VECTORS = "TRL_EXPLORE_STEERING_MAX_VECTORS"
VECTOR_KEY = "trl_explore_steering_vector"
STEER_PROMPT_KEY = "trl_explore_steer_prompt"
STATUS_METHOD = "trl_explore_steering_status"


# ------------------------------------------------------------------ server side
class RequestVectorRows:
    """Table rows for the steering vectors carried by requests (server side).

    Identical vectors share a row; a row is freed when no running request uses it. A request whose vector cannot be
    served (wrong length, not finite, or more distinct vectors in flight than ``R - 1``) is generated unsteered and
    counted in :attr:`rejected` (reported by the worker RPC, so the client raises): the shared server stays up.

    Args:
        table: the steered block's ``[R, d]`` table (row 0 stays zero).
        requests: the runner's live ``{req_id: state}`` dict (finished requests leave it).

    Attributes:
        rejected: number of requests whose vector was refused since the server started.
    """

    def __init__(self, table: torch.Tensor, requests: dict) -> None:
        self.table = table
        self.requests = requests
        self.row_of_request: dict[str, int] = {}
        self.row_of_digest: dict[str, int] = {}
        self.rejected = 0

    def row_of(self, req_id: str, state) -> tuple[int, bool]:
        extra = getattr(getattr(state, "sampling_params", None), "extra_args", None) or {}
        steer_prompt = extra.get(STEER_PROMPT_KEY, True) not in (False, 0, "false", "False", "0")
        vector = extra.get(VECTOR_KEY)
        if vector is None:
            return 0, steer_prompt
        row = self.row_of_request.get(req_id)
        if row is None:
            if len(self.row_of_request) > 2 * len(self.requests) + 64:
                self._release_finished()
            try:
                row = self._assign(vector)
            except (RuntimeError, ValueError, TypeError) as error:
                self.rejected += 1
                logger.error("trl_explore: request %s is generated UNSTEERED: %s", req_id, error)
                row = 0
            self.row_of_request[req_id] = row
        return row, steer_prompt

    def _assign(self, vector) -> int:
        values = torch.as_tensor(vector, dtype=torch.float32)
        if values.shape != (self.table.shape[1],):
            raise RuntimeError(
                f"{VECTOR_KEY} must hold {self.table.shape[1]} floats (the model's hidden size), got shape "
                f"{tuple(values.shape)}"
            )
        if not torch.isfinite(values).all():
            raise RuntimeError(f"{VECTOR_KEY} holds NaN or infinite values")
        digest = hashlib.sha1(values.numpy().tobytes()).hexdigest()
        if digest in self.row_of_digest:
            return self.row_of_digest[digest]
        free = self._free_rows()
        if not free:
            self._release_finished()
            free = self._free_rows()
        if not free:
            raise RuntimeError(
                f"more than {self.table.shape[0] - 1} distinct steering vectors in flight; start the server with a "
                f"larger {ENV_MAX_VECTORS}"
            )
        row = free[0]
        self.table[row].copy_(values.to(self.table.dtype))
        self.row_of_digest[digest] = row
        return row

    def _free_rows(self) -> list[int]:
        used = set(self.row_of_digest.values())
        return [r for r in range(1, self.table.shape[0]) if r not in used]

    def _release_finished(self) -> None:
        self.row_of_request = {k: v for k, v in self.row_of_request.items() if k in self.requests}
        live = set(self.row_of_request.values())
        self.row_of_digest = {d: r for d, r in self.row_of_digest.items() if r in live}

    def status(self, layer: int, calls: int) -> dict:
        """What the worker RPC reports: steered layer, hidden size, table capacity, block calls, rejected requests."""
        return {
            "layer": layer, "hidden_size": int(self.table.shape[1]), "max_vectors": int(self.table.shape[0] - 1),
            "calls": calls, "rejected": self.rejected,
        }


def install_server_steering(runner, layer: int, max_vectors: int = 64):
    """Make a vLLM model runner serve steered requests (see the module docstring); returns the steered block.

    Raises:
        RuntimeError: the runner does not expose its batch layout (per-request vectors need vLLM's V1 runner).
        ValueError: ``layer`` is out of range.
    """
    if not runner_exposes_batch_layout(runner):
        raise RuntimeError(
            f"{ENV_LAYER} is set but vLLM's {type(runner).__name__} does not expose its batch layout; steering "
            "through the server needs vLLM's V1 model runner (VLLM_USE_V2_MODEL_RUNNER=0)"
        )
    block = install_steering_slot(runner.model, layer, max_vectors + 1, runner_max_tokens(runner))
    rows = RequestVectorRows(getattr(block, TABLE_BUFFER), runner.requests)
    original = runner._model_forward

    def _model_forward(*args, **kwargs):
        write_token_routes(runner, getattr(block, ROUTES_BUFFER), rows.row_of)
        return original(*args, **kwargs)

    runner._model_forward = _model_forward
    runner._trl_explore_block = block
    runner._trl_explore_status = lambda: rows.status(layer, int(getattr(block, CALLS_BUFFER).item()))
    logger.info("trl_explore: steering slot on decoder block %d (%d vectors)", layer, max_vectors)
    return block


def _steering_status(worker) -> dict | None:
    """Worker RPC: ``{"layer", "hidden_size", "max_vectors", "calls", "rejected"}`` (None without a slot)."""
    inner = getattr(worker, "worker", None) or worker
    status = getattr(getattr(inner, "model_runner", None), "_trl_explore_status", None)
    return None if status is None else status()


def _env_int(name: str, default: str | None = None) -> int:
    value = os.environ.get(name, default)
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


def register() -> None:
    """vLLM general plugin: steering slot in every model runner when ``TRL_EXPLORE_STEERING_LAYER`` is set.

    Engines built inside :func:`~trl_explore.ase.steering.vllm.steerable_vllm` (colocate mode) are left to it.

    Raises:
        ValueError: ``TRL_EXPLORE_STEERING_LAYER`` or ``TRL_EXPLORE_STEERING_MAX_VECTORS`` is not an integer.
    """
    if not os.environ.get(ENV_LAYER, "").strip():
        return
    layer = _env_int(ENV_LAYER)
    max_vectors = _env_int(ENV_MAX_VECTORS, "64")
    from trl_explore.ase.steering.vllm import pending_slot

    for cls in runner_classes():
        original = cls.__dict__.get("load_model")
        if original is None or getattr(original, "_trl_explore", False):
            continue

        def load_model(self, *args, _original=original, **kwargs):
            result = _original(self, *args, **kwargs)
            if getattr(pending_slot, "slot", None) is None:  # not a colocate engine under steerable_vllm
                install_server_steering(self, layer, max_vectors)
            return result

        load_model._trl_explore = True
        cls.load_model = load_model
    from vllm.v1.worker.worker_base import WorkerBase, WorkerWrapperBase

    for cls in (WorkerWrapperBase, WorkerBase):
        setattr(cls, STATUS_METHOD, _steering_status)


# ------------------------------------------------------------------ client side
def route_requests(keys: list[int], num_generations: int) -> list[tuple[int, int, list[int]]]:
    """Split TRL's server call (``P`` prompts x ``n`` rollouts, rollout ``j`` of prompt ``p`` = row ``p * n + j``) into
    requests that each hold one route and the same number of rollouts per prompt.

    Args:
        keys: ``[P * n]`` route key of every rollout (0 = clean; rollouts with equal keys share a vector).
        num_generations: ``n``.

    Returns:
        ``[(key, count, prompt_indices)]`` sorted by key then count: one request per pair, asking ``count`` rollouts
        for each prompt in ``prompt_indices``.

    Raises:
        ValueError: ``len(keys)`` is not a multiple of ``num_generations``.
    """
    if num_generations < 1 or len(keys) % num_generations:
        raise ValueError(f"{len(keys)} rollouts are not whole groups of {num_generations}")
    counts: dict[tuple[int, int], list[int]] = {}
    for p in range(len(keys) // num_generations):
        group = keys[p * num_generations : (p + 1) * num_generations]
        for key in sorted(set(group)):
            counts.setdefault((key, group.count(key)), []).append(p)
    return [(key, count, prompts) for (key, count), prompts in sorted(counts.items())]


def routed_generate(
    generate: Callable[..., dict],
    prompts: list,
    num_generations: int,
    keys: list[int],
    request_kwargs: Callable[[int], dict],
    features: list | None = None,
    **kwargs,
) -> dict:
    """Run TRL's ``VLLMClient.generate(prompts, n=num_generations)`` as per-route requests; same output layout.

    Args:
        generate: the client's ``generate``.
        prompts: ``P`` prompts (token-id lists).
        num_generations: ``n``.
        keys: ``[P * n]`` route keys, see :func:`route_requests`.
        request_kwargs: ``request_kwargs(key) -> dict`` merged into the request's ``generation_kwargs`` (its vector in
            ``vllm_xargs``, a ``cache_salt``); ``{}`` for the clean route.
        features: per-prompt image features or None.
        **kwargs: the other arguments of ``generate`` (sampling parameters, ``generation_kwargs``).

    Returns:
        ``{"prompt_ids": [P], "completion_ids": [P * n], "logprobs": [P * n] or None, "logprob_token_ids": ...}``
        with rollout ``j`` of prompt ``p`` at ``p * n + j`` coming from the route ``keys[p * n + j]``.
    """
    n = num_generations
    total = len(prompts) * n
    if len(keys) != total:
        raise ValueError(f"{len(keys)} route keys for {len(prompts)} prompts x {n} rollouts")
    completion_ids: list = [None] * total
    logprobs: list | None = [None] * total
    token_ids: list | None = [None] * total
    prompt_ids: list = [None] * len(prompts)
    base = dict(kwargs.pop("generation_kwargs", None) or {})
    plan = route_requests(keys, n)

    def send(key: int, count: int, indices: list[int]) -> dict:
        extra = request_kwargs(key)
        gen_kwargs = {**base, **{k: v for k, v in extra.items() if k != "vllm_xargs"}}
        if "vllm_xargs" in extra:
            gen_kwargs["vllm_xargs"] = {**(base.get("vllm_xargs") or {}), **extra["vllm_xargs"]}
        return generate(
            prompts=[prompts[p] for p in indices],
            features=None if features is None else [features[p] for p in indices],
            n=count,
            generation_kwargs=gen_kwargs,
            **kwargs,
        )

    # all requests at once, so the server batches the routes together (as TRL's own client does for chats)
    with ThreadPoolExecutor(max_workers=min(len(plan), 32)) as pool:
        outputs = list(pool.map(lambda request: send(*request), plan))
    for (key, count, indices), out in zip(plan, outputs):
        for slot, p in enumerate(indices):
            prompt_ids[p] = out["prompt_ids"][slot]
            rows = [p * n + j for j in range(n) if keys[p * n + j] == key]
            for c, row in enumerate(rows):
                completion_ids[row] = out["completion_ids"][slot * count + c]
                if out.get("logprobs") is None:
                    logprobs = None
                elif logprobs is not None:
                    logprobs[row] = out["logprobs"][slot * count + c]
                if out.get("logprob_token_ids") is None:
                    token_ids = None
                elif token_ids is not None:
                    token_ids[row] = out["logprob_token_ids"][slot * count + c]
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs,
            "logprob_token_ids": token_ids}


class ServerSteering:
    """Route-steered rollouts through TRL's vLLM server mode (client side; see the module docstring).

    Args:
        vllm_generation: the trainer's ``VLLMGeneration`` in server mode (its ``vllm_client`` lives on the main
            process).
        accelerator: the trainer's accelerator (routes and offsets are gathered to the main process).
        steer_prompt: steer the prompt tokens too (default True).

    Attributes:
        hook_calls: steered-block executions on the server during the last :meth:`steering` context (from the
            workers' counters), or None on non-main processes.
    """

    def __init__(self, vllm_generation, accelerator, *, steer_prompt: bool = True) -> None:
        self.vllm_generation = vllm_generation
        self.accelerator = accelerator
        self.steer_prompt = steer_prompt
        self.hook_calls: int | None = None

    def _client(self):
        return getattr(self.vllm_generation, "vllm_client", None)

    def server_status(self) -> dict:
        """The server workers' steering status: ``{"layer", "hidden_size", "max_vectors", "calls", "rejected"}``,
        with ``calls`` and ``rejected`` summed over workers.

        Raises:
            RuntimeError: the server does not run the plugin (no ``TRL_EXPLORE_STEERING_LAYER``), has no dev-mode
                endpoints, or a worker has no steering slot.
        """
        import requests

        client = self._client()
        try:  # plain requests: the client's session retries a 500 several times
            response = requests.post(f"{client.base_url}/collective_rpc", json={"method": STATUS_METHOD}, timeout=60)
            status = response.status_code
        except requests.RequestException as error:
            status = repr(error)
        if status != 200:
            raise RuntimeError(
                f"the vLLM server at {client.base_url} cannot report steering ({status}): start it with "
                f"{ENV_LAYER}=<steering_layer> and VLLM_SERVER_DEV_MODE=1 (`trl vllm-serve` sets the latter), with "
                "trl_explore installed in the server's environment"
            )
        results = response.json()["results"]
        if not results or any(not isinstance(r, dict) for r in results):
            raise RuntimeError(f"a vLLM server worker has no steering slot ({results}); set {ENV_LAYER}")
        first = results[0]
        return {**first, "calls": sum(r["calls"] for r in results), "rejected": sum(r["rejected"] for r in results)}

    def check_server(self, layer: int, hidden_size: int) -> dict:
        """Fail now unless the server steers decoder block ``layer`` of a model with ``hidden_size``.

        Raises:
            RuntimeError: see :meth:`server_status`; or the server steers another block / model.
        """
        status = self.server_status()
        if (status["layer"], status["hidden_size"]) != (layer, hidden_size):
            raise RuntimeError(
                f"the vLLM server steers block {status['layer']} of a model with hidden size {status['hidden_size']}, "
                f"but this trainer needs block {layer} (ASEConfig.steering_layer) and hidden size {hidden_size}: "
                f"restart the server with {ENV_LAYER}={layer} and the policy's model"
            )
        return status

    @contextmanager
    def steering(self, keys: torch.Tensor, offsets: torch.Tensor) -> Iterator[None]:
        """Steer TRL's server ``generate`` call made inside this context (every process enters it).

        Args:
            keys: ``LongTensor[B]`` this process's route keys (0 = clean; equal keys must have equal offsets).
            offsets: ``Tensor[B, d]`` this process's offsets ``alpha * v_route`` (zero rows for clean rollouts).

        Raises:
            RuntimeError: (main process, on exit) steering was requested but the server's steered block did not run,
                or the server refused some requests' vectors (they ran unsteered).
        """
        device = self.accelerator.device
        all_keys = self.accelerator.gather(keys.to(device)).cpu()
        all_offsets = self.accelerator.gather(offsets.float().to(device)).cpu()
        client = self._client()
        if client is None:  # only the main process talks to the server
            yield
            return
        key_list = all_keys.tolist()
        vector_of = {k: all_offsets[key_list.index(k)] for k in set(key_list) if k != 0}
        salt = f"trl-explore-steer-{uuid.uuid4().hex}"  # fresh per context; at most 128 chars, no "/" (vLLM's rules)

        def request_kwargs(key: int) -> dict:
            if key == 0:
                return {}
            xargs = {VECTOR_KEY: vector_of[key].tolist()}
            if not self.steer_prompt:
                xargs[STEER_PROMPT_KEY] = False
            return {"vllm_xargs": xargs, "cache_salt": f"{salt}-route{key}"}

        original = client.generate

        def generate(prompts, features=None, n=1, **kwargs):
            return routed_generate(original, prompts, n, key_list, request_kwargs, features=features, **kwargs)

        steered = any(key_list)
        before = self.server_status() if steered else None
        client.generate = generate
        try:
            yield
        finally:
            client.__dict__.pop("generate", None)
        if steered:
            after = self.server_status()
            self.hook_calls = after["calls"] - before["calls"]
            if self.hook_calls <= 0:
                raise RuntimeError(
                    "vLLM server steering was requested but the steered block never ran on the server: is "
                    f"{ENV_LAYER} set where the server runs?"
                )
            if after["rejected"] > before["rejected"]:
                raise RuntimeError(
                    f"the vLLM server refused the steering vectors of {after['rejected'] - before['rejected']} "
                    f"request(s) and generated them unsteered (wrong hidden size, non-finite values, or more than "
                    f"{after['max_vectors']} distinct vectors in flight: raise {ENV_MAX_VECTORS}); see the server log"
                )
