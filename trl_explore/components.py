"""The method interface of :class:`~trl_explore.driver.ExplorationTrainer`: :class:`Component` and the values its
hooks receive.

A method (OGER, ASE-GRPO, or one of your own) is a :class:`Component`: a class with an options dataclass of its own
(:class:`~trl_explore.config.ComponentOptions`) and a few hooks, all no-ops by default. The driver calls each hook of
every component, in list order, at one fixed place of a training or evaluation step. Every hook takes one value and
returns one result; every value is frozen and carries ``mode`` (``"train"`` or ``"eval"``).

========================================  =================================  ==========================================
hook (value) -> result                    when it runs                       what it may change
========================================  =================================  ==========================================
``prepare(TrainerPlan) -> TrainerPlan``   before ``GRPOTrainer.__init__``    reward functions and weights, the contexts
                                                                             TRL's ``__init__`` runs in; checks (raise)
``setup(trainer) -> None``                after ``GRPOTrainer.__init__``     its own parts (models, banks, hooks)
``sampling_context(SamplingCall)``        around TRL's sampler               steering, recorders (a context or None)
``transform_rollout(Rollout) -> Rollout`` after TRL's ``_generate``          completions (replacement), behaviour
                                                                             log-probs, ``offline`` flags
``forward_context(ForwardCall)``          around TRL's scoring forward and   hooks on the model (a context or None)
                                          the loss forward
``observe_forward(ForwardResult)``        after those forwards               nothing (reads log-probs, entropies)
``reward_fields(Rollout) -> dict``        before the reward functions        per-completion reward kwargs (``{name:
                                                                             [value per completion]}``)
``batch_fields(ScoredBatch) -> dict``     after TRL scored the batch         batch-first tensors added to the batch
``loss_batch(LossCall) -> dict``          before TRL's objective             the batch TRL's objective sees (masks)
``advantages(LossCall) -> Tensor``        before TRL's objective             ``[B, 1]`` or ``[B, T]`` advantages: add
                                                                             or multiply terms
``extra_loss(LossCall) -> Tensor``        after TRL's objective              the loss (terms added)
``step_end(TrainerState) -> None``        after each optimizer step          its own state
``save(folder)`` / ``load(folder)``       with every checkpoint / on resume  its own state
========================================  =================================  ==========================================

Two declarations instead of queries: :meth:`Component.needs` (which policy forwards a component reads: TRL's scoring
forward after generation, its entropies, the loss forward) and :attr:`Component.reward_field_names` (the reward kwargs
it adds; a dataset column of that name is refused). One service for the others: :meth:`Component.behaviour_context`,
the distribution the current rollouts were sampled from (a teacher-forced forward under it reproduces them); the
driver adds the sampler's settings (``ExplorationTrainer.sampler``, ``trl_explore.sampler_settings``) and makes that
forward (``ExplorationTrainer.behaviour_forward``).

State: a component keeps what one hook hands to a later one on its own attributes, as one record per generation,
replaced (never shared with another component); everything the components share travels in the values above (e.g.
``Rollout.offline``: the rows that were not sampled from the policy).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import torch

if TYPE_CHECKING:  # pragma: no cover
    from trl_explore.driver import ExplorationTrainer


class Forward(NamedTuple):
    """Output of TRL's ``_get_per_token_logps_and_entropies``: ``[B, T]`` log-probs (nats), ``[B, T]`` entropies
    (nats; None when not computed) and the auxiliary loss (None unless the model has one). TRL's are of
    ``softmax(logits / GRPOConfig.temperature)``; ``ExplorationTrainer.behaviour_forward``'s of the sampler's
    processed distribution (``trl_explore.sampler_settings``)."""

    logps: torch.Tensor
    entropies: torch.Tensor | None
    aux_loss: torch.Tensor | None


@dataclasses.dataclass(frozen=True)
class Needs:
    """What a component reads from the policy forwards TRL and the driver make (:meth:`Component.needs`).

    Attributes:
        scoring_forward: TRL's no-grad scoring forward right after generation (made only when TRL needs
            ``old_per_token_logps``: see ``trl_explore.defaults.trl_scores_after_generation``).
        scoring_entropy: that forward's entropies (extra cost: one entropy per token).
        loss_forward: the policy forward of the loss; the driver then makes it itself (entropies included), runs the
            ``forward_context``/``observe_forward`` and loss hooks, and replays it to TRL's objective.
    """

    scoring_forward: bool = False
    scoring_entropy: bool = False
    loss_forward: bool = False


@dataclasses.dataclass(frozen=True)
class TrainerPlan:
    """What the driver is about to pass to ``GRPOTrainer.__init__`` (:meth:`Component.prepare`).

    Attributes:
        model: the model or its name or path.
        reward_funcs: the reward functions (list).
        args: the training configuration (a ``GRPOConfig``); components may set fields their method requires.
        train_dataset, eval_dataset: as given.
        trainer_kwargs: the other keyword arguments of ``GRPOTrainer`` (``processing_class``, ``peft_config``, ...).
        default_rewards: True when ``reward_funcs`` is the driver's default (``[math_reward]``, the verifiable
            reward R_m): a component may add its own reward functions to it.
        init_contexts: contexts ``GRPOTrainer.__init__`` runs in (e.g. a vLLM engine built steerable).
    """

    model: Any
    reward_funcs: list
    args: Any
    train_dataset: Any = None
    eval_dataset: Any = None
    trainer_kwargs: dict = dataclasses.field(default_factory=dict)
    default_rewards: bool = False
    init_contexts: tuple = ()


@dataclasses.dataclass(frozen=True)
class SamplingCall:
    """One call of TRL's sampler, ``_generate_single_turn`` (:meth:`Component.sampling_context`).

    Attributes:
        mode: ``"train"`` or ``"eval"``.
        rows: the dataset rows of this process's completions, one per completion (TRL repeats a prompt's row once per
            generation), in TRL's order.
        num_generations: completions per prompt (the group size).
    """

    mode: str
    rows: tuple
    num_generations: int

    @property
    def num_rows(self) -> int:
        return len(self.rows)


@dataclasses.dataclass(frozen=True)
class Rollout:
    """The completions of one generation, as TRL's ``_generate`` returns them (per-row lists, in TRL's order), with
    the dataset rows and the neutral per-row fields the components share.

    Attributes:
        mode: ``"train"`` or ``"eval"``.
        rows: the dataset row of each completion (tuple of dicts, read-only).
        num_generations: the group size.
        prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, images, tool_images: TRL's.
        offline: per row, True when the completion was not sampled from the policy in this generation (e.g. a teacher
            trajectory that replaced an online one): it has no behaviour log-probs and no route.
    """

    mode: str
    rows: tuple
    num_generations: int
    prompt_ids: list
    completion_ids: list
    tool_mask: list | None
    completions: list
    logprobs: list | None
    extra_fields: dict
    images: Any
    tool_images: Any
    offline: tuple = ()

    TRL_FIELDS: ClassVar[tuple[str, ...]] = ("prompt_ids", "completion_ids", "tool_mask", "completions", "logprobs",
                                             "extra_fields", "images", "tool_images")
    """The fields of TRL's ``_generate`` return value, in its order."""

    @classmethod
    def from_trl(cls, generated: tuple, mode: str, rows: tuple, num_generations: int) -> Rollout:
        """Wrap TRL's ``_generate`` tuple; every row starts online."""
        return cls(mode, rows, num_generations, *generated, offline=(False,) * len(generated[1]))

    def as_trl_tuple(self) -> tuple:
        """Back to TRL's ``_generate`` tuple."""
        return tuple(getattr(self, name) for name in self.TRL_FIELDS)


@dataclasses.dataclass(frozen=True)
class ForwardCall:
    """A policy forward the driver makes or observes (:meth:`Component.forward_context`).

    Attributes:
        kind: ``"scoring"`` (TRL's no-grad forward after generation, before the rewards) or ``"loss"`` (the forward
            of the loss, with gradients).
        mode: ``"train"`` or ``"eval"``.
        input_ids, attention_mask: ``[B, P + T]`` prompt and completion ids and mask.
        logits_to_keep: ``T``, the completion length.
        inputs: the training batch (``"loss"``: TRL's batch dict; ``"scoring"``: None).
    """

    kind: str
    mode: str
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    logits_to_keep: int
    inputs: dict | None = None


@dataclasses.dataclass(frozen=True)
class ForwardResult:
    """A finished forward (:meth:`Component.observe_forward`): the call and its :class:`Forward`."""

    call: ForwardCall
    forward: Forward

    @property
    def mode(self) -> str:
        return self.call.mode


@dataclasses.dataclass(frozen=True)
class ScoredBatch:
    """A generation after TRL scored it (:meth:`Component.batch_fields`).

    Attributes:
        mode: ``"train"`` or ``"eval"``.
        rollout: the final :class:`Rollout` (after every component's ``transform_rollout``).
        output: TRL's batch dict (``completion_ids [B, T]``, ``completion_mask``, ``advantages [B]``, ...).
        rewards_per_func: ``[N, F]`` rewards of every process's completions (gathered; NaN = not scored), as TRL's
            ``_calculate_rewards`` returned them.
    """

    mode: str
    rollout: Rollout
    output: dict
    rewards_per_func: torch.Tensor


@dataclasses.dataclass(frozen=True)
class LossCall:
    """The loss of one micro-batch (:meth:`Component.loss_batch`, :meth:`Component.advantages`,
    :meth:`Component.extra_loss`).

    Attributes:
        mode: ``"train"`` or ``"eval"``.
        inputs: TRL's batch as it arrived (read-only).
        forward: the policy forward on it (entropies included).
        batch: the batch TRL's objective will see (after the ``loss_batch`` hooks so far).
        advantages: ``[B, 1]`` or ``[B, T]`` advantages TRL's objective will use (after the ``advantages`` hooks so
            far); TRL broadcasts ``[B, 1]`` over tokens.
        loss: TRL's loss plus the terms added so far (``extra_loss`` only; None before TRL's objective ran).
        entropy_mask: ``[B, T]`` bool, with ``top_entropy_quantile = q < 1``: the tokens whose entropy is at least
            the ``(1 - q)``-quantile of the entropies of every token of ``inputs`` (``completion_mask * tool_mask``
            as the batch arrived, before any ``loss_batch`` masked rows out; all processes), TRL's
            ``get_high_entropy_mask``. TRL's objective and its entropy bonus cover the masked-in tokens of its own
            rows; a component that trains rows outside TRL's objective applies the same mask to them. None at
            ``q = 1`` (every token).
    """

    mode: str
    inputs: dict
    forward: Forward
    batch: dict
    advantages: torch.Tensor
    loss: torch.Tensor | None = None
    entropy_mask: torch.Tensor | None = None


class Component:
    """A method as a part of :class:`~trl_explore.driver.ExplorationTrainer` (module docstring: the hooks).

    Class attributes:
        name: short name, also the prefix of the component's metrics (``"oger"`` -> ``oger/...``).
        options_class: the component's options dataclass (a :class:`~trl_explore.config.ComponentOptions`), or None.
        reward_field_names: the reward kwargs :meth:`reward_fields` adds; a dataset column with one of these names is
            refused when the trainer is built, so user columns reach the reward functions unchanged.
        tags: model-card tags.
        card: the method's model-card entry (a ``trl_explore.hub.MethodCard``), or None.
        console_keys: the metrics the compact console line shows (``trl_explore.reporting``; globs allowed).

    Attributes:
        trainer: the trainer, set by :meth:`setup`.
        options: an ``options_class`` instance (given, or read from the training config by :meth:`prepare`).
    """

    name: ClassVar[str] = "component"
    options_class: ClassVar[type | None] = None
    reward_field_names: ClassVar[tuple[str, ...]] = ()
    tags: ClassVar[tuple[str, ...]] = ()
    card: ClassVar[Any] = None
    console_keys: ClassVar[tuple[str, ...]] = ()

    def __init__(self, options=None):
        self.options = options
        self.trainer: ExplorationTrainer | None = None

    # ---------------------------------------------------------------- construction
    def prepare(self, plan: TrainerPlan) -> TrainerPlan:
        """Before TRL's ``__init__``: read the options (when not given) from ``plan.args`` and check them against it.

        Raises:
            ValueError: options that contradict the training configuration (the message names both).
        """
        if self.options is None and self.options_class is not None:
            self.options = self.options_class.from_config(plan.args)
        if self.options is not None:
            self.options.apply(plan.args)
        return plan

    def setup(self, trainer: ExplorationTrainer) -> None:
        """After TRL's ``__init__``: build what needs the model, the accelerator or the tokenizer."""
        self.trainer = trainer

    # ---------------------------------------------------------------- declarations and services
    def needs(self, mode: str) -> Needs:
        """The policy forwards this component reads in ``mode`` (read by the driver after each rollout transform and
        at each loss)."""
        return Needs()

    def behaviour_context(self, mode: str):
        """A context under which a teacher-forced forward gives the distribution the current rollouts were sampled
        from (this component's part of it: e.g. its steering), or None."""
        return None

    # ---------------------------------------------------------------- generation
    def sampling_context(self, call: SamplingCall):
        """A context around TRL's sampler (steering, recorders), or None."""
        return None

    def transform_rollout(self, rollout: Rollout) -> Rollout:
        """A new :class:`Rollout` (``dataclasses.replace``): replaced completions, behaviour log-probs, ``offline``."""
        return rollout

    def forward_context(self, call: ForwardCall):
        """A context around a policy forward this component :meth:`needs` (hooks on the model), or None."""
        return None

    def observe_forward(self, result: ForwardResult) -> None:
        """Read a finished policy forward this component :meth:`needs`."""

    def reward_fields(self, rollout: Rollout) -> dict[str, list]:
        """Per-completion values for the reward functions' kwargs (names in :attr:`reward_field_names`)."""
        return {}

    def batch_fields(self, batch: ScoredBatch) -> dict[str, torch.Tensor]:
        """Batch-first tensors (or lists of length B) added to the training batch; they survive TRL's shuffling and
        splitting into micro-batches."""
        return {}

    # ---------------------------------------------------------------- loss
    def loss_batch(self, call: LossCall) -> dict:
        """The batch TRL's objective sees (e.g. rows masked out of it through ``tool_mask``)."""
        return call.batch

    def advantages(self, call: LossCall) -> torch.Tensor:
        """The advantages TRL's objective uses, ``[B, 1]`` or ``[B, T]``: ``call.advantages`` with this component's
        terms added or multiplied in (multiplying by ``w > 0`` weighs each token's objective by ``w``)."""
        return call.advantages

    def extra_loss(self, call: LossCall) -> torch.Tensor:
        """``call.loss`` (TRL's objective plus earlier components' terms) with this component's terms added."""
        return call.loss

    # ---------------------------------------------------------------- step end and checkpoints
    def step_end(self, state) -> None:
        """After each optimizer step (``state``: transformers' ``TrainerState``)."""

    def save(self, output_dir: str) -> None:
        """Write this component's state next to a checkpoint's (or the final model's) weights."""

    def load(self, checkpoint: str) -> None:
        """Restore this component's state from a checkpoint folder (on resume)."""


def phase(trainer, name: str):
    """A context timing ``name`` like TRL's own phases (``profiling/Time taken: <Trainer>.<name>``, sent to wandb /
    mlflow / trackio when enabled; ``benchmarks/overhead.py`` reads them)."""
    from trl.extras.profiling import profiling_context

    return profiling_context(trainer, name)


def record_phase(trainer, name: str, seconds: float) -> None:
    """Report ``seconds`` spent in ``name``, measured piecewise (e.g. in hooks inside ``generate``), as :func:`phase`
    does (TRL's ``ProfilingContext._log_metrics``: see ``trl_explore.trl_contract``)."""
    phase(trainer, name)._log_metrics(seconds)
