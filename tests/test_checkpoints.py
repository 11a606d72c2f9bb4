"""Checkpoints a kill cannot tear (trl_explore.checkpoints, issue 22 item 3): the completion record, the checks of a
torn folder, the choice ``resume_from_checkpoint=True`` makes, the record of what a checkpoint was written with, and
(slow) runs killed with SIGKILL at each file of a checkpoint's write, in 1 and 2 processes, then resumed.

Issue 31: checkpoints whose files are all there and wrong (a flipped byte in the weights, the optimizer state or a
safetensors header; NaN weights or optimizer state), two runs on one output_dir, a changed learning rate on resume, a
save into a full or read-only folder, and the test helpers ending every process of a run that outlives its timeout.
"""

import contextlib
import errno
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from safetensors.torch import save_file
from trl import GRPOConfig

from trl_explore.checkpoints.records import (
    LOCK_NAME,
    RECORD_NAME,
    CheckpointWriteError,
    OutputDirInUse,
    OutputDirLock,
    compare_optimizer_settings,
    compare_run_records,
    describe_write_failure,
    digest_files,
    file_digest,
    file_problem,
    first_nonfinite,
    inspect_checkpoint,
    inspect_run,
    is_write_failure,
    list_files,
    nonfinite_state,
    read_record,
    write_record,
)
from trl_explore.driver import ExplorationTrainer
from trl_explore.testing import (
    make_tiny_causal_lm,
    parity_reward,
    run_in_session,
    run_two_cpu_processes,
    tiny_training_args,
)

SCRIPT = Path(__file__).parent / "scripts" / "checkpoint_kill.py"


# ---------------------------------------------------------------- the checks of one file and one folder
def test_file_problem_names_torn_files(tmp_path):
    save_file({"a": torch.arange(10.0)}, tmp_path / "w.safetensors")
    torch.save({"x": torch.zeros(100)}, tmp_path / "o.pt")
    (tmp_path / "s.json").write_text('{"step": 3}')
    (tmp_path / "notes.txt").write_text("anything")
    for name in ("w.safetensors", "o.pt", "s.json", "notes.txt"):
        assert file_problem(str(tmp_path / name)) is None, name
    size = os.path.getsize(tmp_path / "w.safetensors")
    os.truncate(tmp_path / "w.safetensors", size - 8)
    assert file_problem(str(tmp_path / "w.safetensors")) == (
        f"w.safetensors is torn: {size - 8} bytes, its header declares {size}")
    os.truncate(tmp_path / "w.safetensors", 5)
    assert "shorter than a safetensors header" in file_problem(str(tmp_path / "w.safetensors"))
    os.truncate(tmp_path / "o.pt", os.path.getsize(tmp_path / "o.pt") // 2)
    assert "o.pt is torn" in file_problem(str(tmp_path / "o.pt")) and "zip directory is missing" in file_problem(
        str(tmp_path / "o.pt"))
    (tmp_path / "empty.pth").write_bytes(b"")
    assert file_problem(str(tmp_path / "empty.pth")) == "empty.pth is torn: 0 bytes, its zip directory is missing"
    (tmp_path / "s.json").write_text('{"step": ')
    assert file_problem(str(tmp_path / "s.json")).startswith("s.json is torn (9 bytes): JSONDecodeError")


def _checkpoint(folder: Path, step: int, status="complete", inside=False, **record):
    """A checkpoint folder of hand-written files and its record."""
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    save_file({"w": torch.ones(4)}, folder / "model.safetensors")
    torch.save({"cpu": torch.zeros(3)}, folder / "rng_state.pth")
    files = list_files(str(folder))
    write_record(str(folder), {"status": status, "step": step, "inside_generation": inside, "files": files,
                               "digest": "sha256", "digests": digest_files(str(folder), files), **record})
    return folder


def test_a_folder_counts_only_when_its_record_says_complete_and_its_files_are_there(tmp_path):
    done = _checkpoint(tmp_path / "checkpoint-2", 2)
    assert inspect_checkpoint(str(done)).complete
    listed = json.loads((done / RECORD_NAME).read_text())["files"]
    assert sorted(listed) == sorted([name, os.path.getsize(done / name)] for name in (
        "trainer_state.json", "model.safetensors", "rng_state.pth"))
    writing = _checkpoint(tmp_path / "checkpoint-3", 3, status="writing")
    status = inspect_checkpoint(str(writing))
    assert not status.complete and status.problem == (
        f"its write did not finish on every process: {RECORD_NAME} says 'writing'")
    (writing / "rng_state.pth").unlink()  # with a complete checkpoint of the run, the missing file is named
    assert inspect_checkpoint(str(writing), reference=status.record).problem.startswith(
        "rng_state.pth is missing; its write did not finish")
    os.truncate(writing / "model.safetensors", 20)
    assert inspect_checkpoint(str(writing)).problem.startswith("model.safetensors is torn: 20 bytes")
    # a complete record whose file was later cut or deleted (e.g. a rotation killed while deleting the folder)
    os.truncate(done / "model.safetensors", 20)
    assert inspect_checkpoint(str(done)).problem.startswith("model.safetensors is torn: 20 bytes, written as")
    save_file({"w": torch.ones(4)}, done / "model.safetensors")
    (done / "trainer_state.json").unlink()
    assert inspect_checkpoint(str(done)).problem == f"trainer_state.json is missing (listed in {RECORD_NAME})"


def test_a_folder_without_record_is_checked_file_by_file(tmp_path):
    legacy = tmp_path / "checkpoint-1"
    legacy.mkdir()
    torch.save({}, legacy / "optimizer.pt")
    assert inspect_checkpoint(str(legacy)).problem == "trainer_state.json is missing"
    (legacy / "trainer_state.json").write_text("{}")
    assert inspect_checkpoint(str(legacy)).complete and inspect_checkpoint(str(legacy)).record is None
    (legacy / "trainer_state.json").write_text("{")
    assert inspect_checkpoint(str(legacy)).problem.startswith("trainer_state.json is torn")


@pytest.mark.slow
def test_inspect_run_lists_newest_first_and_names_what_torn_ones_lack(tmp_path):
    _checkpoint(tmp_path / "checkpoint-2", 2)
    _checkpoint(tmp_path / "checkpoint-10", 10)
    torn = _checkpoint(tmp_path / "checkpoint-11", 11, status="writing")
    (torn / "rng_state.pth").unlink()
    (tmp_path / "checkpoint-x").mkdir()
    statuses = inspect_run(str(tmp_path))
    assert [os.path.basename(s.path) for s in statuses] == ["checkpoint-11", "checkpoint-10", "checkpoint-2"]
    assert [s.complete for s in statuses] == [False, True, True]
    assert statuses[0].problem.startswith("rng_state.pth is missing")


# ---------------------------------------------------------------- what a checkpoint was written with
def _record(inside, per_device=6, components=("ase",), alpha=4.0, trainer="t.ASEGRPOTrainer"):
    return {"inside_generation": inside, "trainer": trainer,
            "components": [{"name": n, "class": f"c.{n}", "options": {"steering_alpha": alpha}} for n in components],
            "geometry": {"per_device_train_batch_size": per_device, "steps_per_generation": 2, "world_size": 1}}


def test_compare_run_records_refuses_inside_a_generation_and_warns_at_a_boundary():
    now = _record(False)
    assert compare_run_records(_record(True), now) == ([], [])
    assert compare_run_records(_record(True, per_device=3), now) == (
        ["per_device_train_batch_size=3 in the checkpoint, 6 now"], [])
    assert compare_run_records(_record(False, per_device=3), now) == (
        [], ["per_device_train_batch_size=3 in the checkpoint, 6 now"])
    assert compare_run_records(_record(True, components=("oger",), trainer="t.OGERTrainer"), now) == (
        ["components ['oger'] wrote the checkpoint, this trainer has ['ase']"],
        ["trainer t.OGERTrainer wrote the checkpoint, this one is t.ASEGRPOTrainer"])
    assert compare_run_records(_record(True, alpha=0.5), now) == (
        [], ["ase.steering_alpha: 0.5 in the checkpoint, 4.0 now"])
    # the trainer's class path before the driver became a package is the same trainer
    new = _record(False, trainer="trl_explore.driver.trainer.ExplorationTrainer")
    assert compare_run_records(_record(True, trainer="trl_explore.driver.ExplorationTrainer"), new) == ([], [])



def test_a_full_disk_while_the_completion_record_is_written_reads_as_one_line(tmp_path, smollm2_tokenizer,
                                                                               monkeypatch):
    import trl_explore.driver.resume as resume

    trainer = _saving_trainer(tmp_path, smollm2_tokenizer)
    real = resume.write_record

    def full(folder, record):  # the disk fills after the files, while the JSON record is written
        if record.get("status") == "complete":
            raise OSError(errno.ENOSPC, "No space left on device", os.path.join(folder, RECORD_NAME))
        return real(folder, record)

    monkeypatch.setattr(resume, "write_record", full)
    with pytest.raises(CheckpointWriteError) as err:
        _save(trainer, 1)
    run = tmp_path / "run" / "checkpoint-1"
    assert str(err.value).startswith(f"cannot save checkpoint {run}: writing {run / RECORD_NAME} failed: no space "
                                     "left on the device (")
    assert not inspect_checkpoint(str(run)).complete

def test_a_checkpoint_of_another_seed_or_data_seed_is_named():
    """Issue 45 item 6: before, the record held no seed and such a checkpoint resumed without a word."""
    now = {**_record(False), "identity": {"seed": 0, "data_seed": None}}
    assert compare_run_records({**_record(False), "identity": {"seed": 0, "data_seed": None}}, now) == ([], [])
    other = "seed=1 in the checkpoint, 0 now (a checkpoint of another run: the resumed run continues as neither; " \
            "give seed=1 to continue that run)"
    assert compare_run_records({**_record(False), "identity": {"seed": 1, "data_seed": None}}, now) == ([], [other])
    assert compare_run_records({**_record(True), "identity": {"seed": 1, "data_seed": None}}, now) == ([other], [])
    refusals, warnings = compare_run_records({**_record(False), "identity": {"seed": 0, "data_seed": 7}}, now)
    assert warnings[0].startswith("data_seed=7 in the checkpoint, None now")
    assert compare_run_records(_record(False), now) == ([], [])  # a record written before identities were recorded


def test_a_checkpoint_copied_in_from_another_run_is_named_on_resume(tmp_path, smollm2_tokenizer, caplog):
    ours = _saving_trainer(tmp_path / "a", smollm2_tokenizer, seed=0)
    theirs = _saving_trainer(tmp_path / "b", smollm2_tokenizer, seed=1)
    first = _save(ours, 1)
    copied = _save(theirs, 2)
    target = first.parent / "checkpoint-2"
    os.rename(copied, target)  # the other run's checkpoint, copied into this run's folder
    assert read_record(str(first))["run_id"] != read_record(str(target))["run_id"]
    assert read_record(str(first))["identity"] == {"seed": 0, "data_seed": None}
    resumed = _saving_trainer(tmp_path / "a", smollm2_tokenizer, seed=0)
    with caplog.at_level(logging.WARNING, logger="trl_explore.driver.resume"):
        resumed._check_run_record(inspect_checkpoint(str(target)))
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "seed=1 in the checkpoint, 0 now" in text
    assert f"{target} was written by run {read_record(str(target))['run_id']}, the first checkpoint of its folder " \
           f"(checkpoint-1) by run {read_record(str(first))['run_id']}: it comes from another run" in text
    caplog.clear()
    again = _saving_trainer(tmp_path / "a", smollm2_tokenizer, seed=0)
    with caplog.at_level(logging.WARNING, logger="trl_explore.driver.resume"):
        again._check_run_record(inspect_checkpoint(str(first)))  # its own checkpoint: not a word
    assert not caplog.records
    assert again._run_id == read_record(str(first))["run_id"]  # the resumed run keeps the checkpoint's run id

# ---------------------------------------------------------------- the trainer's choice on resume
@pytest.fixture
def trainer(tmp_path, smollm2_tokenizer):
    args = GRPOConfig(output_dir=str(tmp_path / "run"), per_device_train_batch_size=2, num_generations=2, max_steps=1,
                      steps_per_generation=2, use_cpu=True, bf16=False, report_to="none")
    return ExplorationTrainer(make_tiny_causal_lm(smollm2_tokenizer), reward_funcs=[parity_reward], args=args,
                              train_dataset=Dataset.from_list([{"prompt": "1 + 1 ="}] * 2),
                              processing_class=smollm2_tokenizer)


@pytest.mark.slow
def test_resume_true_takes_the_newest_complete_checkpoint_and_says_which_it_skipped(trainer, tmp_path, caplog):
    run = tmp_path / "run"
    _checkpoint(run / "checkpoint-1", 1)
    torn = _checkpoint(run / "checkpoint-2", 2, status="writing")
    (torn / "trainer_state.json").unlink()
    with caplog.at_level(logging.WARNING, logger="trl_explore.driver.resume"):
        assert trainer._resumable_checkpoint(True) == str(run / "checkpoint-1")
    lines = [r.getMessage() for r in caplog.records if "resume_from_checkpoint=True" in r.getMessage()]
    assert lines == [f"resume_from_checkpoint=True: resuming from {run / 'checkpoint-1'}, the newest complete "
                     f"checkpoint; skipped the torn {torn} (trainer_state.json is missing; its write did not finish "
                     f"on every process: {RECORD_NAME} says 'writing')"]
    with pytest.raises(ValueError, match=f"cannot resume from {torn}: trainer_state.json is missing; .* the newest "
                                         f"complete checkpoint is {run / 'checkpoint-1'}: resume from it"):
        trainer.train(resume_from_checkpoint=str(torn))
    (run / "checkpoint-1" / "rng_state.pth").unlink()
    with pytest.raises(ValueError, match="resume_from_checkpoint=True: no complete checkpoint in .*checkpoint-2 .*"
                                         "rng_state.pth is missing"):
        trainer.train(resume_from_checkpoint=True)


@pytest.mark.slow
def test_a_resume_inside_a_generation_with_another_geometry_or_method_is_refused(trainer, tmp_path, caplog):
    from trl_explore.checkpoints.records import run_record

    mine = run_record(trainer)
    assert mine["trainer"] == "trl_explore.driver.trainer.ExplorationTrainer" and mine["components"] == []
    assert mine["geometry"] == {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 1,
                                "steps_per_generation": 2, "num_generations": 2, "num_iterations": 1, "world_size": 1}
    other = {**mine, "geometry": {**mine["geometry"], "per_device_train_batch_size": 4}}
    inside = _checkpoint(tmp_path / "run" / "checkpoint-1", 1, inside=True, **{k: other[k] for k in other})
    with pytest.raises(ValueError, match="written inside a generation.*per_device_train_batch_size=4 in the "
                                         "checkpoint, 2 now. Resume with the checkpoint's settings"):
        trainer.train(resume_from_checkpoint=str(inside))
    oger = {**mine, "trainer": "trl_explore.oger.trainer.OGERTrainer",
            "components": [{"name": "oger", "class": "x", "options": {}}]}
    by_oger = _checkpoint(tmp_path / "run" / "checkpoint-2", 2, inside=True, **oger)
    with pytest.raises(ValueError, match=r"components \['oger'\] wrote the checkpoint, this trainer has \[\]"):
        trainer.train(resume_from_checkpoint=str(by_oger))
    boundary = _checkpoint(tmp_path / "run" / "checkpoint-3", 3, inside=False, **oger)
    with caplog.at_level(logging.WARNING, logger="trl_explore.driver.resume"):
        trainer._resumable_checkpoint(str(boundary))
    assert "with other settings than it was written with" in caplog.text
    assert "['oger'] wrote the checkpoint" in caplog.text


# ---------------------------------------------------------------- contents: digests, headers, non-finite values
def _flip(path: Path, offset: int, mask: int = 0x40) -> None:
    """XOR one byte of ``path`` with ``mask`` (the issue's flipped bit); a negative offset counts from the end."""
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


def test_the_record_holds_a_sha256_of_every_file_and_a_flipped_byte_is_named(tmp_path):
    import hashlib

    done = _checkpoint(tmp_path / "checkpoint-2", 2)
    record = json.loads((done / RECORD_NAME).read_text())
    assert record["digest"] == "sha256"
    assert record["digests"]["trainer_state.json"] == hashlib.sha256(
        (done / "trainer_state.json").read_bytes()).hexdigest()
    assert sorted(record["digests"]) == sorted(rel for rel, _ in record["files"])
    assert file_digest(str(done / "model.safetensors")) == record["digests"]["model.safetensors"]
    _flip(done / "model.safetensors", -1)  # the last byte of the weights: size and header unchanged
    assert inspect_checkpoint(str(done)).complete  # by size: as before digests
    assert inspect_checkpoint(str(done), verify_contents=True).problem == (
        f"model.safetensors does not match its sha256 digest in {RECORD_NAME}: its contents changed after it was "
        "written")
    _flip(done / "model.safetensors", -1)
    assert inspect_checkpoint(str(done), verify_contents=True).complete
    _flip(done / "rng_state.pth", 100)  # inside a torch zip file
    assert inspect_checkpoint(str(done), verify_contents=True).problem.startswith("rng_state.pth does not match")


def test_a_flipped_byte_in_a_safetensors_header_is_named_even_without_a_record(tmp_path):
    save_file({"a": torch.arange(10.0)}, tmp_path / "w.safetensors")
    header = (tmp_path / "w.safetensors").read_bytes()
    _flip(tmp_path / "w.safetensors", header.index(b"F32") + 1, ord("3") ^ ord("2"))  # F32 -> F22, still JSON
    assert file_problem(str(tmp_path / "w.safetensors")) == (
        "w.safetensors is corrupt: its header gives tensor 'a' the unknown dtype 'F22'")
    save_file({"a": torch.arange(10.0)}, tmp_path / "w.safetensors")
    _flip(tmp_path / "w.safetensors", header.index(b"[10]") + 2, ord("0") ^ ord("1"))  # shape [10] -> [11]
    assert file_problem(str(tmp_path / "w.safetensors")) == (
        "w.safetensors is corrupt: its header gives tensor 'a' (F32, shape [11]) 40 bytes, it needs 44")
    legacy = tmp_path / "checkpoint-1"
    legacy.mkdir()
    (legacy / "trainer_state.json").write_text("{}")
    (tmp_path / "w.safetensors").rename(legacy / "model.safetensors")
    assert inspect_checkpoint(str(legacy)).problem.startswith("model.safetensors is corrupt")


def test_inspect_run_verifies_contents_newest_first_until_one_matches(tmp_path):
    for step in (1, 2, 3):
        _checkpoint(tmp_path / f"checkpoint-{step}", step)
    _flip(tmp_path / "checkpoint-3" / "model.safetensors", -2)
    _flip(tmp_path / "checkpoint-1" / "model.safetensors", -2)  # older than the one taken: not read
    statuses = inspect_run(str(tmp_path), verify_contents=True)
    assert [s.complete for s in statuses] == [False, True, True]
    assert statuses[0].problem.startswith("model.safetensors does not match its sha256 digest")


def test_first_nonfinite_names_the_tensor_and_counts_its_values():
    assert first_nonfinite([("a", torch.ones(3)), ("ids", torch.tensor([1, 2]))]) is None
    assert first_nonfinite([("a", torch.ones(3)), ("b", torch.tensor([[1.0, float("nan")], [float("inf"), 0.0]]))]) \
        == "b: 2 of 4 values are NaN or infinite"
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.AdamW(model.parameters())
    assert nonfinite_state(model, optimizer) is None
    optimizer.state[model.bias] = {"step": torch.tensor(1.0), "exp_avg": torch.tensor([float("inf")]),
                                   "exp_avg_sq": torch.zeros(1)}
    assert nonfinite_state(model, optimizer) == "optimizer state exp_avg of bias: 1 of 1 values are NaN or infinite"
    with torch.no_grad():
        model.weight[0, 1] = float("nan")
    assert nonfinite_state(model, optimizer) == "weight weight: 1 of 2 values are NaN or infinite"


# ---------------------------------------------------------------- optimizer settings, write failures, the lock
def test_compare_optimizer_settings_says_which_value_is_used():
    saved = {"learning_rate": 1e-3, "weight_decay": 0.0, "adam_beta1": 0.9, "adam_beta2": 0.999,
             "lr_scheduler_type": "linear", "warmup_steps": 0}
    assert compare_optimizer_settings(saved, dict(saved)) == []
    given = {**saved, "learning_rate": 1e-2, "adam_beta2": 0.99, "lr_scheduler_type": "cosine", "warmup_steps": 5}
    assert compare_optimizer_settings(saved, given) == [
        "learning_rate=0.001 kept from the checkpoint (0.01 given)",
        "adam_beta2=0.999 kept from the checkpoint (0.99 given)",
        "lr_scheduler_type='cosine' used as given (the checkpoint's was 'linear')",
        "warmup_steps=5 used as given (the checkpoint's was 0)"]
    assert compare_optimizer_settings({}, given) == []  # a record written before optimizer settings were recorded


def test_describe_write_failure_names_folder_file_and_free_space(tmp_path):
    folder = tmp_path / "checkpoint-3"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"x")
    full = OSError(errno.ENOSPC, "No space left on device", str(folder / "optimizer.pt"))
    line = describe_write_failure(str(folder), full)
    assert line.startswith(f"cannot save checkpoint {folder}: writing {folder / 'optimizer.pt'} failed: no space left "
                           "on the device (")
    assert " free); nothing was marked complete" in line and "\n" not in line
    torn = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 5120 vs 5012")
    (folder / "optimizer.pt").write_bytes(b"PK")  # the newest file: the one torch was writing
    assert describe_write_failure(str(folder), torn).startswith(
        f"cannot save checkpoint {folder}: writing {folder / 'optimizer.pt'} failed: torch could not write it, as on "
        "a full disk ([enforce fail at inline_container.cc:672] . unexpected pos 5120 vs 5012) (")
    denied = PermissionError(errno.EACCES, "Permission denied", str(folder))
    assert f": writing {folder} failed: permission denied (" in describe_write_failure(str(folder), denied)



@pytest.mark.parametrize("error", [
    # safetensors 0.8 (Rust io::Error's Display), the wording the issue met: before the fix a raw 14-frame traceback
    "safetensors:Error while serializing: I/O error: No space left on device (os error 28)",
    "safetensors:Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: \"No space left on "
    "device\" })",  # safetensors before 0.8
    "runtime:[Errno 28] No space left on device",  # an OSError's text wrapped by another library
    "runtime:could not write the file: No space left on device",  # only the OS's words
    "chained:write failed",  # raised from an OSError
])
def test_a_full_disk_reads_as_one_line_whatever_the_writers_wording(tmp_path, error):
    from safetensors import SafetensorError

    kind, text = error.split(":", 1)
    folder = tmp_path / "checkpoint-3"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"x")
    if kind == "safetensors":
        err = SafetensorError(text)
    elif kind == "runtime":
        err = RuntimeError(text)
    else:
        try:
            try:
                raise OSError(errno.ENOSPC, "No space left on device")
            except OSError as cause:
                raise RuntimeError(text) from cause
        except RuntimeError as raised:
            err = raised
    assert is_write_failure(err)
    line = describe_write_failure(str(folder), err)
    assert line.startswith(f"cannot save checkpoint {folder}: writing {folder / 'model.safetensors'} failed: no space "
                           "left on the device (") and "\n" not in line
    assert not is_write_failure(RuntimeError("shape mismatch (2 vs 3)"))  # not a disk error: raised as it is

_HOLD = textwrap.dedent("""
    import sys, time
    from trl_explore.checkpoints.records import OutputDirLock
    OutputDirLock(sys.argv[1]).acquire()
    print("held", flush=True)
    time.sleep(600)
""")


@contextlib.contextmanager
def _held_by_another_process(folder):
    """A process that holds ``folder``'s lock until the block ends, then dies by SIGKILL (leaves its lock file)."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(folder)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert holder.stdout.readline() == "held\n"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait()


def test_one_writer_per_output_dir_and_a_killed_holder_leaves_no_stale_lock(tmp_path):
    folder = tmp_path / "out"
    with _held_by_another_process(folder) as pid:
        with pytest.raises(OutputDirInUse) as err:
            OutputDirLock(str(folder)).acquire()
        assert str(err.value).startswith(f"output_dir {folder} is in use by another run (pid {pid} on ")
        assert "give this run another output_dir" in str(err.value)
    assert (folder / LOCK_NAME).exists()  # SIGKILL: the file stays, the lock went with the process
    lock = OutputDirLock(str(folder))
    lock.acquire()
    assert json.loads((folder / LOCK_NAME).read_text())["pid"] == os.getpid()
    with pytest.raises(OutputDirInUse, match=f"pid {os.getpid()} on"):  # a second lock in this process too
        OutputDirLock(str(folder)).acquire()
    lock.release()
    OutputDirLock(str(folder)).acquire()


# ---------------------------------------------------------------- the trainer: save, refuse, resume (no training)
def _saving_trainer(tmp_path, tokenizer, **overrides):
    """A tiny trainer whose optimizer exists, to call ``_save_checkpoint`` without a training step."""
    args = GRPOConfig(**tiny_training_args(tmp_path / "run", **{
        "per_device_train_batch_size": 2, "num_generations": 2, "max_steps": 2, "max_completion_length": 4,
        "save_strategy": "steps", "save_steps": 1, **overrides}))
    trainer = ExplorationTrainer(make_tiny_causal_lm(tokenizer), reward_funcs=[parity_reward], args=args,
                                 train_dataset=Dataset.from_list([{"prompt": "1 + 1 ="}] * 2),
                                 processing_class=tokenizer)
    trainer.create_optimizer_and_scheduler(num_training_steps=2)
    return trainer


def _save(trainer, step):
    trainer.state.global_step, trainer.state.train_batch_size = step, trainer.args.per_device_train_batch_size
    trainer._save_checkpoint(trainer.model, None)
    return Path(trainer.args.output_dir) / f"checkpoint-{step}"


@pytest.mark.parametrize("name,offset", [("model.safetensors", -3), ("optimizer.pt", 200), ("model.safetensors", 20)])
def test_a_flipped_byte_in_a_complete_checkpoint_falls_back_to_the_previous_one(
        tmp_path, smollm2_tokenizer, caplog, name, offset):
    # the cases: a weight, the optimizer state, a safetensors header (offset 20: inside its JSON)
    trainer = _saving_trainer(tmp_path, smollm2_tokenizer)
    first, second = _save(trainer, 1), _save(trainer, 2)
    assert inspect_checkpoint(str(second), verify_contents=True).complete
    _flip(second / name, offset)
    with caplog.at_level(logging.WARNING, logger="trl_explore.driver.resume"):
        assert trainer._resumable_checkpoint(True) == str(first)
    lines = [r.getMessage() for r in caplog.records if "resume_from_checkpoint=True" in r.getMessage()]
    assert len(lines) == 1 and f"skipped the torn {second} (" in lines[0], lines
    assert f"{name} does not match its sha256 digest" in lines[0] or f"{name} is corrupt" in lines[0], lines
    with pytest.raises(ValueError, match=f"cannot resume from {second}: .*{name}.* the newest complete checkpoint is "
                                         f"{first}: resume from it"):
        trainer.train(resume_from_checkpoint=str(second))


def test_a_save_of_nonfinite_weights_stops_before_the_checkpoint_is_written(tmp_path, smollm2_tokenizer):
    trainer = _saving_trainer(tmp_path, smollm2_tokenizer)
    first = _save(trainer, 1)
    with torch.no_grad():
        trainer.model.model.norm.weight[3] = float("nan")
    with pytest.raises(FloatingPointError, match=r"^step 2: weight model.norm.weight: 1 of 64 values are NaN or "
                                                 rf"infinite; {tmp_path / 'run' / 'checkpoint-2'} was not written .* "
                                                 f"newest complete checkpoint is {first}"):
        _save(trainer, 2)
    assert not (tmp_path / "run" / "checkpoint-2").exists()


@pytest.mark.parametrize("where", ["weights", "optimizer"])
def test_a_checkpoint_holding_nonfinite_values_stops_the_resume(tmp_path, smollm2_tokenizer, monkeypatch, where):
    import trl_explore.driver.resume

    trainer = _saving_trainer(tmp_path, smollm2_tokenizer)
    if where == "weights":
        with torch.no_grad():
            trainer.model.model.norm.weight[0] = float("inf")
    else:
        param = trainer.model.model.norm.weight
        trainer.optimizer.state[param] = {"step": torch.tensor(1.0), "exp_avg": torch.full_like(param, float("nan")),
                                          "exp_avg_sq": torch.zeros_like(param)}
    # written as an older version would
    monkeypatch.setattr(trl_explore.driver.resume, "nonfinite_state", lambda *a: None)
    folder = _save(trainer, 1)
    monkeypatch.undo()
    fresh = _saving_trainer(tmp_path, smollm2_tokenizer)
    problem = ("weight model.norm.weight: 1 of 64 values are NaN or infinite" if where == "weights" else
               "optimizer state exp_avg of model.norm.weight: 64 of 64 values are NaN or infinite")
    with pytest.raises(FloatingPointError, match=f"^cannot resume from {folder}: its {problem}; training on them"):
        fresh.train(resume_from_checkpoint=str(folder))


@contextlib.contextmanager
def _read_only(folder: Path):
    """``folder`` read-only: its mode 0o555, and, when this runs as root (which ignores modes), an effective user
    without rights on it for the block (its parent must let any user through: pytest's base folder does not)."""
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o555)
    root = os.geteuid() == 0
    try:
        if root:
            os.seteuid(65534)
        yield
    finally:
        if root:
            os.seteuid(0)
        os.chmod(folder, 0o755)


@pytest.fixture
def open_tmp_path():
    """A temporary folder any user may pass through (mode 0o755), removed after the test."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="trl_explore_test_"))
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_save_into_a_read_only_or_full_folder_says_so_in_one_line(open_tmp_path, smollm2_tokenizer, monkeypatch):
    trainer = _saving_trainer(open_tmp_path, smollm2_tokenizer)
    run = open_tmp_path / "run"
    with _read_only(run), pytest.raises(CheckpointWriteError) as err:
        _save(trainer, 1)
    assert str(err.value).startswith(f"cannot save checkpoint {run / 'checkpoint-1'}: writing {run / 'checkpoint-1'} "
                                     "failed: permission denied (")
    assert not (run / "checkpoint-1").exists()

    def full(obj, f, *args, **kwargs):  # the disk fills while torch writes the optimizer state
        if str(f).endswith("optimizer.pt"):
            raise OSError(errno.ENOSPC, "No space left on device", str(f))
        return real_save(obj, f, *args, **kwargs)

    real_save = torch.save
    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(CheckpointWriteError) as err:
        _save(trainer, 2)
    line = str(err.value)
    assert line.startswith(f"cannot save checkpoint {run / 'checkpoint-2'}: writing "
                           f"{run / 'checkpoint-2' / 'optimizer.pt'} failed: no space left on the device (")
    assert "free); nothing was marked complete" in line
    status = inspect_checkpoint(str(run / "checkpoint-2"))
    assert not status.complete and status.problem.endswith(f"{RECORD_NAME} says 'writing'")


def test_a_second_run_on_a_folder_in_use_is_refused_at_start(tmp_path, smollm2_tokenizer):
    trainer = _saving_trainer(tmp_path, smollm2_tokenizer)
    with _held_by_another_process(tmp_path / "run") as pid:
        with pytest.raises(OutputDirInUse, match=f"output_dir {tmp_path / 'run'} is in use by another run "
                                                 f"\\(pid {pid} on "):
            trainer.train()
    lock = trainer._lock_output_dir()  # the holder was killed: the folder is free
    assert lock.held
    lock.release()


@pytest.mark.slow
def test_a_changed_learning_rate_on_resume_is_named_with_the_value_kept(tmp_path, smollm2_tokenizer, caplog):
    first = _saving_trainer(tmp_path, smollm2_tokenizer, max_steps=1, lr_scheduler_type="constant")
    first.train()
    resumed = _saving_trainer(tmp_path, smollm2_tokenizer, learning_rate=1e-2, weight_decay=0.1)  # linear, 2 steps
    with caplog.at_level(logging.WARNING, logger="trl_explore.driver.resume"):
        resumed.train(resume_from_checkpoint=True)
    lines = [r.getMessage() for r in caplog.records if "optimizer or scheduler settings" in r.getMessage()]
    assert lines == [f"resuming from {tmp_path / 'run' / 'checkpoint-1'} with other optimizer or scheduler settings "
                     "than it was written with: learning_rate=0.001 kept from the checkpoint (0.01 given); "
                     "weight_decay=0.0 kept from the checkpoint (0.1 given); lr_scheduler_type='linear' used as "
                     "given (the checkpoint's was 'constant')"]
    # what the line says is what the resumed optimizer did: step 2 ran at the checkpoint's rate and weight decay, and
    # the given linear schedule then took the checkpoint's base rate to 0 at the last step (constant would keep 1e-3)
    assert [e["learning_rate"] for e in resumed.state.log_history if "learning_rate" in e] == [1e-3, 1e-3]
    assert {g["weight_decay"] for g in resumed.optimizer.param_groups} == {0.0}
    assert set(resumed.lr_scheduler.base_lrs) == {1e-3} and set(resumed.lr_scheduler.get_last_lr()) == {0.0}


# ---------------------------------------------------------------- the test helpers end every process of a run
_SPAWNER = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    print(child.pid, flush=True)
    time.sleep(600)
""")


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent to read its status does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone(pids, wait: float = 10.0) -> bool:
    """Whether every pid has ended (killed processes handed to init are reaped within moments)."""
    deadline = time.monotonic() + wait
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(_alive(p) for p in pids)


def test_run_in_session_kills_a_child_in_a_session_of_its_own_on_timeout(tmp_path):
    with pytest.raises(subprocess.TimeoutExpired) as err:
        run_in_session([sys.executable, "-c", _SPAWNER], timeout=5)
    child = int(err.value.stdout.split()[0]) if err.value.stdout else None
    assert child is not None and _gone([child])


_SLEEPING_WORKER = textwrap.dedent("""
    import os, sys, time
    with open(os.path.join(sys.argv[1], f"pid{os.environ['RANK']}"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)
""")


@pytest.mark.slow
def test_run_two_cpu_processes_kills_every_worker_on_timeout(tmp_path):
    # torchrun starts each worker in a session of its own: killing torchrun's session alone left them running
    script = tmp_path / "sleep.py"
    script.write_text(_SLEEPING_WORKER)
    with pytest.raises(subprocess.TimeoutExpired):
        run_two_cpu_processes(script, tmp_path, timeout=30)
    pids = [int((tmp_path / f"pid{rank}").read_text()) for rank in (0, 1)]
    assert _gone(pids)


# ---------------------------------------------------------------- killed while writing, then resumed (slow)
def _run(out, *argv, processes=1, timeout=420):
    """The kill script in 1 process (python) or 2 (torchrun); a run that hangs is killed and fails the test."""
    try:
        if processes == 2:
            return run_two_cpu_processes(SCRIPT, out, *argv, timeout=timeout)
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        return run_in_session([sys.executable, str(SCRIPT), str(out), *map(str, argv)], env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{argv} in {processes} process(es) hung for {timeout} s")


def _reference(tmp_path_factory, processes):
    out = tmp_path_factory.mktemp(f"full{processes}")
    result = _run(out, "run", processes=processes)
    assert result.returncode == 0, result.stderr[-3000:]
    files = [json.loads((out / f"files_rank{r}.json").read_text()) for r in range(processes)]
    return json.loads((out / "run_rank0.json").read_text()), files


def _check_resumed(summary, reference, where):
    assert summary["losses"] == reference["losses"], where
    assert summary["weights"] == reference["weights"], where  # bit-identical final weights
    assert summary["bank_updates"] == reference["bank_updates"], where
    assert summary["checkpoints"] == {"checkpoint-4": True, "checkpoint-3": True}, where  # the torn one rewritten


@pytest.mark.slow
def test_a_run_killed_at_each_file_of_a_checkpoint_resumes_exactly(tmp_path_factory, smollm2_tokenizer, caplog):
    # 1 process: killed after each file of checkpoint 3 (inside a generation), and inside a file of each kind; the
    # kill runs are processes of their own (forked, one after the other, from one subprocess that imports once: the
    # script's "kills"), the resumes run here.
    sys.path.insert(0, str(SCRIPT.parent))
    from checkpoint_kill import build_trainer, summary

    reference, (files,) = _reference(tmp_path_factory, 1)
    points = [(n, "after") for n in range(1, len(files) + 1)]
    points += [(files.index(name) + 1, "torn") for name in ("model.safetensors", "optimizer.pt", "trainer_state.json",
                                                            "generation_state/process_0.safetensors")]
    base = tmp_path_factory.mktemp("kills")
    result = _run(base, "kills", *(f"{n}:{mode}" for n, mode in points), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    exits = json.loads((base / "exits.json").read_text())
    matrix = {}
    for n, mode in points:
        out = base / f"kill{n}{mode}"
        assert exits[f"{n}:{mode}"] == -signal.SIGKILL, (n, mode, exits, result.stderr[-2000:])
        run = out / "run"
        refused = "complete"
        try:
            build_trainer(run, tokenizer=smollm2_tokenizer)._resumable_checkpoint(str(run / "checkpoint-3"))
        except ValueError as err:
            refused = str(err)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="trl_explore.driver.resume"):
            trainer = build_trainer(run, tokenizer=smollm2_tokenizer)
            trainer.train(resume_from_checkpoint=True)
        skipped = [r.getMessage() for r in caplog.records if "resume_from_checkpoint=True" in r.getMessage()]
        matrix[f"{mode} {files[n - 1]}"] = {"explicit": refused, "true": skipped}
        _check_resumed(summary(trainer), reference, (n, mode))
        assert len(skipped) == 1 and "resuming from" in skipped[0] and str(run / "checkpoint-2") in skipped[0]
        assert refused.startswith(f"cannot resume from {run / 'checkpoint-3'}")
        if mode == "torn":
            assert f"{files[n - 1]} is torn" in refused, refused
    (tmp_path_factory.getbasetemp() / "kill_matrix_1.json").write_text(json.dumps(matrix, indent=1))


@pytest.mark.slow
def test_two_processes_killed_while_writing_a_checkpoint_resume_exactly_and_never_hang(tmp_path_factory):
    # The hang of issue 22: process 0 wrote trainer_state.json, process 1 had not written its generation state yet.
    # Killed on process 1 at each of its files, and on process 0 at the files that end the write.
    reference, (files0, files1) = _reference(tmp_path_factory, 2)
    assert files1 == ["rng_state_1.pth", "generation_state/process_1.safetensors", "generation_state/process_1.json"]
    points = [(1, n, "after") for n in range(1, len(files1) + 1)] + [(1, len(files1), "torn")]
    points += [(0, files0.index("trainer_state.json") + 1, "after"), (0, len(files0), "after"),
               (0, files0.index("model.safetensors") + 1, "torn")]
    matrix = {}
    for rank, n, mode in points:
        out = tmp_path_factory.mktemp(f"kill2r{rank}n{n}{mode}")
        result = _run(out, "run", n, mode, rank, processes=2)
        assert result.returncode != 0 and not (out / "run_rank0.json").exists(), (rank, n, mode)
        resumed = _run(out, "resume", processes=2)
        assert resumed.returncode == 0, (rank, n, mode, resumed.stderr[-3000:])
        lines = [line for line in resumed.stderr.splitlines() if "resume_from_checkpoint=True" in line]
        matrix[f"rank {rank} {mode} {(files1 if rank else files0)[n - 1]}"] = lines
        assert len(lines) == 1 and "checkpoint-2" in lines[0] and "skipped the torn" in lines[0], lines
        for r in (0, 1):
            _check_resumed(json.loads((out / f"resume_rank{r}.json").read_text()), reference, (rank, n, mode, r))
    (tmp_path_factory.getbasetemp() / "kill_matrix_2.json").write_text(json.dumps(matrix, indent=1))
