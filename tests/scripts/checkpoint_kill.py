"""Run by tests/test_checkpoints.py, in 1 process (python) or 2 (torchrun, gloo): a 4-step ASE run that saves every
step (``steps_per_generation=2``: checkpoint 3 lies inside a generation), optionally killed with SIGKILL while it
writes checkpoint 3, or resumed with ``resume_from_checkpoint=True``.

usage: checkpoint_kill.py OUT run|resume [KILL_AT KILL_MODE KILL_RANK]
       checkpoint_kill.py OUT kills KILL_AT:KILL_MODE [KILL_AT:KILL_MODE ...]   (1 process)

* ``run``: trains in OUT/run. With ``KILL_AT = n > 0``, process ``KILL_RANK`` kills itself (``os.kill(os.getpid(),
  SIGKILL)``) once it has written its n-th file into checkpoint-3: after the file is whole (``KILL_MODE=after``) or
  after cutting it to half its length (``torn``: a write the kill interrupted). Every process records the files it
  wrote into checkpoint-3, in order, in OUT/files_rank{i}.json.
* ``resume``: resumes OUT/run with ``resume_from_checkpoint=True`` and trains to step 4.
* ``kills``: the ``run`` of each kill point, in a process of its own forked from this one (``os.fork``), one after
  the other: child ``n:mode`` trains in OUT/kill{n}{mode}/run and kills itself as ``run`` does (rank 0). The imports
  and the tokenizer are paid once instead of once per kill point; each kill still ends a whole process with SIGKILL.
  OUT/exits.json maps each ``n:mode`` to its child's exit code (``-9``: killed by SIGKILL).

Each process that finishes writes OUT/{run|resume}_rank{i}.json: losses per step, a SHA-256 of the final weights, the
ASE bank's update count, and the checkpoints left with whether each is complete.
"""

import builtins
import hashlib
import json
import os
import signal
import sys
import traceback
from pathlib import Path

import torch

KILL_STEP = 3
rank = int(os.environ.get("RANK", "0"))
target = os.sep + f"checkpoint-{KILL_STEP}" + os.sep
written: list[str] = []
out, kill_at, kill_mode, kill_rank = None, 0, "", 0  # set by the command line


def wrote(path) -> None:
    """Called once a file is whole: record it, and kill this process at the chosen file."""
    path = os.path.abspath(os.fspath(path))
    if target not in path:
        return
    written.append(path.split(target, 1)[1])
    (out / f"files_rank{rank}.json").write_text(json.dumps(written))
    if rank == kill_rank and len(written) == kill_at:
        if kill_mode == "torn":
            os.truncate(path, os.path.getsize(path) // 2)
        os.kill(os.getpid(), signal.SIGKILL)


class _File:
    """A file opened for writing, reported to ``wrote`` when it is closed."""

    def __init__(self, file, path):
        self._file, self._path = file, path

    def __getattr__(self, name):
        return getattr(self._file, name)

    def __iter__(self):
        return iter(self._file)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if not self._file.closed:
            self._file.close()
            wrote(self._path)


def _patch_writers() -> None:
    """Every writer a checkpoint goes through: ``open`` for writing, ``torch.save``, safetensors' ``save_file``
    (replaced wherever a module imported it by name)."""
    import safetensors.torch

    real_open, real_save, real_save_file = builtins.open, torch.save, safetensors.torch.save_file

    def open_(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        return _File(handle, file) if isinstance(file, (str, os.PathLike)) and set(mode) & set("wax+") else handle

    def save(obj, f, *args, **kwargs):
        real_save(obj, f, *args, **kwargs)
        if isinstance(f, (str, os.PathLike)):
            wrote(f)

    def save_file(tensors, filename, *args, **kwargs):
        result = real_save_file(tensors, filename, *args, **kwargs)
        wrote(filename)
        return result

    builtins.open, torch.save = open_, save
    for module in list(sys.modules.values()):
        for name, value in list(vars(module).items()) if module is not None else ():
            if value is real_save_file:
                setattr(module, name, save_file)


from datasets import Dataset  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from trl_explore import ASEConfig, ASEGRPOTrainer  # noqa: E402
from trl_explore.checkpoints.records import inspect_run  # noqa: E402
from trl_explore.defaults import default_policy_path  # noqa: E402
from trl_explore.testing import make_tiny_causal_lm, parity_reward  # noqa: E402


def build_trainer(run_dir, world: int = 1, tokenizer=None):
    """The 4-step ASE run (module docstring) in ``run_dir``, for ``world`` processes."""
    tokenizer = tokenizer or AutoTokenizer.from_pretrained(default_policy_path())
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}],
                                  "answer": str(2 * i), "problem_id": f"p{i}"} for i in range(2)])
    args = ASEConfig(output_dir=str(run_dir), per_device_train_batch_size=6 // world, num_generations=6,
                     steps_per_generation=2, max_completion_length=8, max_steps=4, learning_rate=1e-3,
                     logging_steps=1, report_to="none", use_cpu=True, bf16=False, seed=0, log_completions=False,
                     num_vectors=2, pca_dim=4, kmeans_n_init=2, steering_alpha=4.0, min_pairs_per_cluster=1,
                     save_strategy="steps", save_steps=1, save_total_limit=2, disable_tqdm=True)
    return ASEGRPOTrainer(make_tiny_causal_lm(tokenizer), reward_funcs=[parity_reward], args=args,
                          train_dataset=dataset, processing_class=tokenizer)


def summary(trainer) -> dict:
    """Losses per step, a SHA-256 of the weights, the bank's update count, the checkpoints left (complete or not)."""
    digest = hashlib.sha256()
    for name, param in sorted(trainer.model.named_parameters()):
        digest.update(name.encode())
        digest.update(param.detach().cpu().contiguous().numpy().tobytes())
    return {
        "losses": {str(e["step"]): e["loss"] for e in trainer.state.log_history if "loss" in e},
        "weights": digest.hexdigest(), "bank_updates": trainer.ase.bank.num_updates,
        "checkpoints": {os.path.basename(s.path): s.complete for s in inspect_run(trainer.args.output_dir)},
    }


def kill_runs(base: Path, points: list[str]) -> dict[str, int]:
    """Each kill point's ``run`` in a forked child (module docstring, ``kills``); returns their exit codes."""
    global out, kill_at, kill_mode, kill_rank
    tokenizer = AutoTokenizer.from_pretrained(default_policy_path())  # before the forks: read once
    exits = {}
    for point in points:
        n, mode = point.split(":")
        pid = os.fork()
        if pid == 0:  # the child: one kill run, then gone (os._exit: no cleanup of the parent's state)
            code = 1
            try:
                out, kill_at, kill_mode, kill_rank = base / f"kill{n}{mode}", int(n), mode, 0
                out.mkdir(parents=True, exist_ok=True)
                trainer = build_trainer(out / "run", tokenizer=tokenizer)
                trainer.train()
                (out / f"run_rank{rank}.json").write_text(json.dumps(summary(trainer)))
                code = 0
            except BaseException:  # noqa: BLE001 - the child reports and exits: the parent goes on
                traceback.print_exc()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        exits[point] = os.waitstatus_to_exitcode(status)
    (base / "exits.json").write_text(json.dumps(exits))
    return exits


if __name__ == "__main__":
    out, phase = Path(sys.argv[1]), sys.argv[2]
    if phase == "kills":
        _patch_writers()
        kill_runs(out, sys.argv[3:])
        sys.exit(0)
    if len(sys.argv) > 5:
        kill_at, kill_mode, kill_rank = int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    _patch_writers()
    trainer = build_trainer(out / "run", int(os.environ.get("WORLD_SIZE", "1")))
    trainer.train(resume_from_checkpoint=True if phase == "resume" else None)
    (out / f"{phase}_rank{rank}.json").write_text(json.dumps(summary(trainer)))
    trainer.accelerator.end_training()
