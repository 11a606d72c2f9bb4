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
  (``trl_explore.trl_guards.sampler_settings.processed_logits``); docs/performance.md gives the measured differences.

Chosen on a CPU by measuring (:func:`probe_precision`): ``"auto"`` times a few matrix products of a small decoder
LLM in float32 and in bfloat16 at the run's thread count and picks bfloat16 where it is clearly faster
(:meth:`PrecisionProbe.prefers_bfloat16`). The CPU flags do not decide: the same flag was measured to mean opposite
things on two CPUs (``avx512_bf16`` made bfloat16 1.5 times slower than float32 on a Xeon without AMX and 2.7 times
faster on a Zen 4 EPYC). The reading is cached per CPU model, torch version and thread count. Never chosen on a GPU:
where an accelerator is used, ``bf16`` / ``fp16`` keep TRL's meaning and ``cpu_precision`` is not read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import platform
import time
from collections.abc import Callable, Iterable

import torch

CPU_PRECISIONS = ("auto", "bfloat16", "float32")
"""The values of ``ExplorationConfig.cpu_precision``."""

BF16_FLAGS = ("amx_bf16", "avx512_bf16")
"""``/proc/cpuinfo`` flags that name bfloat16 instructions; printed in the start line as information only. Measured,
one thread, torch 2.13, a 2048 x 576 @ 576 x 1536 matmul: a Xeon with ``amx_bf16`` ran it 5.5 times faster in
bfloat16 than in float32; a Xeon with ``avx512_bf16`` but no AMX 1.5 times SLOWER (50.6 ms against 33.5 ms); a Zen 4
EPYC with ``avx512_bf16`` and no AMX 2.7 times faster (85 against 31 GFLOP/s). Hence :func:`probe_precision`."""

PROBE_SHAPES: tuple[tuple[str, tuple[int, int, int]], ...] = (
    ("a training forward's MLP matmul", (512, 576, 1536)),
    ("a decoding step's LM head", (16, 576, 49152)),
)
"""The products :func:`probe_precision` times, ``(what, (m, k, n))`` for ``[m, k] @ [k, n]``: the shapes of the
embedded SmolLM2-135M-Instruct (hidden size 576, MLP width 1536, vocabulary 49152), one compute-bound (a forward over
512 tokens, as in the loss) and one bound by reading the weights (16 rows, one decoding step)."""

BF16_MIN_SPEEDUP = 1.25
"""``"auto"`` picks bfloat16 when the geometric mean of its speed-ups over :data:`PROBE_SHAPES` is at least this and no
shape is slower in bfloat16 (a margin over the timing noise and over autocast's own casts)."""


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


def bf16_flags(flags: Iterable[str]) -> tuple[str, ...]:
    """The flags of :data:`BF16_FLAGS` among ``flags`` (information for the start line; they decide nothing)."""
    present = {f.lower() for f in flags}
    return tuple(f for f in BF16_FLAGS if f in present)


def cpu_model() -> str:
    """The CPU's model name (``model name`` of ``/proc/cpuinfo``, else ``platform.processor()``, else
    ``"unknown CPU"``)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip().lower() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


@dataclasses.dataclass(frozen=True)
class PrecisionProbe:
    """What :func:`probe_precision` measured: the best of several timings of each :data:`PROBE_SHAPES` product.

    Attributes:
        float32_ms, bfloat16_ms: milliseconds per product, one per shape of :data:`PROBE_SHAPES`.
        threads: torch's intra-op thread count during the measurement.
        cpu: the CPU model (:func:`cpu_model`); torch_version: ``torch.__version__``.
        cached: read back from the cache file rather than measured now.
    """

    float32_ms: tuple[float, ...]
    bfloat16_ms: tuple[float, ...]
    threads: int
    cpu: str
    torch_version: str
    cached: bool = False

    @property
    def speedups(self) -> tuple[float, ...]:
        """float32 time / bfloat16 time, per shape (above 1: bfloat16 is faster)."""
        return tuple(f / b for f, b in zip(self.float32_ms, self.bfloat16_ms))

    @property
    def speedup(self) -> float:
        """The geometric mean of :attr:`speedups`."""
        return math.exp(sum(math.log(s) for s in self.speedups) / len(self.speedups))

    def prefers_bfloat16(self) -> bool:
        """bfloat16 is clearly faster: :attr:`speedup` >= :data:`BF16_MIN_SPEEDUP` and no shape slower."""
        return self.speedup >= BF16_MIN_SPEEDUP and min(self.speedups) >= 1.0

    def summary(self) -> str:
        """One clause for the start line, e.g. ``"bfloat16 measured 2.6x as fast as float32 (a training forward's
        MLP matmul 2.8x, a decoding step's LM head 2.5x; 2 threads)"``; where bfloat16 is slower, how many times:
        ``"bfloat16 measured 45x slower than float32 (a training forward's MLP matmul 40x slower, ...)"``."""
        parts = ", ".join(f"{what} {_times(s)}" for (what, _), s in zip(PROBE_SHAPES, self.speedups))
        threads = f"{self.threads} thread{'s' if self.threads != 1 else ''}"
        overall = f"{_times(self.speedup)} as fast as" if self.speedup >= 0.95 else f"{_times(self.speedup)} than"
        return f"bfloat16 measured {overall} float32 ({parts}; {threads}{', cached' if self.cached else ''})"


def _times(speedup: float) -> str:
    """``2.8x`` for a speed-up (``1.0x`` from 0.95), ``1.7x slower`` / ``45x slower`` below (a "0.0x" said
    nothing)."""
    if speedup >= 0.95:
        return f"{speedup:.1f}x"
    slower = 1.0 / speedup
    return f"{slower:.1f}x slower" if slower < 10 else f"{slower:.0f}x slower"


def _best_matmul_ms(m: int, k: int, n: int, dtype: torch.dtype, repeats: int, budget_s: float = 1.0) -> float:
    """Best milliseconds of ``(m x k) @ (k x n)`` in ``dtype`` over up to ``repeats`` calls after one warm-up, within
    about ``budget_s`` seconds: a warm-up slower than the budget is the reading (a CPU that emulates bfloat16 took
    3.7 s for one LM-head product, where float32 took 0.08 s), and the repeats stop once they have spent it."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=generator).to(dtype)
    b = torch.randn(k, n, generator=generator).to(dtype)
    start = time.perf_counter()
    a @ b  # warm-up: the kernel's first call allocates and dispatches
    warm_up = time.perf_counter() - start
    if warm_up > budget_s:
        return 1000 * warm_up
    best, spent = math.inf, 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        took = time.perf_counter() - start
        best, spent = min(best, took), spent + took
        if spent > budget_s:
            break
    return 1000 * best


def measure_precision(repeats: int = 5) -> PrecisionProbe:
    """Time each :data:`PROBE_SHAPES` product in float32 and in bfloat16 (best of ``repeats``, after one warm-up) at
    torch's current thread count. About a second on a 2-core CPU with fast bfloat16; about 6 s on one that emulates it
    (each product's repeats stop after about a second: :func:`_best_matmul_ms`).

    Raises:
        RuntimeError: torch cannot multiply bfloat16 matrices on this CPU.
    """
    float32 = tuple(_best_matmul_ms(*shape, torch.float32, repeats) for _, shape in PROBE_SHAPES)
    bfloat16 = tuple(_best_matmul_ms(*shape, torch.bfloat16, repeats) for _, shape in PROBE_SHAPES)
    return PrecisionProbe(float32, bfloat16, torch.get_num_threads(), cpu_model(), torch.__version__)


def _probe_cache_path():
    from trl_explore.defaults import cache_dir

    return cache_dir() / "cpu_precision.json"


def probe_precision(cache: bool = True) -> PrecisionProbe:
    """The float32 / bfloat16 reading of this CPU (:func:`measure_precision`), measured once and cached.

    The cache is ``<trl_explore cache>/cpu_precision.json`` (``$TRL_EXPLORE_CACHE`` or ``~/.cache/trl_explore``), one
    entry per CPU model, bfloat16 flags, torch version and thread count; delete it to measure again. The flags are in
    the key because a virtual machine may show one model name for CPUs that differ: two "AMD EPYC" machines of this
    project measured bfloat16 2.6x faster (Zen 4, ``avx512_bf16``) and 45x slower (Zen 3, no such flag; 2 threads),
    and a cache in a home folder shared by both must not carry one's reading to the other.

    Args:
        cache: read and write the cache file (False: measure every call).
    """
    flags = ",".join(bf16_flags(cpu_flags())) or "no bfloat16 flags"
    key = f"{cpu_model()} | {flags} | torch {torch.__version__} | {torch.get_num_threads()} threads"
    path = _probe_cache_path()
    entries = {}
    if cache:
        try:
            entries = json.loads(path.read_text())
            entry = entries[key]
            return PrecisionProbe(tuple(entry["float32_ms"]), tuple(entry["bfloat16_ms"]), entry["threads"],
                                  entry["cpu"], entry["torch_version"], cached=True)
        except (OSError, ValueError, KeyError, TypeError):
            entries = entries if isinstance(entries, dict) else {}
    probe = measure_precision()
    if cache:
        entry = dataclasses.asdict(probe)
        entry.pop("cached")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            temporary.write_text(json.dumps({**entries, key: entry}, indent=1))
            os.replace(temporary, path)  # two processes writing at once: the last whole file wins
        except OSError:
            pass  # a read-only cache: measured again next time
    return probe


def cpu_compute_dtype(option: str, measure: Callable[[], PrecisionProbe] = probe_precision, bf16: bool | None = None,
                      fp16: bool = False) -> torch.dtype:
    """The compute precision of a training run on a CPU: ``torch.bfloat16`` (mixed: float32 weights and optimizer,
    bfloat16 autocast) or ``torch.float32``.

    Rules: an explicit ``bf16`` wins (``True``: bfloat16, ``False``: float32); unset (``None``, TRL's default),
    ``option`` decides: ``"bfloat16"`` or ``"float32"`` as named, ``"auto"`` bfloat16 when ``measure()`` says it is
    clearly faster (:meth:`PrecisionProbe.prefers_bfloat16`), else float32 (also when bfloat16 cannot be measured).

    Args:
        option: ``ExplorationConfig.cpu_precision``, one of :data:`CPU_PRECISIONS`.
        measure: the reading of this CPU, called only for ``"auto"`` (default :func:`probe_precision`).
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
        try:
            return torch.bfloat16 if measure().prefers_bfloat16() else torch.float32
        except RuntimeError:  # no bfloat16 matmul on this CPU
            return torch.float32
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
    dtype = cpu_compute_dtype(option, probe_precision, bf16=args.bf16, fp16=bool(args.fp16))
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


def precision_line(args, device: torch.device, flags: Iterable[str] | None = None,
                   probe: PrecisionProbe | None = None) -> str:
    """One line saying the training precision and why, e.g. ``"precision: bfloat16 mixed on the CPU (float32 weights
    and optimizer; bfloat16 autocast for the loss, the rollouts and the held-out evaluation): cpu_precision='auto',
    bfloat16 measured 2.6x as fast as float32 (...; 2 threads, cached); CPU flags avx512_bf16"``.

    Args:
        args: the training config; device: its device.
        flags: the CPU's flags (default: :func:`cpu_flags`), named for information.
        probe: the reading behind ``"auto"`` (default: :func:`probe_precision`, read back from its cache).
    """
    device = torch.device(device)
    if device.type != "cpu":
        mode = "bfloat16" if getattr(args, "bf16", False) else "float16" if getattr(args, "fp16", False) else "float32"
        return f"precision: {mode} on {device.type} (bf16={getattr(args, 'bf16', None)}, fp16={args.fp16})"
    found = bf16_flags(cpu_flags() if flags is None else flags)
    option = getattr(args, "cpu_precision", None)
    if option == "auto":
        try:
            measured = (probe or probe_precision()).summary()
        except RuntimeError as error:
            measured = f"bfloat16 could not be measured ({error})"
        why = f"cpu_precision='auto', {measured}"
    elif option is not None:
        why = f"cpu_precision={option!r}"
    else:
        why = f"bf16={getattr(args, 'bf16', None)}"
    why += f"; CPU flag{'s' if len(found) > 1 else ''} {', '.join(found)}" if found else "; no bfloat16 CPU flag"
    if cpu_bf16_active(args, device):
        return ("precision: bfloat16 mixed on the CPU (float32 weights and optimizer; bfloat16 autocast for the loss, "
                f"the rollouts and the held-out evaluation): {why}")
    return f"precision: float32 on the CPU: {why}"
