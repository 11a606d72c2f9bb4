"""Evaluation of trained policies in the papers' protocols: metrics, benchmarks, runner, plots.

* :mod:`~trl_explore.evaluation.metrics`: mean@k, unbiased pass@k, macro averages (pure functions).
* :mod:`~trl_explore.evaluation.benchmarks`: the registry of the papers' benchmarks (Hub or local
  file), multiple-choice and exact-match grading.
* :mod:`~trl_explore.evaluation.runner`: protocols (OGER App. A.2, ASE Tables 1-3, a CPU demo),
  generation with vLLM or transformers, grading, per-sample files, tables.
* :mod:`~trl_explore.evaluation.sweeps`: temperature sweep (OGER App. E) and inference-time steering
  sweep over ``(K, f, alpha)`` (ASE Table 3, App. D).
* :mod:`~trl_explore.evaluation.plots`: training dynamics (OGER Fig. 2/5, ASE Fig. 4/5), pass@k and
  temperature curves (OGER Fig. 3/6, ASE Fig. 3).

Command line: ``python examples/evaluate.py`` and ``python examples/plot.py RUN_DIR [RUN_DIR ...]``.
Importing this package loads neither torch nor transformers.
"""

from trl_explore.evaluation.benchmarks import (
    BENCHMARKS,
    BenchmarkSpec,
    benchmark_spec,
    extract_choice_letter,
    grade_completion,
    load_benchmark,
)
from trl_explore.evaluation.metrics import (
    benchmark_pass_at_k,
    default_ks,
    macro_average,
    mean_at_k,
    pass_at_k,
    pass_at_k_curve,
)
from trl_explore.evaluation.plots import (
    ASE_PANELS,
    OGER_PANELS,
    load_log_history,
    plot_pass_at_k,
    plot_runs,
    plot_temperature_sweep,
    plot_training_dynamics,
)
from trl_explore.evaluation.runner import (
    PROTOCOLS,
    EvalProtocol,
    SamplingPlan,
    TransformersGenerator,
    evaluate,
    get_protocol,
    load_samples,
    load_summary,
    make_generator,
    results_table,
    save_run,
)
from trl_explore.evaluation.sweeps import build_steering_banks, steering_sweep, temperature_sweep

__all__ = [
    "ASE_PANELS",
    "BENCHMARKS",
    "OGER_PANELS",
    "PROTOCOLS",
    "BenchmarkSpec",
    "EvalProtocol",
    "SamplingPlan",
    "TransformersGenerator",
    "benchmark_pass_at_k",
    "benchmark_spec",
    "build_steering_banks",
    "default_ks",
    "evaluate",
    "extract_choice_letter",
    "get_protocol",
    "grade_completion",
    "load_benchmark",
    "load_log_history",
    "load_samples",
    "load_summary",
    "make_generator",
    "macro_average",
    "mean_at_k",
    "pass_at_k",
    "pass_at_k_curve",
    "plot_pass_at_k",
    "plot_runs",
    "plot_temperature_sweep",
    "plot_training_dynamics",
    "results_table",
    "save_run",
    "steering_sweep",
    "temperature_sweep",
]
