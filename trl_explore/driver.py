"""``ExplorationTrainer``: one ``GRPOTrainer`` subclass that drives an ordered list of method components.

A method (OGER, ASE-GRPO, your own) is a :class:`~trl_explore.components.Component`; ``trl_explore.components``
documents every hook: when it runs, what it receives and what it may change. The driver overrides TRL's private hooks
(listed, with their signatures, in :mod:`trl_explore.trl_contract`) and calls the components' hooks, in list order, at
fixed places of a step. The checkpoint side (component state, TRL's generation buffer, the sampler's epoch) is
:class:`~trl_explore.resume.ResumableTrainerMixin`: a resumed run continues inside a generation and in a later epoch
exactly as the uninterrupted run.

Metrics go to ``trainer._metrics[mode]`` like TRL's own, under each component's prefix (``oger/``, ``ase/``).

Two distributions (``trl_explore.sampler_settings``): TRL's log-probs and entropies (:meth:`policy_forward`, the
scoring and loss forwards) are of ``softmax(logits / GRPOConfig.temperature)``; the rollouts were sampled from the
effective sampler :attr:`ExplorationTrainer.sampler` (``generation_kwargs`` merged, top-k / top-p / min-p
truncations), which :meth:`behaviour_forward` reproduces.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging

import torch
from transformers import TrainerCallback
from trl import GRPOTrainer

from trl_explore.components import Forward, ForwardCall, ForwardResult, LossCall, Rollout, SamplingCall, ScoredBatch
from trl_explore.components import TrainerPlan
from trl_explore.config import ExplorationConfig
from trl_explore.defaults import check_train_dataset_size, resolve_model_and_config, trl_scores_after_generation
from trl_explore.distributed import check_launch
from trl_explore.hub import check_hub_access, create_model_card
from trl_explore.positions import check_position_ids_supported, context_length_problem, mask_positions
from trl_explore.resume import ResumableTrainerMixin
from trl_explore.rewards.checks import check_column_clash, check_finite_rewards, checked_reward_function
from trl_explore.rewards.checks import not_scored_counts
from trl_explore.rows import check_prompt_column, check_prompt_rows
from trl_explore.sampler_settings import effective_sampler, processed_logits, token_logps_and_entropy
from trl_explore.sampler_settings import trl_temperature_note
from trl_explore.trl_contract import LOSS_FORWARD_KEYS
from trl_explore.vllm_engine import engine_options, use_reload_weights_on_cpu

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


@dataclasses.dataclass
class _Generation:
    """The driver's record of the generation in progress (its own; components never see it)."""

    mode: str
    rows: tuple
    rollout: Rollout | None = None
    observe_scoring: bool = False
    scoring_entropy: bool = False
    rewards_per_func: torch.Tensor | None = None


class ExplorationTrainer(ResumableTrainerMixin, GRPOTrainer):
    """``GRPOTrainer`` driving ``components`` (a list of :class:`~trl_explore.components.Component`) in list order.

    Args:
        model, args, **kwargs: as for ``GRPOTrainer``; ``model="embedded"`` selects the bundled SmolLM2-135M-Instruct;
            ``args`` defaults to an :class:`~trl_explore.config.ExplorationConfig`.
        reward_funcs: as for ``GRPOTrainer``; default ``[MathVerifyReward(mode=args.grader_mode, gold_normalizer=...)]``
            (the verifiable reward R_m, reading golds with ``args.gold_normalizer``), to which components may add their
            own (OGER adds ``OGERRewardFunction``).
        components: the method parts; each prepares the construction, then is set up after TRL's ``__init__``.

    Attributes:
        sampler: the :class:`~trl_explore.sampler_settings.SamplerSettings` the rollouts are drawn from (config plus
            ``generation_kwargs``), read once after TRL's ``__init__``.

    Raises:
        ValueError: a dataset column that a component adds to the reward kwargs itself; fewer prompts than one
            generation batch; whatever a component's ``prepare`` raises (options against the configuration).
    """

    create_model_card = create_model_card  # the card names the components' methods and papers (trl_explore.hub)

    def __init__(self, model, reward_funcs=None, args=None, components=(), **kwargs):
        model, args = resolve_model_and_config(model, args, ExplorationConfig, "explore", check_type=False)
        check_hub_access(args)  # push_to_hub: a token and a reachable Hub, before anything is built
        default_rewards = reward_funcs is None
        if default_rewards:
            from trl_explore.data.gold_normalizers import GOLD_NORMALIZERS
            from trl_explore.rewards.math_verify_reward import MathVerifyReward

            normalizer = GOLD_NORMALIZERS[getattr(args, "gold_normalizer", "none")]
            reward_funcs = [MathVerifyReward(mode=getattr(args, "grader_mode", "math_verify"), gold_normalizer=normalizer)]
        reward_funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        datasets = {key: kwargs.pop(key, None) for key in ("train_dataset", "eval_dataset")}
        plan = TrainerPlan(model, reward_funcs, args, **datasets, trainer_kwargs=kwargs, default_rewards=default_rewards)
        self.components = tuple(components)
        for component in self.components:
            plan = component.prepare(plan)
        check_column_clash(datasets, self.components)
        if not plan.trainer_kwargs.get("environment_factory"):  # an environment may supply the prompts (TRL)
            for where in ("train_dataset", "eval_dataset"):
                if getattr(plan, where) is not None:
                    check_prompt_column(getattr(plan, where), where)
        check_train_dataset_size(plan.train_dataset, plan.args)
        eager = True if plan.args.use_vllm and getattr(plan.args, "vllm_enforce_eager", False) else None
        with _enter(contextlib.ExitStack(), [*plan.init_contexts, engine_options(enforce_eager=eager)]):
            super().__init__(plan.model, plan.reward_funcs, args=plan.args, train_dataset=plan.train_dataset,
                             eval_dataset=plan.eval_dataset, **plan.trainer_kwargs)
        check_launch(self.accelerator)  # DeepSpeed/FSDP launches that Accelerate would not run as launched
        check_position_ids_supported(self.model)  # left-padded rows must be scored at generate's positions
        if self.use_vllm:
            use_reload_weights_on_cpu(self.vllm_generation)  # vLLM's CPU backend: sync weights by reloading them
        self._tag_names = ["trl", "grpo", "trl-explore", *(tag for c in self.components for tag in c.tags)]
        self.sampler = effective_sampler(self)  # the one source of truth for the sampling distribution
        note = trl_temperature_note(self.sampler, self.temperature)
        if note and self.accelerator.is_main_process:
            logger.warning(note)
        self._entropy_mask: torch.Tensor | None = None  # the loss's high-entropy tokens, chosen by the driver
        for component in self.components:
            component.setup(self)
        self.add_callback(_StepEnd(self.components))
        self._generation: _Generation | None = None  # the generation in progress
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

    def step_generator(self, *terms: int) -> torch.Generator:
        """The random generator of this step's draws (replacement, routes): a function of ``args.seed``, the
        optimizer step and ``terms`` (process index, micro-step), so the draws replay exactly after a resume."""
        seed = self.args.seed * 1_000_003 + self.state.global_step * 1_009 + sum(terms)
        return torch.Generator().manual_seed(seed)

    def behaviour_context(self, mode: str) -> contextlib.ExitStack:
        """A context reproducing the sampling distribution of the current rollouts (the components' steering)."""
        return _enter(contextlib.ExitStack(), (c.behaviour_context(mode) for c in self.components))

    def _teacher_forced_batch(self, prompt_ids: list, completion_ids: list):
        """``(input_ids [B, P + T], attention_mask, completion_ids [B, T])`` on the device: left-padded prompts,
        right-padded completions, as TRL lays out its batch."""
        from trl.trainer.utils import pad

        pad_id, device = self._tokenizer.pad_token_id, self.accelerator.device
        p = pad([torch.tensor(x) for x in prompt_ids], padding_value=pad_id, padding_side="left")
        c = pad([torch.tensor(x) for x in completion_ids], padding_value=pad_id, padding_side="right")
        pm = pad([torch.ones(len(x), dtype=torch.long) for x in prompt_ids], padding_value=0, padding_side="left")
        cm = pad([torch.ones(len(x), dtype=torch.long) for x in completion_ids], padding_value=0, padding_side="right")
        return torch.cat([p, c], 1).to(device), torch.cat([pm, cm], 1).to(device), c.to(device)

    def policy_forward(self, prompt_ids: list, completion_ids: list, compute_entropy: bool = True) -> Forward:
        """A no-grad, teacher-forced forward of the policy on the given completions (lists of ids, left-padded
        prompts, right-padded completions), positions from the attention mask: TRL's forward, so its ``[B, T]``
        log-probs and entropies (nats) are of ``softmax(logits / GRPOConfig.temperature)``, the trained policy's
        distribution (not necessarily the sampler's: :meth:`behaviour_forward`). Cost: one forward over the batch."""
        input_ids, attention_mask, completions = self._teacher_forced_batch(prompt_ids, completion_ids)
        with torch.no_grad():
            return Forward(*self._trl_forward(self.model, input_ids, attention_mask, completions.size(1),
                                              compute_entropy=compute_entropy))

    def behaviour_forward(self, mode: str, prompt_ids: list, completion_ids: list,
                          positions: torch.Tensor | None = None) -> Forward:
        """A no-grad, teacher-forced forward under the distribution the current rollouts were sampled from: the
        components' :meth:`behaviour_context` (e.g. a route's steering) and the effective sampler :attr:`sampler`
        (temperature from ``generation_kwargs`` when given there, top-k / top-p / min-p as the truncated,
        renormalised distribution: :func:`~trl_explore.sampler_settings.processed_logits`).

        When the sampler's distribution is TRL's (:meth:`SamplerSettings.matches_trl`, the default) this is
        :meth:`policy_forward` (TRL's fused forward, no logits); otherwise the logits of the positions asked for are
        computed (``[rows, positions, V]`` float32 per chunk of rows, about 1 GiB at most) and processed.

        Args:
            mode: ``"train"`` or ``"eval"`` (the behaviour contexts depend on it).
            prompt_ids, completion_ids: lists of ids per row.
            positions: ``[B]`` completion lengths ``l_i`` in ``[1, len_i]``: only the distribution that produced token
                ``l_i - 1`` of each row is computed. None: every completion position.

        Returns:
            :class:`~trl_explore.components.Forward` with ``logps`` (log-prob of each token under the distribution it
            was drawn from; ``-inf`` for a token outside the kept set) and ``entropies`` (that distribution's Shannon
            entropy), nats, ``[B, T]`` (``[B, 1]`` with ``positions``).

        Raises:
            ValueError: a position outside ``[1, len_i]``.
        """
        if positions is not None:
            positions = positions.long().cpu()
            lengths = torch.tensor([len(c) for c in completion_ids])
            bad = (positions < 1) | (positions > lengths)
            if bad.any():
                rows = torch.nonzero(bad).flatten().tolist()
                raise ValueError(f"positions of rows {rows} are outside [1, completion length]")
        with self.behaviour_context(mode):
            if self.sampler.matches_trl(self.temperature):
                forward = self.policy_forward(prompt_ids, completion_ids, compute_entropy=True)
                if positions is None:
                    return forward
                index = (positions - 1).to(forward.logps.device).unsqueeze(1)
                return Forward(forward.logps.gather(1, index), forward.entropies.gather(1, index), None)
            return self._processed_forward(prompt_ids, completion_ids, positions)

    def _processed_forward(self, prompt_ids, completion_ids, positions) -> Forward:
        """:meth:`behaviour_forward` with logits: the model's own forward (not TRL's fused head), ``logits_to_keep``
        the positions asked for, processed by the sampler."""
        input_ids, attention_mask, completions = self._teacher_forced_batch(prompt_ids, completion_ids)
        num_rows, width = completions.shape
        prompt_width = input_ids.size(1) - width
        columns = torch.arange(width).expand(num_rows, -1) if positions is None else (positions - 1).unsqueeze(1)
        keep = torch.unique(columns)  # completion columns; the logits at prompt_width - 1 + c predict column c
        vocab = self.model.config.get_text_config().vocab_size
        chunk = max(1, (1 << 28) // max(1, len(keep) * vocab))
        logps, entropies = [], []
        with torch.no_grad(), mask_positions(self.model):
            for start in range(0, num_rows, chunk):
                rows = slice(start, start + chunk)
                with self.accelerator.autocast():
                    logits = self.model(input_ids=input_ids[rows], attention_mask=attention_mask[rows],
                                        logits_to_keep=(prompt_width - 1 + keep).to(input_ids.device),
                                        use_cache=False).logits
                if positions is not None:  # each row's own column among the kept ones: [r, 1, V]
                    where = torch.searchsorted(keep, columns[rows]).to(logits.device)
                    logits = logits.gather(1, where.unsqueeze(-1).expand(-1, -1, logits.size(-1)))
                tokens = completions[rows].gather(1, columns[rows].to(completions.device))
                lp, ent = token_logps_and_entropy(processed_logits(logits, self.sampler), tokens.to(logits.device))
                logps.append(lp)
                entropies.append(ent)
        return Forward(torch.cat(logps), torch.cat(entropies), None)

    # ---------------------------------------------------------------- generation (TRL hooks)
    def _generate_and_score_completions(self, inputs):
        # Overrides GRPOTrainer._generate_and_score_completions: hands the rows to the components (TRL's `_generate`
        # sees the prompts only) and adds their batch-first fields to the batch (they survive shuffling/splitting).
        self._generation = gen = _Generation(self._mode(), tuple(inputs))
        if getattr(self, "environment_factories", None) is None:  # else an environment may supply the prompt (TRL)
            where = f"this process's {gen.mode} generation batch"
            self._prompt_kinds[gen.mode] = check_prompt_rows(inputs, where, self._prompt_kinds.get(gen.mode))
        try:
            output = super()._generate_and_score_completions(inputs)
            scored = ScoredBatch(gen.mode, gen.rollout, output, gen.rewards_per_func)
            for component in self.components:
                output.update(component.batch_fields(scored))
        finally:
            self._generation = None
        return output

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        # Overrides GRPOTrainer._generate_single_turn, the one call that samples: runs it under the components'
        # sampling contexts (steering, recorders).
        problem = context_length_problem(self.model, [len(p) for p in prompt_ids], self.max_completion_length)
        if problem is not None and problem[0] == "error":
            raise ValueError(problem[1])
        if problem is not None and not self._warned_context:
            self._warned_context = True
            logger.warning(problem[1])
        call = SamplingCall(self._generation.mode, self._generation.rows, num_generations)
        with _enter(contextlib.ExitStack(), (c.sampling_context(call) for c in self.components)):
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)

    def _generate(self, prompts):
        # Overrides GRPOTrainer._generate: the components transform the finished rollouts (e.g. group replacement)
        # before TRL pads, scores and rewards them.
        gen = self._generation
        if gen is None or len(gen.rows) != len(prompts):
            raise RuntimeError(f"{type(self).__name__}._generate must be called from _generate_and_score_completions")
        group = self.num_generations if gen.mode == "train" else self.num_generations_eval
        rollout = Rollout.from_trl(super()._generate(prompts), gen.mode, gen.rows, group)
        for component in self.components:
            rollout = component.transform_rollout(rollout)
        needs = [c.needs(gen.mode) for c in self.components]
        gen.rollout = rollout
        gen.observe_scoring = trl_scores_after_generation(self) and any(n.scoring_forward for n in needs)
        gen.scoring_entropy = any(n.scoring_entropy for n in needs)
        return rollout.as_trl_tuple()

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # Overrides GRPOTrainer._calculate_rewards: the components' per-completion fields join (copies of) the rows
        # TRL builds the reward kwargs from; the gathered rewards are kept for the components' batch fields.
        gen, fields = self._generation, {}
        for component in self.components:
            fields.update(component.reward_fields(gen.rollout))
        if fields:
            inputs = [{**row, **{k: v[i] for k, v in fields.items()}} for i, row in enumerate(inputs)]
        # TRL's objects stay; for this call only, TRL calls each plain reward function through a check of its output
        # (rewards.checks.check_reward_values: a string reward fails inside TRL naming no function)
        funcs = self.reward_funcs
        self.reward_funcs = [f if isinstance(f, torch.nn.Module) else checked_reward_function(f, name)
                             for f, name in zip(funcs, self.reward_func_names)]
        try:
            rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        finally:
            self.reward_funcs = funcs
        check_finite_rewards(rewards_per_func, self.reward_func_names)  # an inf would zero its group's advantages
        for key, count in not_scored_counts(rewards_per_func, self.reward_func_names).items():
            self._metrics[gen.mode][key].append(count)  # None rewards: "not scored", counted over the whole batch
        gen.rewards_per_func = rewards_per_func
        return rewards_per_func

    # ---------------------------------------------------------------- policy forwards and loss (TRL hooks)
    def _trl_forward(self, model, *args, **kwargs):
        """TRL's ``_get_per_token_logps_and_entropies`` with position ids taken from the attention mask, as
        ``generate`` numbers them. TRL builds the model inputs inside that method (ids, mask, multimodal keys) and
        has no ``position_ids`` argument, so :func:`~trl_explore.positions.mask_positions` passes them through a
        pre-hook on models with absolute positions (GPT-2, ...); RoPE / ALiBi models run unchanged."""
        with mask_positions(model):
            return super()._get_per_token_logps_and_entropies(model, *args, **kwargs)

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        # Overrides GRPOTrainer._get_per_token_logps_and_entropies: (a) inside `_compute_loss`, returns the forward the
        # driver already made (checked to be the same batch); (b) runs TRL's scoring forward under the contexts of the
        # components that need it; (c) every forward gets position ids from the attention mask (`_trl_forward`).
        if self._replay is not None:
            replay_ids, forward = self._replay
            self._replay = None
            if replay_ids.shape != input_ids.shape or not torch.equal(replay_ids, input_ids):
                raise RuntimeError("TRL's loss forward differs from the driver's: see trl_explore.trl_contract")
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
        return tuple(forward)

    def _compute_loss(self, model, inputs):
        # Overrides GRPOTrainer._compute_loss. When a component needs the policy forward, the driver makes it first
        # (under those components' contexts), builds a batch copy (loss_batch, advantages: TRL reads the advantages
        # from the batch it is given) and lets TRL's objective reuse that forward; extra loss terms are then added.
        mode = self._mode()
        users = [c for c in self.components if c.needs(mode).loss_forward]
        if not users:
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
        advantages = inputs["advantages"]
        advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
        entropy_mask = None
        if self.top_entropy_quantile < 1.0:  # one threshold for every token of the batch, before components mask rows
            tokens = inputs["completion_mask"]
            tokens = tokens * inputs["tool_mask"] if "tool_mask" in inputs else tokens
            entropy_mask = super().get_high_entropy_mask(forward.entropies, tokens, 1 - self.top_entropy_quantile)
        loss_call = LossCall(mode, inputs, forward, dict(inputs), advantages, entropy_mask=entropy_mask)
        for component in users:
            loss_call = dataclasses.replace(loss_call, batch=component.loss_batch(loss_call))
        for component in users:
            loss_call = dataclasses.replace(loss_call, advantages=component.advantages(loss_call))
        batch = loss_call.batch
        if loss_call.advantages is not advantages:
            batch = {**batch, "advantages": loss_call.advantages}
        self._replay, self._entropy_mask = (input_ids, forward), entropy_mask
        try:
            loss = super()._compute_loss(model, batch)
        finally:
            unused, self._replay, self._entropy_mask = self._replay, None, None
        if unused is not None:
            raise RuntimeError("TRL's _compute_loss made no policy forward through _get_per_token_logps_and_entropies")
        loss_call = dataclasses.replace(loss_call, batch=batch, loss=loss)
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
