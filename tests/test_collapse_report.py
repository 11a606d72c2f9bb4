"""benchmarks/collapse_report.py on synthetic runs (no model): the collapse check, differences paired by seed, the
step-1 sampling table and the figures, through ``dynamics.py --preset collapse --report-only``."""

import json
import pathlib
import sys

import pytest

from trl_explore.evaluation.heldout import HeldoutResult

ROOT = pathlib.Path(__file__).resolve().parents[1]
STEPS = 12
SETTINGS = {"levels": ["one_digit"], "max_steps": STEPS, "mid_step": 6, "eval_samples": 2, "end_eval_samples": 4,
            "eval_neutral_format": True}


def evaluation(counts, num_samples, prompt_format, greedy=(True, False, True, False)):
    """A held-out entry of 4 problems: ``counts[p]`` of ``num_samples`` samples correct (answer "7"), the others
    wrong with distinct answers."""
    correct = tuple(tuple(j < c for j in range(num_samples)) for c in counts)
    answers = tuple(tuple("7" if ok else f"w{j}" for j, ok in enumerate(row)) for row in correct)
    r = HeldoutResult(benchmark="ladder", split="test", levels=("one_digit",),
                      problem_ids=tuple(f"ladder:one_digit:{i}" for i in range(4)), temperature=1.0, correct=correct,
                      answers=answers, greedy_correct=tuple(greedy), greedy_answers=tuple("7" for _ in greedy),
                      mean_num_tokens=10.0, truncated_fraction=0.0, prompt_format=prompt_format)
    return {"summary": r.summary(), "result": r.to_dict()}


def write_run(out, method, seed, entropy, end_counts, first_length=20.0, oger=False, bank=False):
    """One synthetic ``result.json``: per-step logs with ``entropy(step)``, held-out at step 6 (2 samples) and the end
    (4 samples, ``end_counts`` correct per problem) in both formats."""
    log = []
    for step in range(1, STEPS + 1):
        entry = {"step": step, "dynamics/online_entropy": entropy(step), "dynamics/failed_ratio": 0.5,
                 "dynamics/mixed_groups": 0.75, "dynamics/answer_disagreement": 0.4 + 0.01 * seed,
                 "dynamics/teacher_token_prob": 0.3, "reward": 0.5, "completions/mean_length": first_length + step - 1}
        if oger:
            entry["oger/reward_mean"] = 0.1
        if bank:
            entry["ase/temporal_alignment"] = 0.5
        log.append(entry)
    log.append({"train_runtime": 1.0, "step": STEPS})
    by_format = {f: {"step 6": evaluation([1, 1, 2, 0], 2, f), "end": evaluation(end_counts, 4, f)}
                 for f in ("training", "neutral")}
    banks = [{"global_step": s, "skipped": 0.0, "cluster_share/0": 0.2, "cluster_share/1": 0.8} for s in (0, 4, 8)]
    result = {"method": method, "label": method, "seed": seed, "settings": SETTINGS, "log_history": log,
              "heldout": by_format["training"], "heldout_by_format": by_format,
              "bank_diagnostics": banks if bank else None, "seconds": 5.0}
    folder = out / "runs" / method / f"seed{seed}"
    folder.mkdir(parents=True)
    (folder / "result.json").write_text(json.dumps(result))


def grpo_entropy(seed):
    return (lambda s: 1.0 if s == 1 else 0.05) if seed == 0 else (lambda s: 1.0 - 0.01 * s)


@pytest.fixture
def study(tmp_path):
    by_format = {f: evaluation([1, 1, 2, 2], 4, f) for f in ("training", "neutral")}
    (tmp_path / "start_eval.json").write_text(json.dumps({"key": {}, **by_format["training"], "by_format": by_format}))
    grpo_counts = {0: [0, 1, 2, 3], 1: [1, 0, 3, 2]}
    for seed in (0, 1):
        write_run(tmp_path, "grpo", seed, grpo_entropy(seed), grpo_counts[seed])
        # OGER: one more correct sample on every problem; a step-1 online-token entropy of its own (the replaced row
        # left out), seed 1 a longer step-1 length
        write_run(tmp_path, "oger", seed, lambda s: 1.2 if s == 1 else 0.8,
                  [c + 1 for c in grpo_counts[seed]], first_length=20.0 + seed, oger=True)
        write_run(tmp_path, "ase", seed, lambda s: 0.6, [2, 2, 2, 2], bank=True)
    write_run(tmp_path, "oger_noreward", 0, lambda s: 1.2 if s == 1 else 0.05, [1, 1, 1, 1], oger=True)  # seed 0
    write_run(tmp_path, "ase_random", 1, lambda s: 0.5, [2, 2, 2, 2], bank=True)  # seed 1 only
    return tmp_path


def test_collapse_report_values_and_figures(study, load_script, monkeypatch, capsys):
    monkeypatch.setattr(sys, "path", [str(ROOT / "benchmarks"), *sys.path])  # restored after the test
    dynamics = load_script("benchmarks/dynamics.py", "dynamics_script")
    dynamics.main(["--preset", "collapse", "--report-only", "--out", str(study)])
    summary = json.loads((study / "summary.json").read_text())
    assert summary["formats"] == ["training", "neutral"]
    assert summary["seeds"] == {"grpo": [0, 1], "oger": [0, 1], "oger_noreward": [0], "ase": [0, 1],
                                "ase_random": [1]}

    check = summary["collapse_check"]
    seed0, seed1 = check["per_seed"]["0"]["entropy"], check["per_seed"]["1"]["entropy"]
    # seed 0: 1.0 then 0.05 -> the last 10 steps average 0.05 < max(0.25 x 1.0, 0.1)
    assert seed0 == pytest.approx({"step1": 1.0, "min": 0.05, "min_step": 2, "late_mean": 0.05, "late_steps": 10,
                                   "threshold": 0.25, "collapsed": True, "min_below": True})
    # seed 1: 1 - 0.01 s: steps 3-12 average 0.925, the minimum 0.88 at step 12, threshold 0.2475
    assert seed1 == pytest.approx({"step1": 0.99, "min": 0.88, "min_step": 12, "late_mean": 0.925, "late_steps": 10,
                                   "threshold": 0.2475, "collapsed": False, "min_below": False})
    pooled = check["pooled"]
    assert pooled["collapsed_seeds"] == [0] and pooled["seeds"] == 2
    assert pooled["entropy"]["late_mean"] == pytest.approx((0.05 + 0.925) / 2) and not pooled["entropy"]["collapsed"]
    # end pass@4 (any correct): seed 0 [0,1,1,1], seed 1 [1,0,1,1] -> 0.75 both; the start's [1,1,1,1] -> 1.0
    assert check["per_seed"]["0"]["training"] == pytest.approx(
        {"end mean@4": 6 / 16, "end pass@4": 0.75, "start mean@4": 6 / 16, "start pass@4": 1.0})
    assert pooled["neutral"]["end - start pass@4"][0] == pytest.approx(-0.25)
    assert pooled["training"]["end - start mean@4"][0] == pytest.approx(0.0)

    diff = summary["comparisons"]["grpo"]["oger"]
    assert diff["seeds"] == [0, 1]
    # one more correct sample of 4 on every problem and seed: +0.25 everywhere, a degenerate interval
    assert diff["metrics"]["training end mean@4"] == pytest.approx([0.25, 0.25, 0.25])
    # pass@4 differences per problem: seed 0 [1,0,0,0], seed 1 [0,1,0,0] -> 2/8
    d, low, high = diff["metrics"]["neutral end pass@4"]
    assert d == pytest.approx(0.25) and 0.0 <= low < d < high <= 1.0
    # late (steps 7-12) entropy: OGER 0.8; GRPO 0.05 (seed 0), 1 - 0.095 (seed 1) -> (0.75 - 0.105) / 2
    assert diff["metrics"]["dynamics/online_entropy (late)"][0] == pytest.approx((0.75 - 0.105) / 2)
    assert diff["metrics"]["dynamics/answer_disagreement (run)"] == pytest.approx([0.0, 0.0, 0.0])
    assert summary["comparisons"]["grpo"]["oger_noreward"]["seeds"] == [0]  # only the seeds both ran
    assert summary["comparisons"]["oger_noreward"]["oger"]["seeds"] == [0]
    assert summary["comparisons"]["ase"]["ase_random"]["seeds"] == [1]

    claims = {(c["claim"], c["metric"]): c for c in summary["claims"]}
    held = claims[("OGER ends above GRPO held-out", "training end mean@4")]
    assert held["seeds"] == [0, 1] and held["reading"] == "as claimed" and held["provisional"]  # 2 of 5 seeds
    # late entropy OGER - GRPO per seed: 0.8 - 0.05 = +0.75 and 0.8 - 0.905 = -0.105: the seeds disagree
    assert claims[("OGER keeps entropy above GRPO's", "dynamics/online_entropy (late)")]["reading"] == (
        "no clear difference")
    # ASE, random directions shares only seed 1 with ASE-GRPO: its per-run disagreement has no interval
    assert claims[("random directions fall below learned ones", "dynamics/answer_disagreement (run)")]["reading"] == (
        "one seed, no interval")
    assert not any(c["method"] == "oger_norefine" for c in summary["claims"])  # never ran

    table = summary["table"]
    assert table["grpo"]["training end mean@4"]["values"] == pytest.approx([6 / 16, 6 / 16])
    assert table["grpo"]["neutral mid pass@1"]["mean"] == pytest.approx(0.5)  # [1,1,2,0] of 2 samples
    assert table["start"]["training start pass@4"]["values"] == [1.0]
    assert table["ase"]["ase/cluster_share_min (updates)"]["mean"] == pytest.approx(0.2)

    step1 = summary["step1"]
    assert step1["0"]["same"] is True  # equal lengths; OGER's entropy (1.2) equals OGER w/o reward's, not GRPO's
    assert step1["1"]["same"] is False  # OGER's step-1 length differs
    assert step1["1"]["methods"]["oger"]["completions/mean_length"] == 21.0

    text = (study / "collapse.md").read_text()
    assert "| 0 | 1.000 | 0.050 (2) | 0.050 | 0.250 | yes |" in text
    assert "| pooled |" in text and "1 of 2" in text
    assert "No seed shared with ASE, random directions." in text  # against the LUFFY-style baseline (seed 0 only)
    assert "| training start pass@4 | 1.000 | - |" in text  # the start: one policy, one number
    assert ("| OGER ends above GRPO held-out (OGER Fig. 2b, 3) | OGER - GRPO | training end mean@4 | 0,1 | "
            "+0.250 [+0.250, +0.250] | as claimed (provisional) |") in text
    assert "- ASE-GRPO: 0.200 / 0.800 (2 clusters: 0.500 each if equal)" in text
    assert text in capsys.readouterr().out + "\n"
    for name in ("training", "controls", "heldout_training", "heldout_neutral", "grpo_entropy", "ase_bank"):
        assert (study / f"collapse_{name}.png").stat().st_size > 10_000
    assert not (study / "dynamics.md").exists()


def test_step1_check_compares_online_entropy_within_oger_only(load_script, monkeypatch):
    monkeypatch.setattr(sys, "path", [str(ROOT / "benchmarks"), *sys.path])
    report = load_script("benchmarks/collapse_report.py", "collapse_report_script")

    def run(method, entropy, length=30.0):
        return {"seed": 0, "log_history": [{"step": 1, "dynamics/online_entropy": entropy,
                                            "completions/mean_length": length}]}

    same = report.step1_values({"grpo": [run("grpo", 1.39)], "oger": [run("oger", 1.52)],
                                "oger_noreward": [run("oger_noreward", 1.52)]})
    assert same[0]["same"] is True
    apart = report.step1_values({"grpo": [run("grpo", 1.39)], "oger": [run("oger", 1.52)],
                                 "oger_noreward": [run("oger_noreward", 1.50)]})
    assert apart[0]["same"] is False  # the two OGER runs replaced different rows or sampled differently
    longer = report.step1_values({"grpo": [run("grpo", 1.39)], "oger": [run("oger", 1.52, length=31.0)]})
    assert longer[0]["same"] is False  # the rollouts differ
    alone = report.step1_values({"grpo": [run("grpo", 1.39)], "ase": [run("ase", 1.39)]})
    assert alone[0]["same"] is None  # one of the three has run: nothing to compare yet, not a mismatch


def test_claim_reading_by_the_interval_side(load_script, monkeypatch):
    monkeypatch.setattr(sys, "path", [str(ROOT / "benchmarks"), *sys.path])
    report = load_script("benchmarks/collapse_report.py", "collapse_report_script")
    assert report.claim_reading((0.10, 0.02, 0.20), +1) == "as claimed"
    assert report.claim_reading((0.10, 0.02, 0.20), -1) == "opposite"  # a claim of "lower", measured higher
    assert report.claim_reading((-0.10, -0.20, -0.02), -1) == "as claimed"
    assert report.claim_reading((0.06, 0.0, 0.19), +1) == "no clear difference"  # touches zero
    assert report.claim_reading((0.0, 0.0, 0.0), +1) == "no clear difference"
    with pytest.raises(ValueError, match="sign"):
        report.claim_reading((0.1, 0.0, 0.2), 0)
    comparisons = {"grpo": {"oger": {"seeds": [0, 1, 2, 3, 4], "metrics": {
        "training end mean@16": (0.05, 0.01, 0.09), "dynamics/online_entropy (late)": (-0.3, -0.5, -0.1)}}}}
    rows = report.claim_verdicts(comparisons)
    assert [(r["claim"], r["metric"], r["reading"], r["provisional"]) for r in rows] == [
        ("OGER keeps entropy above GRPO's", "dynamics/online_entropy (late)", "opposite", False),
        ("OGER ends above GRPO held-out", "training end mean@16", "as claimed", False)]


def test_code_versions_group_the_runs_by_the_commit_they_ran(load_script, monkeypatch):
    monkeypatch.setattr(sys, "path", [str(ROOT / "benchmarks"), *sys.path])
    report = load_script("benchmarks/collapse_report.py", "collapse_report_script")
    a, b = "4a7f798cbef86df07d405ebeb16ed0124eda6696", "b1823dec1cd299773a55632411979ff4e448650c"
    by_method = {"grpo": [{"seed": 1, "code": b}, {"seed": 0, "code": a}],
                 "oger": [{"seed": 0, "code": a + "+changes"}, {"seed": 1}]}
    assert report.code_versions(by_method) == {"b1823dec1cd2": ["grpo s1"], "4a7f798cbef8": ["grpo s0"],
                                               "4a7f798cbef8+changes": ["oger s0"], "unknown": ["oger s1"]}
