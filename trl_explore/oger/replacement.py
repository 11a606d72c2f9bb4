"""Divergence-aware hybrid replacement (OGER §3.2).

In each group of ``N`` online completions of one prompt, the ``k`` completions with the LOWEST
divergence from the teachers are replaced by ``k`` offline trajectories drawn at random from that
prompt's teachers, giving the hybrid group ``T_hyb`` of ``N`` samples.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from trl_explore.utils.registry import Registry


@dataclass(frozen=True)
class ReplacementRule:
    """A replacement rule: ``order(divergence [N], generator) -> LongTensor[N]`` ranks a group's completions, the
    first ``k`` are replaced; ``uses_divergence``: the ranking reads the divergence (it must then be computed)."""

    order: Callable[[torch.Tensor, torch.Generator | None], torch.Tensor]
    uses_divergence: bool


def _lowest_divergence_first(divergence, generator):
    return torch.sort(divergence.float().cpu(), stable=True).indices  # a stable sort: lower index first among ties


def _random_order(divergence, generator):
    return torch.randperm(divergence.numel(), generator=generator)


REPLACEMENT_RULES = Registry("replacement_rule", kind="replacement rule")
"""Which online completions of a group are replaced (:func:`select_replacements`)."""
REPLACEMENT_RULES.register("lowest_divergence", ReplacementRule(_lowest_divergence_first, uses_divergence=True),
                           help="the k closest to the teachers, as the paper; default")
REPLACEMENT_RULES.register("random", ReplacementRule(_random_order, uses_divergence=False),
                           help="k drawn uniformly at random, a control")


def select_replacements(
    divergence: torch.Tensor, num_replacements: int, rule: str = "lowest_divergence",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Indices, within one group, of the online completions to replace.

    Args:
        divergence: ``[N]`` divergence of each online completion of the group (OGER Eq. 5).
        num_replacements: ``k``, how many to replace (paper: 1; ablations 2 and 3); ``0 <= k <= N``.
        rule: ``"lowest_divergence"`` (paper) takes the ``k`` smallest divergences, ties broken by the
            lower index; ``"random"`` (a control) takes ``k`` indices uniformly at random.
        generator: RNG for ``"random"``.

    Returns:
        ``[k]`` LongTensor of indices into the group, sorted ascending.

    Raises:
        ValueError: on an unknown rule or ``k`` outside ``[0, N]``.
    """
    n = divergence.numel()
    if not 0 <= num_replacements <= n:
        raise ValueError(f"num_replacements must be in [0, {n}] for a group of {n}, got {num_replacements}")
    if rule not in REPLACEMENT_RULES:
        raise ValueError(f"unknown replacement rule {rule!r}; expected one of {REPLACEMENT_RULES.names()}")
    order = REPLACEMENT_RULES[rule].order(divergence, generator)
    return torch.sort(order[:num_replacements]).values


def sample_offline_indices(num_offline: int, num_samples: int, generator: torch.Generator | None = None) -> list[int]:
    """Draw ``num_samples`` of a prompt's ``num_offline`` teacher trajectories uniformly at random.

    Without replacement while ``num_samples <= num_offline``; beyond that every trajectory is used
    once per full pass, so no trajectory is repeated more than needed.

    Raises:
        ValueError: if ``num_offline`` is 0 and samples are asked for.
    """
    if num_samples == 0:
        return []
    if num_offline <= 0:
        raise ValueError("cannot sample offline trajectories for a prompt that has none")
    picks: list[int] = []
    while len(picks) < num_samples:
        picks.extend(torch.randperm(num_offline, generator=generator).tolist())
    return picks[:num_samples]


def offline_completion_ids(
    token_ids: Sequence[int], max_completion_length: int, eos_token_id: int
) -> list[int]:
    """Token ids of an offline trajectory as a completion: truncated, then ended with EOS.

    The result has at most ``max_completion_length`` tokens and always ends with ``eos_token_id``, so
    TRL does not count it as truncated (``mask_truncated_completions``) and the policy learns to stop.

    Args:
        token_ids: the teacher text tokenized with the POLICY tokenizer, without special tokens.
        max_completion_length: the trainer's ``max_completion_length`` (>= 1).
        eos_token_id: the policy's EOS id.
    """
    if max_completion_length < 1:
        raise ValueError(f"max_completion_length must be >= 1, got {max_completion_length}")
    ids = list(token_ids)
    if ids and ids[-1] == eos_token_id:
        ids = ids[:-1]
    return ids[: max_completion_length - 1] + [eos_token_id]
