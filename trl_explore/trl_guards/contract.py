"""Everything of TRL's ``GRPOTrainer`` that ``trl_explore`` relies on beyond its public API, in one place.

The driver (:mod:`trl_explore.driver`) overrides the private methods in :data:`OVERRIDDEN_METHODS`; the components
(:mod:`trl_explore.oger.component`, :mod:`trl_explore.ase.component`) and the presets read or set the attributes in
:data:`ATTRIBUTES`. :data:`SOURCE_FACTS` are lines of TRL's source whose behaviour the driver depends on (where TRL
reads a batch key, what a method returns), :data:`OTHER_SOURCE_FACTS` the same for TRL's sampler and transformers'
``Trainer``. ``tests/test_trl_contract.py`` checks them all against the installed TRL,
so a TRL upgrade that changes any of them fails there, not silently during training. Checked on trl 1.16.0.
"""

from __future__ import annotations

import importlib
import inspect

TRL_VERSION = "1.16"
"""The TRL minor version this contract was written against (``pyproject.toml`` pins ``trl>=1.16,<1.17``)."""

OVERRIDDEN_METHODS: dict[str, tuple[str, ...]] = {
    # method of GRPOTrainer (or Trainer) -> its parameter names, ``self`` excluded
    "_generate_and_score_completions": ("inputs",),
    "_generate": ("prompts",),
    "_generate_single_turn": ("prompt_ids", "images", "multimodal_fields", "num_generations", "has_tool_images"),
    "_calculate_rewards": ("inputs", "prompts", "completions", "completion_ids_list"),
    "_get_per_token_logps_and_entropies": (
        "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size", "compute_entropy", "compute_aux_loss",
        "pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes", "num_tiles",
        "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids",
    ),
    "_compute_loss": ("model", "inputs"),
    # the loss's high-entropy tokens are chosen once by the driver, over the whole batch (LossCall.entropy_mask)
    "get_high_entropy_mask": ("entropies", "mask", "threshold"),
    "_load_optimizer_and_scheduler": ("checkpoint",),
    "save_model": ("output_dir", "_internal_call"),
    # exact resumption (trl_explore.driver.resume): Trainer's per-process checkpoint hook carries TRL's generation
    # buffer; TRL's training sampler is wrapped to count epochs
    "_save_rng_state": ("output_dir",),
    "_get_train_sampler": ("dataset",),
    # checkpoints a kill cannot tear (trl_explore.checkpoints): the completion record around TRL's and Trainer's
    # checkpoint, the Hub push after it, resume_from_checkpoint=True resolved to the newest complete checkpoint
    "_save_checkpoint": ("model", "trial"),
    "_push_from_checkpoint": ("checkpoint_folder",),
    # load_best_model_at_end: the components' state follows the reloaded weights (trl_explore.driver.resume)
    "_load_best_model": (),
    "train": ("resume_from_checkpoint", "trial", "ignore_keys_for_eval"),
    # Trainer's model card: trl_explore.hub names the base model only when it is a Hub id
    "create_model_card": ("model_name", "dataset_name", "tags"),
}

CALLED_METHODS: dict[str, tuple[str, ...]] = {
    "_log_completion_extra": ("column", "values"),
}

LOSS_FORWARD_KEYS = (
    "pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes", "num_tiles",
    "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids",
)
"""Batch keys TRL's ``_compute_loss`` passes to its policy forward besides the ids and masks; the driver makes that
forward itself with the same keys and replays it to TRL."""

ATTRIBUTES: tuple[str, ...] = (
    # set by GRPOTrainer.__init__ (or Trainer), read by the driver, components or presets
    "_metrics", "_tokenizer", "_step", "accelerator", "args", "state", "model", "processing_class",
    "reward_func_names", "num_generations", "num_generations_eval", "temperature", "max_completion_length",
    "eos_token_ids",
    "use_vllm", "use_transformers_continuous_batching", "rollout_func", "tools", "vllm_importance_sampling_correction",
    "num_iterations", "loss_type", "epsilon_low", "epsilon_high", "entropy_coef", "use_adaptive_entropy",
    "top_entropy_quantile", "_entropy_bonus_enabled", "aux_loss_enabled", "current_gradient_accumulation_steps",
    "reward_weights", "reward_funcs", "environment_factories",
    # edit_scored: what reward functions log while rewritten rows are scored again is merged or dropped
    "_pending_extra_logs", "_pending_metrics",
    # exact resumption: TRL's micro-step counter (`_step`) and the batches of the generation in progress
    "_buffered_inputs",
)
"""``vllm_generation`` (set only with ``use_vllm``) and ``_last_world_entropy`` (set only with an adaptive entropy
bonus) are read too; the test checks them in TRL's source."""

SOURCE_FACTS: dict[str, tuple[str, ...]] = {
    # The driver's batch copy: TRL takes the advantages (possibly [B, T]) from the batch it is given.
    "_compute_loss": (
        'advantages = inputs["advantages"]',
        "if advantages.dim() == 1:",
        "self._get_per_token_logps_and_entropies(",
        # TRL's own importance-sampling path (vLLM only): ASE's TIS weight with vLLM
        'per_token_loss = per_token_loss * inputs["importance_sampling_ratio"]',
        # OGER masks offline rows out of TRL's objective through tool_mask
        'mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]',
        "self._last_world_entropy",
        # top_entropy_quantile < 1: one mask for TRL's objective and its bonus (the driver's LossCall.entropy_mask)
        "entropy_mask = self.get_high_entropy_mask(entropies, mask, 1 - self.top_entropy_quantile)",
        "per_token_loss = per_token_loss * entropy_mask",
        "effective_mask = mask if entropy_mask is None else mask * entropy_mask",
    ),
    "_generate": (
        "return prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, images, tool_images",
        "self._generate_single_turn(",
    ),
    # load_best_model_at_end: TRL syncs vLLM's weights only when the step changed (trl_explore.driver.resume resets it)
    "_generate_single_turn": ("return completion_ids, logprobs",
                              "if self.state.global_step != self._last_loaded_step:"),
    "_generate_and_score_completions": (
        "= self._generate(prompts)",
        "rewards_per_func = self._calculate_rewards(inputs, prompts, completions, completion_ids_list)",
        # NaN behaviour log-probs (OGER's replaced rows) give no importance-sampling correction
        'float("nan") if x is None else x',
        'output["sampling_per_token_logps"] = sampling_per_token_logps',
        "generate_every = self.args.steps_per_generation * self.num_iterations",
        "eos_and_pad = [*self.eos_token_ids, self._tokenizer.pad_token_id]",
        # edit_scored: a second run of the method on the final rows reads the rows (rollout_func fields merged into
        # `inputs`) and computes the advantages from `_calculate_rewards`'s return value only
        "inp[key] = values[i]",
        "unscorable_mask = torch.isnan(rewards_per_func).all(dim=1)",
    ),
    # MathVerifyReward reads the calling trainer's EOS ids through the bound `log_metric` it is passed, and counts a
    # completion as ended with the ids TRL's `mask_truncated_completions` counts (the `eos_and_pad` line below); the
    # driver hands TRL checked reward functions for the call: TRL reads the list then
    # the re-scoring of rows an `edit_scored` hook rewrote: TRL's own method on those rows, its final gather made local
    # (driver._local_reward_gather); the rewards it returns are all that TRL's advantages are computed from
    "_calculate_rewards": ("rewards_per_func = gather(rewards_per_func)",
                           "keys = [key for key in inputs[0] if key not in",
                           'reward_kwargs["log_metric"] = self._log_metric',
                           "zip(self.reward_funcs, self.reward_processing_classes, self.reward_func_names"),
    # TRL writes its entropy-controller state after Trainer's checkpoint, inside the driver's completion record
    "_save_checkpoint": ("super()._save_checkpoint(model, trial)",),
    # TRL's policy forward passes no position ids: the driver adds them from the attention mask for models with
    # absolute positions (trl_explore.trl_guards.positions), which reads `attention_mask` from the model call
    "_get_per_token_logps_and_entropies": (
        'model_inputs = {"input_ids": input_ids_batch, "attention_mask": attention_mask_batch}',
    ),
    # every training / evaluation loss goes through the driver's `_compute_loss`
    "compute_loss": ("return self._compute_loss(model, inputs)",),
    # the sampler (trl_explore.trl_guards.sampler_settings): generation_kwargs override the config's settings; TRL
    # keeps the dict its GenerationConfig is built from; its fused LM head (its log-probs and entropies) uses the
    # config's temperature
    "__init__": ("self.vllm_generation = ", "generation_kwargs.update(args.generation_kwargs)",
                 "self.generation_kwargs = generation_kwargs", "temperature=self.temperature,"),
    # exact resumption: TRL reads its buffer unless a generation is due or the buffer is empty
    # (trl_explore.driver.resume)
    "_prepare_inputs": (
        "if self._step % generate_every == 0 or self._buffered_inputs is None:",
        "inputs = self._buffered_inputs[self._step % self.args.steps_per_generation]",
    ),
    "_get_train_sampler": ("return RepeatSampler(", "seed=self.args.seed,"),
}

OTHER_SOURCE_FACTS: dict[str, tuple[str, ...]] = {
    # "module:Class.method" -> lines its source must contain
    # the generation state is written with the RNG state, for every process, only in checkpoints
    "transformers.trainer:Trainer._save_checkpoint": (
        "self._save_rng_state(output_dir)",
        # the driver defers the rotation (save_total_limit set to None for the call) and the push after its record
        "save_total_limit=self.args.save_total_limit,", "self._push_from_checkpoint(output_dir)",
        'checkpoint_folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"',
        "run_dir = self._get_output_dir(trial=trial)",
    ),
    # resume_from_checkpoint=True: Transformers takes the newest folder, torn or not (the driver resolves it first)
    "transformers.trainer:Trainer.train": ("resume_from_checkpoint = get_last_checkpoint(args.output_dir)",),
    # trl_explore.driver.resume.EpochSampler replays epoch e's order: a generator seeded once, one permutation per
    # iteration; it reads the sampler's shuffle, seed, generator and num_samples
    "trl.trainer.utils:RepeatSampler.__init__": ("self.shuffle = shuffle", "self.seed = seed",
                                                 "self.generator.manual_seed(seed)"),
    "trl.trainer.utils:RepeatSampler.__iter__": (
        "indexes = torch.randperm(self.num_samples, generator=self.generator)",),
}


def check(trainer_cls=None) -> list[str]:
    """Compare the contract with the installed ``GRPOTrainer``; return one message per mismatch (empty when it holds).

    Args:
        trainer_cls: the class to check (default: ``trl.GRPOTrainer``).
    """
    if trainer_cls is None:
        from trl import GRPOTrainer as trainer_cls
    problems = []
    for name, expected in {**OVERRIDDEN_METHODS, **CALLED_METHODS}.items():
        method = getattr(trainer_cls, name, None)
        if method is None:
            problems.append(f"GRPOTrainer.{name} no longer exists")
            continue
        params = tuple(p for p in inspect.signature(method).parameters if p != "self")
        if params != expected:
            problems.append(f"GRPOTrainer.{name} takes {params}, the contract expects {expected}")
    for name, lines in SOURCE_FACTS.items():
        source = inspect.getsource(getattr(trainer_cls, name))
        problems += [f"GRPOTrainer.{name} no longer contains {line!r}" for line in lines if line not in source]
    for where, lines in OTHER_SOURCE_FACTS.items():
        module, qualname = where.split(":")
        target = importlib.import_module(module)
        for part in qualname.split("."):
            target = getattr(target, part)
        source = inspect.getsource(target)
        problems += [f"{qualname} no longer contains {line!r}" for line in lines if line not in source]
    from trl.extras.profiling import (
        ProfilingContext,  # trl_explore.driver.profiling.record_phase logs a measured time
    )

    params = tuple(p for p in inspect.signature(ProfilingContext._log_metrics).parameters if p != "self")
    if params != ("duration",):
        problems.append(f"trl.extras.profiling.ProfilingContext._log_metrics takes {params}, expected ('duration',)")
    return problems
