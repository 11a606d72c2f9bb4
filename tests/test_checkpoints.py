"""Checkpoints a kill cannot tear (trl_explore.checkpoints, issue 22 item 3): the completion record, the checks of a
torn folder, the choice ``resume_from_checkpoint=True`` makes, the record of what a checkpoint was written with, and
(slow) runs killed with SIGKILL at each file of a checkpoint's write, in 1 and 2 processes, then resumed.
"""

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from safetensors.torch import save_file
from trl import GRPOConfig

from trl_explore.checkpoints import (
    RECORD_NAME,
    compare_run_records,
    file_problem,
    inspect_checkpoint,
    inspect_run,
    list_files,
    write_record,
)
from trl_explore.driver import ExplorationTrainer
from trl_explore.testing import make_tiny_causal_lm, parity_reward, run_in_session, run_two_cpu_processes

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
    write_record(str(folder), {"status": status, "step": step, "inside_generation": inside, "files": files, **record})
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
    with caplog.at_level(logging.WARNING, logger="trl_explore.resume"):
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
    from trl_explore.checkpoints import run_record

    mine = run_record(trainer)
    assert mine["trainer"] == "trl_explore.driver.ExplorationTrainer" and mine["components"] == []
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
    with caplog.at_level(logging.WARNING, logger="trl_explore.resume"):
        trainer._resumable_checkpoint(str(boundary))
    assert "with other settings than it was written with" in caplog.text
    assert "['oger'] wrote the checkpoint" in caplog.text


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
    # kill runs are subprocesses, the resumes run here. ~25 s per kill point on 2 loaded cores.
    sys.path.insert(0, str(SCRIPT.parent))
    from checkpoint_kill import build_trainer, summary

    reference, (files,) = _reference(tmp_path_factory, 1)
    points = [(n, "after") for n in range(1, len(files) + 1)]
    points += [(files.index(name) + 1, "torn") for name in ("model.safetensors", "optimizer.pt", "trainer_state.json",
                                                            "generation_state/process_0.safetensors")]
    matrix = {}
    for n, mode in points:
        out = tmp_path_factory.mktemp(f"kill{n}{mode}")
        result = _run(out, "run", n, mode, 0)
        assert result.returncode == -signal.SIGKILL, (n, mode, result.returncode, result.stderr[-2000:])
        run = out / "run"
        refused = "complete"
        try:
            build_trainer(run, tokenizer=smollm2_tokenizer)._resumable_checkpoint(str(run / "checkpoint-3"))
        except ValueError as err:
            refused = str(err)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="trl_explore.resume"):
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
