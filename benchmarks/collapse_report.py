"""Report of the collapse-regime study (``benchmarks/dynamics.py --preset collapse``; issue 28 items 3-4): every
finished run's ``result.json`` and ``start_eval.json`` -> ``<out>/summary.json``, ``<out>/collapse.md`` and the
figures ``<out>/collapse_*.png``.

Sections:

* the collapse check of GRPO, per seed and pooled: the online-token entropy at step 1 against its minimum and the
  mean of the last :data:`LATE_STEPS` steps (collapsed: the late mean below a quarter of step 1's, or below 0.1
  nats), and held-out pass@k / mean@k at the end against the start, in each prompt format;
* method x metric (mean ± sd [min, max] over seeds, n): held-out at the start, middle and end in both formats,
  step metrics over the run and its second half (:func:`dynamics_report.run_scalars`);
* differences paired by training seed (:func:`~trl_explore.evaluation.metrics.seed_paired_bootstrap_interval`, only
  over the seeds both methods ran): every method against GRPO and against the LUFFY-style baseline, each control
  against its method;
* the step-1 values of every method side by side per seed: runs of one seed sample their first step identically
  only if the methods leave step-1 sampling alone (reported, not asserted);
* the papers' claims (:data:`CLAIMS`), each read off one paired difference by :func:`claim_reading`: as claimed,
  opposite, or no clear difference, provisional below the study's planned seeds (:data:`PLANNED_SEEDS`).
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
from dynamics_report import (
    CONTROLS_OF,
    _bank_figure,
    _fmt,
    _heldout_figure,
    _step_figure,
    heldout_entries,
    load_study,
    per_problem,
    run_scalars,
    series,
    spread,
    start_summary,
)

FORMATS = ("training", "neutral")
LATE_STEPS = 10
"""The collapse check's late window: the mean online-token entropy of the last 10 logged steps."""
COLLAPSE_FRACTION = 0.25
COLLAPSE_FLOOR = 0.1
"""Collapsed: the late mean entropy below ``COLLAPSE_FRACTION`` x step 1's, or below ``COLLAPSE_FLOOR`` nats."""
PASS_KS = (1, 4, 16)
CORE = ("grpo", "oger", "oger_noreward", "ase", "oger_ase")
SAMPLING_KEYS = ("dynamics/online_entropy", "completions/mean_length")
SAME_SAMPLING = ("grpo", "oger", "oger_noreward")
"""Methods whose step-1 samples of one seed are expected to match (OGER replaces rows after sampling)."""
SAME_ONLINE_ROWS = (("grpo",), ("oger", "oger_noreward"))
"""Groups of :data:`SAME_SAMPLING` whose step-1 online rows match too: OGER's online-token entropy leaves out the
row it replaced by an offline one, so it is compared with OGER's, never with GRPO's."""
SAME_CELL = {True: "yes", False: "no", None: "-"}
"""The step-1 table's last cell for :func:`step1_values`' ``same`` ("-": fewer than two to compare)."""
STEP_ROWS = (
    "dynamics/online_entropy (first)", "dynamics/online_entropy (run)", "dynamics/online_entropy (late)",
    "dynamics/failed_ratio (run)", "dynamics/failed_ratio (late)", "dynamics/mixed_groups (run)",
    "dynamics/mixed_groups (late)", "dynamics/answer_disagreement (run)", "dynamics/answer_disagreement (late)",
    "reward (run)", "reward (late)", "oger/reward_mean (run)", "oger/reward_mean (late)",
    "dynamics/teacher_token_prob (first)", "dynamics/teacher_token_prob (late)", "dynamics/online_length (late)",
    "ase/cluster_share_min (updates)", "ase/cluster_share_max (updates)", "ase/bank_updates", "seconds",
)
PAIRED_STEP_KEYS = ("dynamics/online_entropy (late)", "dynamics/failed_ratio (late)",
                    "dynamics/answer_disagreement (run)")
HELDOUT_CLAIM_KEYS = ("training end mean@", "training end pass@", "neutral end mean@", "neutral end pass@")
CLAIMS = (
    ("OGER keeps entropy above GRPO's", "OGER Fig. 2a", "grpo", "oger", ("dynamics/online_entropy (late)",), +1),
    ("OGER lowers the failed ratio against the LUFFY-style baseline", "OGER Fig. 2c", "oger_noreward", "oger",
     ("dynamics/failed_ratio (late)",), -1),
    ("OGER ends above GRPO held-out", "OGER Fig. 2b, 3", "grpo", "oger", HELDOUT_CLAIM_KEYS, +1),
    ("OGER ends above the LUFFY-style baseline held-out", "OGER Table 2, w/o reward", "oger_noreward", "oger",
     HELDOUT_CLAIM_KEYS, +1),
    ("ASE raises answer disagreement within groups", "ASE Fig. 4", "grpo", "ase",
     ("dynamics/answer_disagreement (run)",), +1),
    ("ASE keeps entropy above GRPO's", "ASE Fig. 4", "grpo", "ase", ("dynamics/online_entropy (late)",), +1),
    ("ASE ends above GRPO held-out", "ASE Fig. 3", "grpo", "ase", HELDOUT_CLAIM_KEYS, +1),
    ("random directions fall below learned ones", "ASE, random-directions control", "ase", "ase_random",
     ("dynamics/answer_disagreement (run)", "training end mean@", "neutral end mean@"), -1),
    ("entropy refinement helps OGER", "OGER Table 2, w/o refinement", "oger", "oger_norefine",
     ("training end mean@", "neutral end mean@"), -1),
)
"""The claims the collapse regime can test: ``(claim, source, base, method, metric prefixes, sign)``. Each metric is
read from ``method - base`` paired by seed; ``sign`` +1: the claim says the difference is positive, -1 negative.
A prefix ending in ``@`` matches the metric at the evaluation's k (``mean@16`` at the end of the study)."""
PLANNED_SEEDS = {**dict.fromkeys(CORE, 5), "oger_norefine": 3, "ase_random": 3}
"""Seeds the study plans per method (issue 28: >= 5 for the five core methods, >= 3 for the two controls); a claim
read off fewer is provisional."""


def heldout_scalars(summary: dict, prefix: str) -> dict[str, float | None]:
    """``{"<prefix> mean@k", "<prefix> pass@j" (j in PASS_KS up to k), greedy, distinct, disagreement}`` of one
    held-out summary (``k``: its samples per problem); None where the summary has none (no greedy pass)."""
    k = summary["num_samples"]
    out = {f"{prefix} mean@{k}": summary["mean"]}
    out.update({f"{prefix} pass@{j}": summary["pass_at_k"][str(j)] for j in PASS_KS if str(j) in summary["pass_at_k"]})
    out[f"{prefix} greedy"] = summary["greedy_accuracy"]
    out[f"{prefix} distinct"] = summary["distinct_answer_fraction"]
    out[f"{prefix} disagreement"] = summary["answer_disagreement"]
    return out


def collapse_scalars(run: dict, formats: tuple[str, ...]) -> dict[str, float | None]:
    """Per-run scalars: the step and bank metrics of :func:`dynamics_report.run_scalars` and the held-out scores of
    every evaluation (``"<format> mid|end <metric>"``)."""
    out = {k: v for k, v in run_scalars(run).items() if not k.startswith("heldout ")}
    for prompt_format in formats:
        for label, entry in heldout_entries(run, prompt_format).items():
            out.update(heldout_scalars(entry["summary"], f"{prompt_format} {'end' if label == 'end' else 'mid'}"))
    return out


def entropy_check(run: dict, late_steps: int = LATE_STEPS) -> dict:
    """The online-token entropy of one run: step 1 (the first logged step), the minimum (and its step), the mean of
    the last ``late_steps`` steps, the threshold ``max(COLLAPSE_FRACTION * step 1, COLLAPSE_FLOOR)`` and whether the
    late mean (``collapsed``) and the minimum (``min_below``) fall under it. Empty when the run logged no entropy."""
    steps, values = series(run, "dynamics/online_entropy")
    if not values:
        return {}
    threshold = max(COLLAPSE_FRACTION * values[0], COLLAPSE_FLOOR)
    late = float(np.mean(values[-late_steps:]))
    lowest = int(np.argmin(values))
    return {"step1": values[0], "min": values[lowest], "min_step": steps[lowest], "late_mean": late,
            "late_steps": min(late_steps, len(values)), "threshold": threshold, "collapsed": late < threshold,
            "min_below": values[lowest] < threshold}


def _start_run(start: dict) -> dict:
    """``start_eval.json`` seen as a run with one evaluation, ``"start"``, per format (for :func:`per_problem`)."""
    by_format = start.get("by_format") or {"training": {"summary": start["summary"], "result": start["result"]}}
    return {"method": "start", "seed": None, "heldout_by_format": {f: {"start": e} for f, e in by_format.items()}}


def collapse_check(runs: list[dict], start: dict | None, formats: tuple[str, ...]) -> dict:
    """The collapse check of one method's runs (GRPO's): per seed the entropy check and the end's held-out mean@k and
    pass@k against the start's; pooled the mean over seeds, the collapsed seeds and the end-minus-start difference
    with an interval over seeds and problems (:func:`seed_paired_bootstrap_interval`, the start repeated per seed)."""
    from trl_explore.evaluation.metrics import seed_paired_bootstrap_interval

    per_seed = {}
    for run in sorted(runs, key=lambda r: r["seed"]):
        entry = {"entropy": entropy_check(run)}
        for prompt_format in formats:
            end = heldout_entries(run, prompt_format)["end"]["summary"]
            k = end["num_samples"]
            scores = {f"end mean@{k}": end["mean"], f"end pass@{k}": end["pass_at_k"][str(k)]}
            if start:
                first = start_summary(start, prompt_format)
                if first["num_samples"] == k:
                    scores.update({f"start mean@{k}": first["mean"], f"start pass@{k}": first["pass_at_k"][str(k)]})
            entry[prompt_format] = scores
        per_seed[run["seed"]] = entry
    checks = [e["entropy"] for e in per_seed.values() if e["entropy"]]
    pooled: dict = {}
    if checks:
        pooled["entropy"] = {key: float(np.mean([c[key] for c in checks])) for key in ("step1", "min", "late_mean")}
        pooled["entropy"]["threshold"] = max(COLLAPSE_FRACTION * pooled["entropy"]["step1"], COLLAPSE_FLOOR)
        pooled["entropy"]["collapsed"] = pooled["entropy"]["late_mean"] < pooled["entropy"]["threshold"]
        pooled["collapsed_seeds"] = [s for s, e in per_seed.items() if e["entropy"].get("collapsed")]
        pooled["seeds"] = len(checks)
    for prompt_format in formats:
        keys = dict.fromkeys(k for e in per_seed.values() for k in e[prompt_format])
        pooled[prompt_format] = {k: float(np.mean([e[prompt_format][k] for e in per_seed.values()])) for k in keys}
        if start and any(k.startswith("start ") for k in keys):
            k = next(iter(keys)).split("@")[1]
            for what, name in (("mean", f"mean@{k}"), ("pass", f"pass@{k}")):
                first = per_problem(_start_run(start), "start", what, prompt_format)
                ends = np.stack([per_problem(r, "end", what, prompt_format) for r in runs])
                pooled[prompt_format][f"end - start {name}"] = seed_paired_bootstrap_interval(
                    np.tile(first, (len(runs), 1)), ends)
    return {"per_seed": per_seed, "pooled": pooled}


def paired_difference(base: dict[int, dict], other: dict[int, dict], scalars_base: dict[int, dict],
                      scalars_other: dict[int, dict], formats: tuple[str, ...]) -> dict:
    """``other - base`` over the seeds both ran (``{seed: run}``), paired by seed: the end's held-out mean@k, pass@k
    and greedy per problem (seeds x problems) in every format, and per-run step scalars (:data:`PAIRED_STEP_KEYS`).
    ``{"seeds": [...], "metrics": {name: (difference, low, high)}}``; no metrics without a shared seed."""
    from trl_explore.evaluation.metrics import seed_paired_bootstrap_interval

    seeds = sorted(set(base) & set(other))
    out: dict = {"seeds": seeds, "metrics": {}}
    if not seeds:
        return out
    for prompt_format in formats:
        ends = [heldout_entries(runs[s], prompt_format)["end"]["summary"] for runs in (base, other) for s in seeds]
        k = ends[0]["num_samples"]
        if any(e["num_samples"] != k for e in ends):
            continue  # different sample counts: pass@k of different k
        for what, name in (("mean", f"mean@{k}"), ("pass", f"pass@{k}"), ("greedy", "greedy")):
            if what == "greedy" and any(e["greedy_accuracy"] is None for e in ends):
                continue
            a, b = (np.stack([per_problem(runs[s], "end", what, prompt_format) for s in seeds])
                    for runs in (base, other))
            out["metrics"][f"{prompt_format} end {name}"] = seed_paired_bootstrap_interval(a, b)
    for key in PAIRED_STEP_KEYS:
        if all(key in scalars_base[s] and key in scalars_other[s] for s in seeds):
            out["metrics"][key] = seed_paired_bootstrap_interval([scalars_base[s][key] for s in seeds],
                                                                 [scalars_other[s][key] for s in seeds])
    return out


def study_formats(runs: list[dict]) -> tuple[str, ...]:
    """The prompt formats (of :data:`FORMATS`) every run was evaluated in."""
    return tuple(f for f in FORMATS if all(f in (r.get("heldout_by_format") or {"training": 0}) for r in runs))


def metric_table(scalars: dict[str, dict[int, dict]], start: dict | None, formats: tuple[str, ...]) -> dict:
    """``{method: {metric: spread over seeds}}`` from per-run ``scalars`` (``{method: {seed: {metric: value}}}``),
    and ``"start"``: the initial policy's held-out scores in each format (one value each)."""
    table = {m: {key: spread([s.get(key) for s in runs.values()])
                 for key in dict.fromkeys(k for s in runs.values() for k in s)} for m, runs in scalars.items()}
    table["start"] = {}
    for prompt_format in formats if start else ():
        first = heldout_scalars(start_summary(start, prompt_format), f"{prompt_format} start")
        table["start"].update({k: spread([v]) for k, v in first.items()})
    return table


def paired_comparisons(seeded: dict[str, dict[int, dict]], scalars: dict[str, dict[int, dict]], pairs,
                       formats: tuple[str, ...]) -> dict[str, dict]:
    """``{base: {method: paired_difference(...)}}`` for each ``(base, method)`` of ``pairs``."""
    comparisons: dict[str, dict] = {}
    for b, m in pairs:
        comparisons.setdefault(b, {})[m] = paired_difference(seeded[b], seeded[m], scalars[b], scalars[m], formats)
    return comparisons


def comparison_pairs(order: list[str]) -> list[tuple[str, str]]:
    """``(base, method)``: every method against GRPO and against the LUFFY-style baseline, controls against their
    method (:data:`dynamics_report.CONTROLS_OF`), among the methods that ran."""
    pairs = [(base, m) for base in ("grpo", "oger_noreward") if base in order for m in order if m != base]
    return pairs + [(base, c) for base, controls in CONTROLS_OF.items() if base in order
                    for c in controls if c in order]


def step1_values(by_method: dict[str, list[dict]]) -> dict[int, dict]:
    """``{seed: {method: {key: value at step 1}}, "same": ...}``: the first step's :data:`SAMPLING_KEYS` of every
    run; ``same`` is True when the :data:`SAME_SAMPLING` runs of the seed log equal step-1 lengths (1e-6; the
    rollout before OGER's replacement) and equal online-token entropies within each :data:`SAME_ONLINE_ROWS` group,
    ``None`` while fewer than two of them have run (nothing to compare yet)."""
    out: dict[int, dict] = {}
    for m, runs in by_method.items():
        for run in runs:
            values = {}
            for key in SAMPLING_KEYS:
                steps, logged = series(run, key)
                values[key] = next((v for s, v in zip(steps, logged) if s == 1), None)
            out.setdefault(run["seed"], {"methods": {}})["methods"][m] = values
    for entry in out.values():
        def equal(runs: list[dict], key: str) -> bool:
            return all(v[key] is not None and runs[0][key] is not None and abs(v[key] - runs[0][key]) <= 1e-6
                       for v in runs)

        trio = [entry["methods"][m] for m in SAME_SAMPLING if m in entry["methods"]]
        groups = [[entry["methods"][m] for m in group if m in entry["methods"]] for group in SAME_ONLINE_ROWS]
        entry["same"] = None if len(trio) < 2 else (equal(trio, "completions/mean_length")
                                                    and all(equal(g, "dynamics/online_entropy") for g in groups if g))
    return dict(sorted(out.items()))


def code_versions(by_method: dict[str, list[dict]]) -> dict[str, list[str]]:
    """``{commit (12 digits, "+changes" kept): ["grpo s0", ...]}``: the code each run ran (``result.json``'s
    ``code``; "unknown" when it was not recorded), so a reader can check that a study's runs share it."""
    versions: dict[str, list[str]] = {}
    for method, runs in by_method.items():
        for run in sorted(runs, key=lambda r: r["seed"]):
            code = run.get("code") or "unknown"
            commit, _, changes = code.partition("+")
            key = commit[:12] + (f"+{changes}" if changes else "")
            versions.setdefault(key, []).append(f"{method} s{run['seed']}")
    return versions


def claim_reading(entry: tuple[float, float, float], sign: int) -> str:
    """The plain reading of one paired difference ``(d, low, high)`` against a claim of ``sign`` (+1: method above
    base; -1: below): ``"as claimed"`` when the 95% interval lies wholly on the claimed side of 0, ``"opposite"``
    when wholly on the other, else ``"no clear difference"`` (an interval touching 0 is not clear).

    Raises:
        ValueError: ``sign`` not +1 or -1.
    """
    if sign not in (1, -1):
        raise ValueError(f"sign must be +1 or -1, got {sign!r}")
    _, low, high = (sign * x for x in entry)
    low, high = min(low, high), max(low, high)
    return "as claimed" if low > 0 else "opposite" if high < 0 else "no clear difference"


def claim_verdicts(comparisons: dict, claims=CLAIMS, planned: dict | None = None) -> list[dict]:
    """One row per claim and metric: ``{claim, source, base, method, metric, seeds, difference, reading,
    provisional}``, read from ``comparisons[base][method]`` (:func:`paired_difference`) by :func:`claim_reading`;
    ``provisional`` while the seeds both ran are fewer than both methods' planned ones (:data:`PLANNED_SEEDS`); a step
    metric (:data:`PAIRED_STEP_KEYS`, one number per run) of a single shared seed reads "one seed, no interval".
    Claims whose methods never shared a seed, and metrics not measured, are left out."""
    planned = PLANNED_SEEDS if planned is None else planned
    rows = []
    for claim, source, base, method, prefixes, sign in claims:
        pair = comparisons.get(base, {}).get(method)
        if not pair or not pair["seeds"]:
            continue
        for prefix in prefixes:
            metric = next((k for k in pair["metrics"] if k == prefix or (prefix.endswith("@") and
                                                                          k.startswith(prefix))), None)
            if metric is None:
                continue
            entry = pair["metrics"][metric]
            need = min(planned.get(base, 1), planned.get(method, 1))
            one_run = metric in PAIRED_STEP_KEYS and len(pair["seeds"]) < 2  # a per-run scalar: no spread to read
            rows.append({"claim": claim, "source": source, "base": base, "method": method, "metric": metric,
                         "seeds": list(pair["seeds"]), "difference": list(entry),
                         "reading": "one seed, no interval" if one_run else claim_reading(entry, sign),
                         "provisional": len(pair["seeds"]) < need})
    return rows


def _num(x, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _interval(entry) -> str:
    d, lo, hi = entry
    return f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def markdown(summary: dict, methods: dict, order: list[str], formats: tuple[str, ...]) -> list[str]:
    """The lines of ``collapse.md``."""
    settings = summary["settings"]
    lines = ["# The collapse-regime study (benchmarks/dynamics.py --preset collapse)", "",
             "Settings: " + ", ".join(f"{key}={value}" for key, value in settings.items()), "",
             f"Held-out formats: {', '.join(formats)}; \"mid\" after step {settings['mid_step']}, \"end\" after step "
             f"{settings['max_steps']}; start: the initial policy (every run).", "",
             "Code (the commit each run ran): " + "; ".join(
                 f"{commit}: {', '.join(runs)}" for commit, runs in summary.get("code", {}).items()), "",
             "## Does GRPO collapse?", "",
             f"Online-token entropy (nats): step 1, the minimum (step), the mean of the last {LATE_STEPS} steps; "
             f"collapsed: the late mean below max({COLLAPSE_FRACTION} x step 1, {COLLAPSE_FLOOR}). Held-out: k = the "
             "end's and the start's (the initial policy's) samples per problem. Pooled: the mean over seeds.", ""]
    check = summary["collapse_check"]
    if not check:
        lines += ["No GRPO run.", ""]
    else:
        heads = [(f, k) for f in formats for k in dict.fromkeys(k for e in check["per_seed"].values() for k in e[f])]
        lines += ["| seed | step 1 | min (step) | late mean | threshold | collapsed | " +
                  " | ".join(f"{f} {k}" for f, k in heads) + " |", "|---|" + "---|" * (5 + len(heads))]
        for seed, e in check["per_seed"].items():
            h = e["entropy"]
            cells = [_num(e[f].get(k)) for f, k in heads]
            lines.append(f"| {seed} | {_num(h.get('step1'))} | {_num(h.get('min'))} ({h.get('min_step')}) | "
                         f"{_num(h.get('late_mean'))} | {_num(h.get('threshold'))} | "
                         f"{'yes' if h.get('collapsed') else 'no'} | " + " | ".join(cells) + " |")
        p = check["pooled"]
        if "entropy" in p:
            h = p["entropy"]
            lines.append(f"| pooled | {_num(h['step1'])} | {_num(h['min'])} | {_num(h['late_mean'])} | "
                         f"{_num(h['threshold'])} | {len(p['collapsed_seeds'])} of {p['seeds']} | " + " | ".join(
                             _num(p[f].get(k)) for f, k in heads) + " |")
        lines.append("")
        for f in formats:
            for name, entry in p[f].items():
                if name.startswith("end - start"):
                    lines.append(f"- {f} format, {name} (seeds x problems, 95% interval): {_interval(entry)}")
        lines.append("")
    columns = ["start", *order]
    names = {"start": "start (initial policy)", **{m: f"{methods[m][0]} (n={len(summary['seeds'][m])})"
                                                  for m in order}}
    lines += ["## Method x metric", "", "Cells: mean ± sd [min, max] over seeds. \"run\": mean over all steps; "
              "\"late\": over the second half; \"(updates)\": mean over ASE bank updates.", "",
              "| metric | " + " | ".join(names[c] for c in columns) + " |", "|---|" + "---|" * len(columns)]
    table = summary["table"]
    rows = [key for f in formats for tag in ("start", "mid", "end")
            for key in dict.fromkeys(k for c in columns for k in table[c] if k.startswith(f"{f} {tag} "))]
    for key in rows + [k for k in STEP_ROWS if any(k in table[c] for c in columns)]:
        digits = 1 if key == "seconds" or "length" in key else 3
        cells = [_num(table["start"][key]["mean"]) if key in table["start"] else "-"]
        lines.append(f"| {key} | " + " | ".join(cells + [_fmt(table[m].get(key, {}), digits) for m in order]) + " |")
    lines += ["", "## Paired by seed", "",
              "Method minus base over the seeds both ran, 95% bootstrap interval resampling seeds (shared) and "
              "problems (shared); step metrics over seeds only.", ""]
    for base, rows in summary["comparisons"].items():
        apart = [methods[m][0] for m, c in rows.items() if not c["seeds"]]
        rows = {m: c for m, c in rows.items() if c["seeds"]}
        if not rows:
            continue
        keys = list(dict.fromkeys(k for c in rows.values() for k in c["metrics"]))
        lines += [f"Against {methods[base][0]}:", "", "| method | seeds | " + " | ".join(keys) + " |",
                  "|---|---|" + "---|" * len(keys)]
        for m, c in rows.items():
            lines.append(f"| {methods[m][0]} | {','.join(map(str, c['seeds']))} | " + " | ".join(
                _interval(c["metrics"][k]) if k in c["metrics"] else "-" for k in keys) + " |")
        lines += [f"\nNo seed shared with {', '.join(apart)}." if apart else "", ""]
    lines += ["## The papers' claims", "",
              "Each row reads one paired difference (method minus base, 95% interval as above): \"as claimed\" when "
              "the interval lies wholly on the claimed side of zero, \"opposite\" when wholly on the other, else "
              "\"no clear difference\"; provisional while fewer seeds than planned "
              f"({', '.join(f'{methods[m][0]} {n}' for m, n in PLANNED_SEEDS.items() if m in methods)}) are in. "
              "Intervals are per metric, not corrected for the number of rows.", "",
              "| claim (source) | method - base | metric | seeds | difference [95%] | reading |",
              "|---|---|---|---|---|---|"]
    for row in summary["claims"]:
        lines.append(f"| {row['claim']} ({row['source']}) | {methods[row['method']][0]} - {methods[row['base']][0]} | "
                     f"{row['metric']} | {','.join(map(str, row['seeds']))} | {_interval(row['difference'])} | "
                     f"{row['reading']}{' (provisional)' if row['provisional'] else ''} |")
    balance = [(m, summary["table"][m]) for m in order if "ase/cluster_share_min (updates)" in summary["table"][m]]
    if balance:
        lines += ["", "ASE's clusters stay balanced (ASE Fig. 5): the smallest and largest cluster's share of the "
                  "contrast pairs, mean over seeds and bank updates:", ""]
        for m, t in balance:
            k = round(t["ase/clusters"]["mean"])
            lines.append(f"- {methods[m][0]}: {t['ase/cluster_share_min (updates)']['mean']:.3f} / "
                         f"{t['ase/cluster_share_max (updates)']['mean']:.3f} ({k} clusters: {1 / k:.3f} each if "
                         f"equal)")
    lines += ["", "## Step-1 sampling", "",
              f"Step-1 {' / '.join(SAMPLING_KEYS)} of every run; the same seed's {', '.join(SAME_SAMPLING)} runs "
              "log equal lengths only if they sampled step 1 identically (the rollout, before OGER's replacement); "
              "OGER's online-token entropy leaves out the replaced row, so it is compared with OGER's (w/o reward), "
              "not with GRPO's.", "",
              "| seed | " + " | ".join(methods[m][0] for m in order) + f" | equal ({', '.join(SAME_SAMPLING)}) |",
              "|---|" + "---|" * (len(order) + 1)]
    for seed, entry in summary["step1"].items():
        cells = [" / ".join(_num(entry["methods"][m][k], 2 if "length" in k else 4) for k in SAMPLING_KEYS)
                 if m in entry["methods"]
                 else "-" for m in order]
        lines.append(f"| {seed} | " + " | ".join(cells) + f" | {SAME_CELL[entry['same']]} |")
    return lines


def _entropy_figure(path, runs: list[dict], check: dict, label: str) -> None:
    """GRPO's online-token entropy per seed with each seed's collapse threshold (dotted)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, run in enumerate(sorted(runs, key=lambda r: r["seed"])):
        steps, values = series(run, "dynamics/online_entropy")
        h = check["per_seed"][run["seed"]]["entropy"]
        if not steps:
            continue
        state = "collapsed" if h["collapsed"] else "not collapsed"
        ax.plot(steps, values, marker=".", color=f"C{i}", label=f"seed {run['seed']} ({state})")
        ax.axhline(h["threshold"], color=f"C{i}", ls=":", lw=1)
    ax.set_title(f"{label}: online-token entropy per seed (dotted: the seed's collapse threshold)", fontsize=10)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("entropy (nats)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_all(out: pathlib.Path, by_method: dict, methods: dict, order: list[str], start: dict | None,
             formats: tuple[str, ...], check: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    core = [m for m in CORE if m in by_method]
    panels = [("dynamics/online_entropy", "policy entropy, online tokens", "OGER Fig. 2a"),
              ("dynamics/failed_ratio", "failed-response ratio", "OGER Fig. 2c"),
              ("dynamics/mixed_groups", "groups mixing right and wrong", ""),
              ("dynamics/answer_disagreement", "answer disagreement in groups", "ASE Fig. 4"),
              ("oger/reward_mean", "OGER reward, mean", "OGER Fig. 5"),
              ("dynamics/teacher_token_prob", "teacher-token probability", "")]
    _step_figure(out / "collapse_training.png", by_method, methods, core, panels, "Collapse regime: training dynamics")
    controls = [m for base, of in CONTROLS_OF.items() for m in (base, *of) if m in by_method]
    if any(m in by_method for of in CONTROLS_OF.values() for m in of):
        _step_figure(out / "collapse_controls.png", by_method, methods, controls, panels, "Collapse regime: controls")
    for prompt_format in formats:
        _heldout_figure(out / f"collapse_heldout_{prompt_format}.png", by_method, methods, core, start,
                        prompt_format, f"Held-out, {prompt_format} prompt format (k samples: "
                        f"{start_summary(start, prompt_format)['num_samples'] if start else '?'} at the start and end,"
                        f" fewer in the middle; band: min-max over seeds)")
    if "grpo" in by_method:
        _entropy_figure(out / "collapse_grpo_entropy.png", by_method["grpo"], check, methods["grpo"][0])
    _bank_figure(out / "collapse_ase_bank.png", by_method, methods)


def report(out: pathlib.Path, methods: dict) -> dict:
    """Write ``summary.json``, ``collapse.md`` and the ``collapse_*.png`` figures from the finished runs under
    ``out``, print the markdown; returns the summary (empty without a finished run)."""
    study = load_study(out, methods, "collapse")
    if study is None:
        return {}
    runs, start, by_method, order = study
    formats = study_formats(runs)
    scalars = {m: {r["seed"]: collapse_scalars(r, formats) for r in by_method[m]} for m in order}
    table = metric_table(scalars, start, formats)
    seeded = {m: {r["seed"]: r for r in by_method[m]} for m in order}
    comparisons = paired_comparisons(seeded, scalars, comparison_pairs(order), formats)
    check = collapse_check(by_method["grpo"], start, formats) if "grpo" in by_method else {}
    summary = {
        "settings": runs[0]["settings"], "formats": list(formats),
        "start": {f: start_summary(start, f) for f in formats} if start else None,
        "seeds": {m: sorted(seeded[m]) for m in order}, "collapse_check": check, "table": table,
        "comparisons": comparisons, "claims": claim_verdicts(comparisons),
        "step1": step1_values(by_method), "code": code_versions(by_method),
    }
    lines = markdown(summary, methods, order, formats)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=float))
    (out / "collapse.md").write_text("\n".join(lines) + "\n")
    plot_all(out, by_method, methods, order, start, formats, check)
    print("\n".join(lines))
    return summary
