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
    with pytest.raises(difficulty.EmptyFilterError) as err:  # at 128 tokens a and b both have rate 0
        difficulty.filter_by_pass_rate(data, 0.25, rates_file=path, max_new_tokens=128)
    assert "kept 0 of 4 rows (min_rate=0.25, max_rate=1.0; rates graded at 128 tokens" in str(err.value)
    assert "2 of the dataset's 4 problems have a measured rate: min 0, median 0, max 0" in str(err.value)
    with pytest.raises(KeyError, match="needs the column 'problem_id'"):
        difficulty.filter_by_pass_rate(data.rename_column("problem_id", "id"), 0.25, rates_file=path)
    args = difficulty.PassRateFilterArguments(min_pass_rate=None, pass_rates_file=str(path))
    assert args.filter_dataset(data, 256) is data  # no filter asked
    args = difficulty.PassRateFilterArguments(min_pass_rate=0.0, max_pass_rate=0.0, pass_rates_file=str(path))
    assert args.filter_dataset(data, 256)["problem_id"] == ["a"]


def test_empty_filter_names_the_rates_it_saw(tmp_path):
    path = _rates_file(tmp_path)
    data = Dataset.from_list([{"problem_id": p} for p in ("a", "b", "c", "b")])  # "b" twice: counted once
    with pytest.raises(difficulty.EmptyFilterError) as err:
        difficulty.filter_by_pass_rate(data, 0.3, 0.9, rates_file=path)
    message = str(err.value)
    assert "kept 0 of 4 rows (min_rate=0.3, max_rate=0.9" in message and str(path) in message
    assert "3 of the dataset's 3 problems have a measured rate: min 0, median 0.25, max 1" in message
    assert "--min_pass_rate" in message and "--pass_rates_file" in message
    other = Dataset.from_list([{"problem_id": p} for p in ("x", "y")])
    with pytest.raises(difficulty.EmptyFilterError, match=r"none of the dataset's 2 problem ids \(e.g. 'x', 'y'\) "
                       r"has a rate in the file, which has 3 \(e.g. 'a', 'b', 'c'\)"):
        difficulty.filter_by_pass_rate(other, 0.0, rates_file=path)
    # the shipped rates of the embedded policy at 128 tokens are all 0: the README's min_rate=0.25 keeps nothing
    champ = Dataset.from_list([{"problem_id": p} for p in difficulty.load_pass_rates(max_new_tokens=128)])
    with pytest.raises(difficulty.EmptyFilterError, match="30 of the dataset's 30 problems .* min 0, median 0, max 0"):
        difficulty.filter_by_pass_rate(champ, 0.25, max_new_tokens=128)


def _write(tmp_path, record, name="r.json"):
    path = tmp_path / name
    path.write_text(record if isinstance(record, str) else json.dumps(record))
    return path


def test_rates_file_format_is_validated_with_the_file_and_key_named(tmp_path):
    entries = {"a": 0.5, "b": {"rate": 0.0}, "c": {"rate": None}, "d": {"samples": 2, "correct": 1, "rate": 0.5}}
    minimal = {"rates": {"64": entries}}
    assert difficulty.load_pass_rates(_write(tmp_path, minimal)) == {"a": 0.5, "b": 0.0, "d": 0.5}  # one budget
    bad = [
        ("{not json", "is not valid JSON"),
        ([1, 2], r"needs a top-level object with 'rates'.*found list"),
        ({"k": 4}, r"needs a top-level object with 'rates'.*found \['k'\]"),
        ({"rates": {"long": {}}}, r"rates\['long'\] must be a completion-token budget"),
        ({"rates": {"64": {"a": 1.5}}}, r"rates\['64'\]\['a'\]\['rate'\] = 1.5: a rate must be a number in \[0, 1\]"),
        ({"rates": {"64": {"a": {"rate": "high"}}}}, r"\['a'\]\['rate'\] = 'high'"),
        ({"rates": {"64": {"a": {"correct": 1}}}}, r"rates\['64'\]\['a'\] has no 'rate'"),
        ({"rates": {"64": {"a": [0.5]}}}, r"rates\['64'\]\['a'\] = \[0.5\]: expected a rate"),
        ({"rates": {"64": {"a": {"samples": 4, "correct": 5, "rate": 1.0}}}}, r"samples=4, correct=5"),
        ({"rates": {"64": {"a": {"samples": 4, "correct": 1, "rate": 0.5}}}},
         r"\['rate'\] = 0.5 but correct / samples = 1/4"),
        ({"rates": {"64": {}, "128": {}}}, r"grades budgets \['64', '128'\] tokens and names no 'max_new_tokens'"),
    ]  # fmt: skip
    for i, (record, message) in enumerate(bad):
        path = _write(tmp_path, record, f"bad{i}.json")
        with pytest.raises(difficulty.PassRatesFileError, match=message) as err:
            difficulty.load_pass_rates(path)
        assert str(path) in str(err.value)
    assert issubclass(difficulty.PassRatesFileError, ValueError)


def test_shipped_pass_rates_name_what_they_measured():
    record = json.loads(difficulty.SHIPPED_PASS_RATES.read_text())
    assert {"model", "k", "max_new_tokens", "temperature", "date", "grader", "rates"} <= set(record)
    assert "SmolLM2-135M-Instruct" in record["model"] and record["k"] == 4
    for rates in record["rates"].values():
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
