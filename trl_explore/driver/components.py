"""The method interface of :class:`~trl_explore.driver.ExplorationTrainer`: :class:`Component` and the values its
hooks receive.

A method (OGER, ASE-GRPO, or one of your own) is a :class:`Component`: a class with an options dataclass of its own
(:class:`~trl_explore.driver.config.ComponentOptions`) and a few hooks, all no-ops by default. The driver calls each
hook of every component, in list order, at one fixed place of a training or evaluation step. Every hook takes one
value and returns one result; every value is frozen and carries ``mode`` (``"train"`` or ``"eval"``).

The hooks, in step order: ``prepare`` and ``setup`` (construction); ``sampling_context``, ``transform_rollout``,
``forward_context`` / ``observe_forward``, ``reward_fields``, ``edit_scored``, ``batch_fields``, ``drop_rows``,
``select_groups`` (generation); ``loss_batch``, ``advantages``, ``extra_loss`` (loss); ``step_end``, ``save`` /
``load``, ``save_process_state`` / ``load_process_state``. ``docs/architecture.md`` ("Hook reference") says for each
when it runs, on which processes, its value's fields and what it may change.

Two declarations instead of queries: :meth:`Component.needs` (which policy forwards a component reads: TRL's scoring
forward after generation, its entropies, the loss forward) and :attr:`Component.reward_field_names` (the reward kwargs
it adds; a dataset column of that name is refused). One service for the others: :meth:`Component.behaviour_context`,
the distribution the current rollouts were sampled from (a teacher-forced forward under it reproduces them); the
driver adds the sampler's settings (``ExplorationTrainer.sampler``, ``trl_explore.trl_guards.sampler_settings``) and
makes that forward (``ExplorationTrainer.behaviour_forward``).

State: a component keeps what one hook hands to a later one on its own attributes, as one record per generation,
replaced (never shared with another component); everything the components share travels in the values above (e.g.
``Rollout.offline``: the rows that were not sampled from the policy).

Rewriting rows (``docs/architecture.md``, "Rewriting rows"): a component that rewrites completions (in
``transform_rollout`` or ``edit_scored``) declares :attr:`Component.edits_rows` and best uses
:meth:`Rollout.swap_rows`; the driver then marks each rewritten row's :attr:`Rollout.owner` and clears the per-row
fields of the replaced completion (``trl_explore.driver.scoring.settle_rewrites``). A component with per-row state from
generation declares :attr:`Component.follows_row_owners` (it reads ``owner`` / ``offline`` at every hook) or is
refused next to a later rewrite (``scoring.check_row_owners``). Field names are unique across components and TRL
(``scoring.check_component_fields``, and the driver when the values arrive). Random draws:
:meth:`Component.generator`, one stream per component name.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import torch

from trl_explore.driver.profiling import phase, record_phase  # noqa: F401 (here before driver/profiling.py)

if TYPE_CHECKING:  # pragma: no cover
    from trl import GRPOTrainer  # the base class: this module never imports the driver, which imports it


class Forward(NamedTuple):
    """Output of TRL's ``_get_per_token_logps_and_entropies``: ``[B, T]`` log-probs (nats), ``[B, T]`` entropies
    (nats; None when not computed) and the auxiliary loss (None unless the model has one). TRL's are of
    ``softmax(logits / GRPOConfig.temperature)``; ``ExplorationTrainer.behaviour_forward``'s of the sampler's
    processed distribution (``trl_explore.trl_guards.sampler_settings``)."""

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
        behaviour_logps: ``[B, T]`` log-probs of every completion token under the distribution the rollouts were
            sampled from (the policy at rollout time, the effective sampler, every component's steering), handed to
            :meth:`Component.edit_scored` and :meth:`Component.batch_fields` (``behaviour_logps``). The driver reuses
            TRL's ``old_per_token_logps`` (its scoring forward after generation) when TRL makes it and its
            distribution is the sampler's with no steering (then the two are one tensor); otherwise it makes one
            ``ExplorationTrainer.behaviour_forward`` per generation (and one more after rows were edited).
    """

    scoring_forward: bool = False
    scoring_entropy: bool = False
    loss_forward: bool = False
    behaviour_logps: bool = False


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
        owner: per row, the :attr:`Component.name` of the component that wrote the row's completion last, or None for
            a completion of TRL's sampler (row ownership: "Rewriting rows" in ``docs/architecture.md``). The driver
            sets it for every row a hook changed; reward functions read it as the ``row_owner`` kwarg.
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
    owner: tuple = ()

    TRL_FIELDS: ClassVar[tuple[str, ...]] = ("prompt_ids", "completion_ids", "tool_mask", "completions", "logprobs",
                                             "extra_fields", "images", "tool_images")
    """The fields of TRL's ``_generate`` return value, in its order."""

    @classmethod
    def from_trl(cls, generated: tuple, mode: str, rows: tuple, num_generations: int) -> Rollout:
        """Wrap TRL's ``_generate`` tuple; every row starts online."""
        num_rows = len(generated[1])
        return cls(mode, rows, num_generations, *generated, offline=(False,) * num_rows, owner=(None,) * num_rows)

    def as_trl_tuple(self) -> tuple:
        """Back to TRL's ``_generate`` tuple."""
        return tuple(getattr(self, name) for name in self.TRL_FIELDS)

    @property
    def num_rows(self) -> int:
        return len(self.completion_ids)

    def swap_rows(self, owner: str, swaps: dict, *, logprobs: dict | None = None, extra_fields: dict | None = None,
                  offline: bool = True) -> Rollout:
        """A copy with the completions of some rows replaced (the one way a component should rewrite rows).

        Args:
            owner: the rewriting component's :attr:`Component.name` (becomes the rows' :attr:`owner`).
            swaps: ``{row index: (completion_ids, completion)}``; ``completion`` as TRL's ``completions`` holds it
                (text, or a list of messages for conversational prompts).
            logprobs: ``{row index: [float or None per token]}``, the swapped rows' behaviour log-probs when known
                (nats); rows not given get ``None`` per token (TRL: no importance-sampling correction for them).
            extra_fields: ``{row index: {key: value}}`` for TRL's per-completion ``extra_fields`` (from a
                ``rollout_func``); every per-row extra field of a swapped row not given here becomes None, so no value
                of the replaced completion reaches the reward functions (its ``tool_images`` become ``[]``).
            offline: the swapped rows' :attr:`offline` flag (default True: not sampled from the policy now).

        Raises:
            IndexError: a row index outside ``[0, num_rows)``.
        """
        logprobs, extra_fields = logprobs or {}, extra_fields or {}
        bad = sorted(i for i in [*swaps, *logprobs, *extra_fields] if not 0 <= i < self.num_rows)
        if bad:
            raise IndexError(f"{owner}: rows {bad} are outside this rollout's {self.num_rows} rows")
        ids, texts = list(self.completion_ids), list(self.completions)
        new_logprobs = None if self.logprobs is None else list(self.logprobs)
        tool_mask = None if self.tool_mask is None else list(self.tool_mask)
        fields = {k: list(v) if per_row(v, self.num_rows) else v for k, v in self.extra_fields.items()}
        offline_flags, owners = list(self.offline), list(self.owner)
        tool_images = self.tool_images
        if isinstance(tool_images, list) and len(tool_images) == self.num_rows:  # images a tool gave the old one
            tool_images = [[] if i in swaps else v for i, v in enumerate(tool_images)]
        for i, (row_ids, text) in swaps.items():
            ids[i], texts[i] = list(row_ids), text
            if new_logprobs is not None:
                new_logprobs[i] = list(logprobs.get(i, [None] * len(row_ids)))
            if tool_mask is not None:
                tool_mask[i] = [1] * len(row_ids)
            for key, values in fields.items():
                if per_row(self.extra_fields[key], self.num_rows):
                    values[i] = extra_fields.get(i, {}).get(key)
            offline_flags[i], owners[i] = offline, owner
        return dataclasses.replace(self, completion_ids=ids, completions=texts, logprobs=new_logprobs,
                                   tool_mask=tool_mask, extra_fields=fields, offline=tuple(offline_flags),
                                   owner=tuple(owners), tool_images=tool_images)


def per_row(values, num_rows: int) -> bool:
    """An ``extra_fields`` value TRL hands out per completion (a list of one value per row); TRL broadcasts others."""
    return isinstance(values, list) and len(values) == num_rows


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
class ScoredRollout:
    """A generation after the reward functions scored it, while its rows can still change
    (:meth:`Component.edit_scored`).

    Attributes:
        mode: ``"train"`` or ``"eval"``.
        rollout: this process's rows as they are now (``owner`` and ``offline`` current, earlier edits included).
        rewards_per_func: ``[N, F]`` float32 rewards of every process's completions (gathered, in TRL's order; NaN =
            the function returned None), re-scored for rows earlier ``edit_scored`` hooks changed.
        reward_func_names: the ``F`` reward functions' names (TRL's ``reward_func_names``).
        reward_weights: ``[F]`` their weights (TRL's ``reward_weights``).
        process_slice: this process's rows within the ``N`` (``rows = rewards_per_func[process_slice]``).
        behaviour_logps: ``[B, T]`` behaviour log-probs of this process's rows (nats; T the longest completion, right
            padded with 0) when a component declares :attr:`Needs.behaviour_logps`, else None.
    """

    mode: str
    rollout: Rollout
    rewards_per_func: torch.Tensor
    reward_func_names: tuple
    reward_weights: torch.Tensor
    process_slice: slice
    behaviour_logps: torch.Tensor | None = None

    @property
    def local_rewards_per_func(self) -> torch.Tensor:
        """``[B, F]``: this process's rows of :attr:`rewards_per_func`."""
        return self.rewards_per_func[self.process_slice]

    @property
    def rewards(self) -> torch.Tensor:
        """``[N]`` weighted sum over the functions, as TRL's ``sum_then_normalize`` forms it (``nansum``), NaN where
        every function returned None (TRL's unscorable rows)."""
        weights = self.reward_weights.to(self.rewards_per_func.device, self.rewards_per_func.dtype)
        total = (self.rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)
        return total.masked_fill(torch.isnan(self.rewards_per_func).all(dim=1), float("nan"))


@dataclasses.dataclass(frozen=True)
class ScoredBatch:
    """A generation after TRL scored it (:meth:`Component.batch_fields`, :meth:`Component.drop_rows`,
    :meth:`Component.select_groups`).

    Attributes:
        mode: ``"train"`` or ``"eval"``.
        rollout: the final :class:`Rollout` (after every component's ``transform_rollout`` and ``edit_scored``).
        output: TRL's batch dict of this process's ``B`` rows (its keys: "Hook reference" in
            ``docs/architecture.md``) and the components' ``batch_fields``: in ``batch_fields``, those of the
            components before this one; in ``drop_rows`` and ``select_groups``, every component's (its own too).
        rewards_per_func: ``[N, F]`` rewards of every process's completions (gathered; NaN = not scored), as TRL's
            ``_calculate_rewards`` returned them (re-scored rows included).
        behaviour_logps: as :attr:`ScoredRollout.behaviour_logps`, of the final rows.
        reward_func_names: the ``F`` reward functions' names.
        reward_weights: ``[F]`` their weights.
        process_slice: this process's rows within the ``N`` (``rewards_per_func[process_slice]``).
        round: the generation round within one training batch (0: TRL's own; 1, 2, ...: batch-level resampling).

    Properties: :attr:`rewards` (``[N]``) and :attr:`local_rewards_per_func` (``[B, F]``).
    """

    mode: str
    rollout: Rollout
    output: dict
    rewards_per_func: torch.Tensor
    behaviour_logps: torch.Tensor | None = None
    reward_func_names: tuple = ()
    reward_weights: torch.Tensor | None = None
    process_slice: slice = dataclasses.field(default_factory=lambda: slice(None))
    round: int = 0

    @property
    def local_rewards_per_func(self) -> torch.Tensor:
        """``[B, F]``: this process's rows of :attr:`rewards_per_func`."""
        return self.rewards_per_func[self.process_slice]

    @property
    def rewards(self) -> torch.Tensor:
        """``[N]`` the weighted sum over the functions as TRL's advantages see it (``nansum``: an unscored row
        counts 0)."""
        weights = self.reward_weights.to(self.rewards_per_func.device, self.rewards_per_func.dtype)
        return (self.rewards_per_func * weights.unsqueeze(0)).nansum(dim=1)


@dataclasses.dataclass(frozen=True)
class GroupSelection:
    """A component's verdict on this process's groups of one generation round (:meth:`Component.select_groups`).

    Attributes:
        keep: ``[G]`` bool, per group of this process's rows (``G = B / num_generations``): True = may be trained.
        max_rounds: generation rounds (the first included) per training batch (verl's ``max_num_gen_batches``);
            ``<= 0``: no cap.
        on_cap: at the cap with too few kept groups: ``"drop"`` fills the batch with refused groups, dropped from
            the objective (logged); ``"error"`` raises (verl, NeMo-RL).
    """

    keep: torch.Tensor
    max_rounds: int = 1
    on_cap: str = "drop"


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
            as the batch arrived, dropped rows included; all processes), TRL's ``get_high_entropy_mask``. TRL's
            objective and its entropy bonus cover the masked-in tokens of its own rows; a component that trains rows
            outside TRL's objective applies the same mask to them. None at ``q = 1`` (every token).
        dropped: ``[B]`` bool, the rows taken out of TRL's objective (:meth:`Component.drop_rows`), or None (none).
        objective_share: 0-d, the factor that turns TRL's objective over the kept rows into the same sum normalised
            as over every row of the batch (``trl_explore.driver.objective.objective_share``; 1 when nothing is
            dropped): a component that trains the dropped rows itself under one normaliser (OGER's teacher rows,
            LUFFY's mixed objective) multiplies TRL's policy term by it.
    """

    mode: str
    inputs: dict
    forward: Forward
    batch: dict
    advantages: torch.Tensor
    loss: torch.Tensor | None = None
    entropy_mask: torch.Tensor | None = None
    dropped: torch.Tensor | None = None
    objective_share: torch.Tensor | float = 1.0


class Component:
    """A method as a part of :class:`~trl_explore.driver.ExplorationTrainer` (module docstring: the hooks).

    Class attributes:
        name: short name, also the prefix of the component's metrics (``"oger"`` -> ``oger/...``).
        options_class: the component's options dataclass (a
            :class:`~trl_explore.driver.config.ComponentOptions`), or None.
        reward_field_names: the reward kwargs :meth:`reward_fields` adds; a dataset column with one of these names is
            refused when the trainer is built, so user columns reach the reward functions unchanged.
        tags: model-card tags.
        card: the method's model-card entry (a ``trl_explore.hub.MethodCard``), or None.
        console_keys: the metrics the compact console line shows (``trl_explore.reporting``; globs allowed).
        edits_rows: True when :meth:`transform_rollout` or :meth:`edit_scored` rewrites completions (the driver
            refuses an undeclared rewrite at the first generation).
        follows_row_owners: True when this component's per-row state from generation (what its
            :meth:`sampling_context`, :meth:`transform_rollout` or :meth:`observe_forward` kept) follows
            :attr:`Rollout.owner` / :attr:`Rollout.offline` at every later hook, so a row another component rewrote
            is recomputed or cleared. A component that keeps such state without this flag is refused at construction
            next to a component that rewrites rows after it (the message names both).

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
    edits_rows: ClassVar[bool] = False
    follows_row_owners: ClassVar[bool] = False

    def __init__(self, options=None):
        self.options = options
        self.trainer: GRPOTrainer | None = None  # the ExplorationTrainer that runs this component

    # ---------------------------------------------------------------- construction
    def prepare(self, plan: TrainerPlan) -> TrainerPlan:
        """Before TRL's ``__init__``: read the options (when not given) from ``plan.args`` and check them against it.

        Options come from one place (``trl_explore.driver.config.check_options_source``).

        Raises:
            ValueError: options that contradict the training configuration (the message names both); options given
                both ways with different values.
        """
        if self.options_class is not None:
            from trl_explore.driver.config import check_options_source

            check_options_source(self, plan.args)
        if self.options is None and self.options_class is not None:
            self.options = self.options_class.from_config(plan.args)
        if self.options is not None:
            self.options.apply(plan.args)
        return plan

    def setup(self, trainer: GRPOTrainer) -> None:
        """After TRL's ``__init__``: build what needs the model, the accelerator or the tokenizer."""
        self.trainer = trainer

    # ---------------------------------------------------------------- declarations and services
    def generator(self, *terms: int) -> torch.Generator:
        """This component's random generator for this step's draws: ``trainer.step_generator(*terms,
        stream=self.name)``, a function of ``args.seed``, the optimizer step, ``terms`` (in order) and this component's
        name only. Two components never share a stream, adding a component does not change another's draws, and the
        draws replay exactly after a resume (the step is in the seed)."""
        return self.trainer.step_generator(*terms, stream=self.name)

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

    def edit_scored(self, scored: ScoredRollout) -> Rollout:
        """After the reward functions, before the advantages: swap rows, knowing every row's rewards.

        Return ``scored.rollout`` (nothing changes) or a copy with rows rewritten, best through
        :meth:`Rollout.swap_rows` (``scored.rollout.swap_rows(self.name, {i: (ids, text)})``); set
        :attr:`edits_rows`. Only this process's rows can change, and only their completions (never the prompt). The
        driver then, for the changed rows only: marks them ``offline`` and owned by this component; clears the
        per-row fields of the replaced completion (behaviour log-probs, ``tool_mask``, TRL's ``extra_fields`` from a
        ``rollout_func``) that the hook did not supply; asks every component's :meth:`reward_fields` again (on the
        new rollout) and scores the changed rows with every reward function, reward models included (TRL's own
        ``_calculate_rewards`` on those rows); then the next component's ``edit_scored`` sees the new rewards. When
        any process changed a row, TRL's ``_generate_and_score_completions`` runs again on the final rows with
        these rewards (no new sampling, no reward call): TRL pads them, makes its no-grad forwards (old and
        reference log-probs, the ``scoring`` forward hooks) and computes the advantages its own way.

        Runs on every process in list order; it must return on every process (a component may keep rows on one
        process and swap on another). Groups may span processes: ``scored.rewards_per_func`` holds all of them.
        """
        return scored.rollout

    def batch_fields(self, batch: ScoredBatch) -> dict[str, torch.Tensor]:
        """Batch-first tensors (``[B, ...]``) or lists of length ``B`` (this process's rows) added to the training
        batch; they survive TRL's shuffling and splitting into micro-batches. A value of another length is refused
        (``ValueError`` naming the component and the key)."""
        return {}

    def drop_rows(self, batch: ScoredBatch) -> torch.Tensor | None:
        """``[B]`` bool: this process's rows to take out of TRL's objective (True = dropped), or None (none).

        The one way to drop rows from the loss: TRL's objective and its normaliser become those of a batch built
        without them, for every ``loss_type`` (``trl_explore.driver.objective``). The loss hooks still see the rows
        (:attr:`LossCall.dropped`), for a component that trains them itself."""
        return None

    def select_groups(self, batch: ScoredBatch) -> GroupSelection | None:
        """Batch-level resampling: which of this process's groups of this generation round may enter the training
        batch (a :class:`GroupSelection`), or None (every group).

        When a group is refused on some process, the driver generates a further round of new prompts (every hook
        runs on it) and asks again, until every process holds its batch of kept groups or the rounds reach
        ``max_rounds`` (``trl_explore.driver.resampling``). Runs on every process after :meth:`batch_fields`."""
        return None

    def log_metric(self, name: str, value, reduction: str = "mean", mode: str | None = None) -> None:
        """Log ``value`` as ``<component name>/<name>`` (``ExplorationTrainer.log_metric``: ``reduction`` over
        processes, ``"mean"``, ``"sum"``, ``"max"``, ``"min"`` (collectives) or ``"none"``)."""
        prefix = f"{self.name}/"
        self.trainer.log_metric(name if name.startswith(prefix) else prefix + name, value, reduction, mode)

    # ---------------------------------------------------------------- loss
    def loss_batch(self, call: LossCall) -> dict:
        """The batch TRL's objective sees (e.g. token masks; to take whole rows out, use :meth:`drop_rows`)."""
        return call.batch

    def advantages(self, call: LossCall) -> torch.Tensor:
        """The advantages TRL's objective uses, ``[B, 1]`` or ``[B, T]``: ``call.advantages`` (TRL's, with the terms
        of the components before this one) with this component's terms added or multiplied in (multiplying by
        ``w > 0`` weighs each token's objective by ``w``), or values of its own that replace them (e.g. advantages
        recomputed over the rows it keeps: ``call.inputs["advantages"]`` holds TRL's)."""
        return call.advantages

    def extra_loss(self, call: LossCall) -> torch.Tensor:
        """``call.loss`` (TRL's objective plus earlier components' terms) with this component's terms added."""
        return call.loss

    # ---------------------------------------------------------------- step end and checkpoints
    def step_end(self, state) -> None:
        """After each optimizer step (``state``: transformers' ``TrainerState``)."""

    def save(self, output_dir: str) -> None:
        """Write this component's shared state next to a checkpoint's (or the final model's) weights.

        Runs on the main process only (``args.should_save``), after the weights, at every checkpoint and at every
        ``save_model``: write only state that is the same on every process (a bank synced from process 0). State that
        differs between processes goes through :meth:`save_process_state`."""

    def load(self, checkpoint: str) -> None:
        """Restore this component's shared state from a checkpoint folder, on resume.

        Runs on every process, each reading what the main process's :meth:`save` wrote (before TRL's generation
        buffer is restored, after the optimizer and scheduler)."""

    def save_process_state(self, folder: str) -> None:
        """Write this process's own state (e.g. a buffer of the rows this process saw) into ``folder``.

        Runs on every process at every checkpoint (not at a plain ``save_model``, which a resume cannot start from),
        with ``folder = <checkpoint>/component_state/<name>/process_<i>/`` (``resume.process_state_folder``), created
        for it: no other process writes there. A component that overrides it is resumed only with the same number of
        processes (``load_process_state`` refuses a checkpoint without this process's folder)."""

    def load_process_state(self, folder: str) -> None:
        """Restore what :meth:`save_process_state` wrote on this process, on resume, on every process (after
        :meth:`load`). The driver calls it only when this component overrides :meth:`save_process_state`, and raises
        a ``FileNotFoundError`` naming the component, the process and the checkpoint when the folder is missing (a
        checkpoint of another number of processes, or of a run without this component)."""

