"""Auxiliary models under distributed training engines (DeepSpeed ZeRO-3, FSDP).

A trainer may hold models beside the policy that are never trained: OGER's sentence embedder, for example. Every
process needs them whole. The engines do not know that:

* DeepSpeed ZeRO-3: once a ZeRO-3 training config exists (``GRPOConfig`` with ``deepspeed=...``, or
  ``accelerate launch`` with a ZeRO-3 config and ``zero3_init_flag``), transformers builds EVERY later model
  through ``deepspeed.zero.Init``: each parameter is partitioned over the processes and its local tensor has
  shape ``(0,)``. Nothing gathers an auxiliary model's weights, so its first forward fails (for an embedding
  layer: ``RuntimeError: 'weight' must be 2-D``).
* FSDP with ``cpu_ram_efficient_loading`` (``accelerate_configs/fsdp2.yaml``): transformers loads models on
  processes other than the first of each node without initialising them (older transformers: on the ``meta``
  device), expecting FSDP to broadcast the first process's weights. An auxiliary model is never passed to FSDP,
  so it would stay empty there.

:func:`load_auxiliary_model` runs a loading function with both switched off and checks the result.
:func:`check_launch` turns two launch mistakes that otherwise fail late or silently into errors at construction.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")

# accelerate sets it for FSDP's cpu_ram_efficient_loading; transformers reads it in `is_fsdp_enabled()`
_FSDP_RAM_EFFICIENT_LOADING = "FSDP_CPU_RAM_EFFICIENT_LOADING"


def load_auxiliary_model(load: Callable[[], T], name: str = "auxiliary model") -> T:
    """Run ``load()`` so that the models it builds are whole on this process, whatever the training engine.

    While ``load()`` runs, transformers' active DeepSpeed config is unset (no ``zero.Init`` partitioning) and
    FSDP's CPU-RAM-efficient loading is off (every process reads the checkpoint itself); both are restored
    afterwards, also when ``load()`` raises. The returned model is not prepared by Accelerate: it is never
    DeepSpeed-wrapped or FSDP-sharded, and it stays on the device ``load()`` put it on.

    Args:
        load: a function with no arguments that builds and returns the model (e.g. ``lambda: encoder.model``).
        name: how errors name the model (e.g. ``"the OGER embedder (OGERConfig.embedding_model)"``).

    Returns:
        What ``load()`` returned.

    Raises:
        RuntimeError: if the returned ``torch.nn.Module`` still has a parameter that is ZeRO-3 partitioned or on
            the ``meta`` device (e.g. a model built elsewhere after a ZeRO-3 config existed and handed to the
            trainer): it names the parameter.
    """
    from transformers.integrations.deepspeed import set_hf_deepspeed_config, unset_hf_deepspeed_config

    try:  # transformers keeps the active config only as this module-level weak reference (private name)
        from transformers.integrations.deepspeed import _hf_deepspeed_config_weak_ref as ref
    except ImportError:
        ref = None
    active = ref() if ref is not None else None
    ram_efficient = os.environ.pop(_FSDP_RAM_EFFICIENT_LOADING, None)
    unset_hf_deepspeed_config()
    try:
        model = load()
    finally:
        if active is not None:
            set_hf_deepspeed_config(active)
        if ram_efficient is not None:
            os.environ[_FSDP_RAM_EFFICIENT_LOADING] = ram_efficient
    if isinstance(model, torch.nn.Module):
        for param_name, param in model.named_parameters():
            if hasattr(param, "ds_id") or param.device.type == "meta":
                where = "partitioned by DeepSpeed ZeRO-3" if hasattr(param, "ds_id") else "on the meta device"
                raise RuntimeError(
                    f"{name}: parameter {param_name!r} is {where} (local shape {tuple(param.shape)}), so this process "
                    "does not hold the model. Build it inside "
                    "trl_explore.trl_guards.distributed.load_auxiliary_model, or before the training config "
                    "(GRPOConfig) is created, and not through accelerator.prepare"
                )
    return model


def check_launch(accelerator, environ=os.environ) -> None:
    """Raise at trainer construction when Accelerate does not run the engine the processes were launched for.

    Two setups otherwise fail late or silently (checked with accelerate 1.15 on CPU processes):

    * DeepSpeed without a GPU and without ``ddp_backend``: DeepSpeed starts the process group, but Accelerate picks
      no backend and counts ONE process, so the first gather of the first rollout fails with an unrelated-looking
      gloo error. Passing ``--ddp_backend gloo`` fixes it.
    * FSDP on CPU processes: Accelerate enables FSDP only for GPU-type devices, so an FSDP config runs plain DDP
      (``use_cpu=True``) or no distribution at all, without a word.

    Args:
        accelerator: the trainer's ``accelerate.Accelerator``.
        environ: the environment to read ``WORLD_SIZE`` and ``ACCELERATE_USE_FSDP`` from (set by the launcher
            and by ``TrainingArguments``).

    Raises:
        RuntimeError: naming the launched and the running setup and the fix.
    """
    from accelerate.utils import DistributedType

    world_size = int(environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return
    if accelerator.num_processes != world_size:
        raise RuntimeError(
            f"{world_size} processes were launched (WORLD_SIZE) but Accelerate counts {accelerator.num_processes} "
            f"({accelerator.distributed_type}): without a GPU, Accelerate picks no communication backend for "
            "DeepSpeed. Pass --ddp_backend gloo (GRPOConfig.ddp_backend='gloo')"
        )
    fsdp_requested = environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    if fsdp_requested and accelerator.distributed_type != DistributedType.FSDP:
        raise RuntimeError(
            f"FSDP was requested (an FSDP accelerate config or GRPOConfig.fsdp) but Accelerate runs "
            f"{accelerator.distributed_type}: accelerate enables FSDP only on GPU-type devices, so the model would "
            "not be sharded. On CPU processes use DDP or DeepSpeed ZeRO (docs/distributed.md)"
        )
