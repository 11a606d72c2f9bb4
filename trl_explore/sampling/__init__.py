"""One sampling stack: every part of the package that samples completions outside a trainer goes through here.

Used by the evaluation (:mod:`trl_explore.evaluation`), the offline builder's teacher sampling
(:mod:`trl_explore.data.generation`), ASE's inference-time steering (:mod:`trl_explore.ase.inference`) and
``benchmarks/demo_solve_rate.py``.

* :mod:`~trl_explore.sampling.plan`: :class:`SamplingPlan` (what to sample), :class:`Steering` (an intervention
  given by its owner: routes, a context manager, a cache key), :class:`Generations` (what comes back).
* :mod:`~trl_explore.sampling.hf`: :class:`TransformersGenerator` (``model.generate`` in batches).
* :mod:`~trl_explore.sampling.vllm`: :class:`VLLMGenerator` (``LLM.chat``), :func:`vllm_available`.
* :mod:`~trl_explore.sampling.seeds`: :data:`SEEDINGS` (``"per_batch"``, ``"once"``), :func:`request_seeds`.
* :mod:`~trl_explore.sampling.cache`: :class:`BatchCache`, the resumable file of finished batches.
* :mod:`~trl_explore.sampling.backends`: :func:`make_generator`, :func:`load_policy`.

Shared code: imports no method package (``ase``, ``oger``) and neither ``data`` nor ``evaluation``. Loaded on first
access, so ``import trl_explore.sampling`` pulls in neither torch nor transformers.
"""

from trl_explore.utils.lazy import lazy_exports

_LAZY = {
    "BACKENDS": "trl_explore.sampling.backends",
    "BatchCache": "trl_explore.sampling.cache",
    "Generations": "trl_explore.sampling.plan",
    "SEEDINGS": "trl_explore.sampling.seeds",
    "SamplingPlan": "trl_explore.sampling.plan",
    "Steering": "trl_explore.sampling.plan",
    "TransformersGenerator": "trl_explore.sampling.hf",
    "VLLMGenerator": "trl_explore.sampling.vllm",
    "load_policy": "trl_explore.sampling.backends",
    "make_generator": "trl_explore.sampling.backends",
    "request_seeds": "trl_explore.sampling.seeds",
    "vllm_available": "trl_explore.sampling.vllm",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _LAZY)
