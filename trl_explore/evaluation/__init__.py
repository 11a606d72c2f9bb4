"""Evaluation of trained policies in the papers' protocols: metrics, benchmarks, protocols, scoring, runs, plots.

* :mod:`~trl_explore.evaluation.metrics`: mean@k, unbiased pass@k, macro averages, pairwise answer disagreement
  (pure functions).
* :mod:`~trl_explore.evaluation.benchmarks`: the registry of the papers' benchmarks (Hub or local file). Their
  grading (multiple choice, exact match, maths) is :mod:`trl_explore.rewards.benchmark_grading`.
* :mod:`~trl_explore.evaluation.protocols`: protocols (OGER App. A.2, ASE Tables 1-3, a CPU demo) and prompts.
* :mod:`~trl_explore.evaluation.scoring`: gold checks, grading of every sample, per-benchmark aggregates.
* :mod:`~trl_explore.evaluation.runner`: :func:`evaluate_dataset` (one benchmark) and :func:`evaluate` (several);
  the completions come from the sampling stack, :mod:`trl_explore.sampling`.
* :mod:`~trl_explore.evaluation.results`: per-sample files, summaries and tables.
* :mod:`~trl_explore.evaluation.sweeps`: temperature sweep (OGER App. E). ASE's inference-time steering sweep over
  ``(K, f, alpha)`` (ASE Table 3, App. D) is :mod:`trl_explore.ase.inference`.
* :mod:`~trl_explore.evaluation.plots`: training dynamics (OGER Fig. 2/5, ASE Fig. 4/5), pass@k and
  temperature curves (OGER Fig. 3/6, ASE Fig. 3).

Command line: ``python examples/evaluate.py`` and ``python examples/plot.py RUN_DIR [RUN_DIR ...]``.
Names are loaded on first access: importing this package loads neither torch nor transformers.
"""

from trl_explore.utils.lazy import lazy_exports

_LAZY = {
    "ASE_PANELS": "trl_explore.evaluation.plots",
    "BENCHMARKS": "trl_explore.evaluation.benchmarks",
    "BenchmarkSpec": "trl_explore.evaluation.benchmarks",
    "EvalProtocol": "trl_explore.evaluation.protocols",
    "OGER_PANELS": "trl_explore.evaluation.plots",
    "PROTOCOLS": "trl_explore.evaluation.protocols",
    "SamplingPlan": "trl_explore.sampling.plan",
    "TransformersGenerator": "trl_explore.sampling.hf",
    "benchmark_pass_at_k": "trl_explore.evaluation.metrics",
    "benchmark_spec": "trl_explore.evaluation.benchmarks",
    "build_messages": "trl_explore.evaluation.protocols",
    "default_ks": "trl_explore.evaluation.metrics",
    "domain_averages": "trl_explore.evaluation.scoring",
    "evaluate": "trl_explore.evaluation.runner",
    "evaluate_dataset": "trl_explore.evaluation.runner",
    "extract_choice_letter": "trl_explore.rewards.benchmark_grading",
    "get_protocol": "trl_explore.evaluation.protocols",
    "grade_completion": "trl_explore.rewards.benchmark_grading",
    "load_benchmark": "trl_explore.evaluation.benchmarks",
    "load_log_history": "trl_explore.evaluation.plots",
    "load_samples": "trl_explore.evaluation.results",
    "load_summary": "trl_explore.evaluation.results",
    "macro_average": "trl_explore.evaluation.metrics",
    "make_generator": "trl_explore.sampling.backends",
    "mean_at_k": "trl_explore.evaluation.metrics",
    "pairwise_answer_disagreement": "trl_explore.evaluation.metrics",
    "pass_at_k": "trl_explore.evaluation.metrics",
    "pass_at_k_curve": "trl_explore.evaluation.metrics",
    "plot_pass_at_k": "trl_explore.evaluation.plots",
    "plot_runs": "trl_explore.evaluation.plots",
    "plot_temperature_sweep": "trl_explore.evaluation.plots",
    "plot_training_dynamics": "trl_explore.evaluation.plots",
    "results_table": "trl_explore.evaluation.results",
    "save_run": "trl_explore.evaluation.results",
    "summarize_benchmark": "trl_explore.evaluation.scoring",
    "temperature_sweep": "trl_explore.evaluation.sweeps",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _LAZY)
