"""The scoring side of :class:`~trl_explore.driver.ExplorationTrainer`: the reward kwargs the components add, the
``edit_scored`` hooks (rows swapped after the rewards, re-scored alone), the behaviour log-probs of
``Needs.behaviour_logps``, and the rules every rewrite of a row follows (row ownership, field names, random streams).

The rules (``docs/architecture.md``, "Rewriting rows"): :func:`settle_rewrites` after every hook that may rewrite rows;
:func:`check_row_owners` and :func:`check_component_fields` when the trainer is built; :func:`stream_seed` for the
components' random streams.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib

import torch

from trl_explore.defaults import trl_scores_after_generation
from trl_explore.driver.components import Component, Rollout, ScoredBatch, ScoredRollout, per_row
from trl_explore.driver.resampling import GenerationRound
from trl_explore.driver.rows import check_prompt_rows
from trl_explore.rewards.checks import (
    check_finite_rewards,
    checked_reward_functions,
    not_scored_counts,
)


def stream_seed(seed: int, step: int, terms: tuple, stream: str) -> int:
    """A 63-bit seed, a function of all four values in order (SHA-256 of their text): distinct streams, terms in a
    different order or a different step give unrelated draws (a sum would not: ``(a, b)`` and ``(b, a)`` coincide)."""
    text = repr((int(seed), int(step), tuple(int(t) for t in terms), str(stream)))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") & (2**63 - 1)


@dataclasses.dataclass
class Generation:
    """The driver's record of the generation in progress (its own; components never see it)."""

    mode: str
    rows: tuple
    rollout: Rollout | None = None
    observe_scoring: bool = False
    scoring_entropy: bool = False
    rewards_per_func: torch.Tensor | None = None
    edited: bool = False  # rows changed in edit_scored: TRL's scoring runs again on the final rows
    scoring_logps: torch.Tensor | None = None  # [B, T] TRL's old_per_token_logps of the current rows, when kept
    behaviour_logps: torch.Tensor | None = None  # [B, T] of the current rows (Needs.behaviour_logps)


class _RowsEdited(Exception):
    """Raised through TRL's ``_generate_and_score_completions`` after ``edit_scored`` changed rows on some process:
    the driver runs it again on the final rows (see ``ExplorationTrainer._generate_and_score_completions``)."""


ROW_OWNER = "row_owner"
"""The reward kwarg holding each completion's :attr:`Rollout.owner` (None: TRL's sampler), passed when a component
rewrites rows (``Component.edits_rows``)."""

TRL_REWARD_KWARGS = ("prompt", "prompts", "completion", "completions", "completion_ids", "trainer_state", "log_extra",
                     "log_metric", "environments")
"""Keyword arguments TRL's ``_calculate_rewards`` passes to every reward function itself: no component field may take
one of these names."""


@contextlib.contextmanager
def _local_reward_gather():
    """TRL's ``_calculate_rewards`` ends with ``gather(rewards_per_func)`` (module ``trl.trainer.grpo_trainer``): for
    the re-scoring of a few rewritten rows (a number that differs between processes) it returns this process's rows;
    the driver gathers the full tensor itself afterwards."""
    import trl.trainer.grpo_trainer as grpo

    gather = grpo.gather
    grpo.gather = lambda tensor: tensor
    try:
        yield
    finally:
        grpo.gather = gather


def _check_new_keys(fields: dict, sources: dict, name: str, hook: str) -> None:
    """Record ``fields``' keys as given by component ``name``; a key some other party gave already is refused."""
    for key in fields:
        if key in sources:
            raise ValueError(f"field name collision: {hook} of component {name!r} returns {key!r}, which "
                             f"{sources[key] if sources[key] in _TRL_SOURCES else 'component ' + repr(sources[key])} "
                             "gives already; rename one of them")
        sources[key] = name


_TRL_SOURCES = ("GRPOTrainer", "TRL's reward kwargs", "TRL's rollout_func extra_fields")


def _merge_rescored_logs(pending: dict, lengths: dict, changed: list, num_rows: int) -> None:
    """The completion-table columns reward functions logged (TRL's ``log_extra``) while the changed rows were scored
    again: their values replace those of the changed rows (a column logged only now gets None elsewhere)."""
    for column, values in pending.items():
        start = lengths.get(column, 0)
        new = values[start:]
        if not new:
            continue
        del values[start:]
        if len(new) != len(changed):
            continue  # not one value per re-scored row: kept out of the table
        if start == 0:
            values.extend([None] * num_rows)
        elif start != num_rows:
            continue
        for i, value in zip(changed, new):
            values[i] = value


def check_declared_edit(component, changed: list, hook: str) -> None:
    if changed and not component.edits_rows:
        raise RuntimeError(f"{hook} of component {component.name!r} rewrote rows {changed[:8]} but the component does "
                           "not declare edits_rows = True (needed for the construction checks of row ownership)")


def settle_rewrites(before: Rollout, after: Rollout, name: str, force_offline: bool = False) -> tuple[Rollout, list]:
    """``(after with every rewritten row settled, indices of the rewritten rows)``: the driver's rule after a hook
    that may rewrite rows (``transform_rollout``, ``edit_scored``) of component ``name``.

    A row is rewritten when its completion ids, its completion or its owner changed. On each rewritten row: the owner
    becomes ``name`` (unless the hook set one), ``offline`` becomes True when ``force_offline``, and every per-row
    field of the replaced completion that the hook left as it was (the same object) is cleared: behaviour log-probs
    to ``None`` per token, ``tool_mask`` to 1 per token, each per-row ``extra_fields`` list (TRL's ``rollout_func``
    fields) to None at the rewritten rows, TRL's per-row ``tool_images`` to ``[]``.

    Raises:
        ValueError: the hook changed the number of rows or a prompt (naming the component and the row).
    """
    if after.num_rows != before.num_rows:
        raise ValueError(f"component {name!r} returned {after.num_rows} rows for {before.num_rows}: a hook may "
                         "rewrite rows, not add or drop them")
    for i, (a, b) in enumerate(zip(after.prompt_ids, before.prompt_ids)):
        if a is not b and list(a) != list(b):
            raise ValueError(f"component {name!r} changed the prompt of row {i}: only completions may be rewritten")
    def differs(a, b) -> bool:
        return a is not b and a != b

    changed = [i for i in range(before.num_rows)
               if after.owner[i] != before.owner[i]
               or differs(list(after.completion_ids[i]), list(before.completion_ids[i]))
               or differs(after.completions[i], before.completions[i])]
    if not changed:
        return after, changed
    owner, offline = list(after.owner), list(after.offline)
    logprobs = None if after.logprobs is None else list(after.logprobs)
    tool_mask = None if after.tool_mask is None else list(after.tool_mask)
    fields = dict(after.extra_fields)
    for key, values in before.extra_fields.items():
        if per_row(values, before.num_rows) and fields.get(key) is values:
            fields[key] = [None if i in changed else v for i, v in enumerate(values)]
    for i in changed:
        length = len(after.completion_ids[i])
        owner[i] = name if owner[i] == before.owner[i] else owner[i]
        offline[i] = True if force_offline else offline[i]
        if logprobs is not None and before.logprobs is not None and logprobs[i] is before.logprobs[i]:
            logprobs[i] = [None] * length
        if tool_mask is not None and before.tool_mask is not None and tool_mask[i] is before.tool_mask[i]:
            tool_mask[i] = [1] * length
    tool_images = after.tool_images
    if isinstance(tool_images, list) and tool_images is before.tool_images and len(tool_images) == before.num_rows:
        tool_images = [[] if i in changed else v for i, v in enumerate(tool_images)]  # a tool's images of the old one
    settled = dataclasses.replace(after, owner=tuple(owner), offline=tuple(offline), logprobs=logprobs,
                                  tool_mask=tool_mask, extra_fields=fields, tool_images=tool_images)
    return settled, changed


_GENERATION_STATE_HOOKS = ("sampling_context", "transform_rollout", "observe_forward", "behaviour_context")
"""Hooks whose overrides leave a component with per-row state from generation (routes, recorded values)."""


def _overrides(component, hook: str) -> bool:
    return getattr(type(component), hook) is not getattr(Component, hook)


def check_row_owners(components) -> None:
    """Refuse a component list in which a component rewrites rows (``edits_rows``) that another one holds per-row
    state about without following row ownership (``follows_row_owners``).

    The rows another component rewrites in ``transform_rollout`` after it (later in the list) or in ``edit_scored``
    (after every component's generation hooks) would keep that state from the replaced completion: a steered route,
    behaviour log-probs, values recorded while sampling. Per-row values a component computes only in ``reward_fields``
    or ``batch_fields`` are asked again after an edit and need no flag.

    Raises:
        ValueError: naming both components and the two ways out.
    """
    components = list(components)
    for e, editor in enumerate(components):
        if not editor.edits_rows:
            continue
        late = _overrides(editor, "edit_scored")
        for c, other in enumerate(components):
            if other is editor or other.follows_row_owners:
                continue
            stateful = [hook for hook in _GENERATION_STATE_HOOKS if _overrides(other, hook)]
            if stateful and (late or c < e):
                raise ValueError(
                    f"component {editor.name!r} rewrites rows after component {other.name!r} kept per-row state about "
                    f"them (its {', '.join(stateful)}), and {other.name!r} does not declare follows_row_owners = "
                    f"True. Make {other.name!r} read Rollout.owner / Rollout.offline at each hook and set the flag, "
                    f"or place {other.name!r} after {editor.name!r} (rewrites in transform_rollout only)"
                )


def check_component_fields(components, reserved: tuple = ()) -> None:
    """Refuse two components that declare the same reward field (``reward_field_names``), or a declared field that is
    one of TRL's own reward kwargs (``reserved``); the driver refuses undeclared collisions when the values arrive
    (``reward_fields`` and ``batch_fields`` keys, against each other and TRL's batch keys).

    Raises:
        ValueError: naming both components (or the component and TRL) and the field.
    """
    owners: dict[str, str] = dict.fromkeys(reserved, "TRL")
    names = [c.name for c in components]
    for name in {n for n in names if names.count(n) > 1}:
        raise ValueError(f"two components are named {name!r}: names key metrics, random streams and row owners")
    for component in components:
        for key in component.reward_field_names:
            if key in owners:
                party = "TRL's reward kwargs" if owners[key] == "TRL" else f"component {owners[key]!r}"
                raise ValueError(f"field name collision: component {component.name!r} declares reward field {key!r}, "
                                 f"which {party} declares already; rename one of them")
            owners[key] = component.name


def check_components(components: tuple, trainer_kwargs: dict) -> None:
    """The driver's construction checks of a component list: :func:`check_component_fields` (with TRL's reward
    kwargs), :func:`check_row_owners`, and no ``edit_scored`` with TRL's ``environment_factory`` (the second pass of
    ``_generate_and_score_completions`` would reset every environment again).

    Raises:
        ValueError: naming the components (and the field or the option).
    """
    check_component_fields(components, TRL_REWARD_KWARGS)
    check_row_owners(components)
    editors = [c.name for c in components if type(c).edit_scored is not Component.edit_scored]
    if editors and trainer_kwargs.get("environment_factory") is not None:
        raise ValueError(f"component(s) {editors} edit rows after scoring (edit_scored), which runs TRL's "
                         "_generate_and_score_completions again on the final rows; with environment_factory that "
                         "would reset every environment a second time: not supported")


def check_row_owner_column(plan, components) -> None:
    """Refuse a dataset column named ``row_owner`` when a component rewrites rows (the driver passes that kwarg)."""
    from trl_explore.rewards.checks import check_column_clash

    if any(c.edits_rows for c in components):
        check_column_clash({"train_dataset": plan.train_dataset, "eval_dataset": plan.eval_dataset},
                           [type("ExplorationTrainer", (), {"reward_field_names": (ROW_OWNER,)})()])


class ScoringMixin:
    """The driver's reward side, a mixin over ``GRPOTrainer`` (before it in the bases; ``super()`` is TRL's trainer)
    that reads ``self.components`` and ``self._generation`` (a :class:`Generation`)."""

    @property
    def added_reward_kwargs(self) -> frozenset[str]:
        """The reward kwargs that are not dataset columns: TRL's own, ``row_owner`` and the components' fields (a
        reward's error message lists the data set's columns without them)."""
        return frozenset((*TRL_REWARD_KWARGS, ROW_OWNER, *(f for c in self.components for f in c.reward_field_names)))

    def _plan_scoring(self, gen: Generation) -> None:
        """Whether the driver observes TRL's scoring forward of the current rows (components' needs)."""
        needs = [c.needs(gen.mode) for c in self.components]
        scores = trl_scores_after_generation(self)
        gen.observe_scoring = scores and any(n.scoring_forward or n.behaviour_logps for n in needs)
        gen.scoring_entropy = any(n.scoring_entropy for n in needs)
        gen.scoring_logps = gen.behaviour_logps = None

    def _reward_inputs(self, gen: Generation, inputs: list) -> list:
        """Copies of TRL's reward rows with the components' per-completion fields (and ``row_owner``) added."""
        fields, sources = {}, dict.fromkeys(TRL_REWARD_KWARGS, "TRL's reward kwargs")
        sources.update(dict.fromkeys(gen.rollout.extra_fields, "TRL's rollout_func extra_fields"))
        for component in self.components:
            new = component.reward_fields(gen.rollout)
            _check_new_keys(new, sources, component.name, "reward_fields")
            fields.update(new)
        if any(c.edits_rows for c in self.components):
            fields[ROW_OWNER] = list(gen.rollout.owner)
        extra = gen.rollout.extra_fields  # TRL merged these into `inputs` already: the same values unless rewritten
        if not fields and not extra:
            return inputs
        rows = []
        for i, row in enumerate(inputs):
            row = {**row, **{k: v[i] for k, v in fields.items()}}
            for key, values in extra.items():  # TRL's merge of rollout_func fields, from the rows as they are now
                if isinstance(values, list) and i < len(values):
                    row[key] = values[i]
                elif not isinstance(values, list):
                    row[key] = values
            rows.append(row)
        return rows

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # Overrides GRPOTrainer._calculate_rewards: the components' per-completion fields join (copies of) the rows
        # TRL builds the reward kwargs from; then the `edit_scored` hooks (rows re-scored after each edit); the
        # gathered rewards are kept for the components' batch fields. The second pass returns the final rewards.
        gen = self._generation
        if gen.edited:
            rewards_per_func = gen.rewards_per_func
        else:
            with checked_reward_functions(self):  # for this call, a reward of the wrong type names its function
                rewards_per_func = super()._calculate_rewards(self._reward_inputs(gen, inputs), prompts, completions,
                                                              completion_ids_list)
            check_finite_rewards(rewards_per_func, self.reward_func_names)  # an inf would zero its group's advantages
            gen.rewards_per_func = rewards_per_func
            if self._edit_scored(gen, inputs, prompts):
                raise _RowsEdited
        for key, count in not_scored_counts(rewards_per_func, self.reward_func_names).items():
            self._metrics[gen.mode][key].append(count)  # None rewards: "not scored", counted over the whole batch
        return rewards_per_func

    def _edit_scored(self, gen: Generation, inputs: list, prompts: list) -> bool:
        """Every component's ``edit_scored`` in list order; after each that changed a row on some process, the changed
        rows are scored again (every reward function, TRL's ``_calculate_rewards`` on those rows) and the gathered
        rewards updated. Returns whether any row changed."""
        editors = [c for c in self.components if type(c).edit_scored is not Component.edit_scored]
        if not editors:
            return False
        num_local = gen.rollout.num_rows
        process_slice = slice(self.accelerator.process_index * num_local,
                              (self.accelerator.process_index + 1) * num_local)
        weights = torch.as_tensor(self.reward_weights, dtype=torch.float32).cpu()
        edited = False
        for component in editors:
            scored = ScoredRollout(gen.mode, gen.rollout, gen.rewards_per_func, tuple(self.reward_func_names),
                                   weights, process_slice, self._behaviour_logps(gen))
            before = gen.rollout
            rollout, changed = settle_rewrites(before, component.edit_scored(scored), component.name,
                                               force_offline=True)
            check_declared_edit(component, changed, "edit_scored")
            count = torch.tensor([len(changed)], device=self.accelerator.device)
            if self.accelerator.gather(count).sum().item() == 0:
                continue
            edited, gen.rollout = True, rollout
            gen.scoring_logps = gen.behaviour_logps = None  # of the rows before the edit
            local = gen.rewards_per_func[process_slice].clone()
            if changed:
                all_rows = self._reward_inputs(gen, inputs)  # every component's fields asked again, new rollout
                logged = {column: len(values) for column, values in self._pending_extra_logs.items()}
                metrics = {name: len(values) for name, values in self._pending_metrics.items()}
                with checked_reward_functions(self), _local_reward_gather():
                    local[changed] = super()._calculate_rewards(
                        [all_rows[i] for i in changed], [prompts[i] for i in changed],
                        [rollout.completions[i] for i in changed],
                        [rollout.completion_ids[i] for i in changed]).to(local.device)
                check_finite_rewards(local, self.reward_func_names)
                _merge_rescored_logs(self._pending_extra_logs, logged, changed, num_local)
                for name, values in self._pending_metrics.items():  # a mean over a few rows would skew the batch's
                    del values[metrics.get(name, 0):]
            gen.rewards_per_func = self.accelerator.gather(local)
        return edited

    def _behaviour_logps(self, gen: Generation, output: dict | None = None) -> torch.Tensor | None:
        """``[B, T]`` behaviour log-probs of the current rows (``Needs.behaviour_logps``), or None when no component
        needs them: TRL's scoring forward when it is the sampling distribution (no steering, the sampler's settings
        are TRL's), else one ``behaviour_forward``; kept for the generation until rows change."""
        if not any(c.needs(gen.mode).behaviour_logps for c in self.components):
            return None
        if gen.behaviour_logps is None:
            rollout = gen.rollout
            width = max((len(c) for c in rollout.completion_ids), default=0)
            reusable = gen.scoring_logps is not None and self.sampler.matches_trl(self.temperature) and not any(
                c.behaviour_context(gen.mode) is not None for c in self.components)
            if reusable:
                logps = gen.scoring_logps[:, :width]
            else:
                logps = self.behaviour_forward(gen.mode, rollout.prompt_ids, rollout.completion_ids).logps[:, :width]
            lengths = torch.tensor([len(c) for c in rollout.completion_ids], device=logps.device)
            pad = torch.arange(logps.size(1), device=logps.device)[None, :] >= lengths[:, None]
            gen.behaviour_logps = logps.masked_fill(pad, 0.0)
        return gen.behaviour_logps


    def _generation_round(self, inputs, round_index: int) -> GenerationRound:
        """One generation of ``inputs`` (TRL's ``_generate_and_score_completions`` with every component's hooks),
        its components' batch fields, dropped rows and group selection (``trl_explore.driver.resampling``)."""
        self._generation = gen = Generation(self._mode(), tuple(inputs))
        if getattr(self, "environment_factories", None) is None:  # else an environment may supply the prompt (TRL)
            where = f"this process's {gen.mode} generation batch"
            self._prompt_kinds[gen.mode] = check_prompt_rows(inputs, where, self._prompt_kinds.get(gen.mode))
        try:
            try:
                output = super()._generate_and_score_completions(inputs)
            except _RowsEdited:
                gen.edited = True
                self._plan_scoring(gen)
                output = super()._generate_and_score_completions(inputs)
            num_local = gen.rollout.num_rows
            index = self.accelerator.process_index
            scored = ScoredBatch(gen.mode, gen.rollout, output, gen.rewards_per_func,
                                 self._behaviour_logps(gen, output), tuple(self.reward_func_names),
                                 torch.as_tensor(self.reward_weights, dtype=torch.float32).cpu(),
                                 slice(index * num_local, (index + 1) * num_local), round_index)
            sources = dict.fromkeys(output, "GRPOTrainer")
            for component in self.components:
                fields = component.batch_fields(scored)
                _check_new_keys(fields, sources, component.name, "batch_fields")
                check_batch_field_lengths(fields, num_local, component.name)
                output.update(fields)
            return GenerationRound(self, scored)
        finally:
            self._generation = None

    def log_metric(self, name: str, value, reduction: str = "mean", mode: str | None = None) -> None:
        """Log ``value`` (a number or 0-d tensor) as metric ``name`` beside TRL's own, averaged over the logging
        window. ``reduction`` over processes: ``"mean"``, ``"sum"``, ``"max"``, ``"min"`` (collectives: every
        process must call it at the same point) or ``"none"`` (this process's value; TRL logs the main process's).
        ``mode``: ``"train"`` / ``"eval"`` (default: the model's current mode). The public way to write what TRL
        keeps in its private ``_metrics``.

        Raises:
            ValueError: another ``reduction``.
        """
        mode = mode or self._mode()
        if reduction not in ("mean", "sum", "max", "min", "none"):
            raise ValueError(f"log_metric({name!r}): reduction={reduction!r}; valid: mean, sum, max, min, none")
        value = torch.as_tensor(value, dtype=torch.float64).reshape(()).to(self.accelerator.device)
        if reduction != "none" and self.accelerator.num_processes > 1:
            gathered = self.accelerator.gather(value.reshape(1))
            value = {"mean": gathered.mean, "sum": gathered.sum, "max": gathered.max, "min": gathered.min}[reduction]()
        self._metrics[mode][name].append(value.item())


HOOKS = ("prepare", "setup", "sampling_context", "transform_rollout", "forward_context", "observe_forward",
         "reward_fields", "edit_scored", "batch_fields", "drop_rows", "select_groups", "loss_batch", "advantages",
         "extra_loss", "step_end", "save", "load", "save_process_state", "load_process_state", "needs",
         "behaviour_context", "generator", "log_metric")
"""Every method of :class:`~trl_explore.driver.components.Component` the driver calls (or a component calls)."""

_LOSS_HOOKS = ("loss_batch", "advantages", "extra_loss")
_FORWARD_HOOKS = ("forward_context", "observe_forward")


def check_component_hooks(components) -> None:
    """Warn (logging) about a public method of a component class whose name is a near miss of a hook (``loss_bacth``
    for ``loss_batch``): the driver would never call it. A warning, not an error: the name may be meant."""
    import difflib
    import logging

    for component in components:
        for cls in type(component).__mro__:
            if cls is Component or cls is object:
                break
            for name, value in vars(cls).items():
                if name.startswith("_") or name in HOOKS or not callable(value):
                    continue
                close = difflib.get_close_matches(name, HOOKS, n=1, cutoff=0.85)
                if close:
                    logging.getLogger(__name__).warning(
                        "component %r: method %s.%s is not a hook and the driver never calls it; did you mean %r? "
                        "Rename it to override the hook (or to a name further from it to silence this warning)",
                        component.name, cls.__name__, name, close[0])


def check_declared_forwards(components) -> None:
    """Refuse a component that overrides a loss hook (``loss_batch``, ``advantages``, ``extra_loss``) while its
    :meth:`Component.needs` enables ``loss_forward`` in neither mode, or a forward hook (``forward_context``,
    ``observe_forward``) while it declares no forward at all: the driver would never call them (run after every
    component's ``setup``).

    Raises:
        ValueError: naming the component, the hooks and the fix.
    """
    for component in components:
        needs = [component.needs(mode) for mode in ("train", "eval")]
        loss = [hook for hook in _LOSS_HOOKS if _overrides(component, hook)]
        if loss and not any(n.loss_forward for n in needs):
            raise ValueError(
                f"component {component.name!r} overrides {', '.join(loss)} but its needs() never declares "
                "loss_forward, so the driver would never call them: return Needs(loss_forward=True) from needs(mode) "
                "in the modes where they apply (trl_explore.driver.components.Needs)")
        forward = [hook for hook in _FORWARD_HOOKS if _overrides(component, hook)]
        if forward and not any(n.loss_forward or n.scoring_forward for n in needs):
            raise ValueError(
                f"component {component.name!r} overrides {', '.join(forward)} but its needs() declares neither "
                "loss_forward nor scoring_forward, so the driver would never call them: declare the forward it reads "
                "(Needs(loss_forward=True) and/or Needs(scoring_forward=True))")


def check_batch_field_lengths(fields: dict, num_rows: int, name: str) -> None:
    """Refuse a ``batch_fields`` value that is not batch-first over this process's ``num_rows`` rows (TRL would slice
    or drop it silently when it shuffles and splits the batch).

    Raises:
        ValueError: naming the component, the key, the length found and the fix.
    """
    for key, value in fields.items():
        if isinstance(value, torch.Tensor):
            found = value.shape[0] if value.dim() > 0 else None
        elif isinstance(value, list):
            found = len(value)
        else:
            raise ValueError(f"batch_fields of component {name!r} returns {key!r} as a {type(value).__name__}: give "
                             f"a tensor [B, ...] or a list of B values, B = {num_rows} rows of this process")
        if found != num_rows:
            what = "a 0-d tensor" if found is None else f"{found} rows"
            raise ValueError(f"batch_fields of component {name!r} returns {key!r} with {what} for this process's "
                             f"{num_rows} rows: give one value per row (batch-first, [B, ...]); a value shared by "
                             "the batch belongs on the component")
