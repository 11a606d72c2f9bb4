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
(:mod:`trl_explore.checkpoints`): ``resume_from_checkpoint=True`` takes the newest complete checkpoint whose files
match their digests, a named torn one is refused, and a resume with other components or another batch geometry
inside a generation is refused. A run holds a lock on its ``output_dir``; NaN or infinite weights or optimizer state
are neither saved nor resumed from; a save the disk refuses is named in one line.
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

from trl_explore.checkpoints.disk import held_by_this_run
from trl_explore.checkpoints.records import (
    DIGEST,
    RECORD_NAME,
    CheckpointWriteError,
    OutputDirInUse,
    OutputDirLock,
    compare_optimizer_settings,
    compare_run_records,
    describe_torn,
    describe_write_failure,
    digest_files,
    foreign_checkpoint,
    inspect_checkpoint,
    inspect_run,
    is_write_failure,
    list_files,
    nonfinite_state,
    optimizer_settings,
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


PROCESS_STATE_DIR = "component_state"
"""Sub-folder of a checkpoint holding each component's per-process state (``Component.save_process_state``)."""


def process_state_folder(checkpoint: str, name: str, process_index: int) -> str:
    """``<checkpoint>/component_state/<name>/process_<process_index>``: one component's state of one process."""
    return os.path.join(checkpoint, PROCESS_STATE_DIR, name, f"process_{process_index}")


def keeps_process_state(component) -> bool:
    """Whether ``component`` overrides ``Component.save_process_state`` (then it is saved and loaded per process)."""
    from trl_explore.driver.components import Component

    return type(component).save_process_state is not Component.save_process_state


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
        for component in self.components:  # each process's own component state (Component.save_process_state)
            if keeps_process_state(component):
                folder = process_state_folder(output_dir, component.name, self.args.process_index)
                os.makedirs(folder, exist_ok=True)
                component.save_process_state(folder)
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
        # A NaN or infinite weight or optimizer state stops the run before anything is written; a write the disk
        # refuses (space, permission) stops it with one line naming the folder, the file and the free space.
        run_dir = self._get_output_dir(trial=trial)
        folder = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        self._refuse_nonfinite_save(folder)
        limit, self.args.save_total_limit, self._deferred_pushes = self.args.save_total_limit, None, []
        try:
            if self.args.should_save:
                write_record(folder, {"status": "writing", "step": self.state.global_step})
            self.accelerator.wait_for_everyone()  # nobody writes into a folder whose record still says complete
            super()._save_checkpoint(model, trial)
        except Exception as err:
            if is_write_failure(err):
                raise CheckpointWriteError(describe_write_failure(folder, err)) from err
            raise
        finally:
            self.args.save_total_limit, pushes, self._deferred_pushes = limit, self._deferred_pushes, None
        self.accelerator.wait_for_everyone()  # every process's files (RNG and generation state) are written
        if self.args.should_save:
            generate_every = self.args.steps_per_generation * self.num_iterations
            files = list_files(folder)
            try:  # the record itself (JSON) can meet the full disk too: the same one line
                write_record(folder, {"status": "complete", "step": self.state.global_step,
                                      "inside_generation": bool(self._step % generate_every), **run_record(self),
                                      "files": files, "digest": DIGEST, "digests": digest_files(folder, files)})
            except Exception as err:
                if is_write_failure(err):
                    raise CheckpointWriteError(describe_write_failure(folder, err)) from err
                raise
            rotate_checkpoints(output_dir=run_dir, save_total_limit=limit, use_mtime=True,
                               best_model_checkpoint=self.state.best_model_checkpoint)  # as Transformers rotates
        for pushed in pushes:
            super()._push_from_checkpoint(pushed)

    def _refuse_nonfinite_save(self, folder: str) -> None:
        """Raise ``FloatingPointError`` on every process when a process's weights or optimizer state hold a NaN or an
        infinity (``checkpoints.nonfinite_state``): a checkpoint of them would be marked complete and resumed from."""
        from accelerate.utils import gather_object

        problem = next((p for p in gather_object([nonfinite_state(self.model, self.optimizer)]) if p), None)
        if problem is not None:
            newest = next((s.path for s in inspect_run(os.path.dirname(folder)) if s.complete), None)
            raise FloatingPointError(
                f"step {self.state.global_step}: {problem}; {folder} was not written (a resume would train on them). "
                f"The newest complete checkpoint is {newest or 'none'}: lower the learning rate or look for the "
                "step whose loss or gradient norm was not finite")

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
        # Also takes output_dir's lock for the run (checkpoints.OutputDirLock): a second run on the folder is refused.
        lock = self._lock_output_dir()
        try:
            if resume_from_checkpoint is not None and resume_from_checkpoint is not False:
                resume_from_checkpoint = self._resumable_checkpoint(resume_from_checkpoint)
            return super().train(resume_from_checkpoint=resume_from_checkpoint, trial=trial,
                                 ignore_keys_for_eval=ignore_keys_for_eval)
        finally:
            if lock is not None:
                lock.release()

    def _lock_output_dir(self) -> OutputDirLock | None:
        """The main process locks ``output_dir``; every process raises ``OutputDirInUse`` when another run holds it
        (the processes of one run do not refuse each other: only the main one locks)."""
        from accelerate.utils import gather_object

        lock, refusal = None, None
        if self.accelerator.is_main_process and not held_by_this_run(self.args.output_dir):  # the script holds it
            lock = OutputDirLock(self.args.output_dir)
            try:
                lock.acquire()
            except OutputDirInUse as err:
                lock, refusal = None, str(err)
        refusal = next((r for r in gather_object([refusal]) if r), None)
        if refusal is not None:
            if lock is not None:
                lock.release()
            raise OutputDirInUse(refusal)
        return lock

    def _resumable_checkpoint(self, requested) -> str:
        """The checkpoint folder to resume from (every process agrees on it), checked (see :meth:`train`).

        Raises:
            ValueError: no complete checkpoint (``True``); a named checkpoint that is torn (names the file and the
                newest complete checkpoint); a resume inside a generation with other components or another batch
                geometry (names both).
        """
        from accelerate.utils import gather_object

        main = self.accelerator.is_main_process
        verify = self.accelerator.is_local_main_process  # one process per machine reads the files for their digests
        if requested is True:
            run_dir = self.args.output_dir
            statuses = inspect_run(run_dir, verify_contents=verify)
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
            if chosen.complete and verify:
                chosen = inspect_checkpoint(path, verify_contents=True)
            problem = next((p for p in gather_object([chosen.problem]) if p), None)
            if problem is not None:
                others = [s for s in statuses if s.path != path]
                newest = next((s.path for s in others if s.complete
                               and (not verify or inspect_checkpoint(s.path, verify_contents=True).complete)), None)
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
        changed = compare_optimizer_settings(status.record.get("optimizer") or {}, optimizer_settings(self.args))
        if changed and self.accelerator.is_main_process:
            logger.warning("resuming from %s with other optimizer or scheduler settings than it was written with: %s",
                           status.path, "; ".join(changed))
        foreign = foreign_checkpoint(status.path)  # its run id is not that of the other checkpoints of its folder
        if foreign and self.accelerator.is_main_process:
            logger.warning("%s", foreign)
        if status.record.get("run_id"):
            self._run_id = status.record["run_id"]  # the resumed run is the checkpoint's: its later checkpoints too

    def _load_component_state(self, checkpoint: str) -> None:
        """Load every component's state from ``checkpoint``: its shared state (written by the main process, read by
        every process) and, for a component that keeps one, this process's own (``Component.load_process_state``).

        Raises:
            FileNotFoundError: the checkpoint holds no per-process state of a component for this process.
        """
        for component in self.components:  # shared state: written by the main process, read by every process
            component.load(checkpoint)
        for component in self.components:  # each process's own state, from its own folder
            if keeps_process_state(component):
                folder = process_state_folder(checkpoint, component.name, self.args.process_index)
                if not os.path.isdir(folder):
                    raise FileNotFoundError(
                        f"checkpoint {checkpoint} has no state of component {component.name!r} for process "
                        f"{self.args.process_index} ({folder}): it was written by another number of processes or "
                        f"without this component; resume with the processes it was saved with")
                component.load_process_state(folder)

    def _load_best_model(self):
        # Overrides Trainer._load_best_model (load_best_model_at_end): the components' state (ASE's steering bank)
        # follows the weights to the best checkpoint, as on resume; and vLLM, whose weights TRL syncs only when the
        # step changed, takes the reloaded weights at its next generation (an evaluation after training).
        super()._load_best_model()
        self._load_component_state(self.state.best_model_checkpoint)
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
        problem = nonfinite_state(self.model, self.optimizer)  # weights were loaded before, by Trainer.train
        if problem is not None:
            raise FloatingPointError(f"cannot resume from {checkpoint}: its {problem}; training on them gives NaN. "
                                     "Resume from an earlier checkpoint")
        self._load_component_state(checkpoint)
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
