"""The driver: one trainer, :class:`~trl_explore.driver.trainer.ExplorationTrainer` (a ``GRPOTrainer`` subclass),
that runs a list of components (``trl_explore.driver.components``: the method interface) through TRL's training step.

Its files, each one concept: ``trainer`` (the class and its TRL overrides), ``components`` (the hooks and the values
they receive), ``config`` (``ExplorationConfig``, ``ComponentOptions``), ``scoring`` (rewards, advantages and row
edits: a mixin), ``forwards`` (teacher-forced forwards: a mixin), ``resume`` (exact resumption: a mixin),
``resampling`` (batch-level resampling), ``objective`` (rows taken out of TRL's objective), ``rows`` (checks of the
data's rows), ``profiling`` (a component's phase times). Names are imported lazily: ``import
trl_explore.driver.components`` does not import TRL's trainer.
"""

from trl_explore.utils.lazy import lazy_exports

# other names read through to driver.trainer: this package was that module (``from trl_explore.driver import Rollout``)
__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "ExplorationTrainer": "trl_explore.driver.trainer",
    "ExplorationConfig": "trl_explore.driver.config",
    "ComponentOptions": "trl_explore.driver.config",
    "Component": "trl_explore.driver.components",
    "Needs": "trl_explore.driver.components",
}, fallback="trl_explore.driver.trainer")
