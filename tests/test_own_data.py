"""Evaluate on your own data (trl_explore.evaluation.own_data): the held-out rows, the 'own' benchmark, and the
training script and examples/evaluate.py end to end on a tiny model."""

import json
import os
import pathlib
import subprocess
import sys
from types import SimpleNamespace

import pytest
from datasets import Dataset

from trl_explore.data.loading import load_split
from trl_explore.evaluation.benchmarks import load_benchmark
from trl_explore.evaluation.own_data import hold_out, own_rows, training_and_eval_data

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _rows(n):
    return [{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "answer": str(2 * i),
             "problem_id": f"p{i}"} for i in range(n)]


def test_hold_out_takes_a_share_of_problems_whatever_the_row_order():
    data = Dataset.from_list(_rows(10))
    train, held = hold_out(data, 0.3, seed=0)
    assert len(held) == 3 and len(train) == 7
    assert set(train["problem_id"]) | set(held["problem_id"]) == {f"p{i}" for i in range(10)}
    assert not set(train["problem_id"]) & set(held["problem_id"])
    shuffled = Dataset.from_list(list(reversed(_rows(10))))
    assert set(hold_out(shuffled, 0.3, seed=0)[1]["problem_id"]) == set(held["problem_id"])
    assert set(hold_out(data, 0.3, seed=1)[1]["problem_id"]) != set(held["problem_id"])  # another seed, another set
    assert len(hold_out(Dataset.from_list(_rows(3)), 0.01)[1]) == 1  # at least one held out
    assert len(hold_out(Dataset.from_list(_rows(2)), 0.99)[0]) == 1  # at least one left to train on


def test_hold_out_refuses_a_bad_fraction():
    with pytest.raises(ValueError, match=r"eval_fraction must be in \(0, 1\), got 1.5"):
        hold_out(Dataset.from_list(_rows(4)), 1.5)


def test_own_rows_keep_the_training_prompt_and_name_a_bad_row():
    rows = own_rows(Dataset.from_list([{"prompt": "What is 2 + 2?", "answer": 4}]))
    assert rows[0]["prompt"] == [{"role": "user", "content": "What is 2 + 2?"}]
    assert (rows[0]["answer"], rows[0]["benchmark"], rows[0]["grading"]) == ("4", "own", "math")
    assert len(rows[0]["problem_id"]) == 16  # a hash of the prompt
    with pytest.raises(ValueError, match=r"the evaluation data has no column \['answer'\]; its columns: \['prompt'\]"):
        own_rows(Dataset.from_list([{"prompt": "x"}]))
    with pytest.raises(ValueError, match="rows 0 and 1 share the problem id 'p0'"):
        own_rows(Dataset.from_list([_rows(1)[0], _rows(1)[0]]))


def test_a_file_in_the_training_format_is_a_data_set_and_a_benchmark(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _rows(3)) + "\n")
    assert load_split(str(path), "whatever")["problem_id"] == ["p0", "p1", "p2"]
    bench = load_benchmark("own", str(path), limit=2)
    assert bench["problem_id"] == ["p0", "p1"] and bench[1]["prompt"] == _rows(2)[1]["prompt"]


def test_the_three_sources_of_held_out_problems(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _rows(3)) + "\n")
    train = Dataset.from_list(_rows(8))
    args = SimpleNamespace(dataset_name="x", dataset_train_split="train", eval_fraction=0.25, eval_dataset_name=None,
                           eval_dataset_split=None)
    kept, held = training_and_eval_data(args, train)
    assert (len(kept), len(held)) == (6, 2)
    args.eval_fraction, args.eval_dataset_name = 0.0, str(path)
    kept, held = training_and_eval_data(args, train)
    assert len(kept) == 8 and held["problem_id"] == ["p0", "p1", "p2"]
    args.eval_fraction = 0.5
    with pytest.raises(ValueError, match="give one source of held-out problems"):
        training_and_eval_data(args, train)
    args.eval_fraction, args.eval_dataset_name, args.eval_dataset_split = 0.0, None, "train"
    with pytest.raises(ValueError, match="eval_dataset_split='train' is the training split"):
        training_and_eval_data(args, train)


@pytest.mark.slow
def test_training_evaluates_your_own_held_out_problems(tmp_path, tiny_model_dir, capsys, monkeypatch):
    """run_training on a tiny model with --eval_fraction: the problems held out are not trained on, TRL's evaluation
    loop logs eval_reward on them (--eval_strategy steps) and the before/after table is on them."""
    from trl_explore import OGERConfig, OGERTrainer
    from trl_explore.cli import run_training

    monkeypatch.setenv("TRL_EXPLORE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    argv = ["--model_name_or_path", str(tiny_model_dir), "--output_dir", str(out), "--max_steps", "1",
            "--per_device_train_batch_size", "4", "--num_generations", "4", "--max_completion_length", "24",
            "--ladder_levels", "one_digit", "--max_train_samples", "8", "--eval_fraction", "0.25", "--use_cpu",
            "true", "--log_completions", "false", "--eval_samples", "2", "--eval_max_new_tokens", "4",
            "--eval_strategy", "steps", "--eval_steps", "1", "--per_device_eval_batch_size", "4",
            "--readiness_check", "false", "--save_only_model", "true"]
    trainer = run_training(OGERTrainer, OGERConfig, ROOT / "recipes" / "oger_smollm2_ladder_cpu.yaml", "t",
                           argv=argv)
    printed = capsys.readouterr().out
    assert "[t] your own evaluation set: 2 held-out problems (6 to train on)" in printed
    assert "your own held-out problems, their own prompts: 2 problems, k = 2 samples" in printed
    assert len(trainer.train_dataset) == 6 and len(trainer.eval_dataset) == 2
    assert not set(trainer.train_dataset["problem_id"]) & set(trainer.eval_dataset["problem_id"])
    assert any("eval_reward" in entry for entry in trainer.state.log_history)
    saved = json.loads((out / "heldout_eval.json").read_text())
    assert saved["after"]["summary"]["num_problems"] == 2
    assert set(saved["after"]["result"]["problem_ids"]) == set(trainer.eval_dataset["problem_id"])


@pytest.mark.slow
def test_evaluate_py_on_a_data_set_of_your_own(tmp_path, tiny_model_dir):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _rows(3)) + "\n")
    out = tmp_path / "eval"
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "evaluate.py"), "--model_name_or_path", str(tiny_model_dir),
         "--dataset_name", str(path), "--num_samples", "2", "--max_new_tokens", "4", "--backend", "transformers",
         "--output_dir", str(out)],
        capture_output=True, text=True, cwd=ROOT, timeout=900,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    own = summary["benchmarks"]["own"]
    assert (own["num_problems"], own["num_samples"]) == (3, 2)
    assert set(own["pass_at_k"]) == {"1", "2"} and 0.0 <= own["mean"] <= 1.0
    assert "Your data" in (out / "results.md").read_text()
