"""``OGERTrainer``: TRL's ``GRPOTrainer`` with OGER's hybrid groups, exploration reward and policy shaping.

Paper: "OGER: A Robust Offline-Guided Exploration Reward for Hybrid Reinforcement Learning" (§3).
The maths lives in small modules of this package; this file only wires it into three TRL hooks:

* ``_generate`` — after TRL generated the online completions: embed them, compute each one's divergence
  from the prompt's teachers (Eq. 1-5), read the last-token entropy (Eq. 6) recorded during generation,
  and replace the ``k`` least divergent completions of each group by offline trajectories (§3.2). The
  per-completion values travel to the reward functions as TRL ``extra_fields``.
* ``_generate_and_score_completions`` — remembers the batch rows (``_generate`` only gets the prompts)
  and adds the ``is_offline`` flag to the training batch.
* ``_compute_loss`` — TRL's objective on on-policy tokens, LUFFY policy shaping on offline tokens.
"""

from __future__ import annotations

import logging
import textwrap
from contextlib import nullcontext

import torch
from trl import GRPOTrainer

from trl_explore.defaults import check_train_dataset_size, resolve_model_and_config, trl_scores_after_generation
from trl_explore.hub import create_model_card
from trl_explore.oger.config import OGERConfig
from trl_explore.oger.embedding import TrajectoryEncoder
from trl_explore.oger.entropy import LastTokenEntropyRecorder, last_token_values
from trl_explore.oger.exploration import divergence
from trl_explore.oger.policy_shaping import aggregate_token_loss, policy_shaping_per_token_loss
from trl_explore.oger.replacement import offline_completion_ids, sample_offline_indices, select_replacements
from trl_explore.rewards.math_verify_reward import completion_text
from trl_explore.vllm_engine import engine_options, use_reload_weights_on_cpu

logger = logging.getLogger(__name__)


def offline_trajectories(row: dict, args: OGERConfig, row_name: str = "a dataset row"):
    """Validate one dataset row's offline fields; return ``(texts, teachers, stored_embeddings)``.

    Args:
        row: a dataset row with ``args.offline_completions_column`` (list of str, possibly empty), and
            optionally ``args.offline_teachers_column`` (list of str, same length) and
            ``args.offline_embeddings_column`` (``[M][d]`` floats).
        args: the trainer's :class:`OGERConfig` (column names).
        row_name: how errors name the row (e.g. ``"training row 3"``).

    Returns:
        ``texts`` (list of str), ``teachers`` (list of str; ``"offline"`` when the column is absent) and the
        stored embeddings or None.

    Raises:
        ValueError: a column is missing, is not a list, holds a non-string, or the lengths differ.
    """
    col, teachers_col = args.offline_completions_column, args.offline_teachers_column
    if col not in row:
        raise ValueError(
            f"{row_name} has no column {col!r} (the prompt's offline trajectories); columns: {sorted(row)}. "
            f"Set OGERConfig.offline_completions_column or build the dataset with trl_explore.data"
        )
    texts = row[col] if row[col] is not None else []
    if not isinstance(texts, (list, tuple)):
        raise ValueError(f"{row_name}: {col!r} must be a list of strings, got {type(texts).__name__}")
    for j, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"{row_name}: offline trajectory {j} of {col!r} is {type(text).__name__}, expected str")
    teachers = row.get(teachers_col)
    teachers = ["offline"] * len(texts) if teachers is None else teachers
    if not isinstance(teachers, (list, tuple)) or len(teachers) != len(texts):
        raise ValueError(
            f"{row_name} has {len(texts)} offline trajectories but {teachers_col!r} is {teachers!r:.80}: "
            f"expected a list of {len(texts)} teacher names"
        )
    return list(texts), [str(t) for t in teachers], row.get(args.offline_embeddings_column)


def _check_prompt(row: dict, row_name: str) -> None:
    prompt = row.get("prompt")
    is_messages = isinstance(prompt, list) and prompt and all(isinstance(m, dict) and "content" in m for m in prompt)
    if not ((isinstance(prompt, str) and prompt) or is_messages):
        raise ValueError(
            f"{row_name}: 'prompt' must be a non-empty string or a list of {{'role', 'content'}} messages, "
            f"got {prompt!r:.80}"
        )


class OGERTrainer(GRPOTrainer):
    """GRPO with OGER (offline-guided exploration reward) on multi-teacher offline data.

    The training dataset needs, per row, a `prompt`, the gold `answer` (for the default verifiable reward)
    and the prompt's teacher trajectories in `args.offline_completions_column` (a list of str, possibly
    empty: such prompts keep all their online completions). `trl_explore.data` builds such datasets.

    Args:
        model: as for `GRPOTrainer`; the string `"embedded"` selects the bundled SmolLM2-135M-Instruct.
        reward_funcs: default `[math_reward, OGERRewardFunction()]`, weighted `[1, 1]` (Eq. 8), or
            `[1, 0]` when `args.use_exploration_reward` is False (the "w/o Reward" ablation).
        args: an [`OGERConfig`].
        encoder: a `TrajectoryEncoder` to use instead of building one from `args.embedding_model`.
        Other arguments are passed to `GRPOTrainer`.

    Raises:
        ValueError: at the first batch, if a row lacks the offline column or holds a non-string
            trajectory, or if a process does not hold whole groups.
    """

    _tag_names = ["trl", "grpo", "oger", "trl-explore"]
    _name = "OGER"
    _paper = {
        "title": "OGER: A Robust Offline-Guided Exploration Reward for Hybrid Reinforcement Learning",
        # docstyle-ignore
        "citation": textwrap.dedent("""\
            @article{ma2025oger,
                title  = {{OGER: A Robust Offline-Guided Exploration Reward for Hybrid Reinforcement Learning}},
                author = {Xinyu Ma and Mingzhou Xu and Xuebo Liu and Chang Jin and Qiang Wang and Derek F. Wong and Min Zhang},
                year   = 2026,
            }"""),
    }
    create_model_card = create_model_card  # base_model only when it is a Hub id (trl_explore.hub)

    def __init__(self, model, reward_funcs=None, args: OGERConfig | None = None, encoder: TrajectoryEncoder | None = None, **kwargs):
        model, args = resolve_model_and_config(model, args, OGERConfig, "OGER")
        from trl_explore.rewards.math_verify_reward import math_reward
        from trl_explore.rewards.oger_reward import OGERRewardFunction

        if reward_funcs is None:
            reward_funcs = [math_reward, OGERRewardFunction(verifier=math_reward)]
        reward_funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        # The ablation switches act on every OGERRewardFunction, also on ones the user passed.
        is_oger = [isinstance(f, OGERRewardFunction) for f in reward_funcs]
        for func, oger in zip(reward_funcs, is_oger):
            if oger:
                func.entropy_refinement = args.entropy_refinement
        if args.reward_weights is None:
            args.reward_weights = [0.0 if oger and not args.use_exploration_reward else 1.0 for oger in is_oger]
        elif not args.use_exploration_reward and any(w != 0 for w, o in zip(args.reward_weights, is_oger) if o):
            raise ValueError(
                "use_exploration_reward=False ('w/o Reward') but reward_weights gives the OGER reward a non-zero "
                f"weight: {args.reward_weights}"
            )
        train_dataset = kwargs.get("train_dataset")
        if train_dataset is not None and not hasattr(train_dataset, "__len__"):
            train_dataset = None  # an IterableDataset: rows are checked as they arrive
        check_train_dataset_size(train_dataset, args)
        for i in range(min(len(train_dataset), 64) if train_dataset is not None else 0):
            _check_prompt(train_dataset[i], f"training row {i}")
            offline_trajectories(train_dataset[i], args, f"training row {i}")
        with engine_options(enforce_eager=True if args.use_vllm and args.vllm_enforce_eager else None):
            super().__init__(model, reward_funcs, args=args, **kwargs)
        if self.use_vllm:
            use_reload_weights_on_cpu(self.vllm_generation)
        if args.loss_remove_clip:  # LUFFY: no ratio clipping on on-policy tokens
            self.epsilon_low = self.epsilon_high = float("inf")
        self.encoder = encoder or TrajectoryEncoder(
            args.embedding_model,
            device=self.accelerator.device,
            batch_size=args.embedding_batch_size,
            long_text_mode=args.embedding_long_text_mode,
        )
        _ = self.encoder.dim  # load the embedding model now: a wrong name fails here, not after the first rollout
        self._oger_rows = None  # the batch rows of the current generation call
        self._oger_is_offline = None  # [B] bool of the current generation call
        self._oger_forward = None  # capture slot for the policy forward inside _compute_loss
        self._oger_deferred_entropy = None  # H_last to read from TRL's scoring forward (vLLM)
        self._warned_truncation = False

    # ------------------------------------------------------------------ generation
    def _generate_and_score_completions(self, inputs):
        # Overrides GRPOTrainer._generate_and_score_completions only to hand the rows to `_generate`
        # (which receives the prompts alone) and to add `is_offline` ([B] bool, batch-first, so it
        # survives TRL's shuffling and splitting) to the training batch.
        self._oger_rows = inputs
        self._oger_deferred_entropy = None
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self._oger_rows = None
        output["is_offline"] = self._oger_is_offline.to(self.accelerator.device)
        return output

    def _entropy_recorder(self):
        uses_hf_generate = not (self.use_vllm or self.use_transformers_continuous_batching or self.rollout_func or self.tools)
        if not uses_hf_generate:
            return nullcontext()
        return LastTokenEntropyRecorder(self.accelerator.unwrap_model(self.model), self.temperature)

    def _forward_last_token_entropy(self, prompt_ids, completion_ids) -> torch.Tensor:
        """One no-grad policy forward for ``H_last`` when generation did not record it (vLLM, custom rollouts).

        Cost: one forward pass over the batch (TRL's entropies are at the training temperature).
        """
        from trl.trainer.utils import pad

        device = self.accelerator.device
        pad_id = self._tokenizer.pad_token_id
        p = pad([torch.tensor(x) for x in prompt_ids], padding_value=pad_id, padding_side="left")
        c = pad([torch.tensor(x) for x in completion_ids], padding_value=pad_id, padding_side="right")
        pm = pad([torch.ones(len(x), dtype=torch.long) for x in prompt_ids], padding_value=0, padding_side="left")
        cm = pad([torch.ones(len(x), dtype=torch.long) for x in completion_ids], padding_value=0, padding_side="right")
        with torch.no_grad():
            _, entropies, _ = self._get_per_token_logps_and_entropies(
                self.model, torch.cat([p, c], 1).to(device), torch.cat([pm, cm], 1).to(device), c.size(1), compute_entropy=True
            )
        return entropies.float().cpu()

    def _generate(self, prompts):
        # Overrides GRPOTrainer._generate: the online completions come back from TRL, then OGER computes
        # divergence and last-token entropy and builds the hybrid groups before any reward is computed.
        mode = "train" if self.model.training else "eval"
        num_replace = self.args.num_replacements if mode == "train" else 0
        # What this step needs: the divergence feeds the exploration reward (also logged, with weight 0, in
        # the "w/o Reward" ablation) and the lowest-divergence replacement; H_last refines that reward. With
        # no replacement and no reward nothing is computed, so OGERTrainer then costs what GRPOTrainer costs.
        need_divergence = self.args.use_exploration_reward or (
            num_replace > 0 and self.args.replacement_rule == "lowest_divergence"
        )
        need_entropy = need_divergence and self.args.entropy_refinement
        recorder = self._entropy_recorder() if need_entropy else nullcontext()
        with recorder:
            (prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, images, tool_images) = (
                super()._generate(prompts)
            )
        rows = self._oger_rows
        if rows is None or len(rows) != len(completion_ids):
            raise RuntimeError("OGERTrainer._generate must be called from _generate_and_score_completions")
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        num_rows = len(completion_ids)
        if num_rows % group_size != 0:
            raise ValueError(f"this process got {num_rows} completions, not a whole number of groups of {group_size}")

        # H_last (Eq. 6) of every online completion
        lengths = torch.tensor([len(c) for c in completion_ids])
        last_pos = lengths.clone()
        if self.args.last_token == "before_eos":
            ends_eos = torch.tensor([len(c) > 1 and c[-1] in self.eos_token_ids for c in completion_ids])
            last_pos = last_pos - ends_eos.long()
        deferred = False
        if not need_entropy:
            entropy = None
        elif isinstance(recorder, LastTokenEntropyRecorder):
            entropy = recorder.last_token_entropy(last_pos.clamp(min=1))
        elif self.model.training and trl_scores_after_generation(self):
            entropy, deferred = torch.zeros(num_rows), True  # filled from TRL's scoring forward, before the rewards
        else:
            entropy = last_token_values(self._forward_last_token_entropy(prompt_ids, completion_ids), last_pos.clamp(min=1))

        # Divergence (Eq. 1-5) and hybrid replacement (§3.2), group by group
        online_emb = self.encoder.encode([completion_text(c) for c in completions]) if need_divergence else None
        rng = torch.Generator().manual_seed(
            self.args.seed * 1_000_003 + self.state.global_step * 1_009 + self.accelerator.process_index
        )  # a function of the step: replacement draws replay exactly after resuming from a checkpoint
        is_offline = [False] * num_rows
        teacher: list[str | None] = [None] * num_rows
        div_values: list[float | None] = [0.0] * num_rows
        entropy_values: list[float | None] = entropy.tolist() if entropy is not None else [None] * num_rows
        eos_id = self._tokenizer.eos_token_id
        num_truncated = 0
        for start in range(0, num_rows, group_size):
            group = range(start, start + group_size)
            offline_texts, teachers, offline_emb = self._offline_for_group(rows, group, need_divergence)
            if not offline_texts:
                continue  # no teacher for this prompt: all N online completions are kept
            if need_divergence:
                d = divergence(online_emb[start : start + group_size], offline_emb)
                for i in group:
                    div_values[i] = float(d[i - start])
            else:  # random replacement or none: the divergence is never looked at
                d = torch.zeros(group_size)
            chosen = select_replacements(d, num_replace, self.args.replacement_rule, rng)
            picks = sample_offline_indices(len(offline_texts), len(chosen), rng)
            for local, j in zip(chosen.tolist(), picks):
                i = start + local
                tokens = self._tokenizer(offline_texts[j], add_special_tokens=False)["input_ids"]
                ids = offline_completion_ids(tokens, self.max_completion_length, eos_id)
                num_truncated += int(len(tokens) - (tokens[-1:] == [eos_id]) > self.max_completion_length - 1)
                text = self.processing_class.decode(ids, skip_special_tokens=True)
                completion_ids[i] = ids
                completions[i] = [{"role": "assistant", "content": text}] if isinstance(completions[i], list) else text
                if logprobs is not None:  # no behaviour log-probs: TRL reads NaN as "no IS correction"
                    logprobs[i] = [None] * len(ids)
                if tool_mask is not None:
                    tool_mask[i] = [1] * len(ids)
                is_offline[i], teacher[i] = True, teachers[j]
                div_values[i], entropy_values[i] = None, None

        self._oger_is_offline = torch.tensor(is_offline)
        extra_fields = dict(extra_fields)
        extra_fields.update(
            is_offline=is_offline, teacher=teacher, oger_divergence=div_values, last_token_entropy=entropy_values
        )
        metrics = (mode, div_values, entropy_values, is_offline, num_truncated, need_divergence)
        if deferred:  # TRL merges `extra_fields` into the reward inputs after its scoring forward fills them in
            self._oger_deferred_entropy = {"values": entropy_values, "last_pos": last_pos.clamp(min=1), "metrics": metrics}
        else:
            self._log_generation_metrics(*metrics)
        return prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, images, tool_images

    def _offline_for_group(self, rows, group, need_embeddings: bool = True):
        """The group's teacher trajectories, their teacher names and ``[M, d]`` embeddings (cached; None when
        ``need_embeddings`` is False)."""
        first = rows[group[0]]
        for i in group:
            if rows[i].get("prompt") != first.get("prompt"):
                raise ValueError(
                    f"rows {group[0]} and {i} of this process's batch belong to different prompts: OGER needs each "
                    f"group of num_generations consecutive rows to hold one prompt"
                )
        if self.args.offline_completions_column not in first and not self.model.training:
            return [], [], None  # an evaluation set without teachers: divergence 0, nothing to replace
        texts, teachers, stored = offline_trajectories(first, self.args)
        if not texts:
            return [], [], None
        if not need_embeddings:
            return texts, teachers, None
        if stored is not None:
            emb = torch.as_tensor(stored, dtype=torch.float32)
            if emb.dim() != 2 or emb.size(0) != len(texts) or emb.size(1) != self.encoder.dim:
                raise ValueError(
                    f"column {self.args.offline_embeddings_column!r} holds embeddings of shape {tuple(emb.shape)} "
                    f"for {len(texts)} trajectories; the embedding model {self.encoder.model_name_or_path!r} gives "
                    f"{self.encoder.dim}-d ones: expected ({len(texts)}, {self.encoder.dim})"
                )
            if not torch.isfinite(emb).all():
                raise ValueError(f"column {self.args.offline_embeddings_column!r} holds NaN or infinite values")
        else:
            emb = self.encoder.encode_cached(texts)
        return texts, teachers, emb

    def _log_generation_metrics(self, mode, div_values, entropy_values, is_offline, num_truncated, need_divergence):
        device = self.accelerator.device
        online = [i for i, off in enumerate(is_offline) if not off]
        has_entropy = bool(online) and entropy_values[online[0]] is not None  # the same on every process
        stats = torch.tensor(
            [
                sum(div_values[i] for i in online),
                sum(entropy_values[i] for i in online) if has_entropy else 0.0,
                float(len(online)),
                float(sum(is_offline)),
                float(len(is_offline)),
                float(num_truncated),
            ],
            dtype=torch.float64,
            device=device,
        )
        div_sum, ent_sum, n_online, n_offline, n_all, n_cut = self.accelerator.reduce(stats, reduction="sum").tolist()
        if need_divergence:
            self._metrics[mode]["oger/divergence_mean"].append(div_sum / max(n_online, 1.0))
        if has_entropy:
            self._metrics[mode]["oger/last_token_entropy_mean"].append(ent_sum / max(n_online, 1.0))
        self._metrics[mode]["oger/offline_fraction"].append(n_offline / max(n_all, 1.0))
        # teacher trajectories longer than max_completion_length lose their ending (and usually their answer)
        self._metrics[mode]["oger/offline_truncated_fraction"].append(n_cut / max(n_offline, 1.0))
        if n_cut and not self._warned_truncation:
            self._warned_truncation = True
            logger.warning(
                "%d offline trajectories were truncated to max_completion_length=%d tokens: filter the offline set "
                "to at most max_completion_length - 1 tokens (trl_explore.data, max_length)",
                int(n_cut), self.max_completion_length,
            )

    # ------------------------------------------------------------------ loss
    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        # Overrides GRPOTrainer._get_per_token_logps_and_entropies to (a) keep the output of the policy forward made
        # inside `_compute_loss`, so the offline rows' loss reuses it (no second forward), and (b) read H_last of the
        # online completions from TRL's scoring forward after vLLM generation (entropies requested there; no extra
        # forward). That forward runs before the rewards, which then see the filled-in values.
        pending = self._oger_deferred_entropy
        if pending is not None and self._oger_forward is None:
            self._oger_deferred_entropy = None
            kwargs["compute_entropy"] = True
            output = super()._get_per_token_logps_and_entropies(*args, **kwargs)
            values = pending["values"]
            online = [i for i, value in enumerate(values) if value is not None]  # offline rows keep None
            if online:
                rows = torch.tensor(online)
                entropy = last_token_values(output[1].detach().float().cpu()[rows], pending["last_pos"][rows])
                for i, value in zip(online, entropy.tolist()):
                    values[i] = value
            self._log_generation_metrics(*pending["metrics"])
            return output
        output = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._oger_forward is not None and self._oger_forward.get("capture"):
            self._oger_forward = {"capture": False, "output": output}
        return output

    def _compute_loss(self, model, inputs):
        # Overrides GRPOTrainer._compute_loss: TRL computes its objective with offline rows masked out of
        # the loss (through `tool_mask`, which masks the loss but not attention); the offline tokens'
        # policy-shaping loss is then added from the same forward pass, with TRL's normalisation.
        # Every process runs the same collectives below, whether or not its micro-batch holds offline rows.
        is_offline = inputs.get("is_offline")
        if is_offline is None:
            return super()._compute_loss(model, inputs)
        completion_mask = inputs["completion_mask"]
        base_mask = inputs.get("tool_mask", torch.ones_like(completion_mask))
        online_inputs = dict(inputs)
        online_inputs["tool_mask"] = base_mask * (~is_offline).unsqueeze(1).to(base_mask.dtype)
        self._oger_forward = {"capture": True}
        try:
            loss = super()._compute_loss(model, online_inputs)
            per_token_logps, entropies, _ = self._oger_forward["output"]
        finally:
            self._oger_forward = None

        mode = "train" if self.model.training else "eval"
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        all_mask = (completion_mask * base_mask).float()
        online_mask = online_inputs["tool_mask"].float() * completion_mask
        offline_mask = all_mask - online_mask
        n_online, n_all = online_mask.sum(), all_mask.sum()
        if self.loss_type == "bnpo":  # TRL divided by the on-policy token count; renormalise over all tokens
            loss = loss * n_online.clamp(min=1.0) / n_all.clamp(min=1.0)
            token_normalizer = n_all
        elif self.loss_type in ("dapo", "cispo", "vespo"):
            token_normalizer = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if mode == "train":
                token_normalizer = token_normalizer * self.current_gradient_accumulation_steps / self.args.steps_per_generation
        else:
            token_normalizer = n_all
        shaping = policy_shaping_per_token_loss(per_token_logps, inputs["advantages"], self.args.policy_shaping_gamma)
        offline_loss = aggregate_token_loss(
            shaping,
            offline_mask,
            self.loss_type,
            num_rows=completion_mask.size(0),
            max_completion_length=self.max_completion_length,
            token_normalizer=token_normalizer,
            accumulation_steps=accumulation,
        )
        loss = loss + offline_loss

        # TRL's entropy bonus averaged over on-policy tokens only; make it the mean over all tokens
        if self._entropy_bonus_enabled and self.top_entropy_quantile >= 1.0:
            coef = self.entropy_coef
            if self.use_adaptive_entropy and self._last_world_entropy > self.args.entropy_target:
                coef = 0.0
            mean_all = (entropies * all_mask).sum() / n_all.clamp(min=1.0)
            mean_online = (entropies * online_mask).sum() / n_online.clamp(min=1.0)
            loss = loss - coef * (mean_all - mean_online) / accumulation

        with torch.no_grad():
            probs = per_token_logps.exp()
            stats = torch.stack([(probs * offline_mask).sum(), offline_mask.sum(), offline_loss.detach() * accumulation])
            stats = self.accelerator.reduce(stats, reduction="sum")
        self._metrics[mode]["oger/offline_token_prob_mean"].append((stats[0] / stats[1].clamp(min=1.0)).item())
        self._metrics[mode]["oger/offline_policy_loss"].append((stats[2] / self.accelerator.num_processes).item())
        return loss
