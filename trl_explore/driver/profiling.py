"""Timing of a component's phases beside TRL's own (``profiling/Time taken: <Trainer>.<name>``)."""

from __future__ import annotations


def phase(trainer, name: str):
    """A context timing ``name`` like TRL's own phases (``profiling/Time taken: <Trainer>.<name>``, sent to wandb /
    mlflow / trackio when enabled; ``benchmarks/overhead.py`` reads them)."""
    from trl.extras.profiling import profiling_context

    return profiling_context(trainer, name)


def record_phase(trainer, name: str, seconds: float) -> None:
    """Report ``seconds`` spent in ``name``, measured piecewise (e.g. in hooks inside ``generate``), as :func:`phase`
    does (TRL's ``ProfilingContext._log_metrics``: see ``trl_explore.trl_guards.contract``)."""
    phase(trainer, name)._log_metrics(seconds)
