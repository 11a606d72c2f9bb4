"""ASE-GRPO as a :class:`~trl_explore.components.Component` of :class:`~trl_explore.driver.ExplorationTrainer`.

Paper: "Exploration via Activation-Space Steering for Reinforcement Learning with Verifiable Rewards" (§3, App. B, D).
Maths: ``bank`` (§3.2), ``routing``, ``importance`` (§3.3), ``steering``. Extension points: ``rollout_context`` /
``rollout_logprobs`` (routes; steered sampler; HF records the steered behaviour log-probs, vLLM's are the steered
ones), ``transform_rollout`` (route -1 on offline rows), ``scoring_forward_context`` / ``loss_forward_context``
(block-L readouts from TRL's own forwards; bank update once every row was read), ``advantage_weights`` (HF: truncated
IS weights; vLLM: TRL's token_truncate correction, only logged), ``batch_fields``, ``on_step_end``, ``save``/``load``.
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
from trl_explore.ase.importance import routed_importance_weights
from trl_explore.ase.recording import ASERollout, BankStep, BlockReadouts, SampledTokenLogProbs
from trl_explore.ase.routing import pairwise_answer_disagreement, per_route_accuracy, plan_routes, problem_id
from trl_explore.ase.steering import steering_offsets
from trl_explore.components import Component
from trl_explore.defaults import trl_scores_after_generation
from trl_explore.oger import fields as oger_fields
from trl_explore.rewards.checks import non_binary_values

logger = logging.getLogger(__name__)

BANK_DIR = "steering_bank"
"""Sub-folder of a checkpoint (and of the final model folder) holding the vector bank."""


class ASEComponent(Component):
    """ASE-GRPO's part. ``bank``: a ``SteeringVectorBank`` to start from (default: empty, from the config);
    ``include_offline_in_bank``: with OGER's hybrid groups, let the offline rows form contrast pairs."""

    card = ASE_CARD  # the model card's entry (trl_explore.hub)

    def __init__(self, bank: SteeringVectorBank | None = None, include_offline_in_bank: bool = False):
        self.bank, self.include_offline_in_bank = bank, include_offline_in_bank
        self.steerer = self.vllm_steerer = None
        self.bank_diagnostics: list[dict] = []  # one dict per bank update
        # the current generation's ASERollout, the BankStep awaiting its update, and per-forward captures
        self.rollout = self.step = self._recorder = self._scored = self._scoring_capture = self._loss_capture = None
        self._warned_non_binary = False

    def bind(self, trainer) -> None:
        from trl_explore.ase.setup import build_bank, build_steerers

        super().bind(trainer)
        self.steerer, self.vllm_steerer = build_steerers(trainer)
        self.bank = build_bank(trainer, self.bank)

    def plan_routes(self, num_rows: int, num_generations: int):
        """``(steering ids [B], table [R, d], logged routes [B])`` of this process's rollouts, or None (no steering)."""
        t = self.trainer
        micro_step = t._step % t.args.gradient_accumulation_steps
        return plan_routes(self.bank, t.args, num_rows, num_generations, t.accelerator.num_processes,
                           t.accelerator.process_index, t.step_generator(micro_step))

    @contextlib.contextmanager
    def rollout_context(self, num_rows, num_generations, mode):
        t, args = self.trainer, self.trainer.args
        plan = self.plan_routes(num_rows, num_generations) if mode == "train" else None
        self._recorder, start = None, time.perf_counter()
        if plan is None:
            self.rollout = ASERollout(None, None, torch.zeros(num_rows, dtype=torch.long), None)
            yield
        else:
            ids, table, routes = plan
            offsets = steering_offsets(ids, table.float(), self.steerer.alpha).cpu()  # [B, d]
            self.rollout = ASERollout(ids, table, routes, offsets)
            if self.vllm_steerer is None:  # HF generate: behaviour log-probs from the logits generate computes
                self._recorder = SampledTokenLogProbs(t.model, t.temperature)
                context = contextlib.ExitStack()
                context.enter_context(self.steerer.steering(ids, table))
                context.enter_context(self._recorder)
            elif hasattr(self.vllm_steerer, "check_server"):  # server: each request carries its route's vector
                keys = ids + (t.accelerator.process_index * num_rows if args.bank_control == "unstructured_random" else 0)
                context = self.vllm_steerer.steering(keys, offsets)
            else:
                context = self.vllm_steerer.steering(ids, table)
            with context:
                yield
        t._metrics[mode]["ase/rollout_time"].append(time.perf_counter() - start)

    def rollout_logprobs(self, completion_ids, logprobs, mode):  # HF: the steered behaviour log-probs
        return logprobs if self._recorder is None else self._recorder.per_completion(completion_ids)

    def behaviour_context(self, mode):
        steered = mode == "train" and self.rollout is not None and self.rollout.table is not None
        return self.steerer.steering(self.rollout.steering_ids, self.rollout.table) if steered else None

    def transform_rollout(self, rollout, rows, mode):
        offline = rollout.extra_fields.get(oger_fields.IS_OFFLINE)
        if offline is not None and any(offline):  # rows replaced by teacher trajectories: no route, no offset
            offline = torch.tensor(offline, dtype=torch.bool)
            offsets = None if self.rollout.offsets is None else self.rollout.offsets.masked_fill(offline[:, None], 0.0)
            self.rollout = dataclasses.replace(self.rollout, routes=self.rollout.routes.masked_fill(offline, -1),
                                               offsets=offsets)
        self.trainer._log_completion_extra("route", self.rollout.routes.tolist())  # a log_completions column
        return rollout

    # ---------------------------------------------------------------- scoring and rewards
    def _collects_readouts(self, mode) -> bool:  # the unstructured control has no bank to update
        return mode == "train" and self.trainer.args.bank_control != "unstructured_random"

    def observes_scoring_forward(self, mode):  # readouts at the policy of rollout time, when TRL scores then
        return self._collects_readouts(mode) and trl_scores_after_generation(self.trainer)

    def scoring_forward_context(self, input_ids, attention_mask, logits_to_keep):
        if not self.observes_scoring_forward(self.trainer._mode()):
            return None
        self._scoring_capture = self._readouts(input_ids, attention_mask, logits_to_keep)
        return self._scoring_capture

    def _readouts(self, input_ids, attention_mask, logits_to_keep) -> BlockReadouts:
        return BlockReadouts(self.steerer.decoder_block(), input_ids, attention_mask, logits_to_keep,
                             self.trainer.args.readout_fraction, self.bank.hidden_size)

    def on_rewards(self, rewards_per_func, completions, mode):  # R_m of every process's completions
        index = self.trainer.args.correctness_reward_index
        correct = rewards_per_func[:, index].detach().float().cpu()
        odd = non_binary_values(correct)
        if odd and not self._warned_non_binary:  # the same gathered values on every process: all warn, once
            self._warned_non_binary = True
            logger.warning(
                "ASE: reward function %r (correctness_reward_index=%d) returned values outside {0, 1, None}, e.g. "
                "%s. The bank counts a rollout as correct when this reward is above 0.5, so a graded reward pairs "
                "near-equal answers and a reward that is always above 0.5 builds no pairs at all. Put a verifier "
                "(such as trl_explore.rewards.math_reward) at that index.",
                self.trainer.reward_func_names[index], index, odd,
            )
        self._scored = (correct, completions)

    def batch_fields(self, output, rows, mode):
        t = self.trainer
        device, (correct, completions) = t.accelerator.device, self._scored
        routes, num_rows = self.rollout.routes, output["completion_ids"].shape[0]
        self._log_route_diagnostics(mode, routes, correct, completions)
        if self._collects_readouts(mode):
            if self.step is not None and not self.step.updated:
                logger.warning("ASE: a generation's bank update never ran (its rows were not all seen); dropped")
            valid = (output["completion_mask"].sum(1) > 0).cpu()
            if not self.include_offline_in_bank:
                valid &= routes >= 0
            problem_ids = gather_object([problem_id(row, t.args.problem_id_column) for row in rows])
            self.step = BankStep(problem_ids, correct, self.rollout.offsets, valid, self.bank.hidden_size)
            if self._scoring_capture is not None:
                self._store_readouts(torch.arange(num_rows), self._scoring_capture.readouts())
        self._scored = self._scoring_capture = None
        return {"ase_route": routes.to(device), "ase_row": torch.arange(num_rows, device=device)}

    def _log_route_diagnostics(self, mode, routes, correct, completions):
        from trl_explore.rewards.math_verify_reward import extract_answer

        t = self.trainer
        all_routes = t.accelerator.gather(routes.to(t.accelerator.device)).cpu()
        scored = torch.isfinite(correct) & (all_routes >= 0)
        accuracy, counts = per_route_accuracy(correct[scored], all_routes[scored], t.args.num_vectors)
        for s in range(len(counts)):
            if counts[s] > 0:
                t._metrics[mode][f"ase/route_{s}_accuracy"].append(accuracy[s].item())
        answers = gather_object([extract_answer(c, mode=t.args.grader_mode) for c in completions])
        group = t.num_generations if mode == "train" else t.num_generations_eval
        disagreement = pairwise_answer_disagreement(answers, group)
        if disagreement is not None:
            t._metrics[mode]["ase/answer_disagreement"].append(disagreement)

    # ---------------------------------------------------------------- bank
    def _store_readouts(self, rows: torch.Tensor, readouts: torch.Tensor) -> None:
        if self.step.store(rows, readouts):  # every process completes at the same micro-step: collectives are safe
            self._update_bank()

    def _update_bank(self) -> None:
        """Estimate the pending bank from this generation's readouts, R_m and problem ids (all processes)."""
        t, step = self.trainer, self.step
        step.updated = True
        clean = t.accelerator.gather(step.readouts.to(t.accelerator.device)).cpu()  # TRL's forwards are unsteered
        readouts = clean
        if step.offsets is not None and t.args.bank_readouts == "steered":  # as generated: clean + alpha v_route
            readouts = clean + t.accelerator.gather(step.offsets.to(t.accelerator.device)).cpu()
        valid = t.accelerator.gather(step.valid.to(t.accelerator.device)).cpu() & torch.isfinite(step.correct)
        keep = valid.nonzero().squeeze(1)
        start = time.perf_counter()
        diagnostics = self.bank.update(readouts[keep], [step.problem_ids[i] for i in keep.tolist()], step.correct[keep])
        elapsed = time.perf_counter() - start
        if t.accelerator.num_processes > 1:  # every process holds process 0's bank, bit for bit
            synced = broadcast_object_list([self.bank.state_dict(), diagnostics], from_process=0)
            self.bank.load_state_dict(synced[0])
            diagnostics = synced[1]
        if diagnostics.get("skipped") and diagnostics["num_pairs"] > 0 and t.accelerator.is_main_process:
            bank, smallest = self.bank, diagnostics.get("smallest_cluster")
            why = (f"the smallest K-means cluster holds {int(smallest)}" if smallest is not None
                   else f"fewer than K x min_pairs_per_cluster = {bank.num_vectors * bank.min_pairs_per_cluster}")
            logger.warning("ASE: bank update skipped at step %d: %d contrast pairs, %s (min_pairs_per_cluster=%d); the "
                           "bank is kept", t.state.global_step, diagnostics["num_pairs"], why, bank.min_pairs_per_cluster)
        vectors = self.bank.vectors if self.bank.pending_vectors is None else self.bank.pending_vectors
        if vectors is not None and len(keep) > 0:  # the strength the next rollouts are steered with
            strength = applied_strength(vectors, t.args.steering_alpha, clean[keep])
            diagnostics.update({f"applied_strength/{s + 1}": v for s, v in enumerate(strength.tolist())})
        self.bank_diagnostics.append({"global_step": t.state.global_step, **diagnostics})
        logged = {"ase/num_pairs": diagnostics["num_pairs"], "ase/skipped_updates": float(self.bank.num_skipped_updates),
                  "ase/bank_update_time": elapsed, **bank_metrics(diagnostics)}
        for name, value in logged.items():
            t._metrics["train"][name].append(value)

    # ---------------------------------------------------------------- loss
    def _captures(self, inputs, mode) -> bool:
        rows, step = inputs.get("ase_row"), self.step
        return mode == "train" and step is not None and rows is not None and not (
            step.updated or bool(step.filled[rows.cpu()].all()))

    def _weighs(self, inputs, mode) -> bool:
        key = "importance_sampling_ratio" if self.trainer.use_vllm else "sampling_per_token_logps"
        return mode == "train" and "ase_route" in inputs and key in inputs

    def uses_loss_forward(self, inputs, mode):
        return self._captures(inputs, mode) or self._weighs(inputs, mode)

    def loss_forward_context(self, inputs, input_ids, attention_mask, logits_to_keep):
        if self._captures(inputs, self.trainer._mode()):
            self._loss_capture = self._readouts(input_ids, attention_mask, logits_to_keep)
        return self._loss_capture

    def on_loss_forward(self, inputs, forward, mode):
        capture, self._loss_capture = self._loss_capture, None
        if capture is not None:
            self._store_readouts(inputs["ase_row"].cpu(), capture.readouts())
        if self.trainer.use_vllm and self._weighs(inputs, mode):  # TRL's token_truncate ratio is the TIS weight
            ratio = inputs["importance_sampling_ratio"].float()
            mask = inputs["completion_mask"].bool() & (inputs["ase_route"] > 0)[:, None]
            ratio = ratio.reshape(-1, 1).expand_as(mask) if ratio.dim() == 1 or ratio.shape[1] == 1 else ratio
            self._log_is_weights(mode, ratio, ratio >= self.trainer.args.is_cap, mask)

    def advantage_weights(self, inputs, forward, mode):
        """``[B, T]`` truncated IS weights (HF path): ``min(pi_unsteered / pi_steered, is_cap)`` on steered tokens, 1
        elsewhere (clean and offline rows). ``pi_unsteered`` is the policy at rollout time: TRL's
        ``old_per_token_logps`` when it kept them, else this forward's (detached) log-probs, equal to them when
        generation is aligned with the optimizer step. As ``w > 0``, ``A * w`` multiplies each token's objective by
        ``w`` for every TRL loss type (verl's token-level TIS); the KL and entropy terms are not weighted."""
        if self.trainer.use_vllm or not self._weighs(inputs, mode):
            return None
        current = inputs.get("old_per_token_logps")
        current = forward.logps.detach() if current is None else current
        mask, steered = inputs["completion_mask"] * inputs.get("tool_mask", 1), inputs["ase_route"] > 0
        weights, clipped = routed_importance_weights(current, inputs["sampling_per_token_logps"], mask, steered,
                                                     self.trainer.args.is_cap)
        self._log_is_weights(mode, weights, clipped, mask.bool() & steered[:, None])
        return weights

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
    def on_step_end(self):
        self.bank.activate()  # paper §3: a new bank becomes active only after actor optimization

    def save(self, output_dir):  # training state; evaluation with steering (the paper's ^S) loads it too
        self.bank.save(os.path.join(output_dir, BANK_DIR))

    def load(self, checkpoint):
        path = os.path.join(checkpoint, BANK_DIR)
        if os.path.isdir(path):
            self.bank.load_state_dict(SteeringVectorBank.load(path).state_dict())
        else:
            logger.warning("ASE: checkpoint %s has no %s/; the vector bank starts empty", checkpoint, BANK_DIR)
