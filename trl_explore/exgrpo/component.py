"""``ExGRPOComponent``: ExGRPO (Zhan et al. 2025, "ExGRPO: Learning to Reason from Experience", arXiv 2510.02245) as a
part of :class:`~trl_explore.driver.ExplorationTrainer`.

Per training generation:

* ``edit_scored`` (after the rewards): once replay has started, up to ``replay_ratio`` of this process's groups whose
  prompt is in the buffer are drawn by bucket (:meth:`ExperienceBuffer.draw`); in each, the last row the policy
  sampled in this generation is replaced by the prompt's stored trajectory of lowest mean token entropy under the
  current policy (one no-grad forward over the candidates). The driver re-scores that row with every reward function
  and TRL computes the advantages over the group as it now is: ``K - 1`` fresh rollouts and one replayed trajectory,
  as in the paper's experience groups (the ``K`` rollouts are i.i.d., so dropping the last one is sampling ``K - 1``).
* ``batch_fields`` (after TRL scored the batch): marks the replayed rows and hands their recorded behaviour log-probs
  to the loss; then updates the buffer with every process's groups (gathered, so every process holds the same
  buffer): retirement of prompts solved by every rollout, collection of the correct trajectories the policy sampled
  (rows another component wrote, e.g. OGER's teacher rows, count in the pass rate but are not stored) of partly
  solved prompts (once replay has started) with their behaviour log-probs (``Needs.behaviour_logps``: TRL's
  ``old_per_token_logps`` when it makes them for the sampling distribution), and the delayed start.
* ``loss_batch`` (each micro-batch): the replayed rows' ``old_per_token_logps`` become the current log-probs
  (detached), so TRL's ratio is 1 on them and its clip never acts, whatever ``num_iterations`` (ExGRPO's replayed
  term has no clip).
* ``advantages`` (each micro-batch): a replayed token's advantage is multiplied by
  :func:`~trl_explore.exgrpo.experience.replay_advantage_scale`, so that TRL's own objective on it has the gradient of
  the paper's shaped term ``-A * w / (w + gamma)``; on-policy rows are untouched.

How this differs from the paper, and why: the authors' data loader swaps ``replay_ratio`` of a batch's prompts for
prompts drawn from the buffer and generates ``K - 1`` rollouts for them; TRL's sampler chooses the prompts here, so
replay goes to the groups of the batch whose prompt the buffer holds (revisits, across epochs), drawn by bucket among
those. A retired prompt stays in TRL's sampler (the authors also drop it from the training data); it is never
collected or replayed again.

State: the buffer (saved with every checkpoint as ``exgrpo/buffer.json`` by the main process, identical on every
process), and per generation the replayed rows (one record, replaced).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os

import torch

from trl_explore.driver.components import Component, Needs
from trl_explore.exgrpo.buffer import ExperienceBuffer, Trajectory
from trl_explore.exgrpo.card import EXGRPO_CARD
from trl_explore.exgrpo.experience import (
    lowest_entropy_index,
    mean_token_entropy,
    num_replayed_groups,
    replay_advantage_scale,
    replay_starts,
)
from trl_explore.exgrpo.options import ExGRPOOptions
from trl_explore.rewards.correctness import correct_mask, correctness_note, threshold_of

logger = logging.getLogger(__name__)

BUFFER_FILE = os.path.join("exgrpo", "buffer.json")
"""Where a checkpoint (or the final model folder) holds the replay buffer."""
REPLAYED = "exgrpo_replayed"
BEHAVIOUR = "exgrpo_behaviour_logps"


def prompt_key(row: dict) -> str:
    """The buffer's key of a dataset row: its ``problem_id`` when it has one, else a hash of its prompt."""
    if row.get("problem_id") is not None:
        return str(row["problem_id"])
    text = json.dumps(row.get("prompt"), sort_keys=True, default=str)
    return "prompt:" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


class ExGRPOComponent(Component):
    """ExGRPO as a component (module docstring). Options: :class:`~trl_explore.exgrpo.options.ExGRPOOptions`.

    Attributes:
        buffer: the :class:`~trl_explore.exgrpo.buffer.ExperienceBuffer` (built by :meth:`setup`).
    """

    name = "exgrpo"
    options_class = ExGRPOOptions
    tags = ("exgrpo",)
    card = EXGRPO_CARD
    console_keys = ("exgrpo/replayed_fraction", "exgrpo/buffer_prompts", "exgrpo/retired")
    edits_rows = True

    def __init__(self, options: ExGRPOOptions | None = None):
        super().__init__(options)
        self.buffer: ExperienceBuffer | None = None
        self._replayed: dict[int, Trajectory] = {}  # this generation: local row -> the replayed trajectory
        self._noted_values = False  # a verifier outside {0, 1} was noted (once)

    def setup(self, trainer):
        super().setup(trainer)
        self.buffer = ExperienceBuffer(trainer.num_generations)

    def needs(self, mode):
        if mode != "train":
            return Needs()
        return Needs(loss_forward=True, behaviour_logps=self.options.importance_correction)

    # ---------------------------------------------------------------- replay (after the rewards)
    def edit_scored(self, scored):
        self._replayed = {}
        opts, rollout = self.options, scored.rollout
        if scored.mode != "train" or not self.buffer.started or len(self.buffer) == 0:
            return rollout
        k_total = rollout.num_generations
        num_groups = rollout.num_rows // k_total
        keys = [prompt_key(rollout.rows[g * k_total]) for g in range(num_groups)]
        slots: dict[str, int] = {}  # prompt -> the row to replace: the last row the policy sampled now, first group
        for g, key in enumerate(keys):
            sampled = [i for i in range(g * k_total, (g + 1) * k_total)
                       if rollout.owner[i] is None and not rollout.offline[i]]
            if sampled and key in self.buffer and key not in slots and self._replayable(key):
                slots[key] = sampled[-1]
        generator = self.generator(self.trainer.accelerator.process_index)
        count = num_replayed_groups(num_groups, opts.replay_ratio, len(slots))
        drawn = self.buffer.draw(list(slots), count, generator, opts.bucket_weighting, opts.bucket_sigma)
        if not drawn:
            return rollout
        chosen = self._choose_trajectories(rollout, [(key, slots[key]) for key in drawn], generator)
        if not chosen:
            return rollout
        tokenizer = self.trainer.processing_class
        swaps = {}
        for row, trajectory in chosen.items():
            text = tokenizer.decode(list(trajectory.completion_ids), skip_special_tokens=True)
            conversational = isinstance(rollout.completions[row], list)
            swaps[row] = (list(trajectory.completion_ids),
                          [{"role": "assistant", "content": text}] if conversational else text)
        self._replayed = chosen
        return rollout.swap_rows(self.name, swaps)

    def _ended(self, completion_ids) -> bool:
        """Whether a completion ended (its last id one TRL's ``mask_truncated_completions`` counts as an ending:
        ``eos_and_pad``, ``trl_contract``); always True when that option is off (every row then reaches the loss)."""
        if not self.trainer.args.mask_truncated_completions:
            return True
        ends = {*self.trainer.eos_token_ids, self.trainer.processing_class.pad_token_id}
        return len(completion_ids) > 0 and int(completion_ids[-1]) in ends

    def _replayable(self, key: str) -> list[Trajectory]:
        """The prompt's stored trajectories that TRL's loss would not mask out (a buffer from a run without
        ``mask_truncated_completions`` may hold truncated ones; they are kept, not replayed)."""
        return [t for t in self.buffer.trajectories(key) if self._ended(t.completion_ids)]

    def _choose_trajectories(self, rollout, drawn: list[tuple[str, int]], generator) -> dict[int, Trajectory]:
        """``{row: trajectory}``: for each drawn ``(prompt, row)``, the stored trajectory to replay (drawn prompts
        hold at least one replayable trajectory: ``edit_scored`` offers no other)."""
        candidates = {row: self._replayable(key) for key, row in drawn}
        candidates = {row: options for row, options in candidates.items() if options}
        if not candidates:
            return {}
        if self.options.trajectory_selection == "random":
            return {row: options[int(torch.randint(len(options), (1,), generator=generator))]
                    for row, options in candidates.items()}
        prompts = [rollout.prompt_ids[row] for row, options in candidates.items() for _ in options]
        completions = [list(t.completion_ids) for options in candidates.values() for t in options]
        forward = self.trainer.policy_forward(prompts, completions, compute_entropy=True)
        lengths = torch.tensor([len(c) for c in completions], device=forward.entropies.device)
        mask = torch.arange(forward.entropies.size(1), device=lengths.device)[None, :] < lengths[:, None]
        means = mean_token_entropy(forward.entropies.float(), mask).cpu()
        chosen, start = {}, 0
        for row, options in candidates.items():
            chosen[row] = options[lowest_entropy_index(means[start:start + len(options)])]
            start += len(options)
        return chosen

    # ---------------------------------------------------------------- batch fields and the buffer update
    def batch_fields(self, batch):
        if batch.mode != "train":
            return {}
        output = batch.output
        num_rows, width = output["completion_ids"].shape
        device = output["completion_ids"].device
        replayed = torch.zeros(num_rows, dtype=torch.bool, device=device)
        behaviour = torch.zeros(num_rows, width, dtype=torch.float32, device=device)
        for row, trajectory in self._replayed.items():
            replayed[row] = True
            if trajectory.behaviour_logps is not None:
                values = torch.tensor(trajectory.behaviour_logps, dtype=torch.float32)[:width]
                behaviour[row, : values.numel()] = values.to(device)
        self._update_buffer(batch)
        metrics = self.trainer._metrics["train"]
        metrics["exgrpo/replayed_fraction"].append(len(self._replayed) / max(num_rows, 1))
        metrics["exgrpo/buffer_prompts"].append(float(len(self.buffer)))
        metrics["exgrpo/buffer_trajectories"].append(float(self.buffer.num_trajectories()))
        metrics["exgrpo/retired"].append(float(len(self.buffer.retired)))
        metrics["exgrpo/started"].append(float(self.buffer.started))
        return {REPLAYED: replayed, BEHAVIOUR: behaviour}

    def _update_buffer(self, batch) -> None:
        """Retire, collect and maybe start replay from every process's groups (gathered in process order)."""
        from accelerate.utils import gather_object

        rollout, opts = batch.rollout, self.options
        num_local = rollout.num_rows
        process = self.trainer.accelerator.process_index
        verifier, threshold = batch.rewards_per_func[:, 0], threshold_of(self.trainer.args)
        if not self._noted_values:  # the same gathered values on every process: each notes it once
            note = correctness_note(verifier, self.trainer.reward_func_names[0], "ExGRPO", threshold,
                                    detail="(the first reward function: buckets, retirement, replay start)")
            self._noted_values = note is not None
            if note is not None and self.trainer.accelerator.is_main_process:
                logger.warning(note)
        correct_all = correct_mask(verifier, threshold)  # one rule: trl_explore.rewards.correctness
        local_correct = correct_all[process * num_local:(process + 1) * num_local].tolist()
        behaviour = batch.behaviour_logps
        in_loss = batch.output["completion_mask"].sum(dim=1).gt(0).tolist()
        k_total = rollout.num_generations
        groups = []
        for g in range(num_local // k_total):
            rows = range(g * k_total, (g + 1) * k_total)
            trajectories = []
            for i in rows:
                ids = tuple(int(t) for t in rollout.completion_ids[i])
                logps = None
                if i in self._replayed:  # its recorded behaviour log-probs, not those of the current policy
                    logps = self._replayed[i].behaviour_logps
                elif behaviour is not None:
                    logps = tuple(float(x) for x in behaviour[i, : len(ids)].tolist())
                trajectories.append(Trajectory(ids, logps))
            # stored: the policy's own samples (not another method's rows) that TRL's loss trains on (a row with an
            # all-zero completion mask, e.g. truncated under mask_truncated_completions, is neither trained nor kept)
            own = [rollout.owner[i] is None and not rollout.offline[i] and bool(in_loss[i]) for i in rows]
            groups.append((prompt_key(rollout.rows[g * k_total]), trajectories, [local_correct[i] for i in rows], own))
        if self.trainer.accelerator.num_processes > 1:
            groups = gather_object(groups)
        for key, trajectories, correct, own in groups:
            self.buffer.record_group(key, trajectories, correct, collect=self.buffer.started, storable=own)
        if not self.buffer.started and replay_starts(correct_all.float().mean().item(), opts.replay_start_pass_rate):
            self.buffer.started = True

    # ---------------------------------------------------------------- loss
    def loss_batch(self, call):
        # TRL clips its ratio r = pi_theta / old_per_token_logps; with num_iterations > 1 (or more generation steps
        # than accumulation steps) r drifts from 1 after the first update and a clipped replayed token would get no
        # gradient, where ExGRPO's replayed term has no clip (§3.2). For the replayed rows, the batch TRL's objective
        # sees takes the current log-probs (detached) as `old_per_token_logps`: r = 1 there, the clip never acts, and
        # `advantages` sets the whole shaped gradient through its factor (its `old` is then the current log-probs).
        if call.mode != "train" or REPLAYED not in call.inputs:
            return call.batch
        old = call.batch.get("old_per_token_logps")
        replayed = call.inputs[REPLAYED].bool()
        if old is None or not replayed.any():
            return call.batch
        current = call.forward.logps.detach().to(old.dtype)
        return {**call.batch, "old_per_token_logps": torch.where(replayed[:, None], current, old)}

    def advantages(self, call):
        if call.mode != "train" or REPLAYED not in call.inputs:
            return call.advantages
        replayed = call.inputs[REPLAYED].bool()
        if not replayed.any():
            return call.advantages
        logps = call.forward.logps
        behaviour = call.inputs[BEHAVIOUR] if self.options.importance_correction else logps.detach()
        old = call.batch.get("old_per_token_logps")  # the replayed rows' are the current log-probs (loss_batch)
        old = logps.detach() if old is None else old
        scale = replay_advantage_scale(logps, behaviour, old, self.options.policy_shaping_gamma)
        factor = torch.where(replayed[:, None], scale, torch.ones_like(scale))
        mask = call.inputs["completion_mask"].bool() & replayed[:, None]
        self.trainer._metrics["train"]["exgrpo/replay_scale_mean"].append(scale[mask].mean().item())
        return call.advantages * factor

    # ---------------------------------------------------------------- checkpoints
    def save(self, output_dir):
        path = os.path.join(output_dir, BUFFER_FILE)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(self.buffer.state_dict(), f)

    def load(self, checkpoint):
        path = os.path.join(checkpoint, BUFFER_FILE)
        if not os.path.isfile(path):
            logger.warning("ExGRPO: checkpoint %s has no %s; the replay buffer starts empty", checkpoint, BUFFER_FILE)
            return
        with open(path) as f:
            self.buffer.load_state_dict(json.load(f))
