"""Scoring one benchmark: check the golds, grade every sample, aggregate (mean@n, pass@k, answer disagreement).

Verdicts come from :func:`trl_explore.rewards.benchmark_grading.grade_completion` (maths through the training
reward's grader, with the same ``grader_mode`` option; letters for multiple choice; normalised strings for BBH);
the aggregates from the pure functions of :mod:`~trl_explore.evaluation.metrics`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from trl_explore.evaluation.benchmarks import benchmark_spec
from trl_explore.evaluation.metrics import (
    correct_counts,
    macro_average,
    mean_at_k,
    pairwise_answer_disagreement,
    pass_at_k_curve,
)
from trl_explore.rewards.benchmark_grading import grade_completion
from trl_explore.sampling.plan import Generations, SamplingPlan


def _gold_normalizer(benchmark: str):
    """The benchmark's phrasing rules for its golds (CHAMP's for ``champ``;
    :mod:`trl_explore.data.gold_normalizers`)."""
    from trl_explore.data.gold_normalizers import GOLD_NORMALIZERS, gold_normalizer_for

    return GOLD_NORMALIZERS[gold_normalizer_for(benchmark)]


def check_gold_answers(dataset) -> None:
    """Fail before generating if a maths gold answer cannot be parsed by math-verify.

    Raises:
        ValueError: names the benchmark, the problem id and the gold answer.
    """
    from trl_explore.rewards.math_verify_reward import GoldAnswerError, parse_gold

    for row in dataset:
        if row["grading"] != "math":
            continue
        try:
            parse_gold(row["answer"], gold_normalizer=_gold_normalizer(row["benchmark"]))
        except GoldAnswerError as err:
            raise ValueError(
                f"benchmark {row['benchmark']!r}, problem {row['problem_id']!r}: gold answer {row['answer']!r} "
                f"cannot be parsed by math-verify ({err})"
            ) from None


def grade_generations(dataset, generations: Generations, plan: SamplingPlan, timeout_seconds: float = 5.0,
                      grader_mode: str = "math_verify", show_progress: bool = True) -> list[dict]:
    """Per-sample records of one benchmark: grade every completion.

    Args:
        dataset: rows of :func:`~trl_explore.evaluation.benchmarks.load_benchmark` (``P`` problems).
        generations: their completions, ``[P][n]``.
        plan: the sampling plan used (its temperature is recorded).
        timeout_seconds: math-verify's limit per completion.
        grader_mode: the grader mode of maths answers, as in training (see
            :func:`~trl_explore.rewards.benchmark_grading.grade_completion`).
        show_progress: a tqdm bar over the completions (math-verify takes ~5 ms to seconds per completion).

    Returns:
        ``P * n`` dicts with keys ``benchmark``, ``problem_id``, ``sample_index``, ``route``,
        ``temperature``, ``completion``, ``extracted_answer``, ``correct``, ``num_tokens``, ``truncated``.

    Raises:
        ValueError: ``generations`` does not have ``P`` prompts.
    """
    from tqdm.auto import tqdm

    if len(generations.texts) != len(dataset):
        raise ValueError(f"{len(generations.texts)} generated groups for {len(dataset)} problems")
    records = []
    total = sum(len(texts) for texts in generations.texts)
    bar = tqdm(total=total, desc=f"grade {dataset[0]['benchmark']}" if len(dataset) else "grade",
               unit="completion", disable=not show_progress)
    for p, row in enumerate(dataset):
        for s, text in enumerate(generations.texts[p]):
            bar.update(1)
            extracted, correct = grade_completion(
                text, row["answer"], row["grading"], len(row["choices"]), timeout_seconds=timeout_seconds,
                grader_mode=grader_mode, gold_normalizer=_gold_normalizer(row["benchmark"]),
                terminated=not generations.truncated[p][s],  # one rule with training: a cut-off answer as it grades
            )
            records.append(
                {
                    "benchmark": row["benchmark"],
                    "problem_id": row["problem_id"],
                    "sample_index": s,
                    "route": int(generations.routes[p][s]),
                    "temperature": float(plan.temperature),
                    "completion": text,
                    "extracted_answer": extracted,
                    "correct": bool(correct),
                    "num_tokens": len(generations.token_ids[p][s]),
                    "truncated": bool(generations.truncated[p][s]),
                }
            )
    bar.close()
    return records


def summarize_benchmark(records: Sequence[Mapping[str, Any]], ks: Sequence[int] | None = None) -> dict:
    """Scores of one benchmark from its per-sample records.

    Args:
        records: per-sample dicts of one benchmark (``problem_id``, ``correct``, ``extracted_answer``,
            ``num_tokens``, ``truncated``), any order.
        ks: pass@k grid (default :func:`~trl_explore.evaluation.metrics.default_ks` of the smallest n).

    Returns:
        ``{"benchmark", "title", "domain", "num_problems", "num_samples" (smallest n per problem),
        "mean" (mean@n = pass@1), "pass_at_k" ({str(k): value}), "pass_at_n", "answer_disagreement"
        (ASE Fig. 4; None if not computable), "mean_num_tokens", "truncated_fraction"}``.

    Raises:
        ValueError: no records, or records of several benchmarks (names them).
    """
    if not records:
        raise ValueError("no per-sample records to summarise (empty results)")
    names = sorted({r["benchmark"] for r in records})
    if len(names) != 1:
        raise ValueError(f"summarize_benchmark got records of several benchmarks: {names}")
    spec = benchmark_spec(names[0])
    by_problem: dict[str, list[Mapping]] = {}
    for record in records:
        by_problem.setdefault(record["problem_id"], []).append(record)
    verdicts = [[bool(r["correct"]) for r in group] for group in by_problem.values()]
    n, c = correct_counts(verdicts)
    curve = pass_at_k_curve(n, c, ks)
    n_min = int(n.min())
    disagreement = None
    if (n == n_min).all() and n_min > 1:
        answers = [r["extracted_answer"] for group in by_problem.values()
                   for r in sorted(group, key=lambda r: r["sample_index"])]
        disagreement = pairwise_answer_disagreement(answers, n_min)
    return {
        "benchmark": spec.name,
        "title": spec.title,
        "domain": spec.domain,
        "num_problems": len(by_problem),
        "num_samples": n_min,
        "mean": mean_at_k(n, c),
        "pass_at_k": {str(k): v for k, v in curve.items()},
        "pass_at_n": curve.get(n_min, pass_at_k_curve(n, c, [n_min])[n_min]),
        "answer_disagreement": disagreement,
        "mean_num_tokens": float(np.mean([r["num_tokens"] for r in records])),
        "truncated_fraction": float(np.mean([bool(r["truncated"]) for r in records])),
    }


def domain_averages(benchmarks: Mapping[str, Mapping[str, Any]]) -> dict:
    """Unweighted averages over the maths and the out-of-domain benchmarks of a run.

    Returns:
        ``{"math": {"mean", "pass_at_n", "benchmarks"}, "ood": {...}}``, a domain only when the run
        has at least one benchmark of it (OGER "AVG", ASE "Math Avg." / "OOD Avg.").
    """
    out = {}
    for domain in ("math", "ood"):
        names = [name for name, b in benchmarks.items() if b["domain"] == domain]
        if names:
            out[domain] = {
                "mean": macro_average({n: benchmarks[n]["mean"] for n in names}),
                "pass_at_n": macro_average({n: benchmarks[n]["pass_at_n"] for n in names}),
                "benchmarks": names,
            }
    return out
