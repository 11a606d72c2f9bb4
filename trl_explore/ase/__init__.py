"""ASE-GRPO: activation-space exploration (config, trainer, vector bank, steering generator).

The four public names are imported on first use, so ``import trl_explore.ase.bank`` (or ``routing``,
``importance``, ``steering``) stays light: TRL is imported only with ``ASEConfig`` / ``ASEGRPOTrainer``.
"""

from typing import TYPE_CHECKING

from trl_explore.utils.lazy import lazy_exports

_LAZY = {
    "ASEComponent": "trl_explore.ase.component",
    "ASEConfig": "trl_explore.ase.config",
    "ASEOptions": "trl_explore.ase.options",
    "ASEGRPOTrainer": "trl_explore.ase.trainer",
    "SteeringVectorBank": "trl_explore.ase.bank",
    "ActivationSteeringGenerator": "trl_explore.ase.steering",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _LAZY)


if TYPE_CHECKING:  # pragma: no cover - for static analysers only (``X as X``: an explicit re-export)
    from trl_explore.ase.bank import SteeringVectorBank as SteeringVectorBank
    from trl_explore.ase.component import ASEComponent as ASEComponent
    from trl_explore.ase.config import ASEConfig as ASEConfig
    from trl_explore.ase.options import ASEOptions as ASEOptions
    from trl_explore.ase.steering import ActivationSteeringGenerator as ActivationSteeringGenerator
    from trl_explore.ase.trainer import ASEGRPOTrainer as ASEGRPOTrainer
