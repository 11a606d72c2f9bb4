"""Exact resumption: the state of a generation in progress, and the prompt order of every epoch.

TRL 1.16's ``GRPOTrainer`` generates once every ``steps_per_generation * num_iterations`` micro-steps and keeps the
split batches in ``_buffered_inputs``; its micro-step counter ``_step`` and that buffer are not checkpointed, so a run
resumed inside a generation generates again (other completions, another bank update). Its ``RepeatSampler`` draws the
prompt order of each epoch from one generator seeded once, so a resumed run draws epoch 0's order again, whatever the
epoch. :class:`~trl_explore.driver.ExplorationTrainer` uses the two parts below to resume as the uninterrupted run:

* :func:`save_generation_state` / :func:`load_generation_state`: ``_step`` and the buffered batches of one process,
  tensors in safetensors, everything else in JSON (no pickle), in ``generation_state/`` of the checkpoint.
* :class:`EpochSampler`: TRL's sampler, whose order in epoch ``e`` is the ``e + 1``-th permutation of its seeded
  generator (the uninterrupted run's order) whichever epoch the run starts in.

Every checkpoint gets a completion record, written once every process has written its files
(:mod:`trl_explore.checkpoints`): ``resume_from_checkpoint=True`` takes the newest complete checkpoint, a named torn
one is refused, and a resume with other components or another batch geometry inside a generation is refused.
"""

from __future__ import annotations

import json
import logging
import math
import os

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch.utils.data import Sampler
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from trl_explore.checkpoints import (
    RECORD_NAME,
    compare_run_records,
    describe_torn,
    inspect_checkpoint,
    inspect_run,
    list_files,
    run_record,
    write_record,
)

logger = logging.getLogger(__name__)

STATE_DIR = "generation_state"
"""Sub-folder of a checkpoint holding each process's ``process_{i}.json`` and ``process_{i}.safetensors``."""

FORMAT = 1


class UnstorableBatch(ValueError):
    """A buffered batch holds a value that is neither a tensor nor JSON data (e.g. images)."""


def _same(a, b) -> bool:
    """Equal values of equal types, NaN equal to NaN (lists of log-probs hold NaN on replaced rows)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def _describe(value, name: str, tensors: dict) -> dict:
    if isinstance(value, torch.Tensor):
        tensors[name] = value.detach().to("cpu").contiguous().clone()  # no shared storage: safetensors refuses it
        return {"tensor": name}
    try:
        stored = _same(json.loads(json.dumps(value)), value)
    except (TypeError, ValueError):
        stored = False
    if not stored:
        raise UnstorableBatch(f"the buffered batch key {name.split('/', 1)[1]!r} holds a {type(value).__name__} that "
                              "neither safetensors nor JSON stores exactly")
    return {"value": value}


def save_generation_state(directory: str, process_index: int, step: int, buffered: list[dict] | None) -> None:
    """Write one process's generation state into ``directory/generation_state``.

    Args:
        directory: the checkpoint folder.
        process_index: this process's index (one pair of files per process: each holds its own batches).
        step: TRL's micro-step counter ``_step``.
        buffered: TRL's ``_buffered_inputs`` (``steps_per_generation`` dicts of batch-first tensors, 0-d tensors,
            lists and ``None``) when the next micro-step reads them, else ``None`` (a generation starts there).

    Raises:
        UnstorableBatch: a buffered value is neither a tensor nor JSON data; nothing is written then.
    """
    tensors: dict[str, torch.Tensor] = {}
    slices = None if buffered is None else [
        {key: _describe(value, f"{i}/{key}", tensors) for key, value in batch.items()}
        for i, batch in enumerate(buffered)
    ]
    path = os.path.join(directory, STATE_DIR)
    os.makedirs(path, exist_ok=True)
    if tensors:
        save_file(tensors, os.path.join(path, f"process_{process_index}.safetensors"))
    with open(os.path.join(path, f"process_{process_index}.json"), "w") as f:
        json.dump({"format": FORMAT, "step": step, "buffered": slices}, f)


def load_generation_state(checkpoint: str, process_index: int, device) -> tuple[int, list[dict] | None] | None:
    """Read what :func:`save_generation_state` wrote: ``(step, buffered batches on device or None)``, or ``None``
    when the checkpoint has no state for this process (written by another trainer, or before this format)."""
    path = os.path.join(checkpoint, STATE_DIR, f"process_{process_index}.json")
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            state = json.load(f)
    except ValueError as err:
        raise ValueError(f"{path}: {err}; the checkpoint is torn, resume from an earlier one") from err
    if state.get("format") != FORMAT:
        raise ValueError(f"{path}: generation state format {state.get('format')!r}, expected {FORMAT}")
    if state["buffered"] is None:
        return state["step"], None
    tensors_path = os.path.join(checkpoint, STATE_DIR, f"process_{process_index}.safetensors")
    try:
        tensors = load_file(tensors_path)
    except (OSError, SafetensorError) as err:
        raise ValueError(f"{tensors_path}: {err}; the checkpoint is torn, resume from an earlier one") from err
    buffered = [
        {key: tensors[item["tensor"]].to(device) if "tensor" in item else item["value"] for key, item in batch.items()}
        for batch in state["buffered"]
    ]
    return state["step"], buffered


def check_buffered_geometry(buffered: list[dict], args, checkpoint: str) -> None:
    """Refuse buffered batches of another geometry than ``args`` (a checkpoint without a completion record, whose
    geometry is not recorded): TRL would index past them (an ``IndexError``) or train on their stale slices.

    Raises:
        ValueError: naming the checkpoint, both values and the fix.
    """
    rows = next((v.shape[0] for v in buffered[0].values() if isinstance(v, torch.Tensor) and v.dim() > 0), None)
    found = {"steps_per_generation": len(buffered), "per_device_train_batch_size": rows}
    differ = [f"{key}={value} in the checkpoint, {getattr(args, key)} now" for key, value in found.items()
              if value is not None and value != getattr(args, key)]
    if differ:
        raise ValueError(f"cannot resume from {checkpoint}: it was written inside a generation, whose batches TRL "
                         f"buffered under other settings: {'; '.join(differ)}. Resume with the checkpoint's settings, "
                         "or from a checkpoint written at a generation boundary")


class EpochSampler(Sampler):
    """TRL's ``RepeatSampler`` with an epoch: iteration ``e`` yields the order the uninterrupted run has in epoch
    ``e``.

    ``RepeatSampler`` seeds its generator once and draws one permutation per iteration, so epoch ``e`` uses the
    ``e + 1``-th permutation of ``seed``. Here each iteration re-seeds the generator and discards ``e`` permutations
    first: the orders are TRL's, and a run resumed in epoch ``e`` gets epoch ``e``'s. ``e`` is set by ``set_epoch``
    (Trainer calls it at each epoch, through Accelerate's wrappers where they forward it) and otherwise counts the
    iterations; the driver sets it on resume for the wrappers that do not forward it. Unshuffled or unseeded samplers
    are iterated as they are.

    Args:
        sampler: the ``trl.trainer.utils.RepeatSampler`` built by ``GRPOTrainer._get_train_sampler``.
    """

    def __init__(self, sampler):
        self.sampler = sampler
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.sampler)

    def __getattr__(self, name):  # data_source, generator, ...: TRL's sampler's attributes
        if name == "sampler":
            raise AttributeError(name)
        return getattr(self.sampler, name)

    def __iter__(self):
        epoch, self.epoch = self.epoch, self.epoch + 1
        inner = self.sampler
        if inner.shuffle and inner.seed is not None:
            inner.generator.manual_seed(inner.seed)
            for _ in range(epoch):  # the permutations of the epochs before (RepeatSampler draws one per iteration)
                torch.randperm(inner.num_samples, generator=inner.generator)
        return iter(inner)


class ResumableTrainerMixin:
    """The checkpoint side of :class:`~trl_explore.driver.ExplorationTrainer`: component state next to the weights,
    TRL's generation buffer per process, the training sampler's epoch. A mixin over ``GRPOTrainer`` (it comes first in
    the bases; ``super()`` is TRL's trainer) that reads ``self.components``."""

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
        if self.use_vllm and self.args.vllm_mode == "server" and not getattr(self, "_warned_server_resume", False):
            self._warned_server_resume = True
            logger.warning("%s: the vLLM server's sampler state is not part of a checkpoint: a run resumed from it "
                           "samples other completions than the uninterrupted run from its next generation on",
                           output_dir)

    def _save_checkpoint(self, model, trial):
        # Overrides GRPOTrainer._save_checkpoint (TRL's, then Transformers'): the folder's completion record says
        # "writing" before any process writes into it, and "complete", with its files, once every process has written
        # its own (trl_explore.checkpoints). Transformers' rotation of old checkpoints and its Hub push wait for the
        # record: before it, a kill would leave no complete checkpoint (save_total_limit=1) or upload a torn one.
        run_dir = self._get_output_dir(trial=trial)
        folder = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        if self.args.should_save:
            write_record(folder, {"status": "writing", "step": self.state.global_step})
        self.accelerator.wait_for_everyone()  # nobody writes into a folder whose record still says complete
        limit, self.args.save_total_limit, self._deferred_pushes = self.args.save_total_limit, None, []
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.save_total_limit, pushes, self._deferred_pushes = limit, self._deferred_pushes, None
        self.accelerator.wait_for_everyone()  # every process's files (RNG and generation state) are written
        if self.args.should_save:
            generate_every = self.args.steps_per_generation * self.num_iterations
            write_record(folder, {"status": "complete", "step": self.state.global_step,
                                  "inside_generation": bool(self._step % generate_every), **run_record(self),
                                  "files": list_files(folder)})
            rotate_checkpoints(output_dir=run_dir, save_total_limit=limit, use_mtime=True,
                               best_model_checkpoint=self.state.best_model_checkpoint)  # as Transformers rotates
        for pushed in pushes:
            super()._push_from_checkpoint(pushed)

    def _push_from_checkpoint(self, checkpoint_folder):
        # Overrides Trainer._push_from_checkpoint: inside `_save_checkpoint` the push waits for the completion record.
        if getattr(self, "_deferred_pushes", None) is not None:
            self._deferred_pushes.append(checkpoint_folder)
            return None
        return super()._push_from_checkpoint(checkpoint_folder)

    def train(self, resume_from_checkpoint=None, trial=None, ignore_keys_for_eval=None):
        # Overrides Trainer.train, for its resume_from_checkpoint only: True takes the newest COMPLETE checkpoint
        # (Transformers' get_last_checkpoint takes the newest folder, torn or not), a named one must be complete, and
        # either is checked against this trainer's components and batch geometry.
        if resume_from_checkpoint is not None and resume_from_checkpoint is not False:
            resume_from_checkpoint = self._resumable_checkpoint(resume_from_checkpoint)
        return super().train(resume_from_checkpoint=resume_from_checkpoint, trial=trial,
                             ignore_keys_for_eval=ignore_keys_for_eval)

    def _resumable_checkpoint(self, requested) -> str:
        """The checkpoint folder to resume from (every process agrees on it), checked (see :meth:`train`).

        Raises:
            ValueError: no complete checkpoint (``True``); a named checkpoint that is torn (names the file and the
                newest complete checkpoint); a resume inside a generation with other components or another batch
                geometry (names both).
        """
        from accelerate.utils import gather_object

        main = self.accelerator.is_main_process
        if requested is True:
            run_dir = self.args.output_dir
            statuses = inspect_run(run_dir)
            complete = [s.path for s in statuses if s.complete]
            agreed = set.intersection(*(set(paths) for paths in gather_object([complete])))  # each process's view
            chosen = next((s for s in statuses if s.path in agreed), None)
            if chosen is None:
                if statuses:
                    raise ValueError(f"resume_from_checkpoint=True: no complete checkpoint in {run_dir}: "
                                     f"{describe_torn(statuses)}. Start without resume_from_checkpoint")
                raise ValueError(f"No valid checkpoint found in output directory ({run_dir})")  # Transformers' words
            skipped = statuses[:statuses.index(chosen)]
            if skipped and main:
                logger.warning("resume_from_checkpoint=True: resuming from %s, the newest complete checkpoint; "
                               "skipped the torn %s", chosen.path, describe_torn(skipped))
        else:
            path = os.path.normpath(str(requested))
            statuses = inspect_run(os.path.dirname(path))
            chosen = next((s for s in statuses if s.path == path), None) or inspect_checkpoint(path)
            problem = next((p for p in gather_object([chosen.problem]) if p), None)
            if problem is not None:
                newest = next((s.path for s in statuses if s.complete), None)
                hint = (f"the newest complete checkpoint is {newest}: resume from it (resume_from_checkpoint=True "
                        "takes it)" if newest else f"{os.path.dirname(path) or '.'} holds no complete checkpoint")
                raise ValueError(f"cannot resume from {path}: {problem}; {hint}")
        self._check_run_record(chosen)
        return chosen.path

    def _check_run_record(self, status) -> None:
        """Compare what the checkpoint was written with to this trainer (``checkpoints.compare_run_records``)."""
        if status.record is None:
            if self.accelerator.is_main_process:
                logger.warning("%s has no %s (an older version or another trainer wrote it): its files were checked, "
                               "not that every process finished writing, nor its components and batch geometry",
                               status.path, RECORD_NAME)
            return
        refusals, warnings = compare_run_records(status.record, run_record(self))
        if refusals:
            raise ValueError(
                f"cannot resume from {status.path}: it was written inside a generation, whose batches TRL buffered "
                f"under its own settings, and {'; '.join(refusals)}. Resume with the checkpoint's settings, or from a "
                "checkpoint written at a generation boundary (every steps_per_generation x num_iterations steps)")
        if warnings and self.accelerator.is_main_process:
            logger.warning("resuming from %s with other settings than it was written with (the run continues, not as "
                           "the uninterrupted run would): %s", status.path, "; ".join(warnings))

    def _load_best_model(self):
        # Overrides Trainer._load_best_model (load_best_model_at_end): the components' state (ASE's steering bank)
        # follows the weights to the best checkpoint, as on resume; and vLLM, whose weights TRL syncs only when the
        # step changed, takes the reloaded weights at its next generation (an evaluation after training).
        super()._load_best_model()
        for component in self.components:
            component.load(self.state.best_model_checkpoint)
        if getattr(self, "use_vllm", False):
            self._last_loaded_step = -1  # TRL's "never synced" value (GRPOTrainer.__init__)

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
                check_buffered_geometry(buffered, self.args, checkpoint)
                self._buffered_inputs = buffered
        sampler = getattr(self, "_epoch_sampler", None)
        if sampler is not None and self.state.epoch is not None:
            # the epoch Trainer resumes in (Trainer sets it again where Accelerate's wrappers forward set_epoch)
            sampler.set_epoch(math.floor(self.state.epoch))
