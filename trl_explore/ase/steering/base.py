"""Backend-independent part of activation steering for ASE-GRPO (SPEC §3.2-3.3, §3.5, §4).

Everything a steering backend needs that does not depend on how the rollouts are generated lives
here: pure tensor functions (the per-row steering offsets, the readout positions, temperature-scaled
token log-probabilities, the addition to a block's output) and the abstract interface
:class:`SteeringBackend` that the HF ``generate`` backend (``hf.py``) and a vLLM backend both
implement.

The interface is stated in terms of three things only:

* ``route_ids``: ``LongTensor[B]``, one route per rollout; ``0`` is the clean route (no steering),
  ``s`` in ``1..K`` adds ``alpha * vectors[s - 1]``.
* ``vectors``: ``Tensor[K, d]``, the active vector bank (``K`` may be 0: an empty bank).
* ``alpha``: the steering strength (ASE paper §3.3; SPEC §3.4 default 0.5).

How a backend applies them is its own business: the HF backend adds a per-row ``[B, 1, d]`` offset in
one forward hook during one ``generate`` call; the vLLM backend (``vllm.py``), whose decoder layers return
``(hidden_states, residual)`` over a flat token dimension, adds ``table[route of token]`` inside the steered
block's traced forward (the residual stream there is ``hidden_states + residual``, so adding the offset to one
of the two steers it), with per-request routes in one call or one call per route (see :func:`route_groups`).
"""

from __future__ import annotations

import abc
import math
from contextlib import AbstractContextManager

import torch


def check_routes(route_ids: torch.Tensor, vectors: torch.Tensor, hidden_size: int | None = None) -> None:
    """Validate a route assignment against a vector bank (SPEC §3.1-3.2).

    Args:
        route_ids: ``LongTensor[B]`` (any integer dtype), values in ``0..K``; 0 is the clean route.
        vectors: ``Tensor[K, d]``, floating point, finite; ``K = 0`` (empty bank) is allowed, in which
            case every route must be 0.
        hidden_size: if given, ``d`` must equal it (the hidden size of the steered block).

    Raises:
        TypeError: ``route_ids`` or ``vectors`` is not a tensor, or has the wrong dtype.
        ValueError: wrong number of dimensions, a route outside ``0..K``, non-finite vectors, or
            ``d != hidden_size``.
    """
    if not isinstance(route_ids, torch.Tensor):
        raise TypeError(f"`route_ids` must be a torch.Tensor, got {type(route_ids).__name__}")
    if not isinstance(vectors, torch.Tensor):
        raise TypeError(f"`vectors` must be a torch.Tensor, got {type(vectors).__name__}")
    if route_ids.dim() != 1:
        raise ValueError(f"`route_ids` must be 1-D [B], got shape {tuple(route_ids.shape)}")
    if route_ids.dtype.is_floating_point or route_ids.dtype.is_complex or route_ids.dtype == torch.bool:
        raise TypeError(f"`route_ids` must be an integer tensor, got dtype {route_ids.dtype}")
    if vectors.dim() != 2:
        raise ValueError(f"`vectors` must be 2-D [K, d], got shape {tuple(vectors.shape)}")
    if not vectors.dtype.is_floating_point:
        raise TypeError(f"`vectors` must be a floating-point tensor, got dtype {vectors.dtype}")
    num_vectors, dim = vectors.shape
    if hidden_size is not None and dim != hidden_size:
        raise ValueError(f"`vectors` has d={dim} but the steered block has hidden size {hidden_size}")
    if route_ids.numel() > 0:
        low, high = int(route_ids.min()), int(route_ids.max())
        if low < 0 or high > num_vectors:
            raise ValueError(
                f"`route_ids` must lie in 0..K={num_vectors} (0 = clean route), got values in [{low}, {high}]"
            )
    if not torch.isfinite(vectors).all():
        raise ValueError("`vectors` contains NaN or infinite values")


def check_layer_index(layer: int, num_layers: int) -> None:
    """Raise ``ValueError`` unless ``0 <= layer < num_layers`` (the steered decoder block exists).

    Args:
        layer: the steered block's index (``ASEConfig.steering_layer``).
        num_layers: the model's number of decoder blocks.

    Raises:
        ValueError: ``layer`` is out of range; the message gives the valid range and names the option.
    """
    if not 0 <= layer < num_layers:
        raise ValueError(
            f"steering layer {layer} is out of range: the model has {num_layers} decoder layers "
            f"(valid: 0 to {num_layers - 1}; ASEConfig.steering_layer)"
        )


def steering_offsets(route_ids: torch.Tensor, vectors: torch.Tensor, alpha: float) -> torch.Tensor:
    """Per-rollout additive offset ``alpha * v_{route}`` with ``v_0 = 0`` (ASE paper §3.3; SPEC §3.2).

    Args:
        route_ids: ``LongTensor[B]``, values in ``0..K`` (0 = clean route).
        vectors: ``Tensor[K, d]``, the vector bank ``v_1..v_K`` in the block's hidden-state units.
        alpha: steering strength (a finite float; SPEC default 0.5, sweep 0.1-0.6).

    Returns:
        ``Tensor[B, d]`` on ``vectors``' device and dtype; row ``i`` is ``alpha * vectors[route_ids[i] - 1]``,
        and exactly zero for route 0.

    Raises:
        TypeError / ValueError: see :func:`check_routes`; ``ValueError`` if ``alpha`` is not finite.
    """
    check_routes(route_ids, vectors)
    alpha = check_alpha(alpha)
    table = torch.cat([vectors.new_zeros(1, vectors.shape[1]), vectors.detach()], dim=0)  # [K+1, d], v_0 = 0
    return alpha * table[route_ids.to(device=vectors.device, dtype=torch.long)]


def route_groups(route_ids: torch.Tensor) -> dict[int, torch.Tensor]:
    """Row indices of each route present in ``route_ids``, for backends that generate one route at a time.

    Args:
        route_ids: ``LongTensor[B]``.

    Returns:
        ``{route: LongTensor[n_route]}`` with increasing routes and, within a route, increasing row
        indices; routes absent from the batch are absent from the dict.

    Raises:
        ValueError: ``route_ids`` is not 1-D.
    """
    if not isinstance(route_ids, torch.Tensor) or route_ids.dim() != 1:
        raise ValueError("`route_ids` must be a 1-D tensor [B]")
    return {int(r): torch.nonzero(route_ids == r).flatten() for r in torch.unique(route_ids).tolist()}


def readout_positions(completion_mask: torch.Tensor, fraction: float = 0.25) -> torch.Tensor:
    """Response-relative readout position ``floor(f * len)`` of each trajectory (SPEC §3.3).

    ``len`` is the number of completion tokens of the row (the sum of its ``completion_mask``); the
    position is clamped to ``[0, len - 1]`` so that ``f = 1`` reads the last token. A row with no
    completion token (``len = 0``, e.g. a truncated completion masked by TRL's
    ``mask_truncated_completions``) gets position 0: callers that must skip such rows test
    ``completion_mask.sum(-1) > 0``. The product ``f * len`` is taken in float64.

    Args:
        completion_mask: ``Tensor[B, T_c]`` of 0/1 (bool or integer), right-padded as in TRL.
        fraction: ``f`` in ``[0, 1]`` (default 0.25, the ASE paper's readout position, App. D sweep).

    Returns:
        ``LongTensor[B]`` of column indices into the completion (0-based, response-relative).

    Raises:
        ValueError: ``completion_mask`` is not 2-D or holds values other than 0/1; ``fraction`` is not
            a number in ``[0, 1]``.
    """
    if not isinstance(completion_mask, torch.Tensor) or completion_mask.dim() != 2:
        raise ValueError("`completion_mask` must be a 2-D tensor [B, T_c]")
    if not ((completion_mask == 0) | (completion_mask == 1)).all():
        raise ValueError("`completion_mask` must hold only 0 and 1")
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 <= fraction <= 1.0:
        raise ValueError(f"`fraction` must be a number in [0, 1], got {fraction!r}")
    lengths = completion_mask.long().sum(dim=-1)
    positions = torch.floor(lengths.double() * float(fraction)).long()
    return torch.minimum(positions, (lengths - 1).clamp(min=0))


def completion_log_probs(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Log-probability of each token under ``softmax(logits / T)`` (SPEC §3.5 behaviour log-probs).

    ``logits[:, t]`` must be the logits that predicted ``token_ids[:, t]`` (already shifted). The
    log-softmax is computed one row at a time in float32, so the extra memory is ``T * V`` floats, not
    ``B * T * V``.

    Args:
        logits: ``Tensor[B, T, V]``, any floating dtype.
        token_ids: ``LongTensor[B, T]``, values in ``0..V-1``.
        temperature: sampling temperature ``T > 0`` (nats are per unit-temperature-scaled logit).

    Returns:
        ``Tensor[B, T]`` float32, natural-log probabilities (``<= 0``).

    Raises:
        ValueError: shapes disagree, or ``temperature`` is not a positive finite number.
    """
    temperature = check_temperature(temperature)
    if logits.dim() != 3 or token_ids.shape != logits.shape[:2]:
        raise ValueError(
            f"`logits` must be [B, T, V] and `token_ids` [B, T]; got {tuple(logits.shape)} and "
            f"{tuple(token_ids.shape)}"
        )
    out = torch.empty(token_ids.shape, dtype=torch.float32, device=logits.device)
    for row in range(logits.shape[0]):
        scaled = logits[row].float() / temperature  # [T, V]
        chosen = scaled.gather(-1, token_ids[row].long().unsqueeze(-1)).squeeze(-1)
        out[row] = chosen - torch.logsumexp(scaled, dim=-1)
    return out


def add_to_block_output(output, offset: torch.Tensor):
    """Return a decoder block's output with ``offset`` added to its hidden states (out of place).

    Transformers 5.x decoder layers return the hidden states as a Tensor; 4.x layers return a tuple
    whose first element is the hidden states (followed by attention weights / cache). Both are
    handled; the other tuple elements are passed through unchanged.

    Args:
        output: ``Tensor[B, T, d]`` or ``tuple(Tensor[B, T, d], ...)``.
        offset: broadcastable to ``[B, T, d]`` (typically ``[B, 1, d]``); cast to the hidden states'
            dtype and device.

    Returns:
        Same structure as ``output``.

    Raises:
        TypeError: ``output`` is neither a Tensor nor a tuple starting with a Tensor.
    """
    hidden = block_hidden_states(output)
    steered = hidden + offset.to(device=hidden.device, dtype=hidden.dtype)
    if isinstance(output, torch.Tensor):
        return steered
    return (steered, *output[1:])


def block_hidden_states(output) -> torch.Tensor:
    """The hidden-state Tensor of a decoder block's output (Tensor in transformers 5.x, tuple in 4.x).

    Raises:
        TypeError: ``output`` is neither a Tensor nor a tuple/list starting with a Tensor.
    """
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise TypeError(
        "a decoder block must return a Tensor (transformers 5.x) or a tuple starting with a Tensor (4.x); "
        f"got {type(output).__name__}"
    )


def check_alpha(alpha) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise ValueError(f"`alpha` must be a finite number, got {alpha!r}")
    return float(alpha)


def check_temperature(temperature) -> float:
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not math.isfinite(temperature)
        or temperature <= 0
    ):
        raise ValueError(f"`temperature` must be a positive finite number, got {temperature!r}")
    return float(temperature)


class SteeringBackend(abc.ABC):
    """Interface of a route-steered rollout generator (SPEC §4 ``ActivationSteeringGenerator``).

    A backend adds ``alpha * v_{route}`` to the output hidden state of decoder block ``layer`` for every
    rollout whose route is not 0, while the caller generates, and can replay a finished batch
    teacher-forced to get the behaviour log-probs and the readout activations. Steering is a rollout
    device only: validation and deployment generate outside :meth:`steering` (SPEC §3.2).

    Args:
        layer: index of the steered decoder block (default 0: the ASE paper steers and reads block 0's
            output, App. "layer choice").
        alpha: steering strength (default 0.5, SPEC §3.4); a per-call value can be given to
            :meth:`steering` / :meth:`score`.
        steer_prompt: if True (default) the offset is added at every position, prompt prefill included;
            if False only at completion positions. See the backend for the effect on log-probs.

    Attributes:
        hook_calls: number of times the steering hook ran during the last :meth:`steering` context or
            :meth:`score` call; a backend raises if steering was requested and it stayed 0.

    Raises:
        ValueError: ``layer`` is not a non-negative int, ``alpha`` not finite, ``steer_prompt`` not bool.
    """

    def __init__(self, *, layer: int = 0, alpha: float = 0.5, steer_prompt: bool = True) -> None:
        if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
            raise ValueError(f"`layer` must be a non-negative int, got {layer!r}")
        if not isinstance(steer_prompt, bool):
            raise ValueError(f"`steer_prompt` must be a bool, got {steer_prompt!r}")
        self.layer = layer
        self.alpha = check_alpha(alpha)
        self.steer_prompt = steer_prompt
        self.hook_calls = 0

    @abc.abstractmethod
    def steering(
        self, route_ids: torch.Tensor, vectors: torch.Tensor, alpha: float | None = None
    ) -> AbstractContextManager[None]:
        """Context manager under which generating the ``B`` rollouts (in ``route_ids`` order) is steered.

        Must remove everything it installed on exit, also on exceptions, and raise on a normal exit if a
        non-clean route was requested but the steering hook never ran.
        """

    @abc.abstractmethod
    def score(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor,
        route_ids: torch.Tensor,
        vectors: torch.Tensor,
        *,
        temperature: float,
        readout_fraction: float = 0.25,
        alpha: float | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Behaviour log-probs ``[B, T_c]`` and readout activations ``[B, d]`` of a finished batch."""

    def _raise_if_not_fired(self, route_ids: torch.Tensor, where: str, forward_calls: int | None = None) -> None:
        """Fail loudly when steering was requested but the hook did not run on every forward pass."""
        if not bool((route_ids != 0).any()):
            return
        if self.hook_calls == 0:
            raise RuntimeError(
                f"{where}: steering was requested for non-clean routes but the hook on decoder block "
                f"{self.layer} never ran (was the model compiled / graph-captured, or generated outside the "
                "context?). Run the model eagerly inside the context."
            )
        if forward_calls is not None and self.hook_calls < forward_calls:
            raise RuntimeError(
                f"{where}: the steering hook on decoder block {self.layer} ran on {self.hook_calls} of "
                f"{forward_calls} forward passes of the model: some steps were not steered (compiled or "
                "graph-captured decoding?). Run the model eagerly inside the context."
            )
