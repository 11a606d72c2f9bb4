"""trl_explore: exploration methods for RLVR as subclasses of TRL's ``GRPOTrainer``.

Two methods, plus the parts they share:

* OGER (``trl_explore.oger``): offline-guided exploration reward, divergence-aware hybrid
  replacement and LUFFY-style policy shaping.
* ASE-GRPO (``trl_explore.ase``): activation-space exploration with a bank of steering vectors.
* Shared: ``trl_explore.data`` (multi-teacher offline sets), ``trl_explore.rewards`` (verifiable
  math reward, ``OGERRewardFunction``), ``trl_explore.defaults`` (embedded offline assets).

The public names below are imported lazily, so ``import trl_explore`` pulls in neither vLLM nor
sentence-transformers (nor TRL) until a name that needs them is used.
"""

from typing import TYPE_CHECKING

from trl_explore.lazy import lazy_exports

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "MathVerifyReward": "trl_explore.rewards.math_verify_reward",
    "math_reward": "trl_explore.rewards.math_verify_reward",
    "verify_answer": "trl_explore.rewards.math_verify_reward",
    "extract_answer": "trl_explore.rewards.math_verify_reward",
    "OGERRewardFunction": "trl_explore.oger.reward",
    "OfflineDatasetBuilder": "trl_explore.data.builder",
    "build_offline_dataset": "trl_explore.data.builder",
    "OGERConfig": "trl_explore.oger.config",
    "OGEROptions": "trl_explore.oger.options",
    "OGERComponent": "trl_explore.oger.component",
    "OGERTrainer": "trl_explore.oger.trainer",
    "ASEConfig": "trl_explore.ase.config",
    "ASEOptions": "trl_explore.ase.options",
    "ASEComponent": "trl_explore.ase.component",
    "ASEGRPOTrainer": "trl_explore.ase.trainer",
    "OGERASEConfig": "trl_explore.oger_ase",
    "OGERASETrainer": "trl_explore.oger_ase",
    "ExplorationTrainer": "trl_explore.driver",
    "ExplorationConfig": "trl_explore.config",
    "ComponentOptions": "trl_explore.config",
    "Component": "trl_explore.components",
    "SteeringVectorBank": "trl_explore.ase.bank",
    "ActivationSteeringGenerator": "trl_explore.ase.steering",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _LAZY)


if TYPE_CHECKING:  # pragma: no cover - for static analysers only
    from trl_explore.ase.bank import SteeringVectorBank
    from trl_explore.ase.config import ASEConfig
    from trl_explore.ase.steering import ActivationSteeringGenerator
    from trl_explore.ase.trainer import ASEGRPOTrainer
    from trl_explore.components import Component
    from trl_explore.data.builder import OfflineDatasetBuilder, build_offline_dataset
    from trl_explore.driver import ExplorationTrainer
    from trl_explore.oger.config import OGERConfig
    from trl_explore.oger.reward import OGERRewardFunction
    from trl_explore.oger.trainer import OGERTrainer
    from trl_explore.oger_ase import OGERASEConfig, OGERASETrainer
    from trl_explore.rewards.math_verify_reward import MathVerifyReward, extract_answer, math_reward, verify_answer
