"""OGER as a :class:`~trl_explore.driver.components.Component` of :class:`~trl_explore.driver.ExplorationTrainer`.

Paper: "OGER: A Robust Offline-Guided Exploration Reward for Hybrid Reinforcement Learning" (§3). Maths:
``exploration`` (Eq. 3-5), ``entropy`` (Eq. 6), ``replacement`` (§3.2), ``policy_shaping`` (Eq. 10 + LUFFY),
``reward`` (``OGERRewardFunction``, Eq. 7-8). Hooks:

* ``prepare``: the default rewards ``[R_m, R_OGER]`` (Eq. 8) and their weights, every training row checked;
* ``sampling_context``: with HF ``generate``, a recorder of each row's last decoding step (steered or not);
* ``transform_rollout``: H_last and divergence of every online row; the ``k`` least divergent rows of each group
  replaced by teacher trajectories (``Rollout.offline`` marks them);
* ``observe_forward``: H_last read from TRL's scoring forward (vLLM), when it comes after generation;
* ``reward_fields`` / ``batch_fields``: per-completion values for ``OGERRewardFunction``, ``is_offline``;
* ``drop_rows`` / ``extra_loss``: offline rows leave TRL's objective and are trained by policy shaping; the entropy
  mask (``top_entropy_quantile``) and the entropy bonus follow one rule for both kinds of tokens (``OGEROptions``).
"""

from __future__ import annotations

import dataclasses
import logging

import torch

from trl_explore.defaults import trl_scores_after_generation
from trl_explore.driver.components import Component, Needs, Rollout
from trl_explore.driver.objective import ITEMS_BEFORE_DROPS
from trl_explore.driver.profiling import phase, record_phase
from trl_explore.oger import fields
from trl_explore.oger.card import OGER_CARD
from trl_explore.oger.embedding import TrajectoryEncoder
from trl_explore.oger.entropy import LastTokenEntropyRecorder, last_token_values
from trl_explore.oger.exploration import divergence
from trl_explore.oger.offline import (
    check_prompt,
    generation_prefix,
    group_offline,
    offline_trajectories,
    teacher_completion,
)
from trl_explore.oger.options import LAST_TOKEN, OGEROptions
from trl_explore.oger.policy_shaping import (
    aggregate_token_loss,
    entropy_bonus_correction,
    high_entropy_terms,
    policy_shaping_per_token_loss,
)
from trl_explore.oger.replacement import REPLACEMENT_RULES, sample_offline_indices, select_replacements
from trl_explore.rewards.correctness import threshold_of
from trl_explore.rewards.math_verify_reward import completion_text
from trl_explore.trl_guards.distributed import load_auxiliary_model

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class OGERGeneration:
    """OGER's per-completion values of one generation call (tuples of length B; None on offline rows)."""

    mode: str
    is_offline: tuple
    teacher: tuple
    divergence: tuple
    entropy: tuple
    num_truncated: int
    need_divergence: bool
    pending_entropy: torch.Tensor | None = None  # [B] last positions, when H_last comes from TRL's scoring forward
    num_embed_truncated: int = 0  # online completions the embedder cut to its max_seq_length ("truncate" mode)


class OGERComponent(Component):
    """OGER's part (module docstring).

    Args:
        options: :class:`OGEROptions` (default: read from the training config, e.g. an ``OGERConfig``).
        encoder: a ``TrajectoryEncoder`` (default: built from ``options.embedding_model``).
    """

    name = "oger"
    options_class = OGEROptions
    reward_field_names = fields.REWARD_FIELDS
    tags = ("oger",)
    card = OGER_CARD  # the model card's entry (trl_explore.hub)
    edits_rows = True  # teacher trajectories replace online rows in transform_rollout
    follows_row_owners = True  # reward_fields and batch_fields read Rollout.owner / Rollout.offline
    console_keys = ("oger/reward_mean", "oger/failed_ratio", "oger/divergence_mean", "oger/offline_token_prob_mean")

    def __init__(self, options: OGEROptions | None = None, encoder: TrajectoryEncoder | None = None):
        super().__init__(options)
        self.encoder = encoder
        self.generation: OGERGeneration | None = None
        self._recorder: LastTokenEntropyRecorder | None = None
        self._warned_truncation = self._warned_embed_truncation = False
        self._generation_prefix = ""  # set in setup from the chat template

    # ---------------------------------------------------------------- construction
    def prepare(self, plan):
        """The default rewards (Eq. 8: ``[R_m, R_OGER]``, weights ``[1, 1]``; ``[1, 0]`` for "w/o Reward"), the
        ablation switches on every ``OGERRewardFunction``, and every training row checked once.

        Logs a warning when ``reward_funcs`` is given with no ``OGERRewardFunction`` among them (the exploration reward
        is then off), unless ``use_exploration_reward`` is False.

        Raises:
            ValueError: "w/o Reward" with a non-zero OGER weight; a bad prompt or offline field in any row (the message
                names the row).
        """
        from trl_explore.oger.reward import OGERRewardFunction

        plan = super().prepare(plan)
        opts, args = self.options, plan.args
        reward_funcs = list(plan.reward_funcs)
        if plan.default_rewards:
            reward_funcs.append(OGERRewardFunction(verifier=reward_funcs[0]))
        is_oger = [isinstance(f, OGERRewardFunction) for f in reward_funcs]
        if not any(is_oger) and opts.use_exploration_reward:  # reward_funcs given: they replace [R_m, R_OGER]
            logger.warning(
                "reward_funcs %s has no OGERRewardFunction, so OGER's exploration reward R_OGER (Eq. 7-8) is off: "
                "the given functions replace the default [R_m, R_OGER] (teacher replacement and policy shaping still "
                "run). To keep it, pass reward_funcs=[reward, OGERRewardFunction(verifier=reward)]; to run without "
                "it, set use_exploration_reward=False, which silences this warning",
                [f if isinstance(f, str) else getattr(f, "__name__", type(f).__name__) for f in reward_funcs])
        for func, oger in zip(reward_funcs, is_oger):
            if oger:
                func.entropy_refinement = opts.entropy_refinement
                func.correct_threshold = threshold_of(args)  # one correctness rule (rewards.correctness)
        if args.reward_weights is None:
            args.reward_weights = [0.0 if oger and not opts.use_exploration_reward else 1.0 for oger in is_oger]
        elif not opts.use_exploration_reward and any(w != 0 for w, o in zip(args.reward_weights, is_oger) if o):
            raise ValueError(
                "use_exploration_reward=False ('w/o Reward') but reward_weights gives the OGER reward a non-zero "
                f"weight: {args.reward_weights}"
            )
        rows = plan.train_dataset if hasattr(plan.train_dataset, "__len__") else []  # IterableDataset: at first use
        tokenizer = plan.trainer_kwargs.get("processing_class")  # refuses teacher texts of special tokens only
        for i, row in enumerate(rows):  # every row, once, before training
            check_prompt(row, f"training row {i}")
            offline_trajectories(row, opts, f"training row {i}", tokenizer)
        return dataclasses.replace(plan, reward_funcs=reward_funcs)

    def setup(self, trainer) -> None:
        super().setup(trainer)
        opts = self.options
        if opts.loss_remove_clip:  # LUFFY: no ratio clipping on on-policy tokens
            trainer.epsilon_low = trainer.epsilon_high = float("inf")
        if self.encoder is None:
            self.encoder = TrajectoryEncoder(opts.embedding_model, device=trainer.accelerator.device,
                                             batch_size=opts.embedding_batch_size,
                                             long_text_mode=opts.embedding_long_text_mode,
                                             dtype=opts.embedding_precision(trainer.args))
        # load the embedding model now (a wrong name fails here, not after the first rollout), whole on every process:
        # outside DeepSpeed ZeRO-3 partitioning and FSDP's rank-0-only loading, never wrapped by Accelerate
        load_auxiliary_model(lambda: self.encoder.model, "the OGER embedder (OGEROptions.embedding_model / encoder=)")
        # what the chat template puts before every completion (e.g. "<think>\n"): not repeated by teacher rows
        self._generation_prefix = generation_prefix(trainer.processing_class, trainer.chat_template_kwargs)

    def _plan(self, mode: str) -> tuple[int, bool, bool]:
        """``(replacements per group, divergence needed, H_last needed)``. The divergence feeds the reward (also
        logged with weight 0 in "w/o Reward") and the lowest-divergence replacement; H_last refines the reward.
        With neither, nothing is computed and OGER costs what GRPO costs."""
        opts = self.options
        num_replace = opts.num_replacements if mode == "train" else 0
        need_div = opts.use_exploration_reward or (
            num_replace > 0 and REPLACEMENT_RULES[opts.replacement_rule].uses_divergence)
        return num_replace, need_div, need_div and opts.entropy_refinement

    def needs(self, mode):
        pending = self.generation is not None and self.generation.pending_entropy is not None
        return Needs(scoring_forward=pending, scoring_entropy=pending, loss_forward=True)

    # ---------------------------------------------------------------- generation
    def sampling_context(self, call):
        t = self.trainer
        self._recorder = None
        hf_generate = not (t.use_vllm or t.use_transformers_continuous_batching or t.rollout_func or t.tools)
        if not (hf_generate and self._plan(call.mode)[2]):
            return None
        self._recorder = LastTokenEntropyRecorder(t.accelerator.unwrap_model(t.model), t.sampler, t.eos_token_ids,
                                                  keep_previous=LAST_TOKEN[self.options.last_token])
        return self._recorder

    def offline_for_group(self, rows, group, need_embeddings: bool = True):
        """The group's teacher texts, names and ``[M, d]`` embeddings (see ``offline.group_offline``)."""
        return group_offline(rows, group, self.options, self.encoder if need_embeddings else None,
                             self.trainer.model.training)

    def _last_token_entropy(self, rollout: Rollout, last_pos: torch.Tensor):
        """``([B] H_last or None, deferred)``: from the generation recorder (the logits ``generate`` computed,
        processed by the effective sampler), TRL's later scoring forward (when its distribution, ``softmax(logits /
        GRPOConfig.temperature)``, is the sampler's and no other component steers), or the driver's behaviour forward
        (the route's steering and the effective sampler, at the last positions only)."""
        t, recorder, self._recorder = self.trainer, self._recorder, None
        if recorder is not None:  # the per-step work was done in generate's hooks; one entropy per row here
            record_phase(t, "oger: H_last (generate hooks)", recorder.seconds)
            with phase(t, "oger: H_last"):
                return recorder.last_token_entropy(last_pos), False
        steered = any(c.behaviour_context(rollout.mode) is not None for c in t.components if c is not self)
        trl_distribution = t.sampler.matches_trl(t.temperature)
        if rollout.mode == "train" and trl_scores_after_generation(t) and not steered and trl_distribution:
            return torch.zeros(len(last_pos)), True  # filled from TRL's scoring forward, before the rewards
        with phase(t, "oger: H_last"):
            forward = t.behaviour_forward(rollout.mode, rollout.prompt_ids, rollout.completion_ids, positions=last_pos)
        return forward.entropies[:, 0].float().cpu(), False

    def _embed_online(self, rows, completions, group_size: int):
        """``([B, d] online embeddings, number the embedder truncated)``. The teacher texts of every group that has no
        stored embeddings are encoded first, in one call (each text once per run: the encoder's cache); then the
        online completions, all of the generation batch in one call, each distinct text once."""
        t, opts = self.trainer, self.options
        teachers = [text for start in range(0, len(rows), group_size)
                    if rows[start].get(opts.offline_embeddings_column) is None
                    for text in rows[start].get(opts.offline_completions_column) or () if isinstance(text, str)]
        if teachers:
            with phase(t, "oger: embed teachers"):
                self.encoder.encode_cached(teachers)
        with phase(t, "oger: embed online"):
            emb, cut = self.encoder.encode_with_truncation([completion_text(c) for c in completions])
        return emb, int(cut.sum())

    def transform_rollout(self, rollout):
        t = self.trainer
        _, need_div, need_entropy = self._plan(rollout.mode)
        group_size, completion_ids = rollout.num_generations, rollout.completion_ids
        if len(completion_ids) % group_size != 0:
            raise ValueError(f"this process got {len(completion_ids)} completions, not a whole number of groups of "
                             f"{group_size}")

        # H_last (Eq. 6) of every online completion, at the distribution that produced its last token
        last_pos = torch.tensor([len(c) for c in completion_ids])
        if LAST_TOKEN[self.options.last_token]:  # the distribution before a final EOS
            ends_with_eos = [len(c) > 1 and c[-1] in t.eos_token_ids for c in completion_ids]
            last_pos = last_pos - torch.tensor(ends_with_eos).long()
        last_pos = last_pos.clamp(min=1)
        entropy, deferred = self._last_token_entropy(rollout, last_pos) if need_entropy else (None, False)
        self._recorder = None

        online_emb, embed_cut = (self._embed_online(rollout.rows, rollout.completions, group_size) if need_div
                                 else (None, 0))
        with phase(t, "oger: divergence and replacement"):
            rollout = self._replace(rollout, online_emb, entropy, last_pos if deferred else None, embed_cut)
        if not deferred:
            self._log_generation_metrics()
        return rollout

    def _replace(self, rollout, online_emb, entropy, pending_entropy, embed_cut):
        """Divergence (Eq. 1-5) of every online row, then hybrid replacement (§3.2), group by group."""
        t, opts, rows = self.trainer, self.options, rollout.rows
        num_replace, need_div, _ = self._plan(rollout.mode)
        group_size = rollout.num_generations
        completion_ids, completions = list(rollout.completion_ids), list(rollout.completions)
        logprobs = None if rollout.logprobs is None else list(rollout.logprobs)
        tool_mask = None if rollout.tool_mask is None else list(rollout.tool_mask)
        num_rows = len(completion_ids)
        rng = self.generator(t.accelerator.process_index)  # OGER's own stream (Component.generator)
        is_offline, teacher = [False] * num_rows, [None] * num_rows
        div_values = [0.0] * num_rows
        entropy_values = entropy.tolist() if entropy is not None else [None] * num_rows
        for i, rewritten in enumerate(rollout.offline):  # rows an earlier component replaced: not OGER's to score
            if rewritten:
                div_values[i] = entropy_values[i] = None
        num_truncated = 0
        for start in range(0, num_rows, group_size):
            group = range(start, start + group_size)
            offline_texts, teachers, offline_emb = self.offline_for_group(rows, group, need_div)
            if not offline_texts:
                continue  # no teacher for this prompt: all N online completions are kept
            online = [j for j in range(group_size) if not rollout.offline[start + j]]  # candidates: online rows
            if need_div:
                d = divergence(online_emb[start : start + group_size], offline_emb)
            else:
                d = torch.zeros(group_size)
            if need_div:
                for j in online:
                    div_values[start + j] = d[j].item()
            picked = select_replacements(d[online], min(num_replace, len(online)), opts.replacement_rule, rng)
            chosen = [online[j] for j in picked.tolist()]
            for local, j in zip(chosen, sample_offline_indices(len(offline_texts), len(chosen), rng)):
                i = start + local
                completion_ids[i], completions[i], cut = teacher_completion(
                    offline_texts[j], t._tokenizer, t.processing_class, t.max_completion_length,
                    isinstance(completions[i], list), self._generation_prefix)
                ids, num_truncated = completion_ids[i], num_truncated + cut
                if logprobs is not None:  # no behaviour log-probs: TRL reads NaN as "no IS correction"
                    logprobs[i] = [None] * len(ids)
                if tool_mask is not None:
                    tool_mask[i] = [1] * len(ids)
                is_offline[i], teacher[i], div_values[i], entropy_values[i] = True, teachers[j], None, None

        self.generation = OGERGeneration(rollout.mode, tuple(is_offline), tuple(teacher), tuple(div_values),
                                         tuple(entropy_values), num_truncated, need_div, pending_entropy, embed_cut)
        offline = tuple(a or b for a, b in zip(rollout.offline, is_offline))
        # every replaced row is OGER's, named here: the driver infers an owner from changed ids or text only, and a
        # teacher text the policy sampled word for word (the ladder's `terse` style, which its worked example
        # teaches) would stay unowned, its teacher name lost in the reward kwargs and the completion log
        owner = tuple(self.name if off else o for o, off in zip(rollout.owner, is_offline))
        return dataclasses.replace(rollout, completion_ids=completion_ids, completions=completions, logprobs=logprobs,
                                   tool_mask=tool_mask, offline=offline, owner=owner)

    def observe_forward(self, result):
        gen = self.generation
        if result.call.kind != "scoring" or gen is None or gen.pending_entropy is None:
            return
        entropy = list(gen.entropy)  # offline rows keep None; the online ones are read from TRL's forward
        online = torch.tensor([i for i, off in enumerate(gen.is_offline) if not off], dtype=torch.long)
        if online.numel():
            entropies = result.forward.entropies.detach().float().cpu()
            values = last_token_values(entropies[online], gen.pending_entropy[online])
            for i, value in zip(online.tolist(), values.tolist()):
                entropy[i] = value
        self.generation = dataclasses.replace(gen, entropy=tuple(entropy), pending_entropy=None)
        self._log_generation_metrics()

    def reward_fields(self, rollout):
        """OGER's per-completion values, following row ownership: a row OGER replaced is offline with its teacher; a
        row another component rewrote (before or after OGER) has no divergence and no H_last (OGER computed them of
        the completion it replaced, or not at all) and is offline when ``Rollout.offline`` says so, so
        ``OGERRewardFunction`` gives it 0 when offline."""
        gen = self.generation
        own = [owner == self.name for owner in rollout.owner]
        kept = [owner is None for owner in rollout.owner]  # TRL's sample, untouched since OGER read it
        return {
            fields.IS_OFFLINE: [bool(o) or off for o, off in zip(own, rollout.offline)],
            fields.TEACHER: [t if o else None for t, o in zip(gen.teacher, own)],
            fields.DIVERGENCE: [d if k else None for d, k in zip(gen.divergence, kept)],
            fields.LAST_TOKEN_ENTROPY: [h if k else None for h, k in zip(gen.entropy, kept)],
        }

    def batch_fields(self, batch):
        """``is_offline``: the rows OGER replaced with a teacher trajectory and trains by policy shaping (rows other
        components rewrote stay with them)."""
        own = [owner == self.name for owner in batch.rollout.owner]
        return {"is_offline": torch.tensor(own, dtype=torch.bool, device=self.trainer.accelerator.device)}

    def _log_generation_metrics(self) -> None:
        gen, t = self.generation, self.trainer
        online = [i for i, off in enumerate(gen.is_offline) if not off]
        has_entropy = bool(online) and gen.entropy[online[0]] is not None  # the same on every process
        entropy_sum = sum(gen.entropy[i] for i in online) if has_entropy else 0.0
        stats = torch.tensor([sum(gen.divergence[i] for i in online), entropy_sum, len(online), sum(gen.is_offline),
                              len(gen.is_offline), gen.num_truncated, gen.num_embed_truncated],
                             dtype=torch.float64, device=t.accelerator.device)
        div_sum, ent_sum, n_online, n_offline, n_all, n_cut, n_embed_cut = t.accelerator.reduce(
            stats, reduction="sum").tolist()
        metrics = t._metrics[gen.mode]
        if gen.need_divergence:
            metrics["oger/divergence_mean"].append(div_sum / max(n_online, 1.0))
            # every generated completion was embedded (before replacement); "truncate" mode reads only its beginning
            metrics["oger/embed_truncated_frac"].append(n_embed_cut / max(n_all, 1.0))
            if n_embed_cut and not self._warned_embed_truncation:
                self._warned_embed_truncation = True
                logger.warning("%d of %d completions are longer than the embedder's max_seq_length=%d tokens and were "
                               "embedded from their beginning only: completions that differ after it get the same "
                               "divergence. Set OGEROptions.embedding_long_text_mode='chunk_mean' to embed them whole "
                               "(metric oger/embed_truncated_frac)", int(n_embed_cut), int(n_all),
                               int(self.encoder.model.max_seq_length))
        if has_entropy:
            metrics["oger/last_token_entropy_mean"].append(ent_sum / max(n_online, 1.0))
        metrics["oger/offline_fraction"].append(n_offline / max(n_all, 1.0))
        # teacher trajectories longer than max_completion_length lose their ending (and usually their answer)
        metrics["oger/offline_truncated_fraction"].append(n_cut / max(n_offline, 1.0))
        if n_cut and not self._warned_truncation:
            self._warned_truncation = True
            logger.warning("%d offline trajectories were truncated to max_completion_length=%d tokens: filter the "
                           "offline set to at most max_completion_length - 1 tokens (trl_explore.data, max_length)",
                           int(n_cut), t.max_completion_length)

    # ---------------------------------------------------------------- loss
    def drop_rows(self, batch):
        """OGER's teacher rows leave TRL's objective (``Component.drop_rows``); :meth:`extra_loss` trains them by
        policy shaping under the whole batch's normaliser."""
        return torch.tensor([owner == self.name for owner in batch.rollout.owner], dtype=torch.bool)

    def extra_loss(self, call):
        with phase(self.trainer, "oger: policy shaping"):  # its backward is part of TRL's backward pass
            return self._add_policy_shaping(call.loss, call.inputs, call.batch, call.forward, call.mode,
                                            call.entropy_mask, call.objective_share, call.dropped)

    def _add_policy_shaping(self, loss, inputs, batch, forward, mode, entropy_mask=None, share=1.0, dropped=None):
        """Policy shaping of the offline tokens (LUFFY), from the same forward, with TRL's normalisation; with
        ``top_entropy_quantile < 1``, on the high-entropy tokens only, and the entropy bonus over the high-entropy
        tokens of both kinds (``policy_shaping.high_entropy_terms``: one rule for online and offline tokens).

        TRL's objective ran on the online rows alone (the teacher rows were dropped): ``share`` (``LossCall.
        objective_share``) brings its policy term back to the whole batch's normaliser, so that the online and the
        offline tokens share one normaliser (LUFFY's mixed objective); its entropy bonus and auxiliary loss, which
        TRL does not normalise by the loss type, are restored to their own scale."""
        t = self.trainer
        completion_mask = inputs["completion_mask"]
        accumulation = t.current_gradient_accumulation_steps if mode == "train" else 1.0
        all_mask = (completion_mask * inputs.get("tool_mask", torch.ones_like(completion_mask))).float()
        own = batch["is_offline"].bool()
        in_trl = ~(own if dropped is None else dropped | own)  # TRL's objective: the rows no component dropped
        online_mask = all_mask * in_trl.unsqueeze(1).to(all_mask.dtype)
        offline_mask = all_mask * own.unsqueeze(1).to(all_mask.dtype)
        n_all = all_mask.sum()
        share = torch.as_tensor(share, dtype=loss.dtype, device=loss.device)
        loss = loss * share
        if t.aux_loss_enabled and forward.aux_loss is not None:  # TRL's router term is not the loss type's: unscale
            loss = loss + (1 - share) * t.router_aux_loss_coef * forward.aux_loss / accumulation
        if t.loss_type == "bnpo":
            token_normalizer = n_all
        elif t.loss_type in ("dapo", "cispo", "vespo"):  # every loss token of the generation batch, teachers' too
            items = inputs.get(ITEMS_BEFORE_DROPS, inputs["num_items_in_batch"])
            token_normalizer = items.clamp(min=1.0) / t.accelerator.num_processes
            if mode == "train":
                token_normalizer = (token_normalizer * t.current_gradient_accumulation_steps
                                    / t.args.steps_per_generation)
        else:
            token_normalizer = n_all
        shaping = policy_shaping_per_token_loss(forward.logps, inputs["advantages"], self.options.policy_shaping_gamma)
        shaping, bonus_all, bonus_online = high_entropy_terms(shaping, all_mask, online_mask, entropy_mask)
        offline_loss = aggregate_token_loss(shaping, offline_mask, t.loss_type, num_rows=completion_mask.size(0),
                                            max_completion_length=t.max_completion_length,
                                            token_normalizer=token_normalizer, accumulation_steps=accumulation)
        loss = loss + offline_loss
        if t._entropy_bonus_enabled:  # TRL's bonus covered its (online) tokens only: extend it to the offline ones
            coef = 0.0 if t.use_adaptive_entropy and t._last_world_entropy > t.args.entropy_target else t.entropy_coef
            loss = loss - coef * entropy_bonus_correction(forward.entropies, bonus_all, bonus_online,
                                                          online_weight=share) / accumulation
        with torch.no_grad():
            probs = forward.logps.exp()
            stats = torch.stack([(probs * offline_mask).sum(), offline_mask.sum(),
                                 offline_loss.detach() * accumulation])
            stats = t.accelerator.reduce(stats, reduction="sum")
        t._metrics[mode]["oger/offline_token_prob_mean"].append((stats[0] / stats[1].clamp(min=1.0)).item())
        t._metrics[mode]["oger/offline_policy_loss"].append((stats[2] / t.accelerator.num_processes).item())
        return loss
