"""OGER: offline-guided exploration reward (config, trainer and the pure maths behind them).

``OGERConfig`` and ``OGERTrainer`` import TRL; they are loaded on first access so that the pure
modules (``exploration``, ``replacement``, ``policy_shaping``, ``entropy``) stay light.
"""

from trl_explore.utils.lazy import lazy_exports

_LAZY = {
    "OGERComponent": "trl_explore.oger.component",
    "OGERConfig": "trl_explore.oger.config",
    "OGEROptions": "trl_explore.oger.options",
    "OGERRewardFunction": "trl_explore.oger.reward",
    "OGERTrainer": "trl_explore.oger.trainer",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _LAZY)
