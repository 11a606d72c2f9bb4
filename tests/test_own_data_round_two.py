"""Own data, round two (issue 46): unreadable golds refused at load, the nothing-learned watch on rows without a
reward, the readiness verdict, teacher solutions graded at load, the busy output folder refused early, where the
evaluation of your data comes from, and the runs that train nothing."""

import json
import logging
import pathlib
import re
from types import SimpleNamespace

import pytest
import torch

from trl_explore.readiness import (
    NothingLearnedWatch,
    nothing_learned_signals,
    readiness_advice,
    readiness_figures,
    readiness_lines,
    readiness_verdict,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _file(tmp_path, rows, name="mine.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _rows(n=4, **extra):
    return [{"prompt": f"What is {i} + 2?", "answer": str(i + 2), "problem_id": f"p{i:02d}", **extra}
            for i in range(n)]


# ---------------------------------------------------------------- 1. unreadable golds, the watch without a reward
def test_a_gold_in_words_is_refused_at_load_naming_the_rows(tmp_path):
    from trl_explore.data.training_data import DataArguments, load_training_data

    rows = _rows(4)
    rows[0]["answer"], rows[2]["answer"] = "seven", "nine"
    path = _file(tmp_path, rows)
    with pytest.raises(ValueError) as err:
        load_training_data(DataArguments(dataset_name=path), 64, offline=False)
    message = str(err.value)
    assert message.startswith(f"dataset {path!r}: the grader cannot read the gold answer of 2 of 4 rows (rows 0 (id "
                              f"'p00'), 2 (id 'p02'): 'seven', 'nine'), so they would never be scored; write each "
                              f"gold as a number or maths")
    assert "--gold_normalizer" in message and "\n" not in message
    rows[0]["answer"], rows[2]["answer"] = "7", "x=6"  # numbers and maths load
    assert len(load_training_data(DataArguments(dataset_name=_file(tmp_path, rows, "ok.jsonl")), 64,
                                  offline=False)) == 4


def test_a_mark_for_a_missing_answer_is_refused_at_load_as_a_word_is(tmp_path):
    from trl_explore.data.training_data import DataArguments, load_training_data

    rows = _rows(6)
    rows[1]["answer"], rows[2]["answer"], rows[5]["answer"] = "n/a", "N/A", "TBD"  # before: "n/a" loaded, as n / a
    path = _file(tmp_path, rows)
    with pytest.raises(ValueError) as err:
        load_training_data(DataArguments(dataset_name=path), 64, offline=False)
    message = str(err.value)
    assert message.startswith(f"dataset {path!r}: the grader cannot read the gold answer of 3 of 6 rows (rows 1 (id "
                              f"'p01'), 2 (id 'p02'), 5 (id 'p05'): 'n/a', 'N/A', 'TBD'), so they would never be "
                              f"scored")
    rows[1]["answer"], rows[2]["answer"] = "6 7/4", "x = 2 1/3"  # a whole number next to a fraction, not one mixed
    rows[5]["answer"] = "NA"  # number; "NA" as pandas writes a missing value
    with pytest.raises(ValueError, match="cannot read the gold answer of 3 of 6 rows"):
        load_training_data(DataArguments(dataset_name=_file(tmp_path, rows, "two.jsonl")), 64, offline=False)


def test_golds_that_state_a_value_load_mixed_numbers_included(tmp_path):
    from trl_explore.data.training_data import DataArguments, load_training_data

    golds = ["3 3/4", "-2 1/2", "5/8", "-0.75", r"\frac{1}{2}", r"\sqrt{2}", "[0, 1)", "(1, 2)", "x = 3", "a/n"]
    rows = [{**row, "answer": gold} for row, gold in zip(_rows(len(golds)), golds)]
    assert len(load_training_data(DataArguments(dataset_name=_file(tmp_path, rows)), 64, offline=False)) == len(golds)


def test_the_watch_never_crashes_on_metrics_logged_as_none(caplog):
    logs = {"completions/clipped_ratio": None, "frac_reward_zero_std": float("nan"), "rewards/oger_reward/mean": 0.0}
    assert nothing_learned_signals(logs) == {"no_oger_reward": True}  # before: TypeError from float(None)
    watch = NothingLearnedWatch(patience=1)
    state = SimpleNamespace(global_step=1, is_world_process_zero=True)
    with caplog.at_level(logging.WARNING, logger="trl_explore.readiness"):
        watch.on_log(None, state, None, logs={"frac_reward_zero_std": None, "loss": 0.1})
    assert watch.streaks == {} and not caplog.records


# ---------------------------------------------------------------- 2. the readiness verdict
def _figures(pass_rate_rows, cut):
    correct = torch.tensor(pass_rate_rows, dtype=torch.bool)
    truncated = torch.zeros_like(correct)
    truncated.view(-1)[: round(cut * correct.numel())] = True
    return readiness_figures(correct, truncated, torch.full(correct.shape, 50))


def test_the_issues_figures_read_barely_with_the_reason_and_the_fix():
    # 8 prompts x 4: 1 correct completion in 32 (pass 0.03), 1 mixed group (0.12), 27 of 32 cut off (0.84)
    rows = [[True, False, False, False]] + [[False] * 4] * 7
    figures = _figures(rows, 27 / 32)
    verdict, reasons = readiness_verdict(figures)
    assert verdict == "barely"  # before: "the run can learn"
    assert reasons == ["84% of the completions were cut off at the cap (most answers lost)",
                       "correct answers are rare (pass rate 0.03 < 0.1)",
                       "few groups mix right and wrong answers (0.12 < 0.25), the only groups GRPO learns from"]
    lines = readiness_lines(figures, readiness_advice(figures, 96))
    assert lines[1].startswith("verdict: the run barely learns: 84% of the completions were cut off")
    assert lines[2].startswith("WARNING: 84% of the completions were cut off at max_completion_length=96 tokens")
    assert lines[3].startswith("WARNING: correct answers are rare (pass rate 0.03, mixed groups 0.12)")
    assert "pick easier problems" in lines[3] and "teacher rows" in lines[3]


def test_the_verdict_thresholds():
    half = [[True, False, True, False]] * 4  # pass 0.5, all mixed
    assert readiness_verdict(_figures(half, 0.0)) == ("can learn", [])
    assert readiness_verdict(_figures(half, 0.5))[0] == "barely"  # half cut off: most answers lost
    assert readiness_verdict(_figures(half, 15 / 16))[0] == "cannot learn"  # 94% cut off
    assert readiness_verdict(_figures([[False] * 4] * 4, 0.0)) == ("cannot learn", ["no completion was correct"])
    assert readiness_lines(_figures(half, 0.0), [])[1] == ("verdict: the run can learn (4 of 4 groups mix right "
                                                           "and wrong answers)")


# ---------------------------------------------------------------- 3. teacher solutions graded where they are used
def test_a_wrong_teacher_solution_is_named_at_load_and_an_empty_list_is_named(tmp_path, caplog):
    from trl_explore.data.training_data import DataArguments, load_training_data

    rows = _rows(4, offline_completions=[], offline_teachers=[])
    for i, row in enumerate(rows):
        row["offline_completions"] = [f"\\boxed{{{i + 2}}}"]
        row["offline_teachers"] = ["good"]
    rows[1]["offline_completions"].append("\\boxed{99}")
    rows[1]["offline_teachers"].append("bad")
    rows[3]["offline_completions"], rows[3]["offline_teachers"] = [], []
    path = _file(tmp_path, rows)
    with caplog.at_level(logging.WARNING, logger="trl_explore.data.training_data"):
        dataset = load_training_data(DataArguments(dataset_name=path, min_offline_completions=1), 64)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert messages[0].startswith(f"dataset {path!r}: 1 of 4 teacher solutions are graded wrong against their gold "
                                  "(rows counted from 0, solutions from 1): row 1 (id 'p01', gold '3'): its "
                                  "solution 2 of teacher 'bad' '\\boxed{99}'. They are trained on")
    assert messages[0].endswith("fix the gold or the solution, or remove the wrong solution from its row's list")
    assert messages[1].startswith("dropped row 3 (id 'p03'): fewer than min_offline_completions=1 teacher solutions "
                                  "(an empty list is no teacher")
    assert dataset["problem_id"] == ["p00", "p01", "p02"]


def test_losing_most_rows_to_the_teacher_filter_is_said_in_words(tmp_path, caplog):
    from trl_explore.data.training_data import DataArguments, load_training_data

    rows = _rows(5, offline_completions=[], offline_teachers=[])
    rows[0]["offline_completions"], rows[0]["offline_teachers"] = ["\\boxed{2}"], ["good"]
    with caplog.at_level(logging.WARNING, logger="trl_explore.data.training_data"):
        dataset = load_training_data(DataArguments(dataset_name=_file(tmp_path, rows), min_offline_completions=1), 64)
    dropped = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert dropped[0].startswith("4 of 5 rows (80%) have no teacher solution and are left out of training; dropped "
                                 "rows 1 (id 'p01')")
    assert len(dataset) == 1


# ---------------------------------------------------------------- 4. where the evaluation of your data comes from
def test_own_data_without_an_evaluation_split_says_where_its_evaluation_comes_from():
    from trl_explore.cli import eval_source_note
    from trl_explore.evaluation.heldout import HeldoutEvalArguments

    on = HeldoutEvalArguments(eval_heldout=True)
    assert eval_source_note("mine.jsonl", False, on, False) == (
        "your data has no evaluation split: the held-out evaluation runs on the built-in ladder set's test split, not "
        "on your problems (--eval_fraction 0.1 holds out 10% of your problems instead; --eval_heldout false evaluates "
        "nothing)")
    off = HeldoutEvalArguments(eval_heldout=False)
    assert eval_source_note("mine.jsonl", False, off, False) == (
        "your data has no evaluation split: nothing is evaluated (--eval_fraction 0.1 holds out 10% of your problems "
        "instead)")
    assert eval_source_note("mine.jsonl", True, on, True) is None
    assert eval_source_note("ladder", False, on, True) is None


# ---------------------------------------------------------------- 6. the busy output folder
def test_a_busy_output_folder_is_refused_early_writing_nothing(tmp_path):
    from trl_explore.checkpoints.records import OutputDirInUse, OutputDirLock, check_output_dir_free
    from trl_explore.cli import user_error_types

    check_output_dir_free(str(tmp_path / "new"))
    assert not (tmp_path / "new").exists()  # a free folder: nothing created
    busy = tmp_path / "busy"
    lock = OutputDirLock(str(busy))
    lock.acquire()
    try:
        before = {p: p.stat().st_mtime_ns for p in busy.rglob("*")}
        with pytest.raises(OutputDirInUse, match=re.escape(f"output_dir {busy} is in use by another run (pid ")):
            check_output_dir_free(str(busy))
        assert {p: p.stat().st_mtime_ns for p in busy.rglob("*")} == before  # nothing written
    finally:
        lock.release()
    check_output_dir_free(str(busy))  # free again
    assert OutputDirInUse in user_error_types()  # the scripts print it as one line


def test_a_training_run_holds_its_folder_from_the_start(tmp_path):
    # found by a newcomer: a second run started while the first one checked readiness passed the early check, then
    # evaluated, wrote into the busy folder and died with a traceback when the first run's trainer locked it
    from trl_explore.checkpoints.disk import LOCK_NAME, held_by_this_run, run_output_lock
    from trl_explore.checkpoints.records import OutputDirInUse, OutputDirLock, check_output_dir_free

    folder = tmp_path / "run"
    with run_output_lock(str(folder)):
        assert held_by_this_run(str(folder)) and (folder / LOCK_NAME).is_file()
        with pytest.raises(OutputDirInUse, match=re.escape(f"output_dir {folder} is in use by another run (pid ")):
            check_output_dir_free(str(folder))  # the second run's first check
        with pytest.raises(OutputDirInUse):
            OutputDirLock(str(folder)).acquire()
    assert not held_by_this_run(str(folder)) and not folder.exists()  # created here, nothing written: removed
    with run_output_lock(str(folder)):
        (folder / "model.safetensors").write_text("x")
    assert (folder / "model.safetensors").is_file()  # a folder with the run's files stays, unlocked
    lock = OutputDirLock(str(folder))
    lock.acquire()
    lock.release()
    with run_output_lock(str(tmp_path / "dry"), take=False):  # a run that trains nothing only checks
        assert not (tmp_path / "dry").exists() and not held_by_this_run(str(tmp_path / "dry"))
    lock = OutputDirLock(str(folder))
    lock.acquire()
    try:
        with pytest.raises(OutputDirInUse), run_output_lock(str(folder), take=False):
            pass
    finally:
        lock.release()


def test_the_lock_names_the_whole_command(tmp_path, monkeypatch):
    from trl_explore.checkpoints.records import OutputDirInUse, OutputDirLock, check_output_dir_free

    argv = ["train_oger.py", "--dataset_name", "mydata.jsonl", "--output_dir", "outputs/busy", "--max_steps", "2"]
    monkeypatch.setattr("sys.argv", argv)
    lock = OutputDirLock(str(tmp_path))
    lock.acquire()
    try:
        with pytest.raises(OutputDirInUse, match=re.escape(": " + " ".join(argv) + ")")):
            check_output_dir_free(str(tmp_path))
    finally:
        lock.release()


# ---------------------------------------------------------------- 2. runs that train nothing
@pytest.mark.slow
@pytest.mark.parametrize("flags, last", [(["--readiness_only"], "[t] --readiness_only: stopped after the check; "
                                          "nothing trained, nothing saved"),
                                         (["--max_steps", "0"], "[t] --max_steps 0: nothing trained, nothing saved")])
def test_runs_that_train_nothing_save_nothing(tmp_path, tiny_model_dir, capsys, monkeypatch, flags, last):
    from trl_explore import OGERConfig, OGERTrainer
    from trl_explore.cli import run_training

    monkeypatch.setenv("TRL_EXPLORE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    argv = ["--model_name_or_path", str(tiny_model_dir), "--output_dir", str(out), "--max_steps", "1",
            "--per_device_train_batch_size", "4", "--num_generations", "4", "--max_completion_length", "24",
            "--ladder_levels", "one_digit", "--max_train_samples", "8", "--use_cpu", "true", "--eval_heldout",
            "false", "--readiness_prompts", "1", "--embedding_model", "embedded", *flags]
    trainer = run_training(OGERTrainer, OGERConfig, ROOT / "recipes" / "oger_smollm2_ladder_cpu.yaml", "t",
                           argv=argv)
    printed = capsys.readouterr().out
    assert printed.strip().splitlines()[-1] == last
    assert "[t] readiness check (1 training prompts x 4 completions" in printed
    assert trainer.state.global_step == 0 and not out.exists()


# ---------------------------------------------------------------- 7. the small messages
def test_the_rename_hint_for_a_data_file_never_says_load_from_disk(tmp_path):
    from trl_explore.data.training_data import DataArguments, load_training_data
    from trl_explore.evaluation.own_data import load_own_rows

    path = _file(tmp_path, [{"prompt": "What is 1 + 1?", "solution": "2"}])
    with pytest.raises(ValueError) as err:
        load_training_data(DataArguments(dataset_name=path), 64, offline=False)
    assert "load_from_disk" not in str(err.value)
    assert (f"pass the new file, e.g. load_dataset('json', data_files={path!r}, split='train').rename_columns("
            "{'solution': 'answer'}).to_json('my-data.jsonl')") in str(err.value)
    with pytest.raises(ValueError) as err:  # examples/evaluate.py --dataset_name, --eval_dataset_name
        load_own_rows(path)
    assert "load_from_disk" not in str(err.value) and ".to_json('my-data.jsonl')" in str(err.value)


# ---------------------------------------------------------------- 5. evaluation that does not mislead
def _heldout(n, cut, rate):
    from trl_explore.evaluation.heldout import HeldoutResult

    correct = tuple((i < rate * n, False) for i in range(n))
    return HeldoutResult("own", "test", None, tuple(f"p{i}" for i in range(n)), 1.0, correct,
                         tuple(("1", "2") for _ in range(n)), mean_num_tokens=30.0, truncated_fraction=cut)


def test_an_interval_only_with_enough_problems_and_the_cut_off_share_with_a_warning():
    from trl_explore.evaluation.heldout import compare_heldout, heldout_table

    before, after = _heldout(4, 0.94, 0.25), _heldout(4, 0.10, 0.75)
    lines = heldout_table(before, after, compare_heldout(before, after, num_resamples=200))
    assert lines[1].endswith("change (too few problems for an interval: 4 < 10)")
    assert not any("[" in line for line in lines[2:])  # no interval printed for 4 problems
    assert any(re.fullmatch(r"cut off at the token cap +0\.940 +0\.100 +-0\.840", line) for line in lines)
    assert lines[-1].startswith("WARNING: 94% of the samples were cut off at the token cap")
    before, after = _heldout(12, 0.0, 0.25), _heldout(12, 0.0, 0.75)
    lines = heldout_table(before, after, compare_heldout(before, after, num_resamples=200))
    assert lines[1].endswith("change [95% paired bootstrap interval]") and not lines[-1].startswith("WARNING")


def test_a_cut_off_answer_is_graded_as_training_grades_it():
    from trl_explore.rewards.benchmark_grading import grade_completion

    prose = "Let me count the apples one by one: 3, then 4, then 7"  # cut off mid-sentence at the cap
    assert grade_completion(prose, "7", "math")[1] is True  # ending unknown: Math-Verify reads the last number
    assert grade_completion(prose, "7", "math", terminated=False)[1] is False  # the training reward's verdict
    assert grade_completion(prose + " so \\boxed{7}", "7", "math", terminated=False)[1] is True  # boxed counts


def test_the_evaluation_names_the_cut_off_share_and_follows_the_label(tmp_path):
    from trl_explore.evaluation.results import load_summary, save_run

    def summary(model, cut):
        return {"model": model, "layout": "ase", "benchmarks": {"own": {
            "title": "Your data", "mean": 0.1, "pass_at_n": 0.2, "num_samples": 2, "truncated_fraction": cut}}}

    save_run(tmp_path / "base", [], summary("embedded", 0.94), label="base")
    base = load_summary(tmp_path / "base")
    assert base["label"] == "base"
    text = (tmp_path / "base" / "results.md").read_text()
    assert ("WARNING: base, Your data: 94% of the samples cut off at the token cap (graded as in training: a cut-off "
            "answer counts only when boxed or after an answer phrase); most answers were lost") in text
    save_run(tmp_path / "trained", [], summary("outputs/run", 0.1), label="trained", baseline=base)
    text = (tmp_path / "trained" / "results.md").read_text()
    assert "| base (baseline) |" in text and "embedded (baseline)" not in text
    assert "trained, Your data: 10% of the samples cut off" in text


def test_colours_follow_the_runs_across_overlaid_plots(tmp_path):
    from trl_explore.evaluation.plots import label_colors, plot_pass_at_k

    alone = label_colors(["base"])[0]
    assert label_colors(["base (baseline)", "trained"])[0] == alone  # before: C0 alone, then C0 / C1 by position
    assert label_colors(["trained"]) == label_colors(["base (baseline)", "trained"])[1:]
    assert len(set(label_colors([f"run{i}" for i in range(10)]))) == 10  # distinct within one plot
    entry = {"title": "Your data", "pass_at_k": {"1": 0.1, "2": 0.2}}
    fig = plot_pass_at_k({"base (baseline)": {"benchmarks": {"own": entry}},
                          "trained": {"benchmarks": {"own": entry}}}, tmp_path / "p.png")
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["base (baseline)", "trained"]
    assert [line.get_color() for line in fig.axes[0].lines] == label_colors(["base (baseline)", "trained"])


def test_the_builder_names_each_dropped_solution_and_each_problem_left_without_one():
    from trl_explore.data import build_offline_dataset, teacher_column_records

    table = [{"problem": "What is 7 * 8?", "answer": "56", "terse": "7 * 8 = 56. \\boxed{56}",
              "wrong": "7 * 8 = 54. \\boxed{54}", "long": "Let us count. " * 40 + "\\boxed{56}"},
             {"problem": "What is 2 + 2?", "answer": "4", "terse": "2 + 2 = 5. \\boxed{5}", "wrong": "\\boxed{3}",
              "long": "\\boxed{1}"}]
    _, report = build_offline_dataset(teacher_column_records(table, ["terse", "wrong", "long"]), max_length=63,
                                      test_fraction=0.0, show_progress=False)
    text = report.markdown()
    assert "Dropped teacher solutions (5):\n- problem 'row-0', teacher 'wrong': graded wrong against the gold" in text
    assert "- problem 'row-0', teacher 'long': longer than max_length=63 tokens (" in text
    assert "- problem 'row-1', teacher 'terse': graded wrong against the gold" in text
    assert "Problems left without a teacher solution (1; kept with an empty list" in text and "'row-1'" in text


def test_a_misspelt_column_is_named_in_the_rename_hint(tmp_path):
    # found by a newcomer: 'anwser' got the generic "rename_columns({'<your column>': 'answer'})"
    from trl_explore.data.training_data import DataArguments, load_training_data
    from trl_explore.rewards.checks import rename_example

    assert rename_example(["problem_id", "prompt", "anwser"], "answer") == "'anwser'"
    assert rename_example(["promt", "answer"], "prompt") == "'promt'"
    assert rename_example(["question_text", "value"], "answer") == "'<your column>'"  # nothing close: no guess
    path = _file(tmp_path, [{"prompt": "What is 1 + 1?", "anwser": "2"}])
    with pytest.raises(ValueError, match=re.escape(".rename_columns({'anwser': 'answer'})")):
        load_training_data(DataArguments(dataset_name=path), 64, offline=False)
