"""OGER: offline-guided exploration reward (config, trainer and the pure maths behind them).

``OGERConfig`` and ``OGERTrainer`` import TRL; they are loaded on first access so that the pure
modules (``exploration``, ``replacement``, ``policy_shaping``, ``entropy``) stay light.
"""

import importlib

_LAZY = {
    "OGERComponent": "trl_explore.oger.component",
    "OGERConfig": "trl_explore.oger.config",
    "OGEROptions": "trl_explore.oger.options",
    "OGERRewardFunction": "trl_explore.oger.reward",
    "OGERTrainer": "trl_explore.oger.trainer",
}
__all__ = sorted(_LAZY)


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'trl_explore.oger' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
