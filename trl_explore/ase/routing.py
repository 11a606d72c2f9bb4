"""Route allocation and route-level diagnostics for ASE-GRPO.

Source: ASE paper §3.1 (routes, balanced-uniform allocation, clean route); SPEC §3.2, §3.8. The pairwise answer
disagreement of Fig. 4 is a shared metric, :func:`trl_explore.evaluation.metrics.pairwise_answer_disagreement`
(re-exported here).

Routes are integers: 0 is the clean route (no steering), ``s in 1..K`` adds ``alpha * v_s`` (bank
row ``s - 1``). Layout follows TRL: the ``num_generations`` rollouts of a prompt are consecutive
rows, prompts one after another.
"""

from __future__ import annotations

import hashlib
import json

import torch

# Moved to the shared metrics (evaluation uses it too); ase/component.py still imports it from here.
from trl_explore.evaluation.metrics import pairwise_answer_disagreement  # noqa: F401


def balanced_uniform_routes(
    num_prompts: int,
    num_generations: int,
    num_routes: int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Split each prompt's rollouts evenly over the clean route and the K steering routes.

    Paper §3.1 (balanced-uniform allocation): with N = 8 rollouts and K = 3 routes each of the
    K + 1 routes (clean included) gets 2 rollouts, ``[0, 0, 1, 1, 2, 2, 3, 3]`` per prompt.

    Remainder: with ``N = q * (K + 1) + r``, every route gets ``q`` rollouts and ``r`` routes get one
    more. Without ``generator`` the extras go to routes ``0, 1, ..., r - 1`` (the clean route first,
    the conservative choice: more unsteered rollouts). With ``generator`` the ``r`` routes that get
    an extra are drawn uniformly per prompt, so no steering route is favoured over training. If
    ``N < K + 1`` some routes get no rollout for a prompt (``q = 0``). Inside a prompt the rows are
    sorted by route (contiguous blocks), which is harmless for GRPO (group statistics do not depend
    on order).

    Under data parallelism, compute the routes of the global generation batch and slice the local
    rows out, so that each prompt's split stays balanced.

    Args:
        num_prompts: number of prompts P (>= 0).
        num_generations: rollouts per prompt N (>= 1).
        num_routes: number of steering routes K (>= 0); routes take values ``0..K``.
        generator: optional CPU ``torch.Generator`` for the per-prompt remainder draw (one
            ``torch.randperm(K + 1)`` per prompt, only when ``r > 0``).

    Returns:
        ``LongTensor[num_prompts * num_generations]`` of routes in ``0..num_routes``.

    Raises:
        ValueError: an argument out of range.
    """
    if num_prompts < 0:
        raise ValueError(f"num_prompts must be >= 0, got {num_prompts}")
    if num_generations < 1:
        raise ValueError(f"num_generations must be >= 1, got {num_generations}")
    if num_routes < 0:
        raise ValueError(f"num_routes must be >= 0, got {num_routes}")
    total_routes = num_routes + 1
    base, remainder = divmod(num_generations, total_routes)

    def group_routes(extra_routes: torch.Tensor) -> torch.Tensor:
        counts = torch.full((total_routes,), base, dtype=torch.long)
        counts[extra_routes] += 1
        return torch.repeat_interleave(torch.arange(total_routes), counts)

    if remainder == 0 or generator is None:
        one_group = group_routes(torch.arange(remainder))
        return one_group.repeat(num_prompts)
    groups = [
        group_routes(torch.randperm(total_routes, generator=generator)[:remainder])
        for _ in range(num_prompts)
    ]
    if not groups:
        return torch.zeros(0, dtype=torch.long)
    return torch.cat(groups)


def per_route_accuracy(
    rewards: torch.Tensor,
    routes: torch.Tensor,
    num_routes: int,
    threshold: float = 0.5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fraction of correct rollouts on each route (SPEC §3.8 diagnostics).

    Args:
        rewards: ``Tensor[B]`` verifier rewards; ``reward > threshold`` counts as correct.
        routes: ``LongTensor[B]`` of routes in ``0..num_routes`` (0 = clean).
        num_routes: K, the number of steering routes.
        threshold: correctness threshold (default 0.5, the bank's ``CORRECT_THRESHOLD``; kept as a
            literal so that this module does not import scikit-learn).

    Returns:
        ``(accuracy Tensor[K + 1] float32, counts LongTensor[K + 1])``. A route without rows has
        ``counts[s] == 0`` and ``accuracy[s] == 0.0`` (a placeholder, not a measurement: do not log
        it). No NaN is ever returned.

    Raises:
        ValueError: shapes differ or are not 1-D, non-finite rewards, or a route outside ``0..K``.
    """
    if rewards.dim() != 1 or routes.shape != rewards.shape:
        raise ValueError(
            f"rewards and routes must both be 1-D of the same length, got {tuple(rewards.shape)} "
            f"and {tuple(routes.shape)}"
        )
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards contains NaN or inf")
    routes = routes.to(device=rewards.device, dtype=torch.long)
    if len(routes) and (routes.min() < 0 or routes.max() > num_routes):
        raise ValueError(f"routes must lie in 0..num_routes={num_routes}, got values {routes.unique().tolist()}")
    correct = (rewards > threshold).to(torch.float32)
    counts = torch.bincount(routes, minlength=num_routes + 1)
    num_correct = torch.zeros(num_routes + 1, dtype=torch.float32, device=rewards.device)
    num_correct.index_add_(0, routes, correct)
    accuracy = num_correct / counts.clamp(min=1).to(torch.float32)
    return accuracy, counts


def plan_routes(bank, options, num_rows: int, num_generations: int, world: int, rank: int, generator: torch.Generator):
    """``(steering ids [B], table [R, d], logged routes [B])`` for one process's rollouts, or None (empty bank).

    Routes are drawn for the global batch of ``num_rows * world`` rollouts and sliced for ``rank``, so a group split
    across processes keeps its balanced split and every process draws the same numbers. The unstructured control
    gives each rollout its own unit random vector (table row ``i``, logged route 1; App. D.2).

    Raises:
        ValueError: the global batch is not a whole number of groups.
    """
    total, local = num_rows * world, slice(rank * num_rows, (rank + 1) * num_rows)
    if not options.control.estimates_bank:
        table = bank.random_rollout_vectors(total)[local]
        return torch.arange(1, num_rows + 1), table, torch.ones(num_rows, dtype=torch.long)
    if bank.vectors is None:
        return None
    if total % num_generations != 0:
        raise ValueError(f"generation batch of {total} rows is not a whole number of groups of {num_generations}")
    routes = balanced_uniform_routes(total // num_generations, num_generations, options.num_vectors, generator)[local]
    return routes, bank.vectors, routes


def problem_id(row: dict, column: str):
    """A row's problem id: ``row[column]`` (``repr`` when unhashable), else a hash of its prompt (the same on every
    process, unlike ``hash()``)."""
    value = row.get(column)
    if value is None:
        return hashlib.sha1(json.dumps(row["prompt"], sort_keys=True, default=str).encode()).hexdigest()[:16]
    try:
        hash(value)
    except TypeError:
        value = repr(value)
    return value



def prompt_key(row: dict) -> tuple[str, str]:
    """``(hash, preview)`` of a row's prompt: the hash the same on every process, the preview its first 60
    characters (for :func:`shared_problem_id_warning`)."""
    text = json.dumps(row.get("prompt"), sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16], text[:60]


def shared_problem_id_warning(problem_ids, prompt_keys, column: str) -> str | None:
    """The warning for a generation batch in which one problem id stands for different prompts, or None.

    ASE pairs correct with incorrect rollouts of one problem (§3.2), a problem being the rows with one id: rollouts of
    two prompts that share an id are paired with each other. That can be meant (rephrasings of one problem), so it is
    a one-time warning, not an error.

    Args:
        problem_ids: ``[N]`` ids of the gathered batch (:func:`problem_id`); prompt_keys: ``[N]`` :func:`prompt_key`;
        column: ``ASEOptions.problem_id_column``.
    """
    first: dict = {}
    for i, (pid, key) in enumerate(zip(problem_ids, prompt_keys)):
        j, seen = first.setdefault(pid, (i, key))
        if seen[0] != key[0]:
            return (f"ASE: rows {j} and {i} of the generation batch share the problem id {pid!r} (column {column!r}) "
                    f"but have different prompts ({seen[1]} and {key[1]}): their rollouts are paired with each other "
                    f"as one problem's. If they are not rephrasings of one problem, give each prompt its own "
                    f"{column!r} (or drop the column: the prompt's hash is then the id). Warned once")
    return None
