"""The SFT baseline (trl_explore.sft, examples/train_sft.py): teacher rows, its config, and a two-step run of the
script's training on the tiny policy with the shared held-out evaluation."""

import json
import pathlib

import pytest
from datasets import Dataset

from trl_explore.sft import SFTBaselineConfig, teacher_sft_dataset

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROMPT_A = [{"role": "user", "content": "What is 1 + 1?"}]
PROMPT_B = [{"role": "user", "content": "What is 2 + 2?"}]


def _rows():
    return Dataset.from_list([
        {"prompt": PROMPT_A, "answer": "2", "problem_id": "a",
         "offline_completions": ["1 + 1 = 2, so \\boxed{2}.", "\\boxed{2}"], "offline_teachers": ["steps", "terse"]},
        {"prompt": PROMPT_B, "answer": "4", "problem_id": "b", "offline_completions": ["\\boxed{4}"],
         "offline_teachers": ["terse"]},
    ])


def test_one_row_per_teacher_solution():
    rows = teacher_sft_dataset(_rows())
    assert rows.column_names == ["prompt", "completion", "problem_id", "teacher"]
    assert [(r["problem_id"], r["teacher"], r["completion"][0]["content"]) for r in rows] == [
        ("a", "steps", "1 + 1 = 2, so \\boxed{2}."), ("a", "terse", "\\boxed{2}"), ("b", "terse", "\\boxed{4}")]
    assert rows[0]["prompt"] == PROMPT_A and rows[0]["completion"][0]["role"] == "assistant"
    first_only = teacher_sft_dataset(_rows(), teachers_per_prompt=1)
    assert [r["teacher"] for r in first_only] == ["steps", "terse"]
    plain = Dataset.from_list([{"prompt": "1 + 1 =", "offline_completions": [" 2"]}])
    assert teacher_sft_dataset(plain)[0]["completion"] == " 2"  # a text prompt gets a text completion


def test_bad_teacher_data_is_refused_with_the_row():
    with pytest.raises(ValueError, match="no column 'teachers'.*--offline_completions_column"):
        teacher_sft_dataset(_rows(), offline_column="teachers")
    bad = Dataset.from_list([{"prompt": PROMPT_A, "problem_id": "x", "offline_completions": ["ok", "  "]}])
    with pytest.raises(ValueError, match="row 0 \\(problem_id 'x'\\): teacher solution 1"):
        teacher_sft_dataset(bad)
    empty = Dataset.from_list([{"prompt": PROMPT_A, "offline_completions": []}])
    with pytest.raises(ValueError, match="nothing to imitate"):
        teacher_sft_dataset(empty)


def test_config_checks_its_fields():
    with pytest.raises(ValueError, match="teachers_per_prompt must be >= 1"):
        SFTBaselineConfig(output_dir="out", bf16=False, teachers_per_prompt=0)
    with pytest.raises(ValueError, match="grader_mode='loose'"):
        SFTBaselineConfig(output_dir="out", bf16=False, grader_mode="loose")


def test_the_script_lists_data_and_evaluation_options_first(load_script, capsys):
    script = load_script("examples/train_sft.py")
    with pytest.raises(SystemExit):
        script.run_sft(script.RECIPE, argv=["--help"])
    text = capsys.readouterr().out
    assert text.index("Data options") < text.index("--teachers_per_prompt") and "--eval_heldout" in text


@pytest.mark.slow
def test_two_steps_on_teacher_solutions_with_the_held_out_evaluation(tmp_path, monkeypatch, capsys):
    """examples/train_sft.py's run_sft, 2 steps on the tiny policy (TRL_EXPLORE_TINY_POLICY=1): the weights move, the
    loss covers the solution tokens only, and the shared held-out evaluation runs before and after."""
    from transformers import AutoTokenizer

    from trl_explore.defaults import tiny_policy_path
    from trl_explore.sft import run_sft

    monkeypatch.setenv("TRL_EXPLORE_TINY_POLICY", "1")
    monkeypatch.setenv("TRL_EXPLORE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    argv = ["--output_dir", str(out), "--max_steps", "2", "--per_device_train_batch_size", "2",
            "--ladder_levels", "one_digit", "--max_train_samples", "2", "--use_cpu", "true",
            "--eval_problems", "2", "--eval_samples", "1", "--eval_split", "validation", "--eval_max_new_tokens", "4"]
    trainer = run_sft(ROOT / "recipes" / "sft_smollm2_ladder_cpu.yaml", "t", argv=argv)
    assert trainer.state.global_step == 2
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert len(losses) == 2 and all(loss > 0 for loss in losses)
    # 2 prompts x 4 teacher styles = 8 rows; the loss covers the solution tokens only
    tokenizer = AutoTokenizer.from_pretrained(tiny_policy_path())
    data = trainer.train_dataset
    assert len(data) == 8
    for row in data.select(range(2)):
        prompt_ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True,
                                                   return_dict=True)["input_ids"]
        ids, labels, n = row["input_ids"], row["labels"], len(prompt_ids)
        assert ids[:n] == list(prompt_ids) and len(ids) > n
        assert labels[:n] == [-100] * n and labels[n:] == ids[n:]  # TRL folds the completion mask into the labels
    printed = capsys.readouterr().out
    assert "[t] 8 teacher solutions of 2 prompts" in printed
    assert "[t] held-out evaluation before and after training" in printed
    saved = json.loads((out / "heldout_eval.json").read_text())
    assert set(saved) == {"before", "after"} and saved["after"]["summary"]["num_problems"] == 2
    assert (out / "model.safetensors").exists() and (out / "README.md").exists()


def _run_sft(tmp_path, *argv):
    from trl_explore.sft import run_sft

    return run_sft(ROOT / "recipes" / "sft_smollm2_ladder_cpu.yaml", "t",
                   argv=["--output_dir", str(tmp_path / "out"), "--use_cpu", "true", *argv])


@pytest.mark.parametrize("argv, message", [
    (["--teachers_per_prompt", "0"], "teachers_per_prompt must be >= 1 or None (all), got 0"),
    (["--teacher_per_prompt", "1"],
     "unknown option --teacher_per_prompt (did you mean --teachers_per_prompt or --dedupe_prompts?)"),
    (["--readiness_check", "false"], "unknown option --readiness_check"),  # SFT samples nothing while training
    (["--ladder_levels", "one_digit", "--eval_fraction", "0.5", "--eval_dataset_split", "test"],
     "give one source of held-out problems"),
])
def test_the_sft_script_stops_with_one_line(argv, message, tmp_path, capsys, monkeypatch):
    """run_sft through trl_explore.cli.run_recipe: a bad option or held-out source is one line on stderr, exit 2."""
    from trl_explore.cli import EXIT_USER_ERROR

    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("TRL_EXPLORE_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_:
        _run_sft(tmp_path, *argv)
    assert exit_.value.code == EXIT_USER_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("[t] error: ") and message in err[0]
    assert err[0].endswith("(--debug or TRL_EXPLORE_DEBUG=1 shows the traceback)")


def _error_lines(stderr: str) -> list[str]:
    """The lines of ``stderr`` the script wrote (not the progress bars of ``datasets``); no traceback among them."""
    assert "Traceback" not in stderr
    return [line for line in stderr.splitlines() if line.startswith("[t] ")]


def test_bad_sft_data_is_one_line_and_debug_shows_the_exception(tmp_path, capsys, monkeypatch):
    """A data set without teacher solutions, and held-out rows without them under --eval_strategy steps (SFT's
    evaluation loop computes the loss on held-out teacher solutions)."""
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("TRL_EXPLORE_DEBUG", raising=False)
    no_teachers = tmp_path / "plain"
    Dataset.from_list([{k: v for k, v in row.items() if not k.startswith("offline")} for row in _rows()]).save_to_disk(
        str(no_teachers))
    with pytest.raises(SystemExit):
        _run_sft(tmp_path, "--dataset_name", str(no_teachers))
    err = _error_lines(capsys.readouterr().err)
    assert len(err) == 1 and "has no column 'offline_completions', where SFT reads" in err[0]
    assert "ASE-GRPO" not in err[0]  # the baseline needs teachers: no pointer to a method without them
    held_out = tmp_path / "held_out.jsonl"
    held_out.write_text(json.dumps({"prompt": PROMPT_B, "answer": "4", "problem_id": "b"}) + "\n")
    argv = ("--ladder_levels", "one_digit", "--max_train_samples", "2", "--eval_dataset_name", str(held_out),
            "--eval_strategy", "steps")
    with pytest.raises(SystemExit):
        _run_sft(tmp_path, *argv)
    err = _error_lines(capsys.readouterr().err)
    assert len(err) == 1 and err[0].startswith(
        "[t] error: eval_strategy: the SFT baseline's evaluation loop measures the loss on the held-out problems' "
        "teacher solutions, and the evaluation data has no column 'offline_completions' (its columns: ['prompt', "
        "'answer', 'problem_id']); set --eval_strategy no")
    with pytest.raises(ValueError, match="has no column 'offline_completions'"):
        _run_sft(tmp_path, *argv, "--debug")


@pytest.mark.slow
def test_sft_evaluates_your_own_held_out_problems(tmp_path, tiny_model_dir, capsys, monkeypatch):
    """run_sft on a tiny model with --eval_fraction: the held-out problems' teacher solutions are not trained on,
    TRL's evaluation loop logs eval_loss on them (--eval_strategy steps) and the before/after table is on them."""
    monkeypatch.setenv("TRL_EXPLORE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    trainer = _run_sft(tmp_path, "--model_name_or_path", str(tiny_model_dir), "--max_steps", "1",
                       "--per_device_train_batch_size", "4", "--ladder_levels", "one_digit", "--max_train_samples",
                       "8", "--eval_fraction", "0.25", "--eval_samples", "1", "--eval_max_new_tokens", "4",
                       "--eval_strategy", "steps", "--eval_steps", "1", "--per_device_eval_batch_size", "4")
    printed = capsys.readouterr().out
    assert "[t] your own evaluation set: 2 held-out problems (6 to train on)" in printed
    assert "[t] 24 teacher solutions of 6 prompts" in printed  # 4 teacher styles per ladder problem
    assert "[t] held-out evaluation before training on your held-out problems: 2 problems, 1 sample" in printed
    held = json.loads((out / "heldout_eval.json").read_text())["after"]["result"]["problem_ids"]
    assert len(set(held)) == 2 and not set(held) & set(trainer.train_dataset["problem_id"])
    assert len(trainer.eval_dataset) == 8 and set(trainer.eval_dataset["problem_id"]) == set(held)
    assert any("eval_loss" in entry for entry in trainer.state.log_history)


@pytest.mark.slow
def test_your_own_held_out_problems_with_the_sft_baseline(tmp_path, monkeypatch, capsys):
    """--eval_fraction takes problems out of the SFT baseline's training set as it does for the RL scripts: they are
    saved for examples/evaluate.py and the held-out table (printed once before training) is on them."""
    from trl_explore.evaluation.benchmarks import load_benchmark
    from trl_explore.sft import run_sft

    monkeypatch.setenv("TRL_EXPLORE_TINY_POLICY", "1")
    monkeypatch.setenv("TRL_EXPLORE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    argv = ["--output_dir", str(out), "--max_steps", "1", "--per_device_train_batch_size", "2",
            "--ladder_levels", "one_digit", "--max_train_samples", "4", "--eval_fraction", "0.5", "--use_cpu", "true",
            "--eval_samples", "1", "--eval_greedy", "false", "--eval_max_new_tokens", "4"]
    trainer = run_sft(ROOT / "recipes" / "sft_smollm2_ladder_cpu.yaml", "t", argv=argv)
    printed = capsys.readouterr().out
    saved_to = out / "heldout_problems.jsonl"
    assert f"[t] your own evaluation set: 2 held-out problems (2 to train on), saved to {saved_to}" in printed
    held = load_benchmark("own", str(saved_to))["problem_id"]
    assert not set(held) & set(trainer.train_dataset["problem_id"])
    assert printed.count("[t] held-out evaluation before training (") == 1
    assert "your own held-out problems, their own prompts: 2 problems" in printed
    heldout = json.loads((out / "heldout_eval.json").read_text())
    assert set(heldout["after"]["result"]["problem_ids"]) == set(held)
