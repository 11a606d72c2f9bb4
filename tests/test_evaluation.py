"""Tests of trl_explore.evaluation: metrics on exact values, the registry on local fixtures, grading,
the runner end to end on a tiny model, tables, sweeps and plots."""

from __future__ import annotations

import itertools
import json
import math
import pathlib
from fractions import Fraction

import numpy as np
import pytest

from trl_explore.evaluation import benchmarks as bm
from trl_explore.evaluation import metrics, plots, protocols, results, runner, scoring, sweeps
from trl_explore.sampling.hf import TransformersGenerator
from trl_explore.sampling.plan import Generations

DATA = pathlib.Path(__file__).parent / "data" / "eval"
FIXTURES = {
    "aime2024": "aime2024.jsonl", "aime2025": "aime2025.jsonl", "amc": "amc.jsonl", "math500": "math500.jsonl",
    "minerva": "minerva.jsonl", "olympiadbench": "olympiadbench.jsonl", "arc_challenge": "arc_challenge.jsonl",
    "gpqa_diamond": "gpqa_diamond.jsonl", "mmlu_pro": "mmlu_pro.parquet", "bbh": "bbh.jsonl",
}  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------------------


def exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def brute_force_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """Fraction of the k-subsets of n samples (the first c correct) that hold a correct sample."""
    verdicts = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return Fraction(sum(any(verdicts[i] for i in s) for s in subsets), len(subsets))


@pytest.mark.parametrize(
    "n, c, k, expected",
    [
        (4, 2, 2, Fraction(5, 6)),  # 1 - C(2,2)/C(4,2) = 1 - 1/6
        (5, 1, 2, Fraction(2, 5)),  # 1 - C(4,2)/C(5,2) = 1 - 6/10
        (10, 3, 1, Fraction(3, 10)),  # k = 1: c / n
        (8, 2, 4, Fraction(11, 14)),  # 1 - C(6,4)/C(8,4) = 1 - 15/70
        (3, 0, 2, Fraction(0)),
        (3, 3, 3, Fraction(1)),
        (8, 1, 8, Fraction(1)),  # k = n: 1[c > 0]
        (6, 5, 2, Fraction(1)),  # n - c < k
    ],
)
def test_pass_at_k_hand_values(n, c, k, expected):
    assert metrics.pass_at_k(n, c, k) == pytest.approx(float(expected), abs=1e-15)


def test_pass_at_k_matches_exact_rationals_and_subset_enumeration():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = exact_pass_at_k(n, c, k)
                assert brute_force_pass_at_k(n, c, k) == exact
                assert metrics.pass_at_k(n, c, k) == pytest.approx(float(exact), abs=1e-14), (n, c, k)


def test_pass_at_k_is_stable_for_large_n():
    for n, c, k in [(256, 3, 128), (256, 1, 7), (256, 200, 32), (1024, 10, 512), (5000, 17, 100)]:
        exact = float(exact_pass_at_k(n, c, k))
        assert metrics.pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-12, abs=1e-15)
    assert metrics.pass_at_k(256, 1, 1) == pytest.approx(1 / 256, rel=1e-14)
    assert metrics.pass_at_k(100_000, 50_000, 50_000) == 1.0


@pytest.mark.parametrize(
    "args, message",
    [((4, 2, 5), "k=5"), ((4, 5, 1), "c`=5"), ((0, 0, 1), "`n` must be >= 1"), ((4, -1, 1), "`c` must be >= 0"),
     ((4, 1, 0), "`k` must be >= 1")],
)  # fmt: skip
def test_pass_at_k_rejects_bad_counts(args, message):
    with pytest.raises(ValueError, match=message):
        metrics.pass_at_k(*args)
    with pytest.raises(TypeError, match="integer"):
        metrics.pass_at_k(4.5, 1, 1)


def test_mean_at_k_and_benchmark_pass_at_k():
    assert metrics.mean_at_k([8, 8, 8], [8, 0, 2]) == pytest.approx((1 + 0 + 0.25) / 3)
    assert metrics.mean_at_k([2, 4], [1, 1]) == pytest.approx(0.375)  # per problem, not pooled (2/6)
    assert metrics.benchmark_pass_at_k([8, 8, 8], [8, 0, 2], 8) == pytest.approx(2 / 3)
    assert metrics.benchmark_pass_at_k([4, 4], [2, 1], 2) == pytest.approx((5 / 6 + 1 / 2) / 2)
    assert metrics.benchmark_pass_at_k([4, 4], [2, 1], 1) == pytest.approx(metrics.mean_at_k([4, 4], [2, 1]))
    with pytest.raises(ValueError, match="problem 1 has only 2"):
        metrics.pass_at_k_per_problem([4, 2], [1, 1], 3)
    with pytest.raises(ValueError, match="problem 0 has num_correct=5"):
        metrics.mean_at_k([4], [5])
    with pytest.raises(ValueError, match="empty"):
        metrics.mean_at_k([], [])


def test_correct_counts_default_ks_and_curve():
    n, c = metrics.correct_counts([[True, False, False, True], [False] * 4])
    assert n.tolist() == [4, 4] and c.tolist() == [2, 0]
    with pytest.raises(ValueError, match="problem 1 has no graded sample"):
        metrics.correct_counts([[True], []])
    assert metrics.default_ks(1) == [1]
    assert metrics.default_ks(8) == [1, 2, 4, 8]
    assert metrics.default_ks(12) == [1, 2, 4, 8, 12]
    assert metrics.default_ks(256)[-1] == 256 and len(metrics.default_ks(256)) == 9
    curve = metrics.pass_at_k_curve([4, 4], [2, 1])
    assert list(curve) == [1, 2, 4]
    assert curve[2] == pytest.approx((5 / 6 + 1 / 2) / 2) and curve[4] == 1.0


def test_macro_average():
    assert metrics.macro_average({"a": 0.2, "b": 0.4, "c": 0.9}) == pytest.approx(0.5)
    assert metrics.macro_average({"a": 0.2, "b": 0.4, "c": 0.9}, ["a", "b"]) == pytest.approx(0.3)
    with pytest.raises(ValueError, match=r"no score for benchmark\(s\) \['d'\]"):
        metrics.macro_average({"a": 0.2}, ["a", "d"])
    with pytest.raises(ValueError, match="benchmark 'a' is not a finite number"):
        metrics.macro_average({"a": float("nan")})


def test_pairwise_disagreement_hand_value_with_missing_answers():
    answers = ["1", "1", "2", None] + ["a", "a", "a", "a"]
    # prompt 1: pairs among "1","1","2" (None left out): 3 pairs, 2 differ; prompt 2: 6 pairs, none
    assert metrics.pairwise_answer_disagreement(answers, num_generations=4) == pytest.approx(2 / 9)
    assert metrics.pairwise_answer_disagreement(["x", "y", "z"], 3) == 1.0


def test_pairwise_disagreement_without_countable_pairs_is_none():
    assert metrics.pairwise_answer_disagreement([None, None, "3", None], 2) is None
    assert metrics.pairwise_answer_disagreement(["1", "2"], 1) is None
    assert metrics.pairwise_answer_disagreement([], 4) is None


def test_pairwise_disagreement_bad_inputs():
    with pytest.raises(ValueError, match="multiple of num_generations=4"):
        metrics.pairwise_answer_disagreement(["1"] * 6, 4)
    with pytest.raises(ValueError, match="num_generations"):
        metrics.pairwise_answer_disagreement(["1"], 0)


# --------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------


def test_registry_names_and_aliases():
    assert set(FIXTURES) | {"champ", "ladder", "own"} == set(bm.BENCHMARKS)  # own: tests/test_own_data.py
    for alias, name in [("AIME 2024", "aime2024"), ("aime25", "aime2025"), ("MATH-500", "math500"),
                        ("ARC-C", "arc_challenge"), ("GPQA-Diamond", "gpqa_diamond"),
                        ("MMLU-Pro", "mmlu_pro")]:  # fmt: skip
        assert bm.benchmark_spec(alias).name == name
    with pytest.raises(ValueError, match="unknown benchmark 'gsm9k'.*aime2024"):
        bm.benchmark_spec("gsm9k")
    for spec in bm.BENCHMARKS.values():
        assert spec.domain in ("math", "ood") and spec.grading in bm.GRADINGS
        assert spec.hub_id or spec.name in ("champ", "ladder", "own")


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_every_benchmark_loads_from_a_local_file_in_its_hub_schema(name):
    data = bm.load_benchmark(name, DATA / FIXTURES[name])
    assert data.column_names == list(bm.BENCHMARK_COLUMNS)
    assert len(data) == 2
    spec = bm.benchmark_spec(name)
    for row in data:
        assert row["benchmark"] == name and row["problem_id"].startswith(f"{name}/")
        assert row["grading"] == spec.grading and row["domain"] == spec.domain
        assert row["answer"] and row["problem"] and row["prompt"] == []
        if spec.grading == "multiple_choice":
            letter = row["answer"]
            assert f"\n{letter}. {row['choices'][bm.LETTERS.index(letter)]}" in row["problem"]
    assert len(bm.load_benchmark(name, DATA / FIXTURES[name], limit=1)) == 1


def test_field_mappings_give_the_expected_gold_answers():
    def answers(name):
        return [(r["problem_id"], r["answer"]) for r in bm.load_benchmark(name, DATA / FIXTURES[name])]

    assert answers("amc") == [("amc/0", "142"), ("amc/1", "1.5")]  # the Hub stores floats
    assert answers("olympiadbench") == [("olympiadbench/1001", "-3, 3"), ("olympiadbench/1002", "120")]
    assert answers("minerva") == [("minerva/0", "20"), ("minerva/1", "3")]  # no id field: row index
    assert answers("arc_challenge") == [("arc_challenge/LOCAL_1", "B"), ("arc_challenge/LOCAL_2", "C")]  # label "3"
    assert answers("mmlu_pro") == [("mmlu_pro/1", "B"), ("mmlu_pro/2", "C")]
    assert answers("bbh") == [("bbh/boolean_expressions-0", "False"), ("bbh/date_understanding-1", "(A)")]
    gpqa = bm.load_benchmark("gpqa_diamond", DATA / FIXTURES["gpqa_diamond"])
    for row, correct in zip(gpqa, ["Na", "newton"]):
        assert row["choices"][bm.LETTERS.index(row["answer"])] == correct
    # the documented fixed shuffle (seeded by the problem id), pinned: the file lists the correct answer first, the
    # prompts must not (here it lands on D and B); a change of the rule changes every GPQA prompt
    assert gpqa["choices"] == [["S", "Sd", "So", "Na"], ["joule", "newton", "pascal", "watt"]]
    assert [row["answer"] for row in gpqa] == ["D", "B"]
    again = bm.load_benchmark("gpqa_diamond", DATA / FIXTURES["gpqa_diamond"])
    assert again["choices"] == gpqa["choices"]  # deterministic


def test_champ_uses_the_held_out_split_and_keeps_its_prompt(monkeypatch):
    from datasets import Dataset, DatasetDict

    import trl_explore.data

    prompt = [{"role": "system", "content": "S"}, {"role": "user", "content": "Compute 2+2."}]
    split = Dataset.from_list([{"problem_id": "P_7", "prompt": prompt, "answer": "4", "offline_completions": []}])
    calls = []
    monkeypatch.setattr(trl_explore.data, "load_default_offline_dataset",
                        lambda **kw: calls.append(kw) or DatasetDict({"train": split, "test": split}))  # fmt: skip
    data = bm.load_benchmark("champ")
    assert calls == [{}]  # the training job's default arguments: the same held-out split
    assert data[0]["problem_id"] == "P_7" and data[0]["prompt"] == prompt and data[0]["problem"] == "Compute 2+2."
    assert protocols.build_messages(data[0], protocols.get_protocol("oger").plan("champ")) == prompt


def test_bad_benchmark_input_gives_clear_errors(tmp_path):
    with pytest.raises(ValueError, match=r"row 1 \(id 'aime2024/8'\): the 'answer' field is empty"):
        bm.load_benchmark("aime2024", DATA / "missing_answer.jsonl")
    with pytest.raises(ValueError, match="has no rows"):
        bm.load_benchmark("aime2024", DATA / "empty.jsonl")
    with pytest.raises(ValueError, match=r"row 0 .*no 'question' field"):
        bm.load_benchmark("minerva", DATA / "aime2024.jsonl")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        bm.load_benchmark("aime2024", tmp_path / "nope.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "x", "answer": "1"}\nnot json\n')
    with pytest.raises(ValueError, match="line 2: not valid JSON"):
        bm.load_benchmark("aime2024", bad)
    arc = tmp_path / "arc.jsonl"
    arc.write_text(json.dumps({"id": "q", "question": "?", "choices": {"text": ["a", "b"], "label": ["A", "B"]},
                               "answerKey": "E"}) + "\n")  # fmt: skip
    with pytest.raises(ValueError, match="answer 'E' is not one of the labels"):
        bm.load_benchmark("arc_challenge", arc)
    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"id": 1, "problem": "a", "answer": "1"}\n{"id": 1, "problem": "b", "answer": "2"}\n')
    with pytest.raises(ValueError, match="share the id 'aime2024/1'"):
        bm.load_benchmark("aime2024", dup)


# --------------------------------------------------------------------------------------------------
# Protocols, scoring, runner, results
# --------------------------------------------------------------------------------------------------


class ScriptedGenerator:
    """A generation backend that returns fixed completions (to test grading and aggregation)."""

    def __init__(self, texts):
        self.texts = texts

    def generate(self, prompts, plan, *, steering=None, seed=0, desc=""):
        assert len(prompts) == len(self.texts) and all(len(t) == plan.num_samples for t in self.texts)
        ids = [[list(range(len(t.split()))) for t in group] for group in self.texts]
        return Generations(self.texts, ids, [[] for _ in prompts], [[False] * len(g) for g in self.texts],
                           [[0] * len(g) for g in self.texts], 0.0)  # fmt: skip


def test_protocols_give_the_papers_sampling_plans():
    oger = protocols.get_protocol("oger")
    assert oger.plan("aime2024").num_samples == 32 and oger.plan("amc").num_samples == 32
    assert oger.plan("math500").num_samples == 1 and oger.plan("math500").temperature == 0.8
    assert oger.plan("math500").system_prompt.startswith("Your task is to follow a systematic")
    assert oger.plan("gpqa_diamond").system_prompt is None  # removed for OOD (App. B)
    ase = protocols.get_protocol("ase").plan("aime2025")
    assert (ase.num_samples, ase.temperature, ase.top_p, ase.top_k, ase.max_new_tokens) == (8, 0.6, 0.95, 0, 4096)
    demo = protocols.get_protocol("demo").plan("champ", max_new_tokens=64, temperature=None)
    assert (demo.num_samples, demo.temperature, demo.max_new_tokens) == (8, 0.8, 64)
    with pytest.raises(ValueError, match="unknown evaluation protocol"):
        protocols.get_protocol("paper")
    with pytest.raises(ValueError, match="use num_samples=1"):
        protocols.get_protocol("ase").plan("aime2024", temperature=0.0)
    with pytest.raises(ValueError, match="unknown sampling override"):
        protocols.get_protocol("ase").plan("aime2024", beams=4)


def test_build_messages():
    row = bm.load_benchmark("gpqa_diamond", DATA / FIXTURES["gpqa_diamond"])[0]
    oger = protocols.get_protocol("oger")
    messages = protocols.build_messages(row, oger.plan("gpqa_diamond"))
    assert [m["role"] for m in messages] == ["user"] and "letter of the correct option" in messages[0]["content"]
    math_row = bm.load_benchmark("math500", DATA / FIXTURES["math500"])[0]
    messages = protocols.build_messages(math_row, oger.plan("math500"))
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"].startswith("This is the problem: What is")
    own = {**math_row, "prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]}
    assert protocols.build_messages(own, oger.plan("math500")) == own["prompt"]  # CHAMP keeps its prompt


def test_grading_and_aggregation_on_scripted_completions(tmp_path):
    data = bm.load_benchmark("math500", DATA / FIXTURES["math500"])  # golds 5/6 and 4
    texts = [
        [r"\boxed{\frac{5}{6}}", r"\boxed{0.5}", r"\boxed{5/6}", "I cannot solve it."],  # 2 of 4 correct
        [r"x = \boxed{3}", r"\boxed{3}", r"\boxed{5}", r"\boxed{3}"],  # 0 of 4
    ]
    plan = protocols.get_protocol("demo").plan("math500", num_samples=4)
    records, summary = runner.evaluate_dataset(ScriptedGenerator(texts), data, plan)
    assert [r["correct"] for r in records] == [True, False, True, False, False, False, False, False]
    assert [r["extracted_answer"] for r in records[4:]] == ["3", "3", "5", "3"]
    assert summary["num_problems"] == 2 and summary["num_samples"] == 4
    assert summary["mean"] == pytest.approx((2 / 4 + 0) / 2)
    assert summary["pass_at_k"] == pytest.approx({"1": 0.25, "2": (5 / 6) / 2, "4": 0.5})
    assert summary["pass_at_n"] == pytest.approx(0.5)
    # disagreement over answered pairs, answers compared as the strings Math-Verify's parse returns (it writes 5/6
    # as \frac{5}{6} and 0.5 as \frac{1}{2}): problem 1 has 3 answers -> 2 of 3 pairs differ; problem 2 has 3, 3, 5, 3
    # -> 3 of 6 differ; pooled 5 / 9
    assert [r["extracted_answer"] for r in records[:4]] == [r"\frac{5}{6}", r"\frac{1}{2}", r"\frac{5}{6}", None]
    assert summary["answer_disagreement"] == pytest.approx(5 / 9)
    with pytest.raises(ValueError, match="empty results"):
        scoring.summarize_benchmark([])


def test_runner_end_to_end_on_a_tiny_model(smollm2_tokenizer, tmp_path):
    from trl_explore.rewards.math_verify_reward import verify_answer
    from trl_explore.testing import make_tiny_causal_lm

    model = make_tiny_causal_lm(smollm2_tokenizer).eval()
    records, summary = runner.evaluate(
        model, smollm2_tokenizer, ["math500", "arc_challenge"],
        benchmark_files={"math500": DATA / FIXTURES["math500"], "arc_challenge": DATA / FIXTURES["arc_challenge"]},
        protocol="demo", num_samples=3, max_new_tokens=6, batch_size=4, show_progress=False,
    )  # fmt: skip
    assert summary["backend"] == "transformers"
    assert len(records) == 2 * 2 * 3
    golds = {r["problem_id"]: r["answer"] for name in ("math500", "arc_challenge")
             for r in bm.load_benchmark(name, DATA / FIXTURES[name])}  # fmt: skip
    for record in records:  # verdicts recomputed independently
        assert 1 <= record["num_tokens"] <= 6 and record["temperature"] == 0.8
        gold = golds[record["problem_id"]]
        if record["benchmark"] == "math500":
            assert record["correct"] == verify_answer(record["completion"], gold)
        else:
            assert record["correct"] == (bm.extract_choice_letter(record["completion"], 4) == gold)
    for name in ("math500", "arc_challenge"):
        rows = [r for r in records if r["benchmark"] == name]
        per_problem = {}
        for r in rows:
            per_problem.setdefault(r["problem_id"], []).append(r["correct"])
        mean_of_means = np.mean([np.mean(v) for v in per_problem.values()])
        assert summary["benchmarks"][name]["mean"] == pytest.approx(mean_of_means)
    assert set(summary["averages"]) == {"math", "ood"}

    out = results.save_run(tmp_path / "run", records, summary, label="tiny")
    import pandas as pd

    assert len(pd.read_parquet(out / results.SAMPLES_PARQUET)) == len(records)
    lines = (out / results.SAMPLES_JSONL).read_text().splitlines()
    assert json.loads(lines[0]).keys() >= {"problem_id", "sample_index", "completion", "extracted_answer", "correct"}
    assert results.load_summary(out)["benchmarks"].keys() == {"math500", "arc_challenge"}
    again = [r for r in results.load_samples(out) if r["benchmark"] == "math500"]  # re-scored from the file
    assert scoring.summarize_benchmark(again)["mean"] == pytest.approx(summary["benchmarks"]["math500"]["mean"])
    table = (out / results.RESULTS_MD).read_text()
    assert "| Model | MATH-500 | ARC-C | Math Avg. | OOD Avg. |" in table and "| tiny |" in table


def test_empty_or_broken_results_files_give_clear_errors(tmp_path):
    (tmp_path / results.SAMPLES_JSONL).write_text("")
    with pytest.raises(ValueError, match="has no per-sample records"):
        results.load_samples(tmp_path)
    (tmp_path / results.SAMPLES_JSONL).write_text('{"benchmark": "amc", "problem_id": "amc/0"}\n')
    with pytest.raises(ValueError, match=r"record 0: missing field\(s\) \['sample_index', 'correct'\]"):
        results.load_samples(tmp_path)
    (tmp_path / results.SUMMARY_JSON).write_text("")
    with pytest.raises(ValueError, match="summary file is empty"):
        results.load_summary(tmp_path)
    (tmp_path / results.SUMMARY_JSON).write_text('{"benchmarks": {}}')
    with pytest.raises(ValueError, match="no benchmark results"):
        results.load_summary(tmp_path)
    with pytest.raises(FileNotFoundError, match="no evaluation summary"):
        results.load_summary(tmp_path / "missing")


def test_results_table_layouts_and_deltas(make_summary):
    base = make_summary("GRPO", {"aime2024": (0.1, 0.3), "math500": (0.5, 0.7), "gpqa_diamond": (0.25, 0.5)})
    ours = make_summary("OGER", {"aime2024": (0.2, 0.4), "math500": (0.55, 0.8), "gpqa_diamond": (0.25, 0.75)})
    table = results.results_table({"GRPO": base, "OGER": ours}, baseline="GRPO")
    lines = table.splitlines()
    assert lines[0] == "| Model | AIME 2024 | MATH-500 | GPQA-D | Math Avg. | OOD Avg. |"
    assert lines[2] == "| GRPO | 10.00 / 30.00 | 50.00 / 70.00 | 25.00 / 50.00 | 30.00 / 50.00 | 25.00 / 50.00 |"
    assert lines[3] == ("| OGER | 20.00 (+10.00) / 40.00 (+10.00) | 55.00 (+5.00) / 80.00 (+10.00) | "
                        "25.00 (+0.00) / 75.00 (+25.00) | 37.50 (+7.50) / 60.00 (+10.00) | "
                        "25.00 (+0.00) / 75.00 (+25.00) |")  # fmt: skip
    oger = results.results_table({"OGER": ours}, layout="oger").splitlines()
    assert oger[0] == "| Model | AIME 2024 | MATH-500 | GPQA-D | Math AVG | OOD |"
    assert oger[2] == "| OGER | 20.00 | 55.00 | 25.00 | 37.50 | 25.00 |"
    with pytest.raises(ValueError, match="baseline 'LUFFY' is not one of the runs"):
        results.results_table({"OGER": ours}, baseline="LUFFY")


def test_temperature_sweep_on_a_tiny_model(smollm2_tokenizer):
    from trl_explore.testing import make_tiny_causal_lm

    model = make_tiny_causal_lm(smollm2_tokenizer).eval()
    generator = TransformersGenerator(model, smollm2_tokenizer, batch_size=8, show_progress=False)
    datasets = {"aime2024": bm.load_benchmark("aime2024", DATA / FIXTURES["aime2024"], limit=1)}
    protocol = protocols.get_protocol("demo")
    records, sweep = sweeps.temperature_sweep(generator, datasets, protocol, [0.5, 1.0], k=2, num_samples=2,
                                              max_new_tokens=3)  # fmt: skip
    assert sweep["temperatures"] == [0.5, 1.0] and len(sweep["average"]) == 2 and sweep["k"] == 2
    assert sorted({r["temperature"] for r in records}) == [0.5, 1.0]
    with pytest.raises(ValueError, match="temperatures must be > 0"):
        sweeps.temperature_sweep(generator, datasets, protocol, [0.0])


# --------------------------------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------------------------------


def _write_trainer_state(folder: pathlib.Path, history: list[dict]) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": len(history), "log_history": history}))
    return folder


def test_load_log_history_merges_steps_and_finds_checkpoints(tmp_path):
    history = [{"step": 1, "entropy": 1.5, "reward": 0.1}, {"step": 1, "eval_reward": 0.3},
               {"step": 2, "entropy": 1.25, "reward": 0.2},
               {"step": 2, "train_runtime": 9.0, "train_loss": 0.1}]  # fmt: skip
    _write_trainer_state(tmp_path / "run" / "checkpoint-2", history)
    _write_trainer_state(tmp_path / "run" / "checkpoint-1", history[:1])
    frame = plots.load_log_history(tmp_path / "run")
    assert frame.index.tolist() == [1, 2]
    assert frame.loc[1, "eval_reward"] == 0.3 and frame.loc[2, "entropy"] == 1.25
    assert "train_runtime" not in frame.columns
    with pytest.raises(FileNotFoundError, match="no trainer_state.json"):
        plots.load_log_history(tmp_path)
    _write_trainer_state(tmp_path / "empty", [{"step": 5, "train_runtime": 1.0}])
    with pytest.raises(ValueError, match="no logged metrics"):
        plots.load_log_history(tmp_path / "empty")


def _oger_history(scale: float) -> list[dict]:
    return [
        {"step": s, "entropy": scale * (2 - 0.1 * s), "oger/reward_mean": 0.01 * s, "oger/reward_max": 0.05 * s,
         "oger/failed_ratio": 1 - 0.05 * s, "reward": 0.1 * s}
        for s in range(1, 6)
    ]  # fmt: skip


def _ase_history() -> list[dict]:
    return [
        {"step": s, "ase/cluster_share_0": 0.5, "ase/cluster_share_1": 0.3, "ase/cluster_share_2": 0.2,
         "ase/temporal_alignment": 0.7, "ase/inter_cluster_alignment": -0.45, "ase/answer_disagreement": 0.4,
         "reward": 0.2}
        for s in range(1, 4)
    ]  # fmt: skip


def _lines_per_panel(fig) -> dict[str, int]:
    return {ax.get_title().split(" (")[0]: len(ax.get_lines()) for ax in fig.axes if ax.get_visible()}


def test_training_dynamics_plots_have_the_expected_lines(tmp_path):
    runs = {"OGER": _oger_history(1.0), "w/o Refinement": _oger_history(0.8)}
    frames = {label: plots.load_log_history(_write_trainer_state(tmp_path / label.replace("/", "_"), h))
              for label, h in runs.items()}  # fmt: skip
    fig = plots.plot_training_dynamics(frames, plots.OGER_PANELS, tmp_path / "oger.png")
    assert _lines_per_panel(fig) == {"Policy entropy": 2, "Failed-response ratio": 2, "OGER exploration reward": 4,
                                     "Embedding divergence": 0, "Last-token entropy": 0, "Offline fraction": 0,
                                     "Training reward": 2, "Evaluation score": 0}  # empty panels kept, with a note
    assert (tmp_path / "oger.png").stat().st_size > 5_000
    ase = {"ASE": plots.load_log_history(_write_trainer_state(tmp_path / "ase", _ase_history()))}
    fig = plots.plot_training_dynamics(ase, plots.ASE_PANELS, tmp_path / "ase.png")
    assert _lines_per_panel(fig) == {"Cluster shares": 3, "Vector geometry": 2, "Contrast pairs": 0,
                                     "Steering vector norm": 0, "Answer disagreement": 1, "Per-route accuracy": 0,
                                     "Importance weights": 0, "Training reward": 1, "Response length": 0}
    with pytest.raises(ValueError, match="none of the panels"):
        plots.plot_training_dynamics(ase, [plots.OGER_PANELS[0]])


def test_pass_at_k_temperature_plots_and_plot_runs(tmp_path, make_summary, load_script):
    base = make_summary("GRPO", {"aime2024": (0.1, 0.3), "math500": (0.5, 0.7)})
    ours = make_summary("OGER", {"aime2024": (0.2, 0.4)})
    fig = plots.plot_pass_at_k({"GRPO": base, "OGER": ours}, tmp_path / "pk.png")
    assert _lines_per_panel(fig) == {"AIME 2024: pass@k": 2, "MATH-500: pass@k": 1}
    assert (tmp_path / "pk.png").stat().st_size > 5_000
    with pytest.raises(ValueError, match=r"no run evaluated \['amc'\]"):
        plots.plot_pass_at_k({"GRPO": base}, benchmarks=["amc"])
    sweep = {"k": 8, "temperatures": [0.1, 0.5, 1.0], "average": [0.2, 0.3, 0.25]}
    fig = plots.plot_temperature_sweep({"OGER": sweep, "GRPO": {**sweep, "average": [0.1, 0.2, 0.1]}},
                                       tmp_path / "t.png")
    assert len(fig.axes[0].get_lines()) == 2 and (tmp_path / "t.png").stat().st_size > 5_000

    train = _write_trainer_state(tmp_path / "train", _oger_history(1.0))
    evaluation = tmp_path / "eval"
    evaluation.mkdir()
    (evaluation / results.SUMMARY_JSON).write_text(json.dumps(base))
    (evaluation / "temperature_sweep.json").write_text(json.dumps(sweep))
    example = load_script("examples/plot.py", "plot_example")
    assert example.positional_to_flags([str(train), str(evaluation), "--smooth", "2"]) == [
        "--run_dirs", str(train), str(evaluation), "--smooth", "2"]  # fmt: skip
    written = example.main(example.PlotArguments(run_dirs=[str(train), str(evaluation)],
                                                 output_dir=str(tmp_path / "out")))
    assert sorted(p.name for p in written) == ["pass_at_k.png", "temperature_sweep.png", "training_dynamics.png",
                                               "training_dynamics_oger.png"]
    assert all(p.stat().st_size > 5_000 for p in written)
    with pytest.raises(ValueError, match="nothing to plot"):
        plots.plot_runs([tmp_path / "out"], tmp_path / "none")


def test_plots_read_well_for_small_and_all_zero_runs(tmp_path, make_summary):
    """All-zero pass@k on the full 0-100 scale; a single logged step as a marker on integer ticks; routes with
    equal values drawn with different markers and sizes; no internal document cited in titles."""
    zero = make_summary("demo", {"aime2024": (0.0, 0.0)})
    fig = plots.plot_pass_at_k({"demo": zero}, tmp_path / "pk.png")
    assert fig.axes[0].get_ylim() == (-3, 103) and list(fig.axes[0].get_yticks()) == [0, 20, 40, 60, 80, 100]

    one_step = [{"step": 4, "ase/route_0_accuracy": 0.0, "ase/route_1_accuracy": 0.0, "ase/route_2_accuracy": 0.0,
                 "ase/route_3_accuracy": 0.0, "reward": 0.0}]  # fmt: skip
    frame = plots.load_log_history(_write_trainer_state(tmp_path / "ase", one_step))
    fig = plots.plot_training_dynamics({"ASE": frame}, plots.ASE_PANELS, tmp_path / "ase.png")
    assert not any("SPEC" in ax.get_title() for ax in fig.axes)
    for ax in fig.axes:
        if not ax.get_visible() or not ax.get_lines():  # empty panels: a note, no axes ticks
            continue
        assert all(float(t).is_integer() for t in ax.get_xticks()), (ax.get_title(), ax.get_xticks())
        assert ax.get_xlim() == (3, 5)
        assert all(line.get_linestyle() == "None" and line.get_marker() for line in ax.get_lines())
    routes = next(ax for ax in fig.axes if ax.get_title().startswith("Per-route accuracy")).get_lines()
    assert len(routes) == 4
    assert len({line.get_marker() for line in routes}) == 4  # distinguishable where they coincide
    sizes = [line.get_markersize() for line in routes]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == 4  # nested: later markers smaller


def test_default_plot_dir_names_the_runs():
    assert plots.default_plot_dir(["outputs/a"]) == pathlib.Path("outputs/a/plots")
    assert plots.default_plot_dir(["outputs/a", "other/b"]) == pathlib.Path("outputs/plots/a+b")
    assert plots.default_plot_dir(["x/a", "y/b"], labels=["w/o Reward", "OGER"]) == pathlib.Path(
        "outputs/plots/w_o_Reward+OGER")


def test_evaluation_imports_no_method_package():
    """Shared code: no module of trl_explore/evaluation imports trl_explore.ase or trl_explore.oger (every import
    statement, function-level ones included, and the names its package loads lazily)."""
    import ast

    import trl_explore.evaluation
    from trl_explore.evaluation import runner as runner_module

    folder = pathlib.Path(trl_explore.evaluation.__file__).parent
    methods = ("trl_explore.ase", "trl_explore.oger")
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.startswith(methods) for n in names), f"{path.name}:{node.lineno} imports {names}"
    lazy = {**trl_explore.evaluation._LAZY, **runner_module._MOVED}
    assert not [m for m in lazy.values() if m.startswith(methods)]



def test_paired_bootstrap_interval_on_hand_computed_values():
    from trl_explore.evaluation.metrics import paired_bootstrap_interval

    # every problem gains exactly 0.25: the mean and both ends of the interval are 0.25
    assert paired_bootstrap_interval([0.0, 0.5, 0.25], [0.25, 0.75, 0.5], num_resamples=200) == pytest.approx(
        (0.25, 0.25, 0.25))
    # two problems, differences +1 and -1: resamples give means -1, 0, +1 with weights 1/4, 1/2, 1/4
    mean, low, high = paired_bootstrap_interval([0.0, 1.0], [1.0, 0.0], num_resamples=20_000, seed=1)
    assert mean == 0.0 and low == -1.0 and high == 1.0
    mean, low, high = paired_bootstrap_interval([0.0, 1.0], [1.0, 0.0], num_resamples=20_000, confidence=0.4)
    assert low == 0.0 and high == 0.0  # the middle 40% of a distribution with half its mass at 0
    with pytest.raises(ValueError, match="equal-length"):
        paired_bootstrap_interval([0.0], [0.0, 1.0])


def test_distinct_answer_fraction():
    from trl_explore.evaluation.metrics import distinct_answer_fraction

    assert distinct_answer_fraction(["4", "4", "5", "5", None, "7"], 2) == pytest.approx(1 / 3)
    assert distinct_answer_fraction(["4", "4", "4"], 3) == 0.0
    with pytest.raises(ValueError, match="positive multiple"):
        distinct_answer_fraction(["4"], 2)


def test_evaluate_and_plot_default_to_the_main_jobs_output_dir(load_script):
    """examples/evaluate.py's ``main`` and examples/plot.py's default run are the folder the main job writes: the
    ``output_dir`` of examples/train_oger.py's default recipe."""
    import yaml

    recipe = load_script("examples/train_oger.py", "train_oger_example").RECIPE
    output_dir = yaml.safe_load(recipe.read_text())["output_dir"]
    assert output_dir == "outputs/oger-smollm2-ladder"
    evaluate, plot = (load_script(f"examples/{name}.py", f"{name}_example") for name in ("evaluate", "plot"))
    assert evaluate.MAIN_JOB_RECIPE == plot.MAIN_JOB_RECIPE == recipe
    assert evaluate.MAIN_JOB_OUTPUT == plot.MAIN_JOB_OUTPUT == output_dir
    assert plot.PlotArguments().run_dirs == [output_dir]
    assert output_dir in evaluate.EvalArguments.__dataclass_fields__["model_name_or_path"].metadata["help"]
