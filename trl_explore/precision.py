"""The CPU precision tier: bfloat16 mixed precision where the CPU computes bfloat16 fast (AMX), float32 elsewhere.

What "bfloat16" means on a CPU here (``ExplorationConfig.cpu_precision``):

* the weights, gradients and optimizer state stay float32 (TRL loads a model given by name in float32 unless
  ``model_init_kwargs`` say otherwise; a model object keeps its own dtype);
* the loss forward and backward run under ``torch.autocast("cpu", dtype=torch.bfloat16)``: that is Transformers'
  and Accelerate's ``bf16=True, use_cpu=True``, which this module sets;
* the rollouts (HF ``generate``, which TRL does not put under autocast: before the first step the model is not
  prepared by Accelerate at all, and after it each decoding step enters and leaves autocast, casting every weight
  again) run under one autocast context around the whole call (``ExplorationTrainer._generate_single_turn``), and so
  does the held-out evaluation (``trl_explore.evaluation.heldout``);
* what must stay exact is float32: logits leave the model as float32 (Accelerate's output conversion, ``generate``'s
  own cast), and every log-softmax, entropy and log-prob of the package is taken on float32 logits
  (``trl_explore.sampler_settings.processed_logits``); docs/performance.md gives the measured differences.

Chosen on a CPU from the flags of ``/proc/cpuinfo`` (:data:`NATIVE_BF16_FLAGS`), and never on a GPU: where an
accelerator is used, ``bf16`` / ``fp16`` keep TRL's meaning and ``cpu_precision`` is not read.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

import torch

CPU_PRECISIONS = ("auto", "bfloat16", "float32")
"""The values of ``ExplorationConfig.cpu_precision``."""

NATIVE_BF16_FLAGS = ("amx_bf16",)
"""``/proc/cpuinfo`` flags of CPUs on which ``"auto"`` picks bfloat16: Intel AMX (``amx_bf16``). Measured, one
thread, torch 2.13: on a Xeon with ``amx_bf16`` a 2048 x 576 @ 576 x 1536 matmul ran 5.5 times faster in bfloat16
than in float32 (issue 28); on a Xeon with ``avx512_bf16`` but no AMX the same matmul ran 1.5 times SLOWER in
bfloat16 (50.6 ms against 33.5 ms) and a decoding step's LM head only 1.4 times faster, so ``avx512_bf16`` alone does
not qualify. Other CPUs (no flag, other architectures, an unreadable ``/proc/cpuinfo``) get float32 from ``"auto"``;
``cpu_precision="bfloat16"`` forces the tier there."""


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU's feature flags: the words of the ``flags`` lines (x86) and ``Features`` lines (Arm) of
    ``/proc/cpuinfo``.

    Args:
        cpuinfo: the text of ``/proc/cpuinfo``; None reads the file.

    Returns:
        The flags, lower case; empty where the file cannot be read (macOS, Windows) or has no such line.
    """
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            return frozenset()
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("flags", "features"):
            flags.update(value.lower().split())
    return frozenset(flags)


def native_bf16_flags(flags: Iterable[str]) -> tuple[str, ...]:
    """The flags of :data:`NATIVE_BF16_FLAGS` among ``flags`` (empty: ``"auto"`` picks float32)."""
    present = {f.lower() for f in flags}
    return tuple(f for f in NATIVE_BF16_FLAGS if f in present)


def cpu_compute_dtype(option: str, flags: Iterable[str], bf16: bool | None = None, fp16: bool = False) -> torch.dtype:
    """The compute precision of a training run on a CPU: ``torch.bfloat16`` (mixed: float32 weights and optimizer,
    bfloat16 autocast) or ``torch.float32``.

    Rules: an explicit ``bf16`` wins (``True``: bfloat16, ``False``: float32); unset (``None``, TRL's default),
    ``option`` decides: ``"bfloat16"`` or ``"float32"`` as named, ``"auto"`` bfloat16 when ``flags`` hold one of
    :data:`NATIVE_BF16_FLAGS`, else float32.

    Args:
        option: ``ExplorationConfig.cpu_precision``, one of :data:`CPU_PRECISIONS`.
        flags: the CPU's flags (:func:`cpu_flags`).
        bf16: the config's ``bf16`` as given (None when not set).
        fp16: the config's ``fp16``.

    Raises:
        ValueError: an unknown ``option``; ``fp16=True`` (CPUs have no float16 tier); an explicit ``bf16`` that
            contradicts an explicit ``option`` (``bf16=True`` with ``"float32"``, ``bf16=False`` with
            ``"bfloat16"``). Each message names the fields.
    """
    if option not in CPU_PRECISIONS:
        raise ValueError(f"cpu_precision={option!r}: use one of {list(CPU_PRECISIONS)}")
    if fp16:
        raise ValueError("fp16=True on a CPU: CPUs have no float16 tier (Accelerate would train in float32); "
                         "leave fp16 off and use cpu_precision ('auto', 'bfloat16' or 'float32')")
    if bf16 is not None:
        wanted = "bfloat16" if bf16 else "float32"
        if option not in ("auto", wanted):
            raise ValueError(f"bf16={bf16} contradicts cpu_precision={option!r}: on a CPU, set only cpu_precision")
        return torch.bfloat16 if bf16 else torch.float32
    if option == "auto":
        return torch.bfloat16 if native_bf16_flags(flags) else torch.float32
    return torch.bfloat16 if option == "bfloat16" else torch.float32


def runs_on_cpu(use_cpu: bool) -> bool:
    """Whether a training run with this ``use_cpu`` computes on the CPU: ``use_cpu`` or ``$ACCELERATE_USE_CPU`` set,
    or no accelerator that Transformers would pick (CUDA, XPU, MPS, NPU, HPU, MLU, MUSA, XLA) is available."""
    from transformers.utils import import_utils as iu

    if use_cpu or os.environ.get("ACCELERATE_USE_CPU", "").strip().lower() in ("1", "true", "yes", "on"):
        return True
    probes = ("is_torch_cuda_available", "is_torch_xpu_available", "is_torch_mps_available", "is_torch_npu_available",
              "is_torch_hpu_available", "is_torch_mlu_available", "is_torch_musa_available", "is_torch_xla_available")
    return not any(getattr(iu, name, lambda: False)() for name in probes)


def apply_cpu_precision(args) -> torch.dtype | None:
    """Set ``args.use_cpu`` and ``args.bf16`` from ``args.cpu_precision`` when the run computes on a CPU
    (:func:`runs_on_cpu`); called by ``ExplorationConfig.__post_init__`` before Transformers reads them.

    Args:
        args: a ``GRPOConfig`` with a ``cpu_precision`` field, before ``TrainingArguments.__post_init__``.

    Returns:
        The CPU compute dtype (:func:`cpu_compute_dtype`), or None where an accelerator is used (nothing changed:
        ``bf16`` / ``fp16`` as TRL reads them).

    Raises:
        ValueError: as :func:`cpu_compute_dtype`, also for an unknown ``cpu_precision`` on a GPU machine.
    """
    option = args.cpu_precision
    if option not in CPU_PRECISIONS:
        raise ValueError(f"cpu_precision={option!r}: use one of {list(CPU_PRECISIONS)}")
    if not runs_on_cpu(bool(args.use_cpu)):
        return None
    dtype = cpu_compute_dtype(option, cpu_flags(), bf16=args.bf16, fp16=bool(args.fp16))
    args.use_cpu = True  # Transformers accepts bf16 on a CPU only with use_cpu
    args.bf16 = dtype == torch.bfloat16
    return dtype


def cpu_bf16_active(args, device: torch.device) -> bool:
    """Whether a trainer with ``args`` on ``device`` runs the CPU bfloat16 tier (``bf16`` on a CPU device)."""
    return torch.device(device).type == "cpu" and bool(getattr(args, "bf16", False))


def generation_autocast(args, device: torch.device) -> contextlib.AbstractContextManager:
    """The context for HF ``generate`` calls of a trainer (rollouts, held-out evaluation): one
    ``torch.autocast("cpu", dtype=torch.bfloat16)`` around the whole call in the CPU bfloat16 tier
    (:func:`cpu_bf16_active`), so the float32 weights are cast once per call rather than once per decoding step; a
    no-op elsewhere (float32 CPU runs, GPUs: TRL's behaviour)."""
    if cpu_bf16_active(args, device):
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def precision_line(args, device: torch.device, flags: Iterable[str] | None = None) -> str:
    """One line saying the training precision and why, e.g. ``"precision: bfloat16 mixed on the CPU (float32 weights
    and optimizer; bfloat16 autocast for the loss, the rollouts and the held-out evaluation): cpu_precision='auto',
    CPU flag amx_bf16"``."""
    device = torch.device(device)
    if device.type != "cpu":
        mode = "bfloat16" if getattr(args, "bf16", False) else "float16" if getattr(args, "fp16", False) else "float32"
        return f"precision: {mode} on {device.type} (bf16={getattr(args, 'bf16', None)}, fp16={args.fp16})"
    found = native_bf16_flags(cpu_flags() if flags is None else flags)
    option = getattr(args, "cpu_precision", None)
    why = (f"cpu_precision={option!r}, " if option is not None else f"bf16={getattr(args, 'bf16', None)}, ") + (
        f"CPU flag{'s' if len(found) > 1 else ''} {', '.join(found)}" if found else "no amx_bf16 on this CPU")
    if cpu_bf16_active(args, device):
        return ("precision: bfloat16 mixed on the CPU (float32 weights and optimizer; bfloat16 autocast for the loss, "
                f"the rollouts and the held-out evaluation): {why}")
    return f"precision: float32 on the CPU: {why}"
