"""``ExplorationTrainer``: one ``GRPOTrainer`` subclass that drives an ordered list of method components.

A method (OGER, ASE-GRPO) is a :class:`Component`: an object with a few extension points, all no-ops by default.
The driver overrides TRL's hooks (listed, with their signatures, in :mod:`trl_explore.trl_contract`) and calls the
extension points of every component, in list order, at fixed places of a step:

1. ``bind``                      after ``GRPOTrainer.__init__``: build models, banks, callbacks.
2. ``begin_generation``          start of ``_generate_and_score_completions``, with the batch's dataset rows.
3. ``rollout_context``           context around TRL's sampler (``_generate_single_turn``): routing, steering,
                                 recorders. ``rollout_logprobs`` then may replace the behaviour log-probs.
4. ``transform_rollout``         after ``_generate``: returns a new :class:`Rollout` (e.g. group replacement). A
                                 component may run a teacher-forced forward under ``behaviour_context`` (the other
                                 components' steering: the distribution the rollouts were sampled from).
5. ``scoring_forward_context`` / ``on_scoring_forward``
                                 TRL's no-grad scoring forward after generation (when TRL makes one).
6. ``reward_fields``             per-completion columns added to the rows the reward functions receive.
7. ``on_rewards``                the gathered ``rewards_per_func`` of ``_calculate_rewards``.
8. ``batch_fields``              batch-first tensors added to the training batch.
9. ``loss_forward_context`` / ``on_loss_forward``
                                 the policy forward of ``_compute_loss``, made once by the driver and replayed to TRL.
10. ``loss_inputs``              a new batch for TRL's objective (e.g. mask rows out of it).
11. ``advantage_weights``        ``[B, T]`` per-token weights of TRL's objective, multiplied into the advantages of
                                 the driver's batch copy before TRL's ``_compute_loss`` runs (the HF path's truncated
                                 importance weights; with vLLM TRL's own importance sampling is used instead).
12. ``extra_loss``               adds terms to TRL's loss (e.g. policy shaping of offline rows).
13. ``on_step_end``, ``save``, ``load``   after each optimizer step; checkpoint state.

Checkpoints also hold what TRL keeps between the micro-steps of one generation (its buffered batches and ``_step``,
per process) and the training sampler counts epochs (:mod:`trl_explore.resume`): a resumed run continues inside a
generation and in a later epoch exactly as the uninterrupted run.

Metrics go to ``trainer._metrics[mode]`` like TRL's own. Components hand state forward only through their own
attributes (one record per generation, replaced, never shared) and through the values the driver passes.
"""

from __future__ import annotations

import contextlib
import logging
import math

import torch
from transformers import TrainerCallback
from trl import GRPOTrainer

from trl_explore.components import Forward, Rollout
from trl_explore.defaults import trl_scores_after_generation
from trl_explore.distributed import check_launch
from trl_explore.hub import create_model_card
from trl_explore.positions import check_position_ids_supported, mask_positions
from trl_explore.resume import EpochSampler, UnstorableBatch, load_generation_state, save_generation_state
from trl_explore.rewards.checks import check_finite_rewards, not_scored_counts
from trl_explore.trl_contract import LOSS_FORWARD_KEYS

logger = logging.getLogger(__name__)


class _StepEnd(TrainerCallback):
    def __init__(self, components):
        self.components = components

    def on_step_end(self, args, state, control, **kwargs):
        for component in self.components:
            component.on_step_end()


def _contexts(stack: contextlib.ExitStack, contexts) -> None:
    for context in contexts:
        if context is not None:
            stack.enter_context(context)


def _column_names(dataset) -> set[str]:
    """The columns of a ``Dataset``, ``IterableDataset`` (when its features are known) or list of row dicts."""
    names = getattr(dataset, "column_names", None)
    if names is None and isinstance(dataset, (list, tuple)) and dataset and isinstance(dataset[0], dict):
        names = list(dataset[0])
    return set(names or ())


def check_column_clash(datasets: dict, components) -> None:
    """Refuse a dataset column that a component would overwrite in the reward inputs.

    Args:
        datasets: ``{"train_dataset": ..., "eval_dataset": ...}`` (None values and dicts of datasets allowed).
        components: the trainer's components; each lists its keys in ``reward_field_names``.

    Raises:
        ValueError: naming the dataset, the column and the component.
    """
    for where, dataset in datasets.items():
        parts = dataset.items() if isinstance(dataset, dict) else [(None, dataset)]
        for key, part in parts:
            columns = _column_names(part)
            for component in components:
                clash = sorted(columns & set(component.reward_field_names))
                if clash:
                    name = where if key is None else f"{where}[{key!r}]"
                    raise ValueError(
                        f"{name} has column(s) {clash}, which {type(component).__name__} adds to the reward "
                        f"functions' inputs itself; rename the column(s) (the component's fields are "
                        f"{list(component.reward_field_names)})"
                    )


class ExplorationTrainer(GRPOTrainer):
    """``GRPOTrainer`` driving ``components`` (a list of :class:`Component`) in list order.

    Args:
        model, reward_funcs, args, **kwargs: as for ``GRPOTrainer``.
        components: the method parts; each is bound to the trainer after TRL's ``__init__``.
    """

    _tag_names = ["trl", "grpo", "trl-explore"]
    create_model_card = create_model_card  # base_model only when it is a Hub id (trl_explore.hub)

    def __init__(self, model, reward_funcs, args=None, components=(), **kwargs):
        super().__init__(model, reward_funcs, args=args, **kwargs)
        check_launch(self.accelerator)  # DeepSpeed/FSDP launches that Accelerate would not run as launched
        check_position_ids_supported(self.model)  # left-padded rows must be scored at generate's positions
        self.components = list(components)
        check_column_clash({"train_dataset": self.train_dataset, "eval_dataset": self.eval_dataset}, self.components)
        for component in self.components:
            component.bind(self)
        self.add_callback(_StepEnd(self.components))
        self._rows: tuple | None = None  # the dataset rows of the generation in progress (read-only)
        self._observe_scoring = False  # the next policy forward is TRL's scoring forward
        self._replay: tuple | None = None  # (input_ids, Forward) of the loss forward made by the driver
        self._epoch_sampler: EpochSampler | None = None  # the training sampler (trl_explore.resume)
        self._warned_server_resume = False

    def _mode(self) -> str:
        return "train" if self.model.training else "eval"

    def step_generator(self, *terms: int) -> torch.Generator:
        """The random generator of this step's draws (replacement, routes): a function of ``args.seed``, the
        optimizer step and ``terms`` (process index, micro-step), so the draws replay exactly after a resume."""
        seed = self.args.seed * 1_000_003 + self.state.global_step * 1_009 + sum(terms)
        return torch.Generator().manual_seed(seed)

    # ---------------------------------------------------------------- generation (TRL hooks)
    def _generate_and_score_completions(self, inputs):
        # Overrides GRPOTrainer._generate_and_score_completions: hands the rows to the components (TRL's `_generate`
        # sees the prompts only) and adds their batch-first fields to the batch (they survive shuffling/splitting).
        mode, rows = self._mode(), tuple(inputs)
        for component in self.components:
            component.begin_generation(rows, mode)
        self._rows = rows
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self._rows, self._observe_scoring = None, False
        for component in self.components:
            output.update(component.batch_fields(output, rows, mode))
        return output

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        # Overrides GRPOTrainer._generate_single_turn, the one call that samples: runs it under the components'
        # rollout contexts (steering, recorders); they may then supply the behaviour log-probs.
        mode = self._mode()
        with contextlib.ExitStack() as stack:
            _contexts(stack, (c.rollout_context(len(prompt_ids), num_generations, mode) for c in self.components))
            completion_ids, logprobs = super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
            for component in self.components:
                logprobs = component.rollout_logprobs(completion_ids, logprobs, mode)
        return completion_ids, logprobs

    def _generate(self, prompts):
        # Overrides GRPOTrainer._generate: the components transform the finished rollouts (e.g. group replacement)
        # before TRL pads, scores and rewards them.
        if self._rows is None or len(self._rows) != len(prompts):
            raise RuntimeError(f"{type(self).__name__}._generate must be called from _generate_and_score_completions")
        mode = self._mode()
        rollout = Rollout(*super()._generate(prompts))
        for component in self.components:
            rollout = component.transform_rollout(rollout, self._rows, mode)
        self._observe_scoring = trl_scores_after_generation(self) and any(
            c.observes_scoring_forward(mode) for c in self.components
        )
        return rollout.as_tuple()

    def behaviour_context(self, mode: str) -> contextlib.ExitStack:
        """A context reproducing the sampling distribution of the current rollouts (the components' steering)."""
        stack = contextlib.ExitStack()
        _contexts(stack, (c.behaviour_context(mode) for c in self.components))
        return stack

    def _forward_last_token_entropy(self, prompt_ids, completion_ids) -> torch.Tensor:
        """``[B, T]`` no-grad policy entropies of the given completions (lists of ids), at the sampling temperature.
        Cost: one forward pass over the batch; used when generation did not record them (vLLM, custom rollouts)."""
        from trl.trainer.utils import pad

        pad_id, device = self._tokenizer.pad_token_id, self.accelerator.device
        p = pad([torch.tensor(x) for x in prompt_ids], padding_value=pad_id, padding_side="left")
        c = pad([torch.tensor(x) for x in completion_ids], padding_value=pad_id, padding_side="right")
        pm = pad([torch.ones(len(x), dtype=torch.long) for x in prompt_ids], padding_value=0, padding_side="left")
        cm = pad([torch.ones(len(x), dtype=torch.long) for x in completion_ids], padding_value=0, padding_side="right")
        with torch.no_grad():
            _, entropies, _ = self._trl_forward(
                self.model, torch.cat([p, c], 1).to(device), torch.cat([pm, cm], 1).to(device), c.size(1),
                compute_entropy=True,
            )
        return entropies.float().cpu()

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # Overrides GRPOTrainer._calculate_rewards: the components' per-completion fields join (copies of) the rows
        # TRL builds the reward kwargs from; the components then see the gathered rewards.
        mode = self._mode()
        fields: dict[str, list] = {}
        for component in self.components:
            fields.update(component.reward_fields(mode))
        if fields:
            inputs = [{**row, **{k: v[i] for k, v in fields.items()}} for i, row in enumerate(inputs)]
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        check_finite_rewards(rewards_per_func, self.reward_func_names)  # an inf would zero its group's advantages
        for key, count in not_scored_counts(rewards_per_func, self.reward_func_names).items():
            self._metrics[mode][key].append(count)  # None rewards: "not scored", counted over the whole batch
        for component in self.components:
            component.on_rewards(rewards_per_func, completions, mode)
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
        # driver already made (checked to be the same batch); (b) lets the components read TRL's scoring forward;
        # (c) every forward gets position ids from the attention mask (`_trl_forward`), the reference model's too.
        if self._replay is not None:
            replay_ids, forward = self._replay
            self._replay = None
            if replay_ids.shape != input_ids.shape or not torch.equal(replay_ids, input_ids):
                raise RuntimeError("TRL's loss forward differs from the driver's: see trl_explore.trl_contract")
            return tuple(forward)
        if not self._observe_scoring:
            return self._trl_forward(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        self._observe_scoring = False
        if any(c.needs_scoring_entropy() for c in self.components):
            kwargs["compute_entropy"] = True
        with contextlib.ExitStack() as stack:
            _contexts(stack, (c.scoring_forward_context(input_ids, attention_mask, logits_to_keep) for c in self.components))
            forward = Forward(*self._trl_forward(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs))
        for component in self.components:
            component.on_scoring_forward(forward)
        return tuple(forward)

    def _compute_loss(self, model, inputs):
        # Overrides GRPOTrainer._compute_loss. When a component needs the policy forward, the driver makes it first
        # (under the components' contexts), builds a batch copy (loss_inputs, advantage weights: TRL reads these
        # advantages whenever it likes) and lets TRL's objective reuse that forward; extra loss terms are then added.
        mode = self._mode()
        if not any(c.uses_loss_forward(inputs, mode) for c in self.components):
            return super()._compute_loss(model, inputs)
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        logits_to_keep = inputs["completion_ids"].size(1)
        with contextlib.ExitStack() as stack:
            _contexts(stack, (c.loss_forward_context(inputs, input_ids, attention_mask, logits_to_keep)
                              for c in self.components))
            forward = Forward(*self._trl_forward(
                model, input_ids, attention_mask, logits_to_keep, compute_entropy=True,
                compute_aux_loss=self.aux_loss_enabled, **{k: inputs.get(k) for k in LOSS_FORWARD_KEYS},
            ))
        batch, weights = dict(inputs), None
        for component in self.components:
            component.on_loss_forward(inputs, forward, mode)
            batch = component.loss_inputs(batch, mode)
            w = component.advantage_weights(inputs, forward, mode)
            if w is not None:
                weights = w if weights is None else weights * w
        if weights is not None:
            advantages = batch["advantages"]
            advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
            batch["advantages"] = advantages * weights.to(advantages.dtype)
        self._replay = (input_ids, forward)
        try:
            loss = super()._compute_loss(model, batch)
        finally:
            unused, self._replay = self._replay, None
        if unused is not None:
            raise RuntimeError("TRL's _compute_loss made no policy forward through _get_per_token_logps_and_entropies")
        for component in self.components:
            loss = component.extra_loss(loss, inputs, batch, forward, mode)
        return loss

    # ---------------------------------------------------------------- checkpoints (Trainer hooks)
    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        # Overrides Trainer.save_model (called for every checkpoint and for the final model): component state goes
        # next to the weights.
        super().save_model(output_dir, _internal_call)
        if self.args.should_save:
            for component in self.components:
                component.save(output_dir or self.args.output_dir)

    def _save_rng_state(self, output_dir: str):
        # Overrides Trainer._save_rng_state: the one hook `_save_checkpoint` calls on every process with the checkpoint
        # folder, for the state a resume needs (not with `save_only_model`, whose checkpoints Trainer cannot resume).
        # Adds TRL's micro-step counter and, inside a generation, the batches TRL buffered from it (per process).
        super()._save_rng_state(output_dir)
        generate_every = self.args.steps_per_generation * self.num_iterations
        buffered = self._buffered_inputs if self._step % generate_every else None  # None: a generation starts next
        try:
            save_generation_state(output_dir, self.args.process_index, self._step, buffered)
        except UnstorableBatch as err:
            save_generation_state(output_dir, self.args.process_index, self._step, None)
            logger.warning("%s: %s; a run resumed from this checkpoint generates this generation's remaining batches "
                           "again, and does not continue as the uninterrupted run", output_dir, err)
        if self.use_vllm and self.args.vllm_mode == "server" and not self._warned_server_resume:
            self._warned_server_resume = True
            logger.warning("%s: the vLLM server's sampler state is not part of a checkpoint: a run resumed from it "
                           "samples other completions than the uninterrupted run from its next generation on", output_dir)

    def _get_train_sampler(self, dataset=None):
        # Overrides GRPOTrainer._get_train_sampler: TRL's RepeatSampler, wrapped so that epoch e has the uninterrupted
        # run's order of epoch e also when the run was resumed (TRL's draws epoch 0's order again).
        self._epoch_sampler = EpochSampler(super()._get_train_sampler(dataset))
        return self._epoch_sampler

    def _load_optimizer_and_scheduler(self, checkpoint):
        # Overrides GRPOTrainer._load_optimizer_and_scheduler (as TRL does for its entropy controller): restores the
        # components' state, TRL's generation buffer and step counter, and the sampler's epoch when resuming.
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        for component in self.components:
            component.load(checkpoint)
        state = load_generation_state(checkpoint, self.args.process_index, self.accelerator.device)
        if state is not None:
            self._step, buffered = state
            if buffered is not None:
                self._buffered_inputs = buffered
        if self._epoch_sampler is not None and self.state.epoch is not None:
            # the epoch Trainer resumes in (Trainer sets it again where Accelerate's wrappers forward set_epoch)
            self._epoch_sampler.set_epoch(math.floor(self.state.epoch))
