"""Sweeps over the sampling setup: :func:`temperature_sweep` (OGER App. E, Fig. 6), pass@k against the decoding
temperature.

ASE's inference-time steering sweep over ``(K, f, alpha)`` (ASE ^S, Table 3, App. D) is the method's own:
:mod:`trl_explore.ase.inference`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from trl_explore.evaluation.metrics import macro_average
from trl_explore.evaluation.protocols import EvalProtocol
from trl_explore.evaluation.runner import evaluate_dataset


def temperature_sweep(
    generator,
    datasets: Mapping[str, Any],
    protocol: EvalProtocol,
    temperatures: Sequence[float] = tuple(round(0.1 * i, 1) for i in range(1, 11)),
    *,
    k: int = 8,
    seed: int = 0,
    **overrides,
) -> tuple[list[dict], dict]:
    """pass@k against the decoding temperature (OGER App. E / Fig. 6: pass@8, T = 0.1 ... 1.0).

    Each temperature is a full evaluation with ``max(k, plan.num_samples)`` samples per problem.

    Args:
        generator: a generation backend.
        datasets: ``{benchmark: dataset}``.
        protocol: sampling settings other than the temperature.
        temperatures: the grid (each > 0).
        k: the reported pass@k.
        seed: sampling seed.
        **overrides: sampling-plan overrides.

    Returns:
        ``(records with a "temperature" field, {"k", "temperatures", "pass_at_k": {benchmark: [..]},
        "mean": {benchmark: [..]}, "average": [..]})``; ``average`` is the unweighted mean over the
        benchmarks (Fig. 6 averages AIME 2024 and 2025).

    Raises:
        ValueError: an empty grid or a temperature <= 0.
    """
    if not temperatures:
        raise ValueError("temperature_sweep: empty temperature grid")
    bad = [t for t in temperatures if not t > 0]
    if bad:
        raise ValueError(f"temperature_sweep: temperatures must be > 0, got {bad}")
    out = {"k": k, "temperatures": [float(t) for t in temperatures], "pass_at_k": {}, "mean": {}, "average": []}
    records = []
    for temperature in temperatures:
        scores = {}
        for name, dataset in datasets.items():
            plan = protocol.plan(name, **{**overrides, "temperature": float(temperature)})
            plan = replace(plan, num_samples=max(k, plan.num_samples))
            bench_records, summary = evaluate_dataset(generator, dataset, plan, seed=seed, ks=[k])
            records.extend(bench_records)
            out["pass_at_k"].setdefault(name, []).append(summary["pass_at_k"][str(k)])
            out["mean"].setdefault(name, []).append(summary["mean"])
            scores[name] = summary["pass_at_k"][str(k)]
        out["average"].append(macro_average(scores))
    return records, out
