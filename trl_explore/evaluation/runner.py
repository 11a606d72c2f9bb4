"""Running an evaluation: sample k completions per problem, grade them, aggregate (one benchmark or several).

:func:`evaluate_dataset` does one benchmark: prompts from the protocol (:mod:`~trl_explore.evaluation.protocols`),
completions from the sampling stack (:mod:`trl_explore.sampling`), verdicts and aggregates from
:mod:`~trl_explore.evaluation.scoring`. :func:`evaluate` does a list of benchmarks under one protocol; save and
tabulate the result with :mod:`~trl_explore.evaluation.results`.

Generation: vLLM (``vllm.LLM.chat``, one call per benchmark, ``n`` samples per prompt) when ``vllm`` is importable
and the model is given by name, else transformers ``generate`` in batches of rows with a progress bar. An
intervention during sampling (ASE's inference-time steering, :mod:`trl_explore.ase.inference`) is passed in as a
:class:`~trl_explore.sampling.plan.Steering` and always uses transformers.

Sweeps over the temperature live in :mod:`trl_explore.evaluation.sweeps`; ASE's steering sweep in
:mod:`trl_explore.ase.inference`.

The names that lived here before the split (protocols, sampling backends, scoring, files and tables) are still
importable from this module (loaded on first access); new code imports them from their modules.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from trl_explore.evaluation.benchmarks import benchmark_spec, load_benchmark
from trl_explore.evaluation.protocols import EvalProtocol, build_messages, get_protocol
from trl_explore.evaluation.scoring import check_gold_answers, domain_averages, grade_generations, summarize_benchmark
from trl_explore.sampling.backends import make_generator
from trl_explore.sampling.hf import TransformersGenerator
from trl_explore.sampling.plan import SamplingPlan, Steering
from trl_explore.sampling.vllm import VLLMGenerator

logger = logging.getLogger(__name__)

_MOVED = {  # names that lived here before the split -> their module (the ones imported above are attributes anyway)
    "PROTOCOLS": "trl_explore.evaluation.protocols",
    "RESULTS_MD": "trl_explore.evaluation.results",
    "SAMPLES_JSONL": "trl_explore.evaluation.results",
    "SAMPLES_PARQUET": "trl_explore.evaluation.results",
    "SUMMARY_JSON": "trl_explore.evaluation.results",
    "load_samples": "trl_explore.evaluation.results",
    "load_summary": "trl_explore.evaluation.results",
    "results_table": "trl_explore.evaluation.results",
    "save_run": "trl_explore.evaluation.results",
    "Generations": "trl_explore.sampling.plan",
    "load_policy": "trl_explore.sampling.backends",
    "request_seeds": "trl_explore.sampling.seeds",
    "vllm_available": "trl_explore.sampling.vllm",
}


def __getattr__(name):  # the old import path of the names moved out by the split (PEP 562)
    if name not in _MOVED:
        raise AttributeError(f"module 'trl_explore.evaluation.runner' has no attribute {name!r}")
    return getattr(importlib.import_module(_MOVED[name]), name)


def evaluate_dataset(generator, dataset, plan: SamplingPlan, *, seed: int = 0, steering: Steering | None = None,
                     ks: Sequence[int] | None = None, grader_mode: str = "math_verify") -> tuple[list[dict], dict]:
    """Generate, grade and summarise one benchmark.

    Args:
        generator: a :class:`~trl_explore.sampling.hf.TransformersGenerator` or
            :class:`~trl_explore.sampling.vllm.VLLMGenerator` (or any object with their ``generate``).
        dataset: rows of :func:`~trl_explore.evaluation.benchmarks.load_benchmark`.
        plan: sampling plan.
        seed: sampling seed.
        steering: an intervention during sampling (transformers only), see
            :meth:`~trl_explore.sampling.hf.TransformersGenerator.generate`.
        ks: pass@k grid.
        grader_mode: see :func:`~trl_explore.evaluation.scoring.grade_generations`.

    Returns:
        ``(per-sample records, benchmark summary)``; the summary also holds ``generation_seconds``,
        ``grading_seconds`` and the ``plan``.
    """
    name = dataset[0]["benchmark"]
    check_gold_answers(dataset)
    prompts = [build_messages(row, plan) for row in dataset]
    generations = generator.generate(prompts, plan, steering=steering, seed=seed, desc=name)
    start = time.perf_counter()
    records = grade_generations(dataset, generations, plan, grader_mode=grader_mode,
                                show_progress=getattr(generator, "show_progress", True))
    summary = summarize_benchmark(records, ks)
    summary["grader_mode"] = grader_mode
    summary["generation_seconds"] = round(generations.seconds, 2)
    summary["grading_seconds"] = round(time.perf_counter() - start, 2)
    summary["plan"] = {k: v for k, v in asdict(plan).items() if k != "system_prompt"}
    summary["plan"]["system_prompt"] = None if plan.system_prompt is None else plan.system_prompt[:60] + "..."
    return records, summary


def evaluate(
    model,
    tokenizer=None,
    benchmarks: Sequence[str] = ("champ",),
    *,
    protocol: str | EvalProtocol = "demo",
    benchmark_files: Mapping[str, str] | None = None,
    limit: int | None = None,
    backend: str = "auto",
    batch_size: int = 32,
    seed: int = 0,
    steering: Steering | None = None,
    show_progress: bool = True,
    llm_kwargs: Mapping[str, Any] | None = None,
    grader_mode: str = "math_verify",
    own_split: str = "test",
    **overrides,
) -> tuple[list[dict], dict]:
    """Evaluate a policy on several benchmarks under one protocol.

    Args:
        model: a model name / folder (``"embedded"`` works), a loaded ``PreTrainedModel`` (then
            ``tokenizer`` is required and the transformers backend is used), or a generator from
            :func:`~trl_explore.sampling.backends.make_generator` (reused across calls; ``backend`` is then ignored).
        tokenizer: the tokenizer of a loaded model.
        benchmarks: registry names (see :data:`~trl_explore.evaluation.benchmarks.BENCHMARKS`).
        protocol: ``"oger"``, ``"ase"``, ``"demo"`` or an :class:`~trl_explore.evaluation.protocols.EvalProtocol`.
        benchmark_files: ``{benchmark: local file}`` (Hub schema) for benchmarks not read from the Hub.
        limit: first ``limit`` problems of each benchmark.
        backend: ``"auto"`` (vLLM when importable, the model is a name and there is no steering),
            ``"vllm"`` or ``"transformers"``.
        batch_size: rows per ``generate`` call (transformers backend).
        seed: sampling seed (each benchmark restarts from it, so results do not depend on the order).
        steering: a :class:`~trl_explore.sampling.plan.Steering` for inference-time steering (transformers only;
            ASE's: :func:`trl_explore.ase.inference.steering_for`).
        show_progress: progress bars.
        llm_kwargs: extra ``vllm.LLM`` arguments.
        grader_mode: the grader mode of maths answers (default ``"math_verify"``, the training reward's).
        own_split: the split of the ``own`` benchmark's data set (``benchmark_files["own"]``: your data in the
            training format, with its own prompts; :mod:`trl_explore.evaluation.own_data`).
        **overrides: sampling-plan overrides (``num_samples``, ``temperature``, ``top_p``, ``top_k``,
            ``max_new_tokens``); ``None`` values are ignored.

    Returns:
        ``(records, summary)``: all per-sample records, and ``{"model", "protocol", "backend",
        "benchmarks": {name: benchmark summary}, "averages": domain_averages(...), "seconds"}``
        (:func:`~trl_explore.evaluation.scoring.domain_averages`).

    Raises:
        ValueError: unknown benchmark / protocol / backend, or ``backend="vllm"`` with a loaded model
            or with steering.
        ImportError: ``backend="vllm"`` without vLLM installed.
    """
    start = time.perf_counter()
    protocol = get_protocol(protocol) if isinstance(protocol, str) else protocol
    names = [benchmark_spec(b).name for b in benchmarks]
    if not names:
        raise ValueError("no benchmark to evaluate")
    files = {benchmark_spec(k).name: v for k, v in (benchmark_files or {}).items()}
    if isinstance(model, (TransformersGenerator, VLLMGenerator)):
        generator = model
    else:
        generator = make_generator(model, tokenizer, backend=backend, batch_size=batch_size, seed=seed,
                                   steering=steering is not None, show_progress=show_progress, llm_kwargs=llm_kwargs)
    backend = "vllm" if isinstance(generator, VLLMGenerator) else "transformers"
    model_name = model if isinstance(model, str) else getattr(getattr(generator, "model", None), "name_or_path", None)
    datasets = {name: load_benchmark(name, files.get(name), limit=limit, own_split=own_split) for name in names}
    records, per_benchmark = [], {}
    for name, dataset in datasets.items():
        plan = protocol.plan(name, **overrides)
        bench_records, per_benchmark[name] = evaluate_dataset(generator, dataset, plan, seed=seed, steering=steering,
                                                              grader_mode=grader_mode)
        records.extend(bench_records)
        logger.info("%s: mean@%d = %.4f, pass@%d = %.4f", name, plan.num_samples, per_benchmark[name]["mean"],
                    plan.num_samples, per_benchmark[name]["pass_at_n"])
    summary = {
        "model": model_name,
        "protocol": protocol.name,
        "layout": protocol.layout,
        "backend": backend,
        "seed": seed,
        "benchmarks": per_benchmark,
        "averages": domain_averages(per_benchmark),
        "seconds": round(time.perf_counter() - start, 2),
    }
    return records, summary
