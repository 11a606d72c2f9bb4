"""Evaluate on your own data (trl_explore.evaluation.own_data): the held-out rows, the 'own' benchmark, and the
training script and examples/evaluate.py end to end on a tiny model."""

import json
import os
import pathlib
import re
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


def test_hold_out_refuses_a_bad_fraction_and_zero_holds_out_nothing():
    for bad in (1.5, 1.0, -0.1):
        with pytest.raises(ValueError, match=re.escape(f"eval_fraction must be at least 0 and below 1 (the share of "
                                                       f"the training problems held out; 0: no held-out split), got "
                                                       f"{bad}")):
            hold_out(Dataset.from_list(_rows(4)), bad)
    kept, held = hold_out(Dataset.from_list(_rows(4)), 0.0)
    assert (len(kept), len(held)) == (4, 0)
    args = SimpleNamespace(dataset_name="x", dataset_train_split="train", eval_fraction=0.0, eval_dataset_name=None,
                           eval_dataset_split=None)
    assert training_and_eval_data(args, Dataset.from_list(_rows(4)))[1] is None  # 0, the default: no split
    args.eval_fraction = -0.5
    with pytest.raises(ValueError, match="eval_fraction must be at least 0 and below 1"):
        training_and_eval_data(args, Dataset.from_list(_rows(4)))


def test_own_rows_keep_the_training_prompt_and_name_a_bad_row():
    rows = own_rows(Dataset.from_list([{"prompt": "What is 2 + 2?", "answer": 4}]))
    assert rows[0]["prompt"] == [{"role": "user", "content": "What is 2 + 2?"}]
    assert (rows[0]["answer"], rows[0]["benchmark"], rows[0]["grading"]) == ("4", "own", "math")
    assert len(rows[0]["problem_id"]) == 16  # a hash of the prompt
    with pytest.raises(ValueError, match=r"the evaluation data has no column \['answer'\]; its columns: \['prompt'\]"):
        own_rows(Dataset.from_list([{"prompt": "x"}]))
    with pytest.raises(ValueError, match=re.escape("rename_columns({'question': 'prompt', 'solution': 'answer'})")):
        own_rows(Dataset.from_list([{"question": "x", "solution": "1"}]))
    with pytest.raises(ValueError, match="rows 0 and 1 share the problem id 'p0'"):
        own_rows(Dataset.from_list([_rows(1)[0], _rows(1)[0]]))


def test_a_file_in_the_training_format_is_a_data_set_and_a_benchmark(tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _rows(3)) + "\n")
    assert load_split(str(path), "whatever")["problem_id"] == ["p0", "p1", "p2"]
    bench = load_benchmark("own", str(path), limit=2)
    assert bench["problem_id"] == ["p0", "p1"] and bench[1]["prompt"] == _rows(2)[1]["prompt"]


def test_the_held_out_problems_are_saved_in_the_format_evaluate_reads(tmp_path):
    from trl_explore.evaluation.own_data import save_heldout_problems

    rows = [{**r, "answer": int(r["answer"]), "offline_completions": ["x"]} for r in _rows(3)]  # a number gold
    path = save_heldout_problems(Dataset.from_list(rows), tmp_path / "run")
    assert path == tmp_path / "run" / "heldout_problems.jsonl"
    assert json.loads(path.read_text().splitlines()[1]) == {"prompt": _rows(3)[1]["prompt"], "answer": "2",
                                                             "problem_id": "p1"}
    back = load_benchmark("own", str(path))
    assert back["problem_id"] == ["p0", "p1", "p2"] and back["answer"] == ["0", "2", "4"]


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


# ---------------------------------------------------------------- columns and golds refused when the data is loaded
def _save(tmp_path, rows, name="mine"):
    folder = tmp_path / name
    Dataset.from_list(rows).save_to_disk(str(folder))
    return str(folder)


@pytest.mark.parametrize("offline, required", [(True, "prompt, answer, offline_completions"),
                                               (False, "prompt, answer")])
def test_a_data_set_without_answer_is_refused_when_loaded_naming_its_columns(tmp_path, offline, required):
    from trl_explore.data.training_data import DataArguments, load_training_data

    rows = [{"prompt": f"What is {i} + 1?", "solution": str(i + 1), "offline_completions": [f"\\boxed{{{i + 1}}}"]}
            for i in range(4)]
    folder = _save(tmp_path, rows)
    with pytest.raises(ValueError) as err:
        load_training_data(DataArguments(dataset_name=folder), 64, offline=offline)
    message = str(err.value)
    assert message.startswith(f"dataset {folder!r} has no column 'answer' ('answer': each problem's gold answer")
    assert "its columns: ['prompt', 'solution', 'offline_completions']" in message
    assert f"required: {required}." in message
    assert "rename_columns({'solution': 'answer'})" in message  # the real fix: the scripts have no rename option
    assert "answer_column" not in message and "\n" not in message
    assert f"load_from_disk({folder!r}).rename_columns(" in message  # a saved folder is loaded from disk


@pytest.mark.parametrize("suffix, builder", [("jsonl", "json"), ("csv", "csv")])
def test_the_rename_hint_loads_a_data_file_with_its_builder(tmp_path, suffix, builder):
    from trl_explore.data.training_data import DataArguments, load_training_data

    path = tmp_path / f"data.{suffix}"
    if suffix == "jsonl":
        path.write_text(json.dumps({"prompt": "What is 1 + 1?", "solution": "2"}) + "\n")
    else:
        path.write_text("prompt,solution\nWhat is 1 + 1?,2\n")
    with pytest.raises(ValueError) as err:
        load_training_data(DataArguments(dataset_name=str(path)), 64, offline=False)
    assert (f"load_dataset({builder!r}, data_files={str(path)!r}, split='train').rename_columns({{'solution': "
            f"'answer'}})") in str(err.value)


def test_a_data_set_without_prompt_names_the_column_to_rename(tmp_path):
    from trl_explore.data.training_data import DataArguments, load_training_data

    folder = _save(tmp_path, [{"question": "What is 1 + 1?", "answer": "2"}])
    with pytest.raises(ValueError, match=r"has no column 'prompt' \('prompt': the problem the policy is asked\); its "
                                         r"columns: \['question', 'answer'\]; required: prompt, answer\. .*"
                                         r"rename_columns\(\{'question': 'prompt'\}\)"):
        load_training_data(DataArguments(dataset_name=folder), 64, offline=False)


def test_an_empty_gold_is_refused_by_training_and_by_evaluate_naming_the_row(tmp_path):
    from trl_explore.data.training_data import DataArguments, load_training_data

    rows = _rows(4)
    rows[2]["answer"] = "  "
    folder = _save(tmp_path, [{**r, "offline_completions": ["x"]} for r in rows])
    for offline in (True, False):
        with pytest.raises(ValueError, match=re.escape(f"dataset {folder!r}, row 2 (id 'p2'): the 'answer' field is "
                                                       f"empty")):
            load_training_data(DataArguments(dataset_name=folder), 64, offline=offline)
    with pytest.raises(ValueError, match=re.escape("evaluation data, row 2 (id 'p2'): the 'answer' field is empty")):
        own_rows(load_split(folder, "train"))
    no_answer = _save(tmp_path, [{"prompt": "What is 1 + 1?", "offline_completions": ["2"]}], "sft")
    kept = load_training_data(DataArguments(dataset_name=no_answer), 64, offline=True, require_answer=False)
    assert len(kept) == 1  # the SFT baseline grades nothing while training: no gold needed


def test_a_trainer_is_not_built_on_data_without_its_gold_column():
    from trl_explore import MathVerifyReward, OGERRewardFunction
    from trl_explore.rewards.checks import check_gold_columns

    reward = MathVerifyReward()
    data = Dataset.from_list([{"prompt": "What is 1 + 1?", "solution": "2"}])
    with pytest.raises(ValueError, match=re.escape(
            "train_dataset has no 'answer' column, where the reward 'math_reward' reads each row's gold answer (its "
            "columns: ['prompt', 'solution']); rename the column that holds the gold answers, e.g. "
            "dataset.rename_column('solution', 'answer'), or pass MathVerifyReward(answer_column='solution') in "
            "reward_funcs")):
        check_gold_columns({"train_dataset": data, "eval_dataset": None}, [reward])
    with pytest.raises(ValueError, match=r"eval_dataset\['own'\] has no 'gold' column"):  # through R_OGER's verifier
        check_gold_columns({"eval_dataset": {"own": data}}, [OGERRewardFunction(verifier=MathVerifyReward(
            answer_column="gold"))])
    check_gold_columns({"train_dataset": data}, [MathVerifyReward(answer_column="solution")])  # its own name: fine
    check_gold_columns({"train_dataset": data}, [lambda completions, **kw: [0.0] * len(completions)])  # reads none
    blank = Dataset.from_list([{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": ""}])
    with pytest.raises(ValueError, match=re.escape("train_dataset, row 1: the 'answer' field is empty")):
        check_gold_columns({"train_dataset": blank}, [reward])


@pytest.mark.parametrize("method", ["ase", "exgrpo"])
def test_the_trainers_refuse_a_raw_dataset_without_answer_when_built(tmp_path, smollm2_tokenizer, method):
    from trl_explore import ASEConfig, ASEGRPOTrainer, ExGRPOConfig, ExGRPOTrainer
    from trl_explore.testing import make_tiny_causal_lm, tiny_training_args

    trainer_cls, config_cls = {"ase": (ASEGRPOTrainer, ASEConfig), "exgrpo": (ExGRPOTrainer, ExGRPOConfig)}[method]
    data = Dataset.from_list([{"prompt": f"What is {i} + 1?", "solution": str(i + 1)} for i in range(4)])
    with pytest.raises(ValueError, match=re.escape("train_dataset has no 'answer' column, where the reward "
                                                   "'math_reward' reads each row's gold answer (its columns: "
                                                   "['prompt', 'solution'])")):
        trainer_cls(make_tiny_causal_lm(smollm2_tokenizer), args=config_cls(**tiny_training_args(tmp_path)),
                    train_dataset=data, processing_class=smollm2_tokenizer)


def test_the_first_step_message_lists_the_data_sets_columns_only():
    from trl_explore import MathVerifyReward

    class Trainer:  # what TRL 1.16 passes: the trainer's bound _log_metric, and the trainer's added kwargs
        added_reward_kwargs = frozenset({"trainer_state", "log_extra", "log_metric", "row_owner", "oger_divergence"})

        def _log_metric(self, *args):
            pass

    kwargs = {"problem_id": ["p0"], "solution": ["2"], "row_owner": [None], "oger_divergence": [0.1],
              "trainer_state": object(), "log_extra": print, "log_metric": Trainer()._log_metric}
    with pytest.raises(ValueError) as err:
        MathVerifyReward()(prompts=["1 + 1?"], completions=["\\boxed{2}"], **kwargs)
    assert str(err.value) == (
        "MathVerifyReward reads each row's gold answer from the column 'answer', which the data set does not have; "
        "its columns: ['problem_id', 'solution']. Rename the column that holds the gold answers "
        "(dataset.rename_column('solution', 'answer')), or pass MathVerifyReward(answer_column='solution') in "
        "reward_funcs")


@pytest.mark.slow
@pytest.mark.parametrize("script", ["train_ase_grpo.py", "train_exgrpo.py"])
def test_the_scripts_refuse_a_data_set_without_answer_in_one_line(tmp_path, script):
    folder = _save(tmp_path, [{"prompt": "What is 1 + 1?", "gold": "2"}] * 4)
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), "--dataset_name", folder, "--output_dir",
         str(tmp_path / "out"), "--max_steps", "1"], capture_output=True, text=True, cwd=ROOT, timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRL_EXPLORE_TINY_POLICY": "1"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    tag = script.removesuffix(".py")
    line = [x for x in result.stderr.splitlines() if x.startswith(f"[{tag}] error:")]
    assert len(line) == 1 and "has no column 'answer'" in line[0] and "its columns: ['prompt', 'gold']" in line[0]
    assert "rename_columns({'gold': 'answer'})" in line[0]


@pytest.mark.slow
def test_evaluate_py_refuses_an_empty_gold_before_loading_the_model(tmp_path):
    rows = _rows(3)
    rows[1]["answer"] = ""
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "evaluate.py"), "--model_name_or_path", str(tmp_path / "no-model"),
         "--dataset_name", str(path)], capture_output=True, text=True, cwd=ROOT, timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "[evaluate] error: evaluation data, row 1 (id 'p1'): the 'answer' field is empty (--debug or "
        "TRL_EXPLORE_DEBUG=1 shows the traceback)")


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
    saved_to = out / "heldout_problems.jsonl"
    assert (f"[t] your own evaluation set: 2 held-out problems (6 to train on), saved to {saved_to} (evaluate a "
            f"checkpoint on them: python examples/evaluate.py --model_name_or_path {out} --dataset_name {saved_to})"
            in printed)
    assert printed.count("your own evaluation set") == 1
    assert printed.count("[t] held-out evaluation before training (") == 1  # the before table, once
    assert load_benchmark("own", str(saved_to))["problem_id"] == trainer.eval_dataset["problem_id"]
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
