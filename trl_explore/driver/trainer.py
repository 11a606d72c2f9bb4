"""``ExplorationTrainer``: one ``GRPOTrainer`` subclass that drives an ordered list of method components.

A method (OGER, ASE-GRPO, your own) is a :class:`~trl_explore.driver.components.Component`;
``trl_explore.driver.components`` documents every hook: when it runs, what it receives and what it may change. The
driver overrides TRL's private hooks (listed, with their signatures, in :mod:`trl_explore.trl_guards.contract`) and
calls the components' hooks, in list order, at fixed places of a step. The checkpoint side (component state, TRL's
generation buffer, the sampler's epoch) is :class:`~trl_explore.driver.resume.ResumableTrainerMixin`: a resumed run
continues inside a generation and in a later epoch exactly as the uninterrupted run.

Metrics go beside TRL's own through :meth:`ExplorationTrainer.log_metric` (``Component.log_metric``), under each
component's prefix (``oger/``, ``ase/``).

Two distributions (``trl_explore.trl_guards.sampler_settings``): TRL's log-probs and entropies (:meth:`policy_forward`,
the scoring and loss forwards) are of ``softmax(logits / GRPOConfig.temperature)``; the rollouts were sampled from
the effective sampler :attr:`ExplorationTrainer.sampler` (``generation_kwargs`` merged, top-k / top-p / min-p
truncations), which :meth:`behaviour_forward` reproduces.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging

import torch
from transformers import TrainerCallback
from trl import GRPOTrainer

from trl_explore.defaults import resolve_model_and_config
from trl_explore.driver.components import (
    Forward,
    ForwardCall,
    ForwardResult,
    LossCall,
    Rollout,
    SamplingCall,
    TrainerPlan,
)
from trl_explore.driver.config import ExplorationConfig, default_verifier
from trl_explore.driver.forwards import TeacherForcedMixin
from trl_explore.driver.objective import DROPPED, batch_objective_share, take_rows
from trl_explore.driver.resampling import finish_batch
from trl_explore.driver.resume import ResumableTrainerMixin
from trl_explore.driver.rows import check_datasets
from trl_explore.driver.scoring import (
    Generation,
    ScoringMixin,
    check_component_hooks,
    check_components,
    check_declared_edit,
    check_declared_forwards,
    check_row_owner_column,
    settle_rewrites,
    stream_seed,
)
from trl_explore.hub import check_hub_access, create_model_card
from trl_explore.precision import precision_line
from trl_explore.sampling.decode import rollout_sampling
from trl_explore.trl_guards.contract import LOSS_FORWARD_KEYS
from trl_explore.trl_guards.distributed import check_launch
from trl_explore.trl_guards.positions import check_context_length, check_position_ids_supported
from trl_explore.trl_guards.sampler_settings import effective_sampler, trl_temperature_note
from trl_explore.trl_guards.vllm_engine import engine_options, use_reload_weights_on_cpu

logger = logging.getLogger(__name__)


class _StepEnd(TrainerCallback):
    def __init__(self, components):
        self.components = components

    def on_step_end(self, args, state, control, **kwargs):
        for component in self.components:
            component.step_end(state)


def _enter(stack: contextlib.ExitStack, contexts) -> contextlib.ExitStack:
    for context in contexts:
        if context is not None:
            stack.enter_context(context)
    return stack


class ExplorationTrainer(TeacherForcedMixin, ResumableTrainerMixin, ScoringMixin, GRPOTrainer):
    """``GRPOTrainer`` driving ``components`` (:class:`~trl_explore.driver.components.Component` s) in list order.

    Args:
        model, args, **kwargs: as for ``GRPOTrainer`` (``train_dataset``, ``eval_dataset``, ``processing_class``,
            ``callbacks``, ``peft_config``, ... pass through); ``model="embedded"`` selects the bundled
            SmolLM2-135M-Instruct; ``args`` defaults to an :class:`~trl_explore.driver.config.ExplorationConfig`.
        reward_funcs: as for ``GRPOTrainer``; default: the verifiable reward R_m (``config.default_verifier``:
            ``MathVerifyReward`` with ``args.grader_mode`` and ``args.gold_normalizer``), to which components may add
            their own (OGER adds ``OGERRewardFunction``).
        components: the method parts; each prepares the construction, then is set up after TRL's ``__init__``.

    Attributes:
        precision_note: one line saying the training precision and why (``trl_explore.precision``).
        sampler: the :class:`~trl_explore.trl_guards.sampler_settings.SamplerSettings` the rollouts are drawn from
            (config plus ``generation_kwargs``), read once after TRL's ``__init__``.

    Raises:
        ValueError: a dataset column that a component adds to the reward kwargs itself; fewer prompts than one batch;
            whatever a component's ``prepare`` raises (options against the configuration).
    """

    create_model_card = create_model_card  # the card names the components' methods and papers (trl_explore.hub)

    def __init__(self, model, reward_funcs=None, args=None, components=(), **kwargs):
        model, args = resolve_model_and_config(model, args, ExplorationConfig, "explore", check_type=False)
        check_hub_access(args)  # push_to_hub: a token and a reachable Hub, before anything is built
        self.components = tuple(components)
        check_components(self.components, kwargs)  # field names, row ownership, edit_scored with environments
        check_component_hooks(self.components)  # public methods whose names are near misses of hooks: a warning
        default_rewards = reward_funcs is None
        reward_funcs = [default_verifier(args)] if default_rewards else reward_funcs
        reward_funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        datasets = {key: kwargs.pop(key, None) for key in ("train_dataset", "eval_dataset")}
        plan = TrainerPlan(model, reward_funcs, args, **datasets, trainer_kwargs=kwargs,
                           default_rewards=default_rewards)
        for component in self.components:
            plan = component.prepare(plan)
        check_datasets(plan, self.components)
        check_row_owner_column(plan, self.components)  # the `row_owner` reward kwarg is the driver's
        eager = True if plan.args.use_vllm and getattr(plan.args, "vllm_enforce_eager", False) else None
        with _enter(contextlib.ExitStack(), [*plan.init_contexts, engine_options(enforce_eager=eager)]):
            super().__init__(plan.model, plan.reward_funcs, args=plan.args, train_dataset=plan.train_dataset,
                             eval_dataset=plan.eval_dataset, **plan.trainer_kwargs)
        check_launch(self.accelerator)  # DeepSpeed/FSDP launches that Accelerate would not run as launched
        check_position_ids_supported(self.model)  # left-padded rows must be scored at generate's positions
        if self.use_vllm:
            use_reload_weights_on_cpu(self.vllm_generation)  # vLLM's CPU backend: sync weights by reloading them
        self.precision_note = precision_line(self.args, self.accelerator.device)  # the scripts print it once
        self._tag_names = ["trl", "grpo", "trl-explore", *(tag for c in self.components for tag in c.tags)]
        self.sampler = effective_sampler(self)  # the one source of truth for the sampling distribution
        note = trl_temperature_note(self.sampler, self.temperature)
        if note and self.accelerator.is_main_process:
            logger.warning(note)
        self._entropy_mask: torch.Tensor | None = None  # the loss's high-entropy tokens, chosen by the driver
        for component in self.components:
            component.setup(self)
        check_declared_forwards(self.components)  # loss / forward hooks that needs() never enables: an error
        self.add_callback(_StepEnd(self.components))
        self._generation: Generation | None = None  # the generation in progress
        self._replay: tuple | None = None  # (input_ids, Forward) of the loss forward made by the driver
        self._prompt_kinds: dict[str, str] = {}  # per mode: plain text or conversational (rows.check_prompt_rows)
        self._warned_context = False

    def component(self, name: str):
        """The component named ``name`` (``"oger"``, ``"ase"``, ...); KeyError naming the components there are."""
        for component in self.components:
            if component.name == name:
                return component
        raise KeyError(f"no component {name!r}; this trainer has {[c.name for c in self.components]}")

    def _mode(self) -> str:
        return "train" if self.model.training else "eval"

    def step_generator(self, *terms: int, stream: str = "") -> torch.Generator:
        """The random generator of this step's draws: a function of ``args.seed``, the optimizer step, ``terms``
        (process index, micro-step; their order counts) and ``stream`` (a component's :attr:`Component.name`: see
        ``Component.generator``), so the draws replay exactly after a resume and two streams never coincide. The seed
        is the first 8 bytes of SHA-256 of the values' text (``stream_seed``)."""
        return torch.Generator().manual_seed(stream_seed(self.args.seed, self.state.global_step, terms, stream))

    def behaviour_context(self, mode: str) -> contextlib.ExitStack:
        """A context reproducing the sampling distribution of the current rollouts (the components' steering)."""
        return _enter(contextlib.ExitStack(), (c.behaviour_context(mode) for c in self.components))

    # ---------------------------------------------------------------- generation (TRL hooks)
    def _generate_and_score_completions(self, inputs):
        # Overrides GRPOTrainer._generate_and_score_completions: hands the rows to the components (TRL's `_generate`
        # sees the prompts only) and adds their batch-first fields to the batch (they survive shuffling/splitting).
        # When an `edit_scored` hook changed rows, TRL's method runs a second time on the final rows (`_generate` and
        # `_calculate_rewards` then return them and their rewards): TRL pads, scores and computes the advantages its
        # own way, and no line of it is copied here. `select_groups` / `drop_rows`: trl_explore.driver.resampling.
        return finish_batch(self, inputs, self._generation_round(inputs, 0))  # resampling, drops, metrics

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        # Overrides GRPOTrainer._generate_single_turn, the one call that samples: runs it under the components'
        # sampling contexts (steering, recorders) and `rollout_sampling` (HF path: bfloat16 autocast, fast decoder).
        self._warned_context = check_context_length(  # past the position table: an error or a warning
            self.model, [len(p) for p in prompt_ids], self.max_completion_length, self._warned_context)
        call = SamplingCall(self._generation.mode, self._generation.rows, num_generations)
        contexts = [rollout_sampling(self), *(c.sampling_context(call) for c in self.components)]
        with _enter(contextlib.ExitStack(), contexts):
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)

    def _generate(self, prompts):
        # Overrides GRPOTrainer._generate: the components transform the finished rollouts (e.g. group replacement)
        # before TRL pads, scores and rewards them; the second pass after `edit_scored` returns the final rows.
        gen = self._generation
        if gen is None or len(gen.rows) != len(prompts):
            raise RuntimeError(f"{type(self).__name__}._generate must be called from _generate_and_score_completions")
        if gen.edited:
            return gen.rollout.as_trl_tuple()
        group = self.num_generations if gen.mode == "train" else self.num_generations_eval
        rollout = Rollout.from_trl(super()._generate(prompts), gen.mode, gen.rows, group)
        for component in self.components:
            before, rollout = rollout, component.transform_rollout(rollout)
            rollout, changed = settle_rewrites(before, rollout, component.name)
            check_declared_edit(component, changed, "transform_rollout")
        gen.rollout = rollout
        self._plan_scoring(gen)
        return rollout.as_trl_tuple()

    # ---------------------------------------------------------------- policy forwards and loss (TRL hooks)
    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        # Overrides GRPOTrainer._get_per_token_logps_and_entropies: (a) inside `_compute_loss`, returns the forward the
        # driver already made (checked to be the same batch); (b) runs TRL's scoring forward under the contexts of the
        # components that need it; (c) every forward gets position ids from the attention mask (`_trl_forward`).
        if self._replay is not None:
            replay_ids, forward = self._replay
            self._replay = None
            if replay_ids.shape != input_ids.shape or not torch.equal(replay_ids, input_ids):
                raise RuntimeError("TRL's loss forward differs from the driver's: see trl_explore.trl_guards.contract")
            return tuple(forward)
        gen = self._generation
        if gen is None or not gen.observe_scoring:
            return self._trl_forward(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        gen.observe_scoring = False
        if gen.scoring_entropy:
            kwargs["compute_entropy"] = True
        users = [c for c in self.components if c.needs(gen.mode).scoring_forward]
        call = ForwardCall("scoring", gen.mode, input_ids, attention_mask, logits_to_keep)
        with _enter(contextlib.ExitStack(), (c.forward_context(call) for c in users)):
            forward = Forward(*self._trl_forward(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs))
        for component in users:
            component.observe_forward(ForwardResult(call, forward))
        gen.scoring_logps = forward.logps.detach()  # TRL's old_per_token_logps (Needs.behaviour_logps reuses them)
        return tuple(forward)

    def _compute_loss(self, model, inputs):
        # Overrides GRPOTrainer._compute_loss. When a component needs the policy forward, the driver makes it first
        # (under those components' contexts), builds a batch copy (loss_batch, advantages: TRL reads the advantages
        # from the batch it is given) and lets TRL's objective reuse that forward; extra loss terms are then added.
        # Rows a component dropped (`drop_rows`) are taken out of the micro-batch TRL's objective sees: its objective
        # and normaliser are those of a batch without them (`trl_explore.driver.objective`).
        mode = self._mode()
        users = [c for c in self.components if c.needs(mode).loss_forward]
        dropped = inputs[DROPPED].bool() if DROPPED in inputs and bool(inputs[DROPPED].any()) else None
        if not users and dropped is None:
            return super()._compute_loss(model, inputs)
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        call = ForwardCall("loss", mode, input_ids, attention_mask, inputs["completion_ids"].size(1), inputs)
        with _enter(contextlib.ExitStack(), (c.forward_context(call) for c in users)):
            forward = Forward(*self._trl_forward(
                model, input_ids, attention_mask, call.logits_to_keep, compute_entropy=True,
                compute_aux_loss=self.aux_loss_enabled, **{k: inputs.get(k) for k in LOSS_FORWARD_KEYS},
            ))
        for component in users:
            component.observe_forward(ForwardResult(call, forward))
        advantages = inputs["advantages"] if inputs["advantages"].dim() > 1 else inputs["advantages"].unsqueeze(1)
        entropy_mask = None
        if self.top_entropy_quantile < 1.0:  # one threshold for every token of the batch, before components mask rows
            tokens = inputs["completion_mask"]
            tokens = tokens * inputs["tool_mask"] if "tool_mask" in inputs else tokens
            entropy_mask = super().get_high_entropy_mask(forward.entropies, tokens, 1 - self.top_entropy_quantile)
        share = 1.0 if dropped is None else batch_objective_share(self.loss_type, inputs, dropped)
        loss_call = LossCall(mode, inputs, forward, dict(inputs), advantages, entropy_mask=entropy_mask,
                             dropped=dropped, objective_share=share)
        for component in users:
            loss_call = dataclasses.replace(loss_call, batch=component.loss_batch(loss_call))
        for component in users:
            loss_call = dataclasses.replace(loss_call, advantages=component.advantages(loss_call))
        batch = full_batch = loss_call.batch
        if loss_call.advantages is not advantages:
            batch = full_batch = {**batch, "advantages": loss_call.advantages}
        none_left = dropped is not None and bool(dropped.all())
        if dropped is not None and not none_left:  # TRL's objective on the kept rows only, from the same forward
            keep = ~dropped
            batch = take_rows(batch, keep)
            input_ids, entropy_mask = input_ids[keep], None if entropy_mask is None else entropy_mask[keep]
            forward = Forward(forward.logps[keep], None if forward.entropies is None else forward.entropies[keep],
                              forward.aux_loss)
        self._replay, self._entropy_mask = (input_ids, forward), entropy_mask
        try:
            loss = super()._compute_loss(model, batch)
        finally:
            unused, self._replay, self._entropy_mask = self._replay, None, None
        if unused is not None:
            raise RuntimeError("TRL's _compute_loss made no forward through _get_per_token_logps_and_entropies")
        if none_left:  # every row dropped: TRL ran on them all (its metric gathers are collectives every process
            # joins; its logged metrics then include them) and its term is replaced by a zero on the graph
            loss = loss * 0.0 if bool(torch.isfinite(loss)) else loss_call.forward.logps.sum() * 0.0
        loss_call = dataclasses.replace(loss_call, batch=full_batch, loss=loss)
        for component in users:
            loss_call = dataclasses.replace(loss_call, loss=component.extra_loss(loss_call))
        return loss_call.loss

    def get_high_entropy_mask(self, entropies, mask, threshold):
        # Overrides GRPOTrainer.get_high_entropy_mask (called by TRL's `_compute_loss` when top_entropy_quantile < 1):
        # inside the driver's loss, the high-entropy tokens were chosen once, over every token of the batch as it
        # arrived (LossCall.entropy_mask), so that rows a component takes out of TRL's objective and trains itself
        # (OGER's teacher rows) share TRL's threshold; TRL's objective and entropy bonus cover its own tokens of them.
        chosen = getattr(self, "_entropy_mask", None)
        if chosen is not None:
            return chosen & mask.bool()
        return super().get_high_entropy_mask(entropies, mask, threshold)
