"""Lazy public names for the package's ``__init__`` modules (PEP 562): a name is imported on first access, so
``import trl_explore`` (or ``trl_explore.rewards``, ...) pulls in neither TRL, vLLM, sentence-transformers nor
math-verify until a name that needs them is used."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(package: str, names: Mapping[str, str], aliases: Mapping[str, str] | None = None,
                 fallback: str | None = None) -> tuple[list[str], Callable, Callable]:
    """``(__all__, __getattr__, __dir__)`` of a package whose public ``names`` map to the modules defining them.

    Args:
        package: the package's ``__name__``.
        names: ``{public name: module that defines it}``.
        aliases: ``{public name: name in that module}`` where the two differ.
        fallback: a module whose other (non-dunder) names the package also reads through to: the module the package
            replaced (``trl_explore.driver`` was ``driver.trainer``'s module before it became a package).

    Returns:
        Assign them in the package: ``__all__, __getattr__, __dir__ = lazy_exports(__name__, {...})``. A value is
        cached in the package after its first access.
    """
    aliases = dict(aliases or {})

    def __getattr__(name: str):
        module = names.get(name)
        if module is None and fallback and not name.startswith("__"):
            if hasattr(importlib.import_module(fallback), name):
                return getattr(sys.modules[fallback], name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), aliases.get(name, name))
        setattr(sys.modules[package], name, value)  # the next access skips this function
        return value

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(names))

    return sorted(names), __getattr__, __dir__
