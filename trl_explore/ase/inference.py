"""ASE's inference-time steering (^S, ASE Table 3 and App. D): steer a fixed policy while it is evaluated.

* :func:`steering_for`: a saved or estimated bank as a :class:`~trl_explore.sampling.plan.Steering` for the sampling
  stack: the samples of each prompt split over the clean route and the K steering routes (balanced uniform, ASE
  §3.1, as in training), route ``s > 0`` adding ``alpha * v_s`` to block ``L`` through
  :class:`~trl_explore.ase.steering.ActivationSteeringGenerator`.
* :func:`readouts_at_fractions` and :func:`build_steering_banks`: estimate one bank per ``(K, f)`` from the policy's
  own clean rollouts (App. D), with :class:`~trl_explore.ase.bank.SteeringVectorBank`.
* :func:`steering_sweep` and :func:`steering_table`: evaluate every ``(K, f, alpha)`` against the clean policy.

Built on the shared evaluation (:mod:`trl_explore.evaluation`) and sampling stack (:mod:`trl_explore.sampling`),
which know nothing of ASE; steering needs the transformers backend.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from trl_explore.ase.routing import balanced_uniform_routes
from trl_explore.evaluation.metrics import macro_average
from trl_explore.evaluation.protocols import EvalProtocol, build_messages
from trl_explore.evaluation.runner import evaluate_dataset
from trl_explore.evaluation.scoring import check_gold_answers, grade_generations
from trl_explore.sampling.hf import TransformersGenerator
from trl_explore.sampling.plan import Generations, SamplingPlan, Steering

logger = logging.getLogger(__name__)


def steering_key(layer: int, vectors, alpha: float) -> list:
    """``[layer, 16 hex digits of the SHA-256 of vectors (float32 bytes), alpha]``: the JSON-able identity of a
    steering condition in the sampling stack's partial-file fingerprint (the key evaluation has always used)."""
    digest = hashlib.sha256(vectors.detach().float().cpu().numpy().tobytes()).hexdigest()[:16]
    return [int(layer), digest, float(alpha)]


def steering_for(steerer, vectors, alpha: float) -> Steering:
    """Inference-time steering with ``vectors`` at strength ``alpha`` (ASE §3.1 routes; ^S of Table 3).

    Args:
        steerer: an :class:`~trl_explore.ase.steering.ActivationSteeringGenerator` on the policy (its ``layer`` is
            the steered block).
        vectors: ``Tensor[K, d]`` steering vectors (bank rows), on the policy's device and dtype.
        alpha: steering strength.

    Returns:
        A :class:`~trl_explore.sampling.plan.Steering`: the ``n`` samples of each prompt get
        ``balanced_uniform_routes(P, n, K)`` (routes ``0..K``, the clean route first), and a batch's ``generate`` runs
        inside ``steerer.steering(route_ids, vectors, alpha)``, so route ``s > 0`` adds ``alpha * vectors[s - 1]`` to
        block ``steerer.layer``.
    """
    num_vectors = int(vectors.shape[0])

    def routes(num_prompts: int, num_samples: int) -> list[list[int]]:
        return balanced_uniform_routes(num_prompts, num_samples, num_vectors).view(-1, num_samples).tolist()

    return Steering(routes=routes, context=lambda route_ids: steerer.steering(route_ids, vectors, alpha),
                    key=steering_key(steerer.layer, vectors, alpha))


def readouts_at_fractions(steerer, generations: Generations, fractions: Sequence[float], pad_id: int,
                          batch_size: int = 16) -> dict[float, Any]:
    """Block-``L`` readout activations of clean rollouts at several response-relative positions.

    For each rollout and each ``f``, the output of block ``steerer.layer`` at completion position
    ``floor(f * len)`` (ASE §3.2, App. D sweep of f), from a teacher-forced replay with
    :meth:`~trl_explore.ase.steering.ActivationSteeringGenerator.score` (route 0, no steering).

    Args:
        steerer: an ``ActivationSteeringGenerator`` on the policy.
        generations: clean rollouts of the transformers backend (``prompt_ids`` needed).
        fractions: the ``f`` values in ``[0, 1]``.
        pad_id: pad token id.
        batch_size: rows per replay forward.

    Returns:
        ``{f: Tensor[P * n, d]}`` rows in prompt-major order.

    Raises:
        ValueError: no prompt ids (vLLM generations), or an empty completion.
    """
    import torch

    rows = [(p, s) for p in range(len(generations.texts)) for s in range(len(generations.texts[p]))]
    if any(not generations.prompt_ids[p] for p, _ in rows):
        raise ValueError("readouts need the prompt token ids of the transformers backend")
    out: dict[float, list] = {f: [] for f in fractions}
    hidden = None
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        width = max(len(generations.prompt_ids[p]) for p, _ in batch)
        length = max(max(len(generations.token_ids[p][s]) for p, s in batch), 1)
        prompt_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        prompt_mask = torch.zeros_like(prompt_ids)
        completion_ids = torch.full((len(batch), length), pad_id, dtype=torch.long)
        completion_mask = torch.zeros_like(completion_ids)
        for i, (p, s) in enumerate(batch):
            ids, comp = generations.prompt_ids[p], generations.token_ids[p][s]
            if not comp:
                raise ValueError(f"rollout {s} of prompt {p} is empty: no readout position")
            prompt_ids[i, width - len(ids) :] = torch.tensor(ids)
            prompt_mask[i, width - len(ids) :] = 1
            completion_ids[i, : len(comp)] = torch.tensor(comp)
            completion_mask[i, : len(comp)] = 1
        device = next(steerer.model.parameters()).device
        if hidden is None:
            hidden = steerer.model.config.get_text_config().hidden_size
        for f in fractions:
            _, readouts = steerer.score(
                prompt_ids.to(device), prompt_mask.to(device), completion_ids.to(device), completion_mask.to(device),
                torch.zeros(len(batch), dtype=torch.long, device=device), torch.zeros(0, hidden, device=device),
                temperature=1.0, readout_fraction=float(f),
            )  # fmt: skip
            out[f].append(readouts.cpu())
    return {f: torch.cat(parts) for f, parts in out.items()}


def build_steering_banks(generator: TransformersGenerator, dataset, plan: SamplingPlan, *,
                         num_clusters: Sequence[int] = (3,), fractions: Sequence[float] = (0.25,), layer: int = 0,
                         seed: int = 0, pca_dim: int = 64, kmeans_n_init: int = 16) -> tuple[dict, dict]:
    """Estimate one steering bank per ``(K, f)`` from the policy's own clean rollouts (ASE App. D).

    Samples ``plan.num_samples`` rollouts per problem of ``dataset``, grades them, reads the block
    activations at each ``f``, and runs one :meth:`SteeringVectorBank.update` per ``(K, f)``
    (within-problem correct/incorrect pairs, CAA differences, PCA, K-means), then activates it.

    Returns:
        ``({(K, f): SteeringVectorBank with active vectors}, {(K, f): update diagnostics})``; a
        ``(K, f)`` whose update was skipped (fewer than K contrast pairs) is left out of the first dict.
    """
    import torch

    from trl_explore.ase.bank import SteeringVectorBank
    from trl_explore.ase.steering import ActivationSteeringGenerator

    check_gold_answers(dataset)
    prompts = [build_messages(row, plan) for row in dataset]
    generations = generator.generate(prompts, plan, seed=seed, desc="bank rollouts")
    records = grade_generations(dataset, generations, plan)
    rewards = torch.tensor([1.0 if r["correct"] else 0.0 for r in records])
    problem_ids = [r["problem_id"] for r in records]
    steerer = ActivationSteeringGenerator(generator.model, layer=layer)
    readouts = readouts_at_fractions(steerer, generations, fractions, generator.tokenizer.pad_token_id)
    banks, diagnostics = {}, {}
    for k in num_clusters:
        for f in fractions:
            bank = SteeringVectorBank(readouts[f].shape[1], k, pca_dim=pca_dim, kmeans_n_init=kmeans_n_init, seed=seed)
            diagnostics[(k, f)] = bank.update(readouts[f], problem_ids, rewards)
            if bank.activate():
                banks[(k, f)] = bank
            else:
                logger.warning("steering bank K=%d, f=%.2f: too few contrast pairs (%d), skipped", k, f,
                               int(diagnostics[(k, f)]["num_pairs"]))
    return banks, diagnostics


def steering_sweep(generator: TransformersGenerator, datasets: Mapping[str, Any], protocol: EvalProtocol,
                   banks: Mapping[tuple, Any], alphas: Sequence[float] = (0.25, 0.5), *, layer: int = 0,
                   seed: int = 0, **overrides) -> tuple[list[dict], list[dict]]:
    """Inference-time steering sweep (ASE ^S, Table 3 and App. D) over banks ``(K, f)`` and strengths.

    The clean policy is evaluated first (``alpha = 0``, the reference), then every ``(K, f, alpha)``
    with the samples of each problem split over the clean route and the K steering routes (balanced
    uniform, as in training). Scores are averaged over the given benchmarks ("Core Math" of App. D).

    Args:
        generator: the transformers backend.
        datasets: ``{benchmark: dataset}``.
        protocol: sampling settings.
        banks: ``{(K, f): SteeringVectorBank}`` (``f`` may be ``None`` for a saved bank).
        alphas: steering strengths.
        layer: the steered block.
        seed: sampling seed (the same for every condition).
        **overrides: sampling-plan overrides.

    Returns:
        ``(records with "K", "f", "alpha" fields, rows)``; one row per condition: ``{"K", "f",
        "alpha", "mean", "pass_at_n", "delta_mean", "delta_pass_at_n", "benchmarks": {...}}`` (deltas
        against the clean reference, in fractions).

    Raises:
        ValueError: a bank without active vectors, or ``alphas`` empty.
    """
    from trl_explore.ase.steering import ActivationSteeringGenerator

    if not alphas:
        raise ValueError("steering_sweep: no steering strength given")
    steerer = ActivationSteeringGenerator(generator.model, layer=layer)
    conditions = [(None, None, 0.0, None)]
    for (k, f), bank in banks.items():
        if bank.vectors is None:
            raise ValueError(f"steering bank (K={k}, f={f}) has no active vectors")
        conditions += [(k, f, float(a), bank.vectors) for a in alphas]
    records, rows = [], []
    for k, f, alpha, vectors in conditions:
        per_benchmark = {}
        for name, dataset in datasets.items():
            plan = protocol.plan(name, **overrides)
            steering = None
            if vectors is not None:
                param = next(generator.model.parameters())
                steering = steering_for(steerer, vectors.to(device=param.device, dtype=param.dtype), alpha)
            bench_records, per_benchmark[name] = evaluate_dataset(generator, dataset, plan, seed=seed,
                                                                  steering=steering)
            records.extend({**r, "K": k, "f": f, "alpha": alpha} for r in bench_records)
        row = {
            "K": k, "f": f, "alpha": alpha,
            "mean": macro_average({n: b["mean"] for n, b in per_benchmark.items()}),
            "pass_at_n": macro_average({n: b["pass_at_n"] for n, b in per_benchmark.items()}),
            "benchmarks": {n: {"mean": b["mean"], "pass_at_n": b["pass_at_n"]} for n, b in per_benchmark.items()},
        }  # fmt: skip
        rows.append(row)
    clean = rows[0]
    for row in rows:
        row["delta_mean"] = row["mean"] - clean["mean"]
        row["delta_pass_at_n"] = row["pass_at_n"] - clean["pass_at_n"]
    return records, rows


def steering_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown table of :func:`steering_sweep` rows: ``K``, ``f``, ``alpha``, Mean / Pass (%) and the
    changes against the clean reference (first row), as in ASE App. D."""
    lines = ["| K | f | alpha | Mean (%) | Pass (%) | dMean | dPass |", "|---|---|---|:---:|:---:|:---:|:---:|"]
    for r in rows:
        k = "clean" if r["K"] is None else str(r["K"])
        f = "-" if r["f"] is None else f"{r['f']:.2f}"
        lines.append(
            f"| {k} | {f} | {r['alpha']:.2f} | {100 * r['mean']:.2f} | {100 * r['pass_at_n']:.2f} | "
            f"{100 * r['delta_mean']:+.2f} | {100 * r['delta_pass_at_n']:+.2f} |"
        )
    return "\n".join(lines)
