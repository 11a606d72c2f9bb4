"""The parts of :class:`~trl_explore.driver.ExplorationTrainer`: the :class:`Component` base class (every extension
point, a no-op by default, in the order the driver calls them) and the two values it hands to components."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

if TYPE_CHECKING:  # pragma: no cover
    from trl_explore.driver import ExplorationTrainer


@dataclasses.dataclass(frozen=True)
class Rollout:
    """What TRL's ``_generate`` returns, as one value (per-row lists, in TRL's order)."""

    prompt_ids: list
    completion_ids: list
    tool_mask: list | None
    completions: list
    logprobs: list | None
    extra_fields: dict
    images: Any
    tool_images: Any

    def as_tuple(self) -> tuple:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))


class Forward(NamedTuple):
    """Output of ``_get_per_token_logps_and_entropies``: ``[B, T]`` log-probs, ``[B, T]`` entropies, aux loss."""

    logps: torch.Tensor
    entropies: torch.Tensor | None
    aux_loss: torch.Tensor | None


class Component:
    """A method as a part of :class:`ExplorationTrainer`. Every extension point is a no-op; see the module docstring
    for when each one runs. ``mode`` is ``"train"`` or ``"eval"``."""

    trainer: ExplorationTrainer | None = None
    reward_field_names: tuple[str, ...] = ()
    """The keys :meth:`reward_fields` adds (and any ``extra_fields`` it puts in the rollout): a dataset column with
    one of these names is refused when the trainer is built, so user columns reach the reward functions unchanged."""

    def bind(self, trainer: ExplorationTrainer) -> None:
        self.trainer = trainer

    def begin_generation(self, rows: tuple, mode: str) -> None: ...

    def rollout_context(self, num_rows: int, num_generations: int, mode: str):
        return None

    def rollout_logprobs(self, completion_ids: list, logprobs: list | None, mode: str) -> list | None:
        return logprobs

    def behaviour_context(self, mode: str):
        """A context under which a teacher-forced forward gives the distribution the rollouts were sampled from."""
        return None

    def transform_rollout(self, rollout: Rollout, rows: tuple, mode: str) -> Rollout:
        return rollout

    def observes_scoring_forward(self, mode: str) -> bool:
        return False

    def needs_scoring_entropy(self) -> bool:
        return False

    def scoring_forward_context(self, input_ids, attention_mask, logits_to_keep: int):
        return None

    def on_scoring_forward(self, forward: Forward) -> None: ...

    def reward_fields(self, mode: str) -> dict[str, list]:
        return {}

    def on_rewards(self, rewards_per_func: torch.Tensor, completions: list, mode: str) -> None: ...

    def batch_fields(self, output: dict, rows: tuple, mode: str) -> dict[str, torch.Tensor]:
        return {}

    def uses_loss_forward(self, inputs: dict, mode: str) -> bool:
        return False

    def loss_forward_context(self, inputs: dict, input_ids, attention_mask, logits_to_keep: int):
        return None

    def on_loss_forward(self, inputs: dict, forward: Forward, mode: str) -> None: ...

    def loss_inputs(self, batch: dict, mode: str) -> dict:
        return batch

    def advantage_weights(self, inputs: dict, forward: Forward, mode: str) -> torch.Tensor | None:
        return None

    def extra_loss(self, loss: torch.Tensor, inputs: dict, batch: dict, forward: Forward, mode: str) -> torch.Tensor:
        """Return ``loss`` (TRL's objective on ``batch``) with this component's terms added."""
        return loss

    def on_step_end(self) -> None: ...

    def save(self, output_dir: str) -> None: ...

    def load(self, checkpoint: str) -> None: ...
