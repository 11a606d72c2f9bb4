"""Evaluate on your own data (issue 32): the held-out problems of a data set in the training format.

The training format is the one the training scripts read (docs/own-data.md): a ``prompt`` (chat messages, or a
string taken as one user message), a gold ``answer`` and an optional ``problem_id`` (default: a hash of the
prompt). Its held-out problems come from one of (``DataArguments``):

* ``eval_fraction``: a share of the training problems, taken out of training (:func:`hold_out`: chosen by a seeded
  hash of the problem id, so the same problems are held out whatever the row order);
* ``eval_dataset_split``: another split of ``dataset_name`` (e.g. ``test``);
* ``eval_dataset_name``: a second data set (a file, a ``save_to_disk`` folder or a Hub id), its
  ``eval_dataset_split`` (default ``train``; a file has one split).

They are evaluated with their own prompt, the training one: by TRL's evaluation loop (``--eval_strategy steps``,
``eval_reward`` in the plots), by the before/after table of ``--eval_heldout`` and by ``examples/evaluate.py
--dataset_name PATH`` (the ``own`` benchmark: :func:`load_own_rows`). The training scripts save them as
``<output_dir>/heldout_problems.jsonl`` (:func:`save_heldout_problems`), a ``PATH`` for the last.
"""

from __future__ import annotations

import hashlib
import json
import pathlib

from trl_explore.rewards.benchmark_grading import answer_text

OWN = "own"
"""The benchmark name of a data set in the training format (``trl_explore.evaluation.benchmarks``)."""


def _problem_key(prompt) -> str:
    return hashlib.sha1(json.dumps(prompt, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:16]


def as_messages(prompt, where: str) -> list[dict]:
    """A row's prompt as chat messages (a string is one user message). Raises ValueError naming ``where``."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if not isinstance(prompt, list) or not prompt or not all(isinstance(m, dict) and "content" in m for m in prompt):
        raise ValueError(f"{where}: 'prompt' must be a string or a list of {{'role', 'content'}} messages, got "
                         f"{str(prompt)[:80]!r}")
    return [{"role": m.get("role", "user"), "content": str(m["content"])} for m in prompt]


def training_format(dataset, name: str | None = None):
    """``dataset`` with the columns the trainers read: ``answer`` (from a verl ``reward_model.ground_truth`` when
    absent) and ``problem_id`` (a hash of the prompt when absent).

    Raises:
        ValueError: no ``prompt`` or no ``answer`` column (the message lists the columns there are).
    """
    columns = dataset.column_names
    if "answer" not in columns and "reward_model" in columns:  # verl parquet layout
        dataset = dataset.map(lambda row: {"answer": str(row["reward_model"]["ground_truth"])})
    missing = [c for c in ("prompt", "answer") if c not in dataset.column_names]
    if missing:
        from trl_explore.data.training_data import rename_hint
        from trl_explore.rewards.checks import rename_example

        renames = ", ".join(f"{rename_example(columns, c)}: {c!r}" for c in missing)
        how = rename_hint(name, renames) if name else f"a renamed copy, e.g. rename_columns({{{renames}}})"
        raise ValueError(f"the evaluation data has no column {missing}; its columns: {columns} (the training format: "
                         f"prompt, answer, optional problem_id; rename yours with datasets and pass {how}; "
                         f"docs/own-data.md)")
    if "problem_id" not in dataset.column_names:
        dataset = dataset.map(lambda row: {"problem_id": _problem_key(row["prompt"])})
    return dataset


def own_rows(dataset, name: str = OWN) -> list[dict]:
    """Benchmark rows (``trl_explore.evaluation.benchmarks.BENCHMARK_COLUMNS``) of a data set in the training
    format, each with its own prompt; graded as maths answers.

    Raises:
        ValueError: a missing column, a bad prompt or an empty answer (naming the row), a repeated problem id.
    """
    dataset = training_format(dataset)
    rows, seen = [], {}
    for index, record in enumerate(dataset):
        where = f"evaluation data, row {index} (id {record['problem_id']!r})"
        prompt = as_messages(record["prompt"], where)
        users = [m["content"] for m in prompt if m["role"] == "user"]
        pid = str(record["problem_id"])
        if pid in seen:
            raise ValueError(f"evaluation data: rows {seen[pid]} and {index} share the problem id {pid!r}")
        seen[pid] = index
        rows.append({"benchmark": name, "problem_id": pid, "problem": users[-1] if users else prompt[-1]["content"],
                     "answer": answer_text(record["answer"], "answer", where), "grading": "math", "domain": "math",
                     "choices": [], "prompt": prompt})
    return rows


def load_own_rows(path, split: str = "test") -> list[dict]:
    """:func:`own_rows` of the data set at ``path`` (a file, a ``save_to_disk`` folder or a Hub id; ``split`` of a
    folder or Hub data set holding several). Raises ValueError without ``path``."""
    from trl_explore.data.loading import load_split

    if path is None:
        raise ValueError("the 'own' benchmark needs a data set: examples/evaluate.py --dataset_name PATH "
                         "(a .jsonl/.parquet file or a save_to_disk folder in the training format)")
    return own_rows(training_format(load_split(str(path), split), str(path)))  # a missing column: the rename hint


def check_eval_fraction(fraction: float) -> float:
    """``fraction``, checked: a share of the training problems to hold out, at least 0 (none) and below 1.

    Raises:
        ValueError: naming the option, the range and what 0 means."""
    if not 0 <= fraction < 1:
        raise ValueError(f"eval_fraction must be at least 0 and below 1 (the share of the training problems held "
                         f"out; 0: no held-out split), got {fraction}")
    return fraction


HELDOUT_PROBLEMS_FILE = "heldout_problems.jsonl"
"""The file, in a run's ``output_dir``, holding the held-out problems the run evaluated on (training format)."""


def save_heldout_problems(dataset, output_dir) -> pathlib.Path:
    """Write held-out rows (training format: ``prompt``, ``answer``, ``problem_id``) as JSON lines to
    ``output_dir/heldout_problems.jsonl``, the file ``examples/evaluate.py --dataset_name`` reads back
    (:func:`load_own_rows`), so a checkpoint is evaluated later on the same problems. A number gold is written as
    text. Returns the path."""
    path = pathlib.Path(output_dir) / HELDOUT_PROBLEMS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for row in dataset.select_columns(["prompt", "answer", "problem_id"]):
            answer = str(row["answer"]) if isinstance(row["answer"], (int, float)) else row["answer"]
            handle.write(json.dumps({"prompt": row["prompt"], "answer": answer, "problem_id": str(row["problem_id"])},
                                    ensure_ascii=False) + "\n")
    return path


def hold_out(dataset, fraction: float, seed: int = 0):
    """Split ``dataset`` into (training rows, held-out rows): ``round(fraction * n)`` problems (at least 1) are held
    out, those whose ``sha1(f"{seed}:{problem_id}")`` is smallest, so the choice does not depend on the row order;
    both parts keep the original order. ``fraction`` 0 holds out nothing (an empty held-out part).

    Raises:
        ValueError: ``fraction`` not in [0, 1) (:func:`check_eval_fraction`), or, above 0, fewer than 2 rows (nothing
            would be left to train on).
    """
    if check_eval_fraction(fraction) == 0:
        return dataset, dataset.select([])
    n = len(dataset)
    if n < 2:
        raise ValueError(f"eval_fraction={fraction} needs at least 2 training problems, got {n}")
    count = min(max(1, round(fraction * n)), n - 1)
    keys = [hashlib.sha1(f"{seed}:{pid}".encode()).hexdigest() for pid in dataset["problem_id"]]
    held = set(sorted(range(n), key=lambda i: (keys[i], i))[:count])
    return (dataset.select([i for i in range(n) if i not in held]), dataset.select(sorted(held)))


def training_and_eval_data(data_args, train_dataset, seed: int = 0):
    """The training rows and the held-out rows (training format, or None) of ``data_args`` (module docstring).

    Raises:
        ValueError: more than one source given (``eval_fraction`` with a split or a second data set), an
            evaluation set without its columns, or an empty one.
    """
    from trl_explore.data.loading import load_split

    fraction = check_eval_fraction(getattr(data_args, "eval_fraction", 0.0) or 0.0)
    name, split = getattr(data_args, "eval_dataset_name", None), getattr(data_args, "eval_dataset_split", None)
    if fraction and (name or split):
        raise ValueError("give one source of held-out problems: eval_fraction (a share of the training set), or "
                         "eval_dataset_split / eval_dataset_name (another split, a second data set)")
    if fraction:
        return hold_out(train_dataset, fraction, seed)
    if not (name or split):
        return train_dataset, None
    source = name or data_args.dataset_name
    if source == data_args.dataset_name and (split or "train") == data_args.dataset_train_split:
        raise ValueError(f"eval_dataset_split={split or 'train'!r} is the training split: evaluate on held-out "
                         f"problems (another split, a second data set or eval_fraction)")
    heldout = training_format(load_split(source, split or "train"), source)
    if len(heldout) == 0:
        raise ValueError(f"the evaluation data ({source}, split {split or 'train'!r}) is empty")
    return train_dataset, heldout
