"""ASE-GRPO as a :class:`~trl_explore.driver.components.Component` of :class:`~trl_explore.driver.ExplorationTrainer`.

Paper: "Exploration via Activation-Space Steering for Reinforcement Learning with Verifiable Rewards" (§3, App. B, D).
Maths: ``bank`` (§3.2), ``routing``, ``importance`` (§3.3), ``steering``. Hooks:

* ``prepare`` / ``setup``: checks (single-turn generation, the correctness reward, the steering layer before vLLM
  loads), a vLLM engine built steerable; then the steerers and the vector bank;
* ``sampling_context``: routes and the steered sampler (HF records the steered behaviour log-probs; vLLM's are the
  steered ones);
* ``transform_rollout``: the behaviour log-probs of the sampled rows; route -1 on rows not sampled (``offline``);
* ``forward_context`` / ``observe_forward``: block-L readouts from TRL's own forwards (scoring or loss); the bank
  update once every row was read;
* ``batch_fields``: routes, route diagnostics (per-route accuracy, answer disagreement), the generation's bank step;
* ``advantages``: HF path, truncated IS weights multiplied in (vLLM: TRL's token_truncate correction, only logged);
* ``step_end``: the new bank becomes active; ``save`` / ``load``: the bank.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time

import torch
from accelerate.utils import broadcast_object_list, gather_object

from trl_explore.ase.bank import SteeringVectorBank, applied_strength, bank_metrics
from trl_explore.ase.card import ASE_CARD
from trl_explore.ase.controls import BANK_READOUTS, CLEAN_ROUTE, OFFLINE_ROUTE
from trl_explore.ase.importance import routed_importance_weights
from trl_explore.ase.options import ASEOptions
from trl_explore.ase.recording import (
    ASERollout,
    BankStep,
    BlockReadouts,
    SampledTokenLogProbs,
    check_steering_layer,
    max_routes,
)
from trl_explore.ase.routing import (
    pairwise_answer_disagreement,
    per_route_accuracy,
    plan_routes,
    problem_id,
    prompt_key,
    shared_problem_id_warning,
)
from trl_explore.ase.steering import ActivationSteeringGenerator, steering_offsets
from trl_explore.defaults import trl_scores_after_generation
from trl_explore.driver.components import Component, Needs
from trl_explore.rewards.checks import unscored_correctness_warning
from trl_explore.rewards.correctness import correctness_note, correctness_values, threshold_of
from trl_explore.trl_guards.models import unwrap_model

logger = logging.getLogger(__name__)

BANK_DIR = "steering_bank"
"""Sub-folder of a checkpoint (and of the final model folder) holding the vector bank."""


class ASEComponent(Component):
    """ASE-GRPO's part (module docstring).

    Args:
        options: :class:`ASEOptions` (default: read from the training config, e.g. an ``ASEConfig``).
        bank: a ``SteeringVectorBank`` to start from (default: empty, from the options).

    Attributes:
        bank: the ``SteeringVectorBank`` (training state; saved in ``steering_bank/`` with every checkpoint).
        steerer: the ``ActivationSteeringGenerator`` bound to the policy; ``vllm_steerer``: vLLM's, or None.
        bank_diagnostics: one dict per bank update (the bank's diagnostics plus ``global_step``).
    """

    name = "ase"
    options_class = ASEOptions
    tags = ("ase-grpo", "activation-steering")
    card = ASE_CARD  # the model card's entry (trl_explore.hub)
    follows_row_owners = True  # routes, offsets and behaviour log-probs follow Rollout.owner / Rollout.offline
    console_keys = ("ase/num_pairs", "ase/answer_disagreement", "ase/route_*_accuracy", "ase/is_weight_mean")

    def __init__(self, options: ASEOptions | None = None, bank: SteeringVectorBank | None = None):
        super().__init__(options)
        self.bank = bank
        self.steerer = self.vllm_steerer = None
        self.bank_diagnostics: list[dict] = []
        # the current generation's ASERollout, the BankStep awaiting its update, and per-forward captures
        self.rollout = self.step = self._recorder = self._scoring_capture = self._loss_capture = None
        self._warned_non_binary = False
        self._announced: str | None = None  # the steering state last logged: "clean" or "steered"

    # ---------------------------------------------------------------- construction
    def prepare(self, plan):
        """Checks before TRL's ``__init__``; colocated vLLM gets its steering slot before it compiles the model.

        Raises:
            NotImplementedError: tools, environments, a custom ``rollout_func`` (single-turn generation only).
            ValueError: ``correctness_reward_index`` out of range; a steering layer the model does not have (vLLM:
                before the engine loads).
        """
        plan = super().prepare(plan)
        opts, args = self.options, plan.args
        for option in ("tools", "rollout_func", "environment_factory"):
            if plan.trainer_kwargs.get(option):
                raise NotImplementedError(f"ASE-GRPO does not support `{option}` (single-turn generation only)")
        if opts.correctness_reward_index >= len(plan.reward_funcs):
            raise ValueError(f"correctness_reward_index={opts.correctness_reward_index} but there are only "
                             f"{len(plan.reward_funcs)} reward functions")
        if not args.use_vllm:
            return plan
        check_steering_layer(plan.model, opts.steering_layer)  # before vLLM loads the weights
        if args.vllm_mode == "server":  # the server steers (plugin); requests carry the vectors
            return plan
        from trl_explore.ase.steering.vllm import steerable_vllm

        slot = steerable_vllm(layer=opts.steering_layer, max_routes=max_routes(opts, args))
        return dataclasses.replace(plan, init_contexts=(*plan.init_contexts, slot))

    def setup(self, trainer) -> None:
        """The steerers (HF always; vLLM colocate or server) and the bank (the given one, checked, or an empty one).

        Raises:
            ValueError: the steering layer is not a block of the model; a given bank's K or d differs from the
                options / the model's hidden size.
            RuntimeError: server mode against a server that cannot steer this block of this model.
        """
        super().setup(trainer)
        opts, args = self.options, trainer.args
        hidden_size = unwrap_model(trainer.model).config.get_text_config().hidden_size
        if args.use_vllm and args.vllm_mode == "server":
            from trl_explore.ase.steering.vllm_server import ServerSteering

            self.vllm_steerer = ServerSteering(trainer.vllm_generation, trainer.accelerator,
                                               steer_prompt=opts.steer_prompt)
            if trainer.accelerator.is_main_process:  # fails now if the server cannot steer this block of this model
                self.vllm_steerer.check_server(opts.steering_layer, hidden_size)
        elif args.use_vllm:
            from trl_explore.ase.steering.vllm import VLLMActivationSteeringGenerator

            self.vllm_steerer = VLLMActivationSteeringGenerator(
                trainer.vllm_generation.llm, layer=opts.steering_layer, alpha=opts.steering_alpha,
                steer_prompt=opts.steer_prompt, tp_group=getattr(trainer.vllm_generation, "tp_group", None),
            )
        self.steerer = ActivationSteeringGenerator(trainer.model, layer=opts.steering_layer, alpha=opts.steering_alpha,
                                                   steer_prompt=opts.steer_prompt)
        if self.bank is None:
            self.bank = SteeringVectorBank(
                hidden_size, opts.num_vectors, pca_dim=opts.pca_dim, ema_beta=opts.bank_ema_beta,
                kmeans_n_init=opts.kmeans_n_init, max_pairs_per_problem=opts.max_pairs_per_problem,
                min_pairs_per_cluster=opts.min_pairs_per_cluster, control=opts.bank_control, seed=args.seed,
                num_threads=1,  # the bank's PCA/K-means are small; more threads oversubscribe the training host
            )
        elif (self.bank.num_vectors, self.bank.hidden_size) != (opts.num_vectors, hidden_size):
            raise ValueError(f"bank has K={self.bank.num_vectors}, d={self.bank.hidden_size}; expected "
                             f"K={opts.num_vectors}, d={hidden_size}")

    def _collects_readouts(self, mode) -> bool:  # the unstructured control has no bank to update
        return mode == "train" and self.options.control.estimates_bank

    def needs(self, mode):
        # readouts at the policy of rollout time from TRL's scoring forward when TRL makes one, else from the loss
        # forward; the truncated IS weights (HF) and their log (vLLM) from the loss forward
        return Needs(scoring_forward=self._collects_readouts(mode) and trl_scores_after_generation(self.trainer),
                     loss_forward=mode == "train")

    # ---------------------------------------------------------------- generation
    def plan_routes(self, num_rows: int, num_generations: int):
        """``(steering ids [B], table [R, d], logged routes [B])`` of this process's rollouts, or None (no
        steering)."""
        t = self.trainer
        micro_step = t._step % t.args.gradient_accumulation_steps
        return plan_routes(self.bank, self.options, num_rows, num_generations, t.accelerator.num_processes,
                           t.accelerator.process_index, self.generator(micro_step))

    @contextlib.contextmanager
    def sampling_context(self, call):
        t, opts, num_rows = self.trainer, self.options, call.num_rows
        plan = self.plan_routes(num_rows, call.num_generations) if call.mode == "train" else None
        self._recorder, start = None, time.perf_counter()
        if call.mode == "train":
            self._announce_steering(plan is not None)
        if plan is None:
            self.rollout = ASERollout(None, None, torch.full((num_rows,), CLEAN_ROUTE, dtype=torch.long), None)
            yield
        else:
            ids, table, routes = plan
            offsets = steering_offsets(ids, table.float(), self.steerer.alpha).cpu()  # [B, d]
            self.rollout = ASERollout(ids, table, routes, offsets)
            if self.vllm_steerer is None:  # HF generate: behaviour log-probs from the logits generate computes
                self._recorder = SampledTokenLogProbs(t.model, t.sampler)  # the effective sampler's distribution
                context = contextlib.ExitStack()
                context.enter_context(self.steerer.steering(ids, table))
                context.enter_context(self._recorder)
            elif hasattr(self.vllm_steerer, "check_server"):  # server: each request carries its route's vector
                keys = ids + (t.accelerator.process_index * num_rows if not opts.control.estimates_bank else 0)
                context = self.vllm_steerer.steering(keys, offsets)
            else:
                context = self.vllm_steerer.steering(ids, table)
            with context:
                yield
        t._metrics[call.mode]["ase/rollout_time"].append(time.perf_counter() - start)

    def _announce_steering(self, steered: bool) -> None:
        """Say once why the first rollouts all take the clean route, and once when steering starts."""
        state = "steered" if steered else "clean"
        if self._announced == "steered" or state == self._announced:
            return
        self._announced = state
        if not self.trainer.accelerator.is_main_process or not self.options.control.estimates_bank:
            return
        bank = self.bank
        if steered:
            logger.warning("ASE: steering starts at step %d: the bank holds %d vectors; rollouts are split over the "
                           "clean route and %d steered routes", self.trainer.state.global_step, bank.num_vectors,
                           bank.num_vectors)
        else:
            logger.warning("ASE: no steering vectors yet, so every rollout takes the clean route. The bank is "
                           "estimated after a generation whose groups mix right and wrong answers give at least "
                           "K x min_pairs_per_cluster = %d contrast pairs, and the generation after it is steered",
                           bank.num_vectors * bank.min_pairs_per_cluster)

    def behaviour_context(self, mode):
        steered = mode == "train" and self.rollout is not None and self.rollout.table is not None
        return self.steerer.steering(self.rollout.steering_ids, self.rollout.table) if steered else None

    def transform_rollout(self, rollout):
        recorder, self._recorder = self._recorder, None
        if recorder is not None:  # HF: the steered behaviour log-probs of the sampled rows (none for offline rows)
            rollout = dataclasses.replace(rollout, logprobs=recorder.per_completion(rollout.completion_ids,
                                                                                   skip=rollout.offline))
        self._follow_rewrites(rollout)
        self.trainer._log_completion_extra("route", self.rollout.routes.tolist())  # a log_completions column
        return rollout

    def _follow_rewrites(self, rollout) -> None:
        """Rows not sampled under their route (offline, e.g. teacher trajectories, or rewritten by any component,
        before or after ASE: ``Rollout.owner``) take the offline route and no steering offset."""
        rewritten = [off or owner is not None for off, owner in zip(rollout.offline, rollout.owner or
                                                                     (None,) * len(rollout.offline))]
        if any(rewritten):
            mask = torch.tensor(rewritten, dtype=torch.bool)
            offsets = None if self.rollout.offsets is None else self.rollout.offsets.masked_fill(mask[:, None], 0.0)
            routes = self.rollout.routes.masked_fill(mask, OFFLINE_ROUTE)
            self.rollout = dataclasses.replace(self.rollout, routes=routes, offsets=offsets)

    # ---------------------------------------------------------------- forwards
    def _readouts(self, call) -> BlockReadouts:
        return BlockReadouts(self.steerer.decoder_block(), call.input_ids, call.attention_mask, call.logits_to_keep,
                             self.options.readout_fraction, self.bank.hidden_size)

    def _captures(self, inputs) -> bool:
        rows, step = inputs.get("ase_row"), self.step
        if step is None or rows is None or step.updated:
            return False
        rows = rows.cpu()
        rows = rows[rows >= 0]  # rows of later resampling rounds (-1) are not part of the bank step
        return rows.numel() > 0 and not bool(step.filled[rows].all())

    def _weighs(self, inputs, mode) -> bool:
        key = "importance_sampling_ratio" if self.trainer.use_vllm else "sampling_per_token_logps"
        return mode == "train" and "ase_route" in inputs and key in inputs

    def forward_context(self, call):
        if call.kind == "scoring":
            self._scoring_capture = self._readouts(call) if self._collects_readouts(call.mode) else None
            return self._scoring_capture
        self._loss_capture = self._readouts(call) if call.mode == "train" and self._captures(call.inputs) else None
        return self._loss_capture

    def observe_forward(self, result):
        call = result.call
        if call.kind != "loss":  # the scoring readouts are stored with the generation's bank step (batch_fields)
            return
        capture, self._loss_capture = self._loss_capture, None
        if capture is not None:
            rows = call.inputs["ase_row"].cpu()
            ours = rows >= 0
            self._store_readouts(rows[ours], capture.readouts()[ours])
        inputs = call.inputs
        if self.trainer.use_vllm and self._weighs(inputs, call.mode):  # TRL's token_truncate ratio is the TIS weight
            ratio = inputs["importance_sampling_ratio"].float()
            mask = inputs["completion_mask"].bool() & (inputs["ase_route"] > CLEAN_ROUTE)[:, None]
            ratio = ratio.reshape(-1, 1).expand_as(mask) if ratio.dim() == 1 or ratio.shape[1] == 1 else ratio
            self._log_is_weights(call.mode, ratio, ratio >= self.options.is_cap, mask)

    # ---------------------------------------------------------------- rewards and the bank step
    def batch_fields(self, batch):
        t, opts, mode, output = self.trainer, self.options, batch.mode, batch.output
        index = opts.correctness_reward_index
        correct = batch.rewards_per_func[:, index].detach().float().cpu()  # R_m of every process's completions
        if not self._warned_non_binary:  # the same gathered values on every process: all note it, once
            note = correctness_note(correct, t.reward_func_names[index], "ASE", threshold_of(t.args),
                                    detail=f"(correctness_reward_index={index})")
            if note is not None:
                self._warned_non_binary = True
                logger.warning(note)
        # one correctness rule (trl_explore.rewards.correctness): 1 correct, 0 wrong, NaN not scored; the bank and
        # the route accuracies split these verdicts at 0.5
        correct = correctness_values(correct, threshold_of(t.args))
        # issue 22 (input checks): a correctness reward that scored nothing, warned once
        unscored = None if getattr(self, "_warned_unscored", False) else unscored_correctness_warning(
            correct, t.reward_func_names[index], index)
        if unscored is not None:
            self._warned_unscored = True
            if t.accelerator.is_main_process:
                logger.warning(unscored)
        self._follow_rewrites(batch.rollout)  # rows rewritten after transform_rollout (edit_scored, later components)
        device, routes, num_rows = t.accelerator.device, self.rollout.routes, output["completion_ids"].shape[0]
        self._log_route_diagnostics(mode, routes, correct, batch.rollout.completions)
        if batch.round > 0:  # a further generation round of batch-level resampling: its routes, not its readouts
            if self.step is not None:  # the bank step is round 0's; it runs at the step's end on the rows trained
                self.step.partial = True
            self._scoring_capture = None
            return {"ase_route": routes.to(device), "ase_row": torch.full((num_rows,), -1, device=device)}
        if self._collects_readouts(mode):
            if self.step is not None and not self.step.updated:
                logger.warning("ASE: a generation's bank update never ran (its rows were not all seen); dropped")
            valid = (output["completion_mask"].sum(1) > 0).cpu()
            if not opts.include_offline_in_bank:
                valid &= routes >= CLEAN_ROUTE
            problem_ids = gather_object([problem_id(row, opts.problem_id_column) for row in batch.rollout.rows])
            if not getattr(self, "_warned_shared_ids", False):  # issue 22: one id, several prompts (warned once)
                keys = gather_object([prompt_key(row) for row in batch.rollout.rows])
                shared = shared_problem_id_warning(problem_ids, keys, opts.problem_id_column)
                self._warned_shared_ids = shared is not None  # the same gathered values on every process
                if shared is not None and t.accelerator.is_main_process:
                    logger.warning(shared)
            self.step = BankStep(problem_ids, correct, self.rollout.offsets, valid, self.bank.hidden_size)
            if self._scoring_capture is not None:
                self._store_readouts(torch.arange(num_rows), self._scoring_capture.readouts())
        self._scoring_capture = None
        return {"ase_route": routes.to(device), "ase_row": torch.arange(num_rows, device=device)}

    def _log_route_diagnostics(self, mode, routes, correct, completions):
        from trl_explore.rewards.math_verify_reward import extract_answer

        t = self.trainer
        all_routes = t.accelerator.gather(routes.to(t.accelerator.device)).cpu()
        scored = torch.isfinite(correct) & (all_routes >= CLEAN_ROUTE)
        accuracy, counts = per_route_accuracy(correct[scored], all_routes[scored], self.options.num_vectors)
        for s in range(len(counts)):
            if counts[s] > 0:
                t._metrics[mode][f"ase/route_{s}_accuracy"].append(accuracy[s].item())
        grader_mode = getattr(t.args, "grader_mode", "math_verify")
        answers = gather_object([extract_answer(c, mode=grader_mode) for c in completions])
        group = t.num_generations if mode == "train" else t.num_generations_eval
        disagreement = pairwise_answer_disagreement(answers, group)
        if disagreement is not None:
            t._metrics[mode]["ase/answer_disagreement"].append(disagreement)

    def _store_readouts(self, rows: torch.Tensor, readouts: torch.Tensor) -> None:
        complete = self.step.store(rows, readouts)
        if complete and not getattr(self.step, "partial", False):  # every process completes at the same micro-step
            self._update_bank()

    def _update_bank(self) -> None:
        """Estimate the pending bank from this generation's readouts, R_m and problem ids (all processes)."""
        t, step = self.trainer, self.step
        step.updated = True
        clean = t.accelerator.gather(step.readouts.to(t.accelerator.device)).cpu()  # TRL's forwards are unsteered
        readouts = clean
        # as generated: clean + alpha v_route
        if step.offsets is not None and BANK_READOUTS[self.options.bank_readouts]:
            readouts = clean + t.accelerator.gather(step.offsets.to(t.accelerator.device)).cpu()
        valid = t.accelerator.gather(step.valid.to(t.accelerator.device)).cpu() & torch.isfinite(step.correct)
        keep = valid.nonzero().squeeze(1)
        start = time.perf_counter()
        diagnostics = self.bank.update(readouts[keep], [step.problem_ids[i] for i in keep.tolist()],
                                       step.correct[keep])
        elapsed = time.perf_counter() - start
        if t.accelerator.num_processes > 1:  # every process holds process 0's bank, bit for bit
            synced = broadcast_object_list([self.bank.state_dict(), diagnostics], from_process=0)
            self.bank.load_state_dict(synced[0])
            diagnostics = synced[1]
        if diagnostics.get("skipped") and diagnostics["num_pairs"] > 0 and t.accelerator.is_main_process:
            bank, smallest = self.bank, diagnostics.get("smallest_cluster")
            why = (f"the smallest K-means cluster holds {int(smallest)}" if smallest is not None
                   else f"fewer than K x min_pairs_per_cluster = {bank.num_vectors * bank.min_pairs_per_cluster}")
            logger.warning("ASE: bank update skipped at step %d: %d contrast pairs, %s (min_pairs_per_cluster=%d); "
                           "the bank is kept", t.state.global_step, diagnostics["num_pairs"], why,
                           bank.min_pairs_per_cluster)
        vectors = self.bank.vectors if self.bank.pending_vectors is None else self.bank.pending_vectors
        if vectors is not None and len(keep) > 0:  # the strength the next rollouts are steered with
            strength = applied_strength(vectors, self.options.steering_alpha, clean[keep])
            diagnostics.update({f"applied_strength/{s + 1}": v for s, v in enumerate(strength.tolist())})
        self.bank_diagnostics.append({"global_step": t.state.global_step, **diagnostics})
        logged = {"ase/num_pairs": diagnostics["num_pairs"],
                  "ase/skipped_updates": float(self.bank.num_skipped_updates), "ase/bank_update_time": elapsed,
                  **bank_metrics(diagnostics)}
        for name, value in logged.items():
            t._metrics["train"][name].append(value)

    # ---------------------------------------------------------------- loss
    def advantages(self, call):
        """``call.advantages`` times the truncated IS weights (HF path): ``min(pi_unsteered / pi_steered, is_cap)`` on
        steered tokens, 1 elsewhere (clean and offline rows). ``pi_unsteered`` is the policy at rollout time: TRL's
        ``old_per_token_logps`` when it kept them, else this forward's (detached) log-probs, equal to them when
        generation is aligned with the optimizer step; both are of ``softmax(logits / GRPOConfig.temperature)``.
        ``pi_steered`` is the recorded behaviour log-prob (``sampling_per_token_logps``): the steered policy under the
        effective sampler (``trainer.sampler``: the ``generation_kwargs`` temperature, top-k / top-p / min-p
        truncation and renormalisation), i.e. the distribution the token was drawn from. As ``w > 0``, ``A * w``
        multiplies each token's objective by ``w`` for every TRL loss type (verl's token-level TIS); the KL and
        entropy terms are not weighted."""
        inputs = call.inputs
        if self.trainer.use_vllm or not self._weighs(inputs, call.mode):
            return call.advantages
        current = inputs.get("old_per_token_logps")
        current = call.forward.logps.detach() if current is None else current
        mask, steered = inputs["completion_mask"] * inputs.get("tool_mask", 1), inputs["ase_route"] > CLEAN_ROUTE
        weights, clipped = routed_importance_weights(current, inputs["sampling_per_token_logps"], mask, steered,
                                                     self.options.is_cap)
        self._log_is_weights(call.mode, weights, clipped, mask.bool() & steered[:, None])
        return call.advantages * weights.to(call.advantages.dtype)

    def _log_is_weights(self, mode, weights, clipped, steered_mask) -> None:
        """``ase/is_weight_mean`` and ``ase/is_weight_clipped_frac`` over the steered tokens of all processes."""
        t = self.trainer
        stats = torch.stack([(weights * steered_mask).sum(), (clipped & steered_mask).sum().float(),
                             steered_mask.sum().float()])
        stats = t.accelerator.reduce(stats, reduction="sum")
        if stats[2] > 0:
            t._metrics[mode]["ase/is_weight_mean"].append((stats[0] / stats[2]).item())
            t._metrics[mode]["ase/is_weight_clipped_frac"].append((stats[1] / stats[2]).item())

    # ---------------------------------------------------------------- step end and checkpoints
    def step_end(self, state):
        step, t = self.step, self.trainer
        if (step is not None and getattr(step, "partial", False) and not step.updated
                and t._step % t.args.steps_per_generation == 0):  # resampled: the rows of round 0 that were trained
            step.valid &= step.filled
            self._update_bank()
        self.bank.activate()  # paper §3: a new bank becomes active only after actor optimization

    def save(self, output_dir):  # training state; evaluation with steering (the paper's ^S) loads it too
        self.bank.save(os.path.join(output_dir, BANK_DIR))

    def load(self, checkpoint):
        path = os.path.join(checkpoint, BANK_DIR)
        if os.path.isdir(path):
            self.bank.load_state_dict(SteeringVectorBank.load(path).state_dict())
        else:
            logger.warning("ASE: checkpoint %s has no %s/; the vector bank starts empty", checkpoint, BANK_DIR)
