"""One rule for "this rollout is correct", read by every part of the package that needs it: OGER's exploration-reward
gate and failed-response ratio (``OGERRewardFunction``), ASE-GRPO's contrast pairs and per-route accuracy, and
ExGRPO's buckets, retirement and replay start.

The rule: a rollout is **correct when its verifier reward (the correctness reward, ``R_m``) is strictly greater than
``correct_threshold``** (default :data:`CORRECT_THRESHOLD` = 0.5); a scored value at or below it is wrong; a reward of
``None`` (NaN in TRL's table) is "not scored", neither correct nor wrong. The threshold is one shared option,
``ExplorationConfig.correct_threshold`` (every method's config has it; :func:`threshold_of` reads it from a training
config, the default for a plain ``GRPOConfig``), so every reader of one run applies the same value.

Why a threshold and not the value itself: the papers' verifiers return ``R_m`` in ``{0, 1}``, and OGER's Eq. 7
multiplies by it (``R_OGER = D * exp(-H_last) * R_m``). Verifiers of other recipes return other pairs: DAPO's and
verl's ``+1 / -1``, a "format" penalty ``-0.5`` for unparseable answers, ``{0, 10}``. Multiplying by ``-1`` gives a
wrong answer a negative exploration reward (modelscope/ms-swift#3925's class; measured: -0.33 and -0.45, where the
paper's reward is 0), and counting ``R_m == 0`` as failed reads 2 wrong answers of 4 as none. The default 0.5 splits
``{0, 1}`` and ``{-1, +1}`` alike, so both read as the papers mean them; set the threshold for another pair (e.g. 5
for ``{0, 10}``). Every value outside ``{0, 1}`` is read by the rule and noted once (:func:`correctness_note`), naming
the values seen and how they were read. Infinite rewards are refused before (``rewards.checks.check_finite_rewards``).
"""

from __future__ import annotations

import math

import torch

CORRECT_THRESHOLD = 0.5
"""A rollout is correct when its verifier reward is strictly greater than this (module docstring)."""


def check_threshold(value, owner: str = "correct_threshold") -> float:
    """``value`` as a float, or ``ValueError`` naming ``owner`` when it is not a finite number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{owner} must be a finite number, got {value!r}")
    return float(value)


def threshold_of(args) -> float:
    """The correctness threshold of a training config: ``args.correct_threshold``, or :data:`CORRECT_THRESHOLD` for a
    config without the option (a plain ``GRPOConfig``)."""
    return float(getattr(args, "correct_threshold", CORRECT_THRESHOLD))


def correct_mask(rewards, threshold: float = CORRECT_THRESHOLD) -> torch.Tensor:
    """``[B]`` bool: which rollouts are correct, ``reward > threshold`` (NaN, i.e. not scored: False).

    Args:
        rewards: ``[B]`` verifier rewards (a tensor, or a list of floats / None).
        threshold: the correctness threshold (default 0.5).
    """
    if not isinstance(rewards, torch.Tensor):
        rewards = torch.tensor([math.nan if r is None else float(r) for r in rewards], dtype=torch.float64)
    values = rewards.detach().double().cpu().reshape(-1)
    return torch.nan_to_num(values, nan=-math.inf) > threshold


def correctness_values(rewards, threshold: float = CORRECT_THRESHOLD) -> torch.Tensor:
    """``[B]`` float32: 1.0 correct, 0.0 wrong, NaN not scored (the verdict each reader uses in place of ``R_m``)."""
    if not isinstance(rewards, torch.Tensor):
        rewards = torch.tensor([math.nan if r is None else float(r) for r in rewards], dtype=torch.float64)
    values = rewards.detach().double().cpu().reshape(-1)
    out = correct_mask(values, threshold).float()
    return out.masked_fill(torch.isnan(values), math.nan)


def correctness_note(rewards, name: str, reader: str, threshold: float = CORRECT_THRESHOLD,
                     limit: int = 5, detail: str = "") -> str | None:
    """A one-line note when a correctness reward returns values outside ``{0, 1}`` (None otherwise), naming the
    values seen and how the rule reads them; the callers log it once.

    Args:
        rewards: ``[B]`` rewards of the function read as the verifier.
        name: its name; reader: who reads it (``"OGER"``, ``"ASE"``, ``"ExGRPO"``); threshold: the rule's.
        limit: distinct values shown; detail: words after the name (e.g. ``"(correctness_reward_index=0)"``).
    """
    if not isinstance(rewards, torch.Tensor):
        rewards = torch.tensor([math.nan if r is None else float(r) for r in rewards], dtype=torch.float64)
    values = rewards.detach().double().cpu().reshape(-1)
    values = values[~torch.isnan(values)]
    if values.numel() == 0 or bool(((values == 0) | (values == 1)).all()):
        return None
    seen = torch.unique(values)
    shown = ", ".join(f"{v:g}" for v in seen[:limit].tolist()) + (", ..." if seen.numel() > limit else "")
    correct = [f"{v:g}" for v in seen[:limit].tolist() if v > threshold]
    name = f"{name!r} {detail}" if detail else repr(name)
    return (f"{reader}: the correctness reward {name} returned values outside {{0, 1}} ({shown}); they are read "
            f"with the package's rule: correct when > correct_threshold={threshold:g} (here: "
            f"{', '.join(correct) or 'none of them'}), else wrong. Set correct_threshold if the verifier's correct "
            f"value is another (trl_explore.rewards.correctness). Noted once")
