"""Old import paths, kept working since the driver became a package: the driver's files moved into
``trl_explore.driver``, the TRL and transformers guards into ``trl_explore.trl_guards``, the checkpoint files into
``trl_explore.checkpoints`` and three small helpers into ``trl_explore.utils``.

``import trl_explore.components`` (or ``from trl_explore.config import ExplorationConfig``) still works: a finder at
the end of ``sys.meta_path`` answers for an old name with the module at its new place, the same module object, so a
patch made through either name is seen through the other. New code should use the new paths (:data:`MOVED`).

What the move changed all the same: ``trl_explore.driver`` and ``trl_explore.checkpoints`` became packages, whose
names read through to ``driver.trainer`` and ``checkpoints.records`` but whose patches do not reach them (patch
``trl_explore.driver.trainer.X`` and ``trl_explore.checkpoints.records.X``, where the names are used); loggers carry
the new module names (``trl_explore.driver.config``; the package's logger ``trl_explore`` covers them all); and a
pickle that names a class by its old path loads, but ``torch.load(..., weights_only=True)`` needs the old name in its
allowlist (``torch.serialization.safe_globals([(ExplorationConfig, "trl_explore.config.ExplorationConfig")])``).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {  # old module -> where it lives now
    "trl_explore.components": "trl_explore.driver.components",
    "trl_explore.config": "trl_explore.driver.config",
    "trl_explore.scoring": "trl_explore.driver.scoring",
    "trl_explore.forwards": "trl_explore.driver.forwards",
    "trl_explore.resume": "trl_explore.driver.resume",
    "trl_explore.resampling": "trl_explore.driver.resampling",
    "trl_explore.objective": "trl_explore.driver.objective",
    "trl_explore.rows": "trl_explore.driver.rows",
    "trl_explore.trl_contract": "trl_explore.trl_guards.contract",
    "trl_explore.sampler_settings": "trl_explore.trl_guards.sampler_settings",
    "trl_explore.vllm_engine": "trl_explore.trl_guards.vllm_engine",
    "trl_explore.positions": "trl_explore.trl_guards.positions",
    "trl_explore.prefix_forward": "trl_explore.trl_guards.prefix_forward",
    "trl_explore.models": "trl_explore.trl_guards.models",
    "trl_explore.distributed": "trl_explore.trl_guards.distributed",
    "trl_explore.disk": "trl_explore.checkpoints.disk",
    "trl_explore.lazy": "trl_explore.utils.lazy",
    "trl_explore.registry": "trl_explore.utils.registry",
    "trl_explore.similarity": "trl_explore.utils.similarity",
}


MOVED_CLASSES = {  # class paths that checkpoints of earlier versions record -> today's
    "trl_explore.driver.ExplorationTrainer": "trl_explore.driver.trainer.ExplorationTrainer",
}


def current_path(dotted: str) -> str:
    """Today's path of a module or class path that an earlier version recorded (a checkpoint's trainer class):
    ``"trl_explore.config.ExplorationConfig"`` -> ``"trl_explore.driver.config.ExplorationConfig"``; other paths
    come back unchanged."""
    if dotted in MOVED_CLASSES:
        return MOVED_CLASSES[dotted]
    for old in sorted(MOVED, key=len, reverse=True):
        if dotted == old or dotted.startswith(old + "."):
            return MOVED[old] + dotted[len(old):]
    return dotted


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finder and loader of the old names: the loader hands back the module already imported at its new place."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        module = importlib.import_module(MOVED[spec.name])
        spec.loader_state = module.__spec__  # per import, so concurrent imports of two old names cannot mix them
        return module

    def exec_module(self, module):
        # the import system has just set ``__spec__`` to the old name's spec: the module gets its own back
        module.__spec__ = module.__spec__.loader_state


def keep_old_import_paths() -> None:
    """Put the finder of old names at the end of ``sys.meta_path`` (once; the package's ``__init__`` calls it)."""
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.append(_Alias())
