"""trl_explore: exploration methods for RLVR as subclasses of TRL's ``GRPOTrainer``.

Two methods, plus the parts they share:

* OGER (``trl_explore.oger``): offline-guided exploration reward, divergence-aware hybrid
  replacement and LUFFY-style policy shaping.
* ASE-GRPO (``trl_explore.ase``): activation-space exploration with a bank of steering vectors.
* Baselines of the OGER paper: ExGRPO (``trl_explore.exgrpo``: replay of the policy's own correct trajectories) and
  SFT on the teacher trajectories (``trl_explore.sft``, TRL's ``SFTTrainer``).
* DAPO's dynamic sampling (``trl_explore.dynamic_sampling``): flat groups refused and the batch refilled with new
  prompts (the driver's batch-level resampling).
* Shared: ``trl_explore.data`` (multi-teacher offline sets), ``trl_explore.rewards`` (verifiable
  math reward, ``OGERRewardFunction``), ``trl_explore.defaults`` (embedded offline assets).

The public names below are imported lazily, so ``import trl_explore`` pulls in neither vLLM nor
sentence-transformers (nor TRL) until a name that needs them is used.
"""

from typing import TYPE_CHECKING

from trl_explore.moved import keep_old_import_paths
from trl_explore.utils.lazy import lazy_exports
from trl_explore.version import __version__ as __version__

keep_old_import_paths()

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
    "ExGRPOComponent": "trl_explore.exgrpo.component",
    "ExGRPOConfig": "trl_explore.exgrpo.config",
    "ExGRPOOptions": "trl_explore.exgrpo.options",
    "ExGRPOTrainer": "trl_explore.exgrpo.trainer",
    "DynamicSamplingComponent": "trl_explore.dynamic_sampling.component",
    "DynamicSamplingConfig": "trl_explore.dynamic_sampling.config",
    "DynamicSamplingOptions": "trl_explore.dynamic_sampling.options",
    "DynamicSamplingTrainer": "trl_explore.dynamic_sampling.trainer",
    "OGERASEConfig": "trl_explore.oger_ase",
    "OGERASETrainer": "trl_explore.oger_ase",
    "ExplorationTrainer": "trl_explore.driver.trainer",
    "ExplorationConfig": "trl_explore.driver.config",
    "ComponentOptions": "trl_explore.driver.config",
    "Component": "trl_explore.driver.components",
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
    from trl_explore.data.builder import OfflineDatasetBuilder as OfflineDatasetBuilder
    from trl_explore.data.builder import build_offline_dataset as build_offline_dataset
    from trl_explore.driver.components import Component as Component
    from trl_explore.driver.config import ComponentOptions as ComponentOptions
    from trl_explore.driver.config import ExplorationConfig as ExplorationConfig
    from trl_explore.driver.trainer import ExplorationTrainer as ExplorationTrainer
    from trl_explore.dynamic_sampling.component import DynamicSamplingComponent as DynamicSamplingComponent
    from trl_explore.dynamic_sampling.config import DynamicSamplingConfig as DynamicSamplingConfig
    from trl_explore.dynamic_sampling.options import DynamicSamplingOptions as DynamicSamplingOptions
    from trl_explore.dynamic_sampling.trainer import DynamicSamplingTrainer as DynamicSamplingTrainer
    from trl_explore.exgrpo.component import ExGRPOComponent as ExGRPOComponent
    from trl_explore.exgrpo.config import ExGRPOConfig as ExGRPOConfig
    from trl_explore.exgrpo.options import ExGRPOOptions as ExGRPOOptions
    from trl_explore.exgrpo.trainer import ExGRPOTrainer as ExGRPOTrainer
    from trl_explore.oger.component import OGERComponent as OGERComponent
    from trl_explore.oger.config import OGERConfig as OGERConfig
    from trl_explore.oger.options import OGEROptions as OGEROptions
    from trl_explore.oger.reward import OGERRewardFunction as OGERRewardFunction
    from trl_explore.oger.trainer import OGERTrainer as OGERTrainer
    from trl_explore.oger_ase import OGERASEConfig as OGERASEConfig
    from trl_explore.oger_ase import OGERASETrainer as OGERASETrainer
    from trl_explore.rewards.math_verify_reward import MathVerifyReward as MathVerifyReward
    from trl_explore.rewards.math_verify_reward import extract_answer as extract_answer
    from trl_explore.rewards.math_verify_reward import math_reward as math_reward
    from trl_explore.rewards.math_verify_reward import verify_answer as verify_answer
