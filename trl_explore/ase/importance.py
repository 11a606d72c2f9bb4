"""Off-policy correction for steered rollouts: token-level truncated importance sampling.

Source: SPEC §3.5; ASE paper App. B ("verl's default token-level truncated importance-sampling
configuration, with c_IS = 2.0 and no batch normalization of the weights").

Steered rollouts are sampled from a behaviour policy (the policy with ``alpha * v_s`` added to
block L) while the unsteered policy is trained. Each completion token's loss term is multiplied by
``w_t = min(pi_unsteered(y_t) / pi_steered(y_t), c)``.
"""

from __future__ import annotations

import math

import torch


def truncated_importance_weights(
    logp_current: torch.Tensor,
    logp_behaviour: torch.Tensor,
    mask: torch.Tensor,
    cap: float = 2.0,
) -> torch.Tensor:
    """Token-level truncated importance weights ``min(exp(logp_current - logp_behaviour), cap)``.

    The weight multiplies the per-token policy loss; it is a constant for the gradient (the result
    is detached), as in verl's TIS. The log-ratio is clamped at ``log(cap)`` before ``exp``, which
    gives the same value as truncating after ``exp`` but never overflows to inf. Rows whose
    behaviour log-probs equal the current ones (clean route) get weight exactly 1; masked positions
    get 0.

    Args:
        logp_current: ``Tensor[B, T]`` log-probs (nats) of the sampled tokens under the trained,
            unsteered policy, as the trainer computes them when scoring the rollouts (TRL's
            ``old_per_token_logps``, or the current log-probs when those are not kept).
        logp_behaviour: ``Tensor[B, T]`` log-probs of the same tokens under the steered behaviour
            policy that generated them.
        mask: ``Tensor[B, T]`` completion mask (bool, or 0/1 of any dtype); 1 = real token.
        cap: truncation level ``c > 0`` (default 2.0, paper App. B).

    Returns:
        ``Tensor[B, T]`` float32 on the inputs' device, detached, in ``[0, cap]``.

    Raises:
        ValueError: shapes differ or are not 2-D, ``cap`` not a finite positive number, ``mask``
            not 0/1, or NaN/inf log-probs at an unmasked position (masked positions may hold
            anything).
    """
    if logp_current.dim() != 2:
        raise ValueError(f"logp_current must be 2-D [B, T], got shape {tuple(logp_current.shape)}")
    for name, tensor in (("logp_behaviour", logp_behaviour), ("mask", mask)):
        if tensor.shape != logp_current.shape:
            raise ValueError(
                f"{name} has shape {tuple(tensor.shape)} but logp_current has {tuple(logp_current.shape)}"
            )
    if not (math.isfinite(cap) and cap > 0):
        raise ValueError(f"cap must be a finite number > 0, got {cap}")
    if mask.dtype != torch.bool:
        if not ((mask == 0) | (mask == 1)).all():
            raise ValueError("mask must hold only 0 and 1")
        mask = mask.bool()

    with torch.no_grad():
        current = logp_current.detach().to(torch.float32)
        behaviour = logp_behaviour.detach().to(torch.float32)
        for name, tensor in (("logp_current", current), ("logp_behaviour", behaviour)):
            if not torch.isfinite(tensor[mask]).all():
                raise ValueError(f"{name} contains NaN or inf at unmasked positions")
        log_ratio = (current - behaviour).clamp(max=math.log(cap))
        weights = torch.exp(log_ratio).clamp(max=cap)
        return torch.where(mask, weights, torch.zeros_like(weights))


def routed_importance_weights(
    current: torch.Tensor, behaviour: torch.Tensor, mask: torch.Tensor, steered: torch.Tensor, cap: float = 2.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Truncated IS weights of a batch whose rows are steered or not: ``(weights [B, T], clipped [B, T] bool)``.

    Steered rows (``steered [B]`` True) get :func:`truncated_importance_weights`; every other row (the clean route,
    OGER's offline rows, whose behaviour log-probs may be NaN) gets exactly 1. ``clipped`` marks the steered, unmasked
    tokens whose ratio exceeded ``cap``. ``current`` / ``behaviour``: ``[B, T]`` log-probs of the trained
    (unsteered) policy and of the sampler; ``mask``: ``[B, T]`` 0/1.
    """
    weights = torch.ones_like(current, dtype=torch.float32)
    steered_mask = mask.bool() & steered[:, None]
    if not bool(steered.any()):
        return weights, torch.zeros_like(steered_mask)
    weights[steered] = truncated_importance_weights(current[steered], behaviour[steered], mask[steered], cap=cap)
    return weights, (current.float() - behaviour.float() > math.log(cap)) & steered_mask
