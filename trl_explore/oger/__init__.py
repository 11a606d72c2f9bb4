"""OGER: offline-guided exploration reward (config, trainer and the pure maths behind them).

``OGERConfig`` and ``OGERTrainer`` import TRL; they are loaded on first access so that the pure
modules (``exploration``, ``replacement``, ``policy_shaping``, ``entropy``) stay light.
"""

import importlib

__all__ = ["OGERConfig", "OGERTrainer"]
_LAZY = {"OGERConfig": "trl_explore.oger.config", "OGERTrainer": "trl_explore.oger.trainer"}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'trl_explore.oger' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
