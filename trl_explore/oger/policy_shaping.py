"""LUFFY-style policy shaping for offline (teacher) tokens, as used by OGER (§3.3, Eq. 10 + LUFFY).

Offline tokens were not sampled from the policy, so the PPO ratio ``pi_theta / pi_old`` is replaced by
the shaping function ``f(p) = p / (p + gamma)`` of the token probability ``p = pi_theta(token)``, with
the behaviour probability taken as 1, no clipping and no importance ratio. Its gradient
``f'(p) = gamma / (p + gamma)^2`` boosts low-probability tokens that plain ``p`` would ignore.

Entropy masking (TRL's ``top_entropy_quantile = q``, "Beyond the 80/20 rule", Wang et al. 2025), one rule for the
online and the offline (teacher) tokens of a hybrid batch: the threshold is the ``(1 - q)``-quantile of the policy's
entropies over EVERY token of the batch, online and offline (all processes; the driver's ``LossCall.entropy_mask``);
a token at or above it is trained, by TRL's objective when it is online and by the shaping term when it is offline,
and enters the entropy bonus; a token below it gets neither (it still counts in the loss normaliser, as in TRL). At
``q = 1`` every token is trained and the bonus is the mean entropy of every token (:func:`high_entropy_terms`).
"""

from __future__ import annotations

import math

import torch


def policy_shaping_per_token_loss(per_token_logps: torch.Tensor, advantages: torch.Tensor,
                                  gamma: float = 0.1) -> torch.Tensor:
    """Per-token loss ``-A * p / (p + gamma)`` for offline tokens.

    Its gradient with respect to the log-probability is ``-A * gamma * p / (p + gamma)^2``.

    Args:
        per_token_logps: ``[B, T]`` log-probabilities (nats) of the offline tokens under the policy,
            differentiable.
        advantages: ``[B]`` or ``[B, 1]`` (or ``[B, T]``) group-relative advantages.
        gamma: shaping constant (LUFFY/OGER: 0.1), ``> 0``.

    Returns:
        ``[B, T]`` per-token loss, unmasked (the caller masks and aggregates).

    Raises:
        ValueError: if ``gamma <= 0``.
    """
    if not (math.isfinite(gamma) and gamma > 0):
        raise ValueError(f"policy shaping gamma must be a finite number > 0, got {gamma}")
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    p = torch.exp(per_token_logps)
    return -advantages * p / (p + gamma)


def aggregate_token_loss(
    per_token_loss: torch.Tensor,
    mask: torch.Tensor,
    loss_type: str,
    *,
    num_rows: int,
    max_completion_length: int,
    token_normalizer: torch.Tensor | float,
    accumulation_steps: float,
) -> torch.Tensor:
    """Reduce a ``[B, T]`` per-token loss to a scalar with TRL 1.16's normalisation for ``loss_type``.

    It mirrors the normalisers of ``GRPOTrainer._compute_loss`` so that offline rows added to TRL's
    on-policy loss get the same weight as on-policy rows of the same length:

    * ``grpo``, ``sapo``: mean over the ``num_rows`` rows of the micro-batch of each row's token mean,
      divided by ``accumulation_steps``.
    * ``bnpo``: sum over tokens / ``token_normalizer`` (the micro-batch's token count) / ``accumulation_steps``.
    * ``dr_grpo``: sum / (``num_rows`` * ``max_completion_length``) / ``accumulation_steps``.
    * ``dapo``, ``cispo``, ``vespo``: sum / ``token_normalizer`` (TRL's rescaled ``num_items_in_batch``).
    * ``luspo``: sum over tokens of each row, mean over ``num_rows``, / ``accumulation_steps``.

    Args:
        per_token_loss: ``[B', T]`` loss of the rows being added (``B' <= num_rows``).
        mask: ``[B', T]`` 0/1 loss mask of those rows.
        loss_type: TRL's ``loss_type``.
        num_rows: rows in the whole micro-batch (on-policy + offline).
        max_completion_length: the config's ``max_completion_length`` (for ``dr_grpo``).
        token_normalizer: token count used by ``bnpo`` / ``dapo``-style losses (see above).
        accumulation_steps: TRL's ``current_gradient_accumulation_steps`` in training, 1 in eval.

    Raises:
        ValueError: on a loss type TRL 1.16 does not define.
    """
    mask = mask.to(per_token_loss.dtype)
    masked = per_token_loss * mask
    if loss_type in ("grpo", "sapo"):
        row_means = masked.sum(-1) / mask.sum(-1).clamp(min=1.0)
        return row_means.sum() / num_rows / accumulation_steps
    if loss_type == "bnpo":
        return masked.sum() / torch.as_tensor(token_normalizer).clamp(min=1.0) / accumulation_steps
    if loss_type == "dr_grpo":
        return masked.sum() / (num_rows * max_completion_length) / accumulation_steps
    if loss_type in ("dapo", "cispo", "vespo"):
        return masked.sum() / torch.as_tensor(token_normalizer).clamp(min=1.0)
    if loss_type == "luspo":
        return masked.sum() / num_rows / accumulation_steps
    raise ValueError(f"unknown loss_type {loss_type!r}")


def entropy_bonus_correction(entropies: torch.Tensor, all_mask: torch.Tensor,
                             online_mask: torch.Tensor, online_weight: float | torch.Tensor = 1.0) -> torch.Tensor:
    """Mean entropy over all tokens minus ``online_weight`` times the mean over on-policy tokens (``[B, T]`` inputs,
    0/1 masks; nats).

    TRL's entropy bonus ``-coef * mean(H)`` averages over the tokens of its objective (with ``top_entropy_quantile <
    1``, its high-entropy ones), which excludes the offline rows; subtracting ``coef *`` this difference turns it
    into the mean over every token of the hybrid group (its high-entropy tokens: pass the masks of
    :func:`high_entropy_terms`). ``online_weight``: the factor TRL's loss was multiplied by (``LossCall.
    objective_share``), which scaled its bonus too. Empty masks count as one token (no division by zero).
    """
    mean_all = (entropies * all_mask).sum() / all_mask.sum().clamp(min=1.0)
    mean_online = (entropies * online_mask).sum() / online_mask.sum().clamp(min=1.0)
    return mean_all - online_weight * mean_online


def high_entropy_terms(shaping_loss: torch.Tensor, all_mask: torch.Tensor, online_mask: torch.Tensor,
                       entropy_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The tokens the shaping term and the entropy bonus cover (module docstring: one rule for both kinds).

    Args:
        shaping_loss: ``[B, T]`` per-token shaping loss (:func:`policy_shaping_per_token_loss`).
        all_mask: ``[B, T]`` 0/1, every token of the hybrid batch (online and offline).
        online_mask: ``[B, T]`` 0/1, the tokens of TRL's objective.
        entropy_mask: ``[B, T]`` bool, the high-entropy tokens chosen over ``all_mask`` (TRL's
            ``get_high_entropy_mask``), or None (``top_entropy_quantile = 1``: every token).

    Returns:
        ``(shaping_loss, bonus_all_mask, bonus_online_mask)``: the shaping loss zeroed below the threshold (aggregate
        it with the offline mask, so that masked tokens still count in the normaliser, as TRL counts its own), and
        the two masks of :func:`entropy_bonus_correction` (every / online token at or above the threshold). With
        ``entropy_mask=None`` the inputs, unchanged.
    """
    if entropy_mask is None:
        return shaping_loss, all_mask, online_mask
    high = entropy_mask.to(all_mask.dtype)
    return shaping_loss * high.to(shaping_loss.dtype), all_mask * high, online_mask * high
