"""Difficulty filter by measured pass rate, and the example scripts' console output."""

import json

import pandas as pd
import pytest
from datasets import Dataset

from trl_explore.data import difficulty
from trl_explore.reporting import completion_table, silence_trl_completion_panel


def _rates_file(tmp_path):
    record = {"model": "m", "k": 4, "max_new_tokens": 256, "date": "2026-11-30",
              "rates": {"256": {"a": {"samples": 4, "correct": 0, "rate": 0.0},
                                "b": {"samples": 4, "correct": 1, "rate": 0.25},
                                "c": {"samples": 4, "correct": 4, "rate": 1.0},
                                "u": {"samples": 4, "correct": 0, "rate": None}},
                        "128": {"a": {"samples": 4, "correct": 0, "rate": 0.0},
                                "b": {"samples": 4, "correct": 0, "rate": 0.0}}}}  # fmt: skip
    path = tmp_path / "rates.json"
    path.write_text(json.dumps(record))
    return path


def test_pass_rate_mask_hand_values():
    rates = {"a": 0.0, "b": 0.25, "c": 1.0}
    ids = ["a", "b", "c", "unmeasured"]
    assert difficulty.pass_rate_mask(ids, rates, 0.25, 1.0) == [False, True, True, False]
    assert difficulty.pass_rate_mask(ids, rates, 0.0, 0.0) == [True, False, False, False]
    assert difficulty.pass_rate_mask(ids, rates, 0.1, 0.9) == [False, True, False, False]  # never-and-always dropped
    for bad in [(0.5, 0.25), (-0.1, 1.0), (0.0, 1.5), (float("nan"), 1.0)]:
        with pytest.raises(ValueError, match="min_rate"):
            difficulty.pass_rate_mask(ids, rates, *bad)


def test_load_pass_rates_per_token_budget(tmp_path):
    path = _rates_file(tmp_path)
    assert difficulty.load_pass_rates(path) == {"a": 0.0, "b": 0.25, "c": 1.0}  # ungradable "u" left out
    assert difficulty.load_pass_rates(path, 128) == {"a": 0.0, "b": 0.0}
    with pytest.raises(KeyError, match=r"\['128', '256'\] tokens, not 64"):
        difficulty.load_pass_rates(path, 64)


def test_filter_by_pass_rate_and_script_arguments(tmp_path):
    path = _rates_file(tmp_path)
    data = Dataset.from_list([{"problem_id": p, "prompt": p} for p in ("a", "b", "c", "x")])
    assert difficulty.filter_by_pass_rate(data, 0.25, rates_file=path)["problem_id"] == ["b", "c"]
    assert len(difficulty.filter_by_pass_rate(data, 0.25, rates_file=path, max_new_tokens=128)) == 0
    with pytest.raises(KeyError, match="needs the column 'problem_id'"):
        difficulty.filter_by_pass_rate(data.rename_column("problem_id", "id"), 0.25, rates_file=path)
    args = difficulty.PassRateFilterArguments(min_pass_rate=None, pass_rates_file=str(path))
    assert args.filter_dataset(data, 256) is data  # no filter asked
    args = difficulty.PassRateFilterArguments(min_pass_rate=0.0, max_pass_rate=0.0, pass_rates_file=str(path))
    assert args.filter_dataset(data, 256)["problem_id"] == ["a"]


def test_shipped_pass_rates_name_what_they_measured():
    record = json.loads(difficulty.SHIPPED_PASS_RATES.read_text())
    assert {"model", "k", "max_new_tokens", "temperature", "date", "grader", "rates"} <= set(record)
    assert "SmolLM2-135M-Instruct" in record["model"] and record["k"] == 4
    for budget, rates in record["rates"].items():
        for entry in rates.values():
            assert entry["samples"] == record["k"] and 0 <= entry["correct"] <= entry["samples"]
            assert entry["rate"] is None or entry["rate"] == entry["correct"] / entry["samples"]
    assert difficulty.load_pass_rates(max_new_tokens=256) and difficulty.load_pass_rates(max_new_tokens=128)


def test_completion_table_prints_the_last_step_compactly(tmp_path):
    rows = lambda step, text: pd.DataFrame({  # noqa: E731
        "step": [step, step], "prompt": [[{"role": "user", "content": "q"}]] * 2,
        "completion": [[{"role": "assistant", "content": text}], []], "math_reward": [1.0, 0.0],
        "advantage": [0.5, -0.5], "unlisted": [1, 2]})  # fmt: skip
    assert completion_table(tmp_path) is None
    rows(1, "old").to_parquet(tmp_path / "completions_00001.parquet")
    rows(2, "line one\nline two " + "x" * 100).to_parquet(tmp_path / "completions_00002.parquet")
    lines = completion_table(tmp_path, max_chars=20).splitlines()
    assert len(lines) == 3  # header + the 2 rows of the last step only
    assert lines[0].split() == ["step", "math_reward", "advantage", "completion"]
    assert "line one line two xx" in lines[1] and "xxx" not in lines[1]  # cut at 20 characters, newline as space
    assert "old" not in "".join(lines)


def test_silence_trl_completion_panel(monkeypatch):
    import trl.trainer.grpo_trainer as grpo_module

    monkeypatch.setattr(grpo_module, "print_prompt_completions_sample", lambda *a, **k: pytest.fail("printed"))
    silence_trl_completion_panel()
    assert grpo_module.print_prompt_completions_sample(["p"], ["c"], {}, [0.0], 1, 1) is None
