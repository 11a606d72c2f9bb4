"""Activation steering for ASE-GRPO rollouts (SPEC §3.2-3.3, §4).

``ActivationSteeringGenerator`` is the HF ``generate`` backend; ``SteeringBackend`` is the interface a
vLLM backend implements too. The pure helpers are re-exported for the trainer and the bank.
"""

from trl_explore.ase.steering.base import (
    SteeringBackend,
    check_routes,
    completion_log_probs,
    readout_positions,
    route_groups,
    steering_offsets,
)
from trl_explore.ase.steering.hf import ActivationSteeringGenerator, find_decoder_layers
from trl_explore.trl_guards.models import unwrap_model  # re-exported: where it was first defined

__all__ = [
    "ActivationSteeringGenerator",
    "SteeringBackend",
    "check_routes",
    "completion_log_probs",
    "find_decoder_layers",
    "readout_positions",
    "route_groups",
    "steering_offsets",
    "unwrap_model",
]
