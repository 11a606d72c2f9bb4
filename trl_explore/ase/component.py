"""ASE-GRPO as a :class:`~trl_explore.components.Component` of :class:`~trl_explore.driver.ExplorationTrainer`.

Paper: "Exploration via Activation-Space Steering for Reinforcement Learning with Verifiable Rewards" (§3, App. B,
D). The maths lives in ``bank`` (estimation, §3.2), ``routing`` (balanced routes, diagnostics), ``importance``
(truncated IS, §3.3) and ``steering`` (hooks). Extension points used:

* ``rollout_context`` / ``rollout_logprobs``: the rollouts of each prompt are split over the clean route and K
  steering routes; HF ``generate`` runs under the steering hook and the log-prob of each sampled token under the
  (steered) distribution it came from is recorded (TRL's ``sampling_per_token_logps``). vLLM colocate / server:
  TRL's vLLM call runs under the engine's steering; its log-probs are the steered ones.
* ``transform_rollout``: the generation's routes (``-1`` on rows another component replaced by offline data).
* ``scoring_forward_context`` / ``loss_forward_context``: block-L readouts from TRL's own forwards (steered readout
  = clean readout + ``alpha * v_route``, exactly); once every row is read, the bank is re-estimated (pending).
* ``advantage_weights`` (HF path): ``w = min(pi_unsteered / pi_steered, is_cap)`` on steered tokens. With vLLM the
  weight is TRL's own ``token_truncate`` importance sampling (set by ``ASEConfig``); only its metrics are logged.
* ``batch_fields``: ``ase_route`` / ``ase_row``; ``on_step_end``: the pending bank becomes active; ``save`` /
  ``load``: the bank in ``steering_bank/``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import time

import torch
from accelerate.utils import broadcast_object_list, gather_object

from trl_explore.ase.bank import SteeringVectorBank
from trl_explore.ase.importance import truncated_importance_weights
from trl_explore.ase.recording import BlockReadouts, SampledTokenLogProbs
from trl_explore.ase.routing import balanced_uniform_routes, pairwise_answer_disagreement, per_route_accuracy
from trl_explore.ase.steering import steering_offsets
from trl_explore.components import Component
from trl_explore.defaults import trl_scores_after_generation

logger = logging.getLogger(__name__)

BANK_DIR = "steering_bank"
"""Sub-folder of a checkpoint (and of the final model folder) holding the vector bank."""


@dataclasses.dataclass(frozen=True)
class ASERollout:
    """Routes of one generation call: steering ids / table given to the steerer, logged routes [B] (0 = clean,
    -1 = offline row), steered readout offsets ``alpha * v`` [B, d] (None: unsteered)."""

    steering_ids: torch.Tensor | None
    table: torch.Tensor | None
    routes: torch.Tensor
    offsets: torch.Tensor | None


class BankStep:
    """The readouts of one training generation, filled micro-batch by micro-batch until the bank update runs."""

    def __init__(self, problem_ids, correct, offsets, valid, hidden_size):
        self.problem_ids, self.correct, self.offsets, self.valid = problem_ids, correct, offsets, valid
        self.readouts = torch.zeros(len(valid), hidden_size)
        self.filled = torch.zeros(len(valid), dtype=torch.bool)
        self.updated = False

    def store(self, rows: torch.Tensor, readouts: torch.Tensor) -> bool:
        """Store ``readouts`` of ``rows``; True when every row of the generation has been read."""
        if readouts.shape[0] != rows.numel():
            raise RuntimeError(f"ASE: captured {readouts.shape[0]} readouts for {rows.numel()} rows")
        self.readouts[rows], self.filled[rows] = readouts, True
        return bool(self.filled.all())


class ASEComponent(Component):
    """Activation-space exploration (see the module docstring).

    Args:
        bank: a ``SteeringVectorBank`` to start from (default: an empty one built from the config at ``bind``).
        include_offline_in_bank: with OGER's hybrid groups, let the replaced (offline) rows form contrast pairs.
    """

    def __init__(self, bank: SteeringVectorBank | None = None, include_offline_in_bank: bool = False):
        self.bank, self.include_offline_in_bank = bank, include_offline_in_bank
        self.steerer = self.vllm_steerer = None
        self.bank_diagnostics: list[dict] = []
        self.rollout: ASERollout | None = None
        self.step: BankStep | None = None
        self._recorder = self._scored = self._scoring_capture = self._loss_capture = None

    def bind(self, trainer) -> None:
        from trl_explore.ase.setup import build_bank, build_steerers

        super().bind(trainer)
        self.steerer, self.vllm_steerer = build_steerers(trainer)
        self.bank = build_bank(trainer, self.bank)
        # Readouts come from TRL's scoring forward (policy at rollout time) when TRL makes one, else from the loss
        # forward; the unstructured control has no bank to update.
        self._readouts_at_scoring = trl_scores_after_generation(trainer)

    def _mode_args(self):
        return self.trainer, self.trainer.args

    def plan_routes(self, num_rows: int, num_generations: int):
        """``(steering ids [B], table [R, d], logged routes [B])`` for this process's rollouts, or None (no steering).
        Routes are drawn for the global batch and sliced: a group split across processes keeps its balanced split."""
        t, args = self._mode_args()
        world, rank = t.accelerator.num_processes, t.accelerator.process_index
        total, local = num_rows * world, slice(rank * num_rows, (rank + 1) * num_rows)
        if args.bank_control == "unstructured_random":  # one unit random vector per rollout (App. D.2)
            table = self.bank.random_rollout_vectors(total)[local]
            return torch.arange(1, num_rows + 1), table, torch.ones(num_rows, dtype=torch.long)
        if self.bank.vectors is None:
            return None
        if total % num_generations != 0:
            raise ValueError(f"generation batch of {total} rows is not a whole number of groups of {num_generations}")
        generator = t.step_generator(t._step % args.gradient_accumulation_steps)
        routes = balanced_uniform_routes(total // num_generations, num_generations, args.num_vectors, generator)[local]
        return routes, self.bank.vectors, routes

    @contextlib.contextmanager
    def rollout_context(self, num_rows, num_generations, mode):
        t, args = self._mode_args()
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

    def rollout_logprobs(self, completion_ids, logprobs, mode):
        return logprobs if self._recorder is None else self._recorder.per_completion(completion_ids)

    def behaviour_context(self, mode):
        if mode != "train" or self.rollout is None or self.rollout.table is None:
            return None
        return self.steerer.steering(self.rollout.steering_ids, self.rollout.table)

    def transform_rollout(self, rollout, rows, mode):
        offline = rollout.extra_fields.get("is_offline")
        if offline is not None and any(offline):  # rows replaced by teacher trajectories: no route, no offset
            offline = torch.tensor(offline, dtype=torch.bool)
            offsets = None if self.rollout.offsets is None else self.rollout.offsets.masked_fill(offline[:, None], 0.0)
            self.rollout = dataclasses.replace(self.rollout, routes=self.rollout.routes.masked_fill(offline, -1),
                                               offsets=offsets)
        self.trainer._log_completion_extra("route", self.rollout.routes.tolist())  # a log_completions column
        return rollout

    # ---------------------------------------------------------------- scoring and rewards
    def _collects_readouts(self, mode) -> bool:
        return mode == "train" and self.trainer.args.bank_control != "unstructured_random"

    def observes_scoring_forward(self, mode):
        return self._collects_readouts(mode) and self._readouts_at_scoring

    def scoring_forward_context(self, input_ids, attention_mask, logits_to_keep):
        t, args = self._mode_args()
        if not self.observes_scoring_forward(t._mode()):
            return None
        self._scoring_capture = BlockReadouts(self.steerer.decoder_block(), input_ids, attention_mask, logits_to_keep,
                                              args.readout_fraction, self.bank.hidden_size)
        return self._scoring_capture

    def on_rewards(self, rewards_per_func, completions, mode):
        correct = rewards_per_func[:, self.trainer.args.correctness_reward_index].detach().float().cpu()
        self._scored = (correct, completions)

    def _problem_id(self, row: dict):
        value = row.get(self.trainer.args.problem_id_column)
        if value is None:  # stable across processes, unlike hash()
            return hashlib.sha1(json.dumps(row["prompt"], sort_keys=True, default=str).encode()).hexdigest()[:16]
        try:
            hash(value)
        except TypeError:
            value = repr(value)
        return value

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
            problem_ids = gather_object([self._problem_id(row) for row in rows])
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
        answers = gather_object([extract_answer(c) for c in completions])
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
        readouts = step.readouts if step.offsets is None else step.readouts + step.offsets  # + alpha v_route
        readouts = t.accelerator.gather(readouts.to(t.accelerator.device)).cpu()
        valid = t.accelerator.gather(step.valid.to(t.accelerator.device)).cpu() & torch.isfinite(step.correct)
        keep = valid.nonzero().squeeze(1)
        start = time.perf_counter()
        diagnostics = self.bank.update(readouts[keep], [step.problem_ids[i] for i in keep.tolist()], step.correct[keep])
        elapsed = time.perf_counter() - start
        if t.accelerator.num_processes > 1:  # every process holds process 0's bank, bit for bit
            synced = broadcast_object_list([self.bank.state_dict(), diagnostics], from_process=0)
            self.bank.load_state_dict(synced[0])
            diagnostics = synced[1]
        self.bank_diagnostics.append({"global_step": t.state.global_step, **diagnostics})
        metrics = t._metrics["train"]
        metrics["ase/num_pairs"].append(diagnostics["num_pairs"])
        metrics["ase/skipped_updates"].append(float(self.bank.num_skipped_updates))
        metrics["ase/bank_update_time"].append(elapsed)
        for key, value in diagnostics.items():
            if key.startswith("cluster_share/"):
                metrics[f"ase/cluster_share_{key.split('/')[1]}"].append(value)
            elif key in ("temporal_alignment", "inter_cluster_alignment"):
                metrics[f"ase/{key}"].append(value)
            elif key == "mean_vector_norm":
                metrics["ase/vector_norm"].append(value)

    # ---------------------------------------------------------------- loss
    def _captures(self, inputs, mode) -> bool:
        rows, step = inputs.get("ase_row"), self.step
        return (mode == "train" and step is not None and rows is not None and not step.updated
                and not bool(step.filled[rows.cpu()].all()))

    def _weighs(self, inputs, mode) -> bool:
        return mode == "train" and "ase_route" in inputs and ("importance_sampling_ratio" in inputs
                                                             if self.trainer.use_vllm else "sampling_per_token_logps" in inputs)

    def uses_loss_forward(self, inputs, mode):
        return self._captures(inputs, mode) or self._weighs(inputs, mode)

    def loss_forward_context(self, inputs, input_ids, attention_mask, logits_to_keep):
        if not self._captures(inputs, self.trainer._mode()):
            return None
        args = self.trainer.args
        self._loss_capture = BlockReadouts(self.steerer.decoder_block(), input_ids, attention_mask, logits_to_keep,
                                           args.readout_fraction, self.bank.hidden_size)
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
        mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
        current = inputs.get("old_per_token_logps")
        current = forward.logps.detach() if current is None else current
        behaviour, steered = inputs["sampling_per_token_logps"], inputs["ase_route"] > 0
        weights = torch.ones_like(current, dtype=torch.float32)
        steered_mask = mask.bool() & steered[:, None]
        clipped = torch.zeros_like(steered_mask)
        if bool(steered.any()):
            weights[steered] = truncated_importance_weights(current[steered], behaviour[steered], mask[steered],
                                                            cap=self.trainer.args.is_cap)
            clipped = (current.float() - behaviour.float() > math.log(self.trainer.args.is_cap)) & steered_mask
        self._log_is_weights(mode, weights, clipped, steered_mask)
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

    def save(self, output_dir):
        # The bank (K x d floats, safetensors + json) is training state; from_pretrained ignores it; evaluation with
        # inference-time steering (the paper's ^S) loads it with SteeringVectorBank.load.
        self.bank.save(os.path.join(output_dir, BANK_DIR))

    def load(self, checkpoint):
        path = os.path.join(checkpoint, BANK_DIR)
        if os.path.isdir(path):
            self.bank.load_state_dict(SteeringVectorBank.load(path).state_dict())
        else:
            logger.warning("ASE: checkpoint %s has no %s/; the vector bank starts empty", checkpoint, BANK_DIR)
