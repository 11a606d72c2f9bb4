"""Report of the guidance study (``benchmarks/dynamics.py --preset guidance``; issue 47, docs/reproduction.md): every
finished run's ``result.json`` and ``start_eval.json`` -> ``<out>/summary.json``, ``<out>/guidance.md`` and the figures
``<out>/guidance_*.png``.

Sections:

* the setting's criterion on the test split (written before the runs): GRPO's mean@k gain in the training format and
  its share of all-wrong groups over the second half of the steps;
* method x metric (mean ± sd [min, max] over seeds, n): held-out at the start, middle and end in both formats, and
  the step metrics (``collapse_report.collapse_scalars``);
* all-wrong groups per step: the share of groups whose every sample was wrong, at step 1 and over each half;
* never solved -> solved, per held-out problem: problems none of the start's k samples solved that at least one of
  the end's samples solves (:func:`never_to_solved`), and the reverse, per run;
* differences paired by training seed (95% bootstrap interval over seeds and problems): every method against GRPO,
  against the LUFFY-style baseline, and the pairs the claims read;
* the OGER paper's Table 1 ordering and the other claims (:data:`CLAIMS`), each read by
  ``collapse_report.claim_reading``: "as claimed" only when the interval lies wholly on the claimed side of zero.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
from collapse_report import (
    _interval,
    _num,
    claim_verdicts,
    code_versions,
    collapse_scalars,
    metric_table,
    paired_comparisons,
    study_formats,
)
from dynamics_report import (
    _colors,
    _fmt,
    _heldout_figure,
    _step_figure,
    heldout_entries,
    load_study,
    series,
    spread,
    start_summary,
)

CORE = ("sft", "grpo", "oger_noreward", "exgrpo", "oger", "oger_ase")
"""The OGER paper's Table 1 at this scale (SFT, GRPO, LUFFY-style, ExGRPO, OGER) and OGER + ASE."""
PLANNED_SEEDS = {**dict.fromkeys(CORE, 5), "ase": 3, "oger_norefine": 3, "dynamic": 3}
"""Seeds the study plans per method (issue 47); a claim read off fewer is provisional."""
HELDOUT = ("training end mean@", "training end pass@", "neutral end mean@", "neutral end pass@")
CLAIMS = (
    ("offline guidance (LUFFY-style) ends above GRPO", "OGER Table 1, Luffy", "grpo", "oger_noreward", HELDOUT, +1),
    ("OGER ends above GRPO", "OGER Table 1", "grpo", "oger", HELDOUT, +1),
    ("OGER's exploration reward adds to plain guidance", "OGER Tables 1-2", "oger_noreward", "oger", HELDOUT, +1),
    ("ExGRPO ends above GRPO", "OGER Table 1", "grpo", "exgrpo", HELDOUT, +1),
    ("the LUFFY-style baseline ends above ExGRPO", "OGER Table 1, 1.5B", "exgrpo", "oger_noreward", HELDOUT, +1),
    ("OGER ends above ExGRPO", "OGER Table 1", "exgrpo", "oger", HELDOUT, +1),
    ("OGER ends above SFT", "OGER Table 1", "sft", "oger", HELDOUT, +1),
    ("OGER + ASE's pass@16 ends above GRPO's", "the collapse study's one clear reading", "grpo", "oger_ase",
     ("training end pass@16", "neutral end pass@"), +1),
    ("entropy refinement helps OGER", "OGER Table 2, w/o refinement", "oger_norefine", "oger",
     ("training end mean@", "neutral end mean@"), +1),
    ("ASE-GRPO ends above GRPO", "ASE Fig. 3", "grpo", "ase", HELDOUT, +1),
    ("dynamic sampling ends above GRPO", "DAPO §3.2", "grpo", "dynamic", HELDOUT, +1),
)
"""``(claim, source, base, method, metric prefixes, sign)``, read from ``method - base`` paired by seed
(``collapse_report.claim_verdicts``). SFT against GRPO has no claimed sign (Table 1: -0.56 at 1.5B, +7.19 at 7B): it
is reported, not read."""
CRITERION_GAIN = 0.05
CRITERION_ALL_WRONG = 0.40
"""The setting's criterion (docs/reproduction.md, written before the runs): GRPO gains less than 0.05 mean@k with at
least 40% of its groups all wrong over the second half of the steps."""


def never_to_solved(start_correct, end_correct) -> dict[str, int]:
    """Per held-out problem, solved means at least one correct sample. ``start_correct`` ``[P, k0]`` and
    ``end_correct`` ``[P, k1]`` (bool, the same problems in the same order) -> ``{"never_at_start": problems no start
    sample solved, "never_to_solved": of those, the ones some end sample solves, "solved_to_never": problems solved
    at the start that no end sample solves, "problems": P}``.

    Raises:
        ValueError: the two evaluations hold different numbers of problems.
    """
    start, end = np.asarray(start_correct, dtype=bool), np.asarray(end_correct, dtype=bool)
    if start.shape[0] != end.shape[0]:
        raise ValueError(f"the start holds {start.shape[0]} problems, the end {end.shape[0]}")
    before, after = start.any(axis=1), end.any(axis=1)
    return {"never_at_start": int((~before).sum()), "never_to_solved": int((~before & after).sum()),
            "solved_to_never": int((before & ~after).sum()), "problems": int(start.shape[0])}


def _start_result(start: dict, prompt_format: str) -> dict:
    return start["by_format"][prompt_format]["result"] if "by_format" in start else start["result"]


def moved_problems(run: dict, start: dict, prompt_format: str) -> dict[str, int]:
    """:func:`never_to_solved` of one run's end against the shared start, in ``prompt_format``.

    Raises:
        ValueError: the run's end evaluated other problems than the start (another order or set).
    """
    first, end = _start_result(start, prompt_format), heldout_entries(run, prompt_format)["end"]["result"]
    if first["problem_ids"] != end["problem_ids"]:
        raise ValueError(f"{run['method']} seed {run['seed']}: its end evaluated other problems than the start")
    return never_to_solved(first["correct"], end["correct"])


def all_wrong(run: dict) -> dict[str, float]:
    """The share of a run's groups whose every sample was wrong (``dynamics/all_wrong_groups``): at step 1, and the
    means over the first and the second half of its logged steps. Empty when not logged."""
    _, values = series(run, "dynamics/all_wrong_groups")
    if not values:
        return {}
    half = len(values) // 2
    return {"all-wrong groups (step 1)": values[0], "all-wrong groups (first half)": float(np.mean(values[:half])),
            "all-wrong groups (second half)": float(np.mean(values[half:]))}


def criterion(grpo_runs: list[dict], start: dict | None) -> dict:
    """The setting's criterion on GRPO's runs: the mean over seeds of the end's mean@k minus the start's (training
    format) and of the second half's all-wrong share; ``holds`` when the gain is below :data:`CRITERION_GAIN` and the
    share at least :data:`CRITERION_ALL_WRONG` (None without a GRPO run or a start)."""
    if not grpo_runs or not start:
        return {"holds": None}
    first = start_summary(start, "training")["mean"]
    gain = float(np.mean([heldout_entries(r, "training")["end"]["summary"]["mean"] - first for r in grpo_runs]))
    late = [all_wrong(r).get("all-wrong groups (second half)") for r in grpo_runs]
    late = float(np.mean([x for x in late if x is not None])) if any(x is not None for x in late) else None
    holds = None if late is None else bool(gain < CRITERION_GAIN and late >= CRITERION_ALL_WRONG)
    return {"gain": gain, "late_all_wrong": late, "seeds": len(grpo_runs), "holds": holds}


def comparison_pairs(order: list[str]) -> list[tuple[str, str]]:
    """``(base, method)``: every method against GRPO and against the LUFFY-style baseline, and each claim's pair,
    among the methods that ran."""
    pairs = [(base, m) for base in ("grpo", "oger_noreward") if base in order for m in order
             if m not in ("grpo", base)]
    pairs += [(base, m) for _, _, base, m, _, _ in CLAIMS if base in order and m in order]
    return list(dict.fromkeys(pairs))


def markdown(summary: dict, methods: dict, order: list[str], formats: tuple[str, ...]) -> list[str]:
    """The lines of ``guidance.md``."""
    settings = summary["settings"]
    lines = ["# The guidance study (benchmarks/dynamics.py --preset guidance)", "",
             "Settings: " + ", ".join(f"{key}={value}" for key, value in settings.items()), "",
             f"Held-out formats: {', '.join(formats)}; \"mid\" after step {settings['mid_step']}, \"end\" after step "
             f"{settings['max_steps']}; start: the initial policy (every run).", "",
             "Code (the commit each run ran): " + "; ".join(
                 f"{commit}: {', '.join(runs)}" for commit, runs in summary["code"].items()), ""]
    c = summary["criterion"]
    lines += ["## The setting's criterion on the test split", ""]
    if c["holds"] is None:
        lines += ["Not read yet (no GRPO run, no start evaluation or no all-wrong counts).", ""]
    else:
        lines += [f"GRPO ({c['seeds']} seeds): training-format mean@k gain, end minus start, {c['gain']:+.3f} "
                  f"(criterion: below {CRITERION_GAIN}); all-wrong groups over the second half "
                  f"{c['late_all_wrong']:.3f} (criterion: at least {CRITERION_ALL_WRONG}): the criterion "
                  f"{'holds' if c['holds'] else 'does not hold'} on the test split.", ""]
    columns = ["start", *order]
    names = {"start": "start (initial policy)", **{m: f"{methods[m][0]} (n={len(summary['seeds'][m])})"
                                                  for m in order}}
    table = summary["table"]
    lines += ["## Method x metric", "", "Cells: mean ± sd [min, max] over seeds. \"run\": mean over all steps; "
              "\"late\": over the second half.", "",
              "| metric | " + " | ".join(names[col] for col in columns) + " |", "|---|" + "---|" * len(columns)]
    rows = [key for f in formats for tag in ("start", "mid", "end")
            for key in dict.fromkeys(k for col in columns for k in table[col] if k.startswith(f"{f} {tag} "))]
    step_rows = [k for k in ("all-wrong groups (step 1)", "all-wrong groups (first half)",
                             "all-wrong groups (second half)", "dynamics/online_entropy (first)",
                             "dynamics/online_entropy (late)", "dynamics/mixed_groups (late)", "reward (late)",
                             "dynamics/teacher_token_prob (late)", "resample/extra_completions (run)", "seconds")
                 if any(k in table[m] for m in order)]
    for key in rows + step_rows:
        digits = 1 if key == "seconds" else 3
        cells = [_num(table["start"][key]["mean"]) if key in table["start"] else "-"]
        lines.append(f"| {key} | " + " | ".join(cells + [_fmt(table[m].get(key, {}), digits) for m in order]) + " |")
    lines += ["", "## Never solved -> solved", "",
              "Per held-out problem: solved = at least one correct sample of k. \"never -> solved\": problems none of "
              "the start's samples solved that some end sample solves; \"solved -> never\": the reverse. A problem "
              "solved by few samples flips either way by sampling alone, so read the net count (the first minus the "
              "second) against GRPO's. Mean ± sd [min, max] over seeds; the start's never-solved count is the same "
              "for every run.", ""]
    for f in formats:
        moved = summary["moved"].get(f, {})
        if not moved:
            continue
        never = next(iter(next(iter(moved.values())).values()))["never_at_start"]
        total = next(iter(next(iter(moved.values())).values()))["problems"]
        lines += [f"{f} format: {never} of {total} problems never solved at the start.", "",
                  "| method | never -> solved | solved -> never | net | per seed (never -> solved) |",
                  "|---|---|---|---|---|"]
        for m in order:
            if m not in moved:
                continue
            per_seed = moved[m]
            up = spread([v["never_to_solved"] for v in per_seed.values()])
            down = spread([v["solved_to_never"] for v in per_seed.values()])
            net = spread([v["never_to_solved"] - v["solved_to_never"] for v in per_seed.values()])
            seeds = ", ".join(f"s{s}: {v['never_to_solved']}" for s, v in per_seed.items())
            lines.append(f"| {methods[m][0]} | {_fmt(up, 1)} | {_fmt(down, 1)} | {_fmt(net, 1)} | {seeds} |")
        lines.append("")
    lines += ["## Paired by seed", "",
              "Method minus base over the seeds both ran, 95% bootstrap interval resampling seeds (shared) and "
              "problems (shared).", ""]
    for base, pairs in summary["comparisons"].items():
        pairs = {m: p for m, p in pairs.items() if p["seeds"]}
        if not pairs:
            continue
        keys = list(dict.fromkeys(k for p in pairs.values() for k in p["metrics"] if not k.startswith("dynamics/")))
        lines += [f"Against {methods[base][0]}:", "", "| method | seeds | " + " | ".join(keys) + " |",
                  "|---|---|" + "---|" * len(keys)]
        for m, p in pairs.items():
            lines.append(f"| {methods[m][0]} | {','.join(map(str, p['seeds']))} | " + " | ".join(
                _interval(p["metrics"][k]) if k in p["metrics"] else "-" for k in keys) + " |")
        lines.append("")
    lines += ["## Verdicts", "",
              "Each row reads one paired difference (method minus base): \"as claimed\" when the 95% interval lies "
              "wholly on the claimed side of zero, \"opposite\" when wholly on the other, else \"no clear "
              "difference\"; provisional while fewer seeds than planned are in "
              f"({', '.join(f'{methods[m][0]} {n}' for m, n in PLANNED_SEEDS.items() if m in methods)}). Intervals "
              "are per metric, not corrected for the number of rows.", "",
              "| claim (source) | method - base | metric | seeds | difference [95%] | reading |",
              "|---|---|---|---|---|---|"]
    for row in summary["claims"]:
        lines.append(f"| {row['claim']} ({row['source']}) | {methods[row['method']][0]} - {methods[row['base']][0]} | "
                     f"{row['metric']} | {','.join(map(str, row['seeds']))} | {_interval(row['difference'])} | "
                     f"{row['reading']}{' (provisional)' if row['provisional'] else ''} |")
    if not summary["claims"]:
        lines.append("| no claim's two methods share a seed yet | | | | | |")
    return lines


def _moved_figure(path, moved: dict, methods: dict, order: list[str], formats: tuple[str, ...]) -> None:
    """Never -> solved (up) and solved -> never (down) per method and format: mean over seeds, dots per seed."""
    import matplotlib.pyplot as plt

    colors = _colors(list(methods))
    fig, axes = plt.subplots(1, len(formats), figsize=(6.5 * len(formats), 4), squeeze=False)
    for ax, f in zip(axes[0], formats):
        shown = [m for m in order if m in moved.get(f, {})]
        for i, m in enumerate(shown):
            up = [v["never_to_solved"] for v in moved[f][m].values()]
            down = [-v["solved_to_never"] for v in moved[f][m].values()]
            ax.bar(i, np.mean(up), color=colors[m], alpha=0.8)
            ax.bar(i, np.mean(down), color=colors[m], alpha=0.35)
            ax.plot([i] * len(up), up, "k.", ms=4)
            ax.plot([i] * len(down), down, "k.", ms=4)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xticks(range(len(shown)), [methods[m][0] for m in shown], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("held-out problems")
        ax.set_title(f"{f} format: never -> solved (up), solved -> never (down)", fontsize=10)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle("Held-out problems that changed state between the start and the end (bar: mean over seeds; dots: "
                 "seeds)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_all(out: pathlib.Path, by_method: dict, methods: dict, order: list[str], start: dict | None,
             formats: tuple[str, ...], moved: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    panels = [("dynamics/all_wrong_groups", "groups with every sample wrong", "the setting's criterion"),
              ("dynamics/online_accuracy", "online accuracy (R_m)", ""),
              ("dynamics/online_entropy", "policy entropy, online tokens (nats)", "OGER Fig. 2a"),
              ("dynamics/mixed_groups", "groups mixing right and wrong", ""),
              ("dynamics/teacher_token_prob", "teacher-token probability", ""),
              ("oger/reward_mean", "OGER reward, mean", "OGER Fig. 5")]
    _step_figure(out / "guidance_training.png", by_method, methods, order, panels, "Guidance study: training dynamics")
    for prompt_format in formats:
        k = start_summary(start, prompt_format)["num_samples"] if start else "?"
        _heldout_figure(out / f"guidance_heldout_{prompt_format}.png", by_method, methods, order, start,
                        prompt_format, f"Held-out, {prompt_format} prompt format ({k} samples at the start and end; "
                        "band: min-max over seeds)")
    if start:
        _moved_figure(out / "guidance_never_to_solved.png", moved, methods, order, formats)


def report(out: pathlib.Path, methods: dict) -> dict:
    """Write ``summary.json``, ``guidance.md`` and the ``guidance_*.png`` figures from the finished runs under
    ``out``, print the markdown; returns the summary (empty without a finished run)."""
    study = load_study(out, methods, "guidance")
    if study is None:
        return {}
    runs, start, by_method, order = study
    formats = study_formats(runs)
    scalars = {m: {r["seed"]: {**collapse_scalars(r, formats), **all_wrong(r)} for r in by_method[m]} for m in order}
    table = metric_table(scalars, start, formats)
    seeded = {m: {r["seed"]: r for r in by_method[m]} for m in order}
    comparisons = paired_comparisons(seeded, scalars, comparison_pairs(order), formats)
    moved = {f: {m: {s: moved_problems(r, start, f) for s, r in sorted(seeded[m].items())} for m in order}
             for f in formats} if start else {}
    summary = {
        "settings": runs[0]["settings"], "formats": list(formats),
        "start": {f: start_summary(start, f) for f in formats} if start else None,
        "seeds": {m: sorted(seeded[m]) for m in order}, "criterion": criterion(by_method.get("grpo", []), start),
        "table": table, "moved": moved, "comparisons": comparisons,
        "claims": claim_verdicts(comparisons, CLAIMS, PLANNED_SEEDS), "code": code_versions(by_method),
    }
    lines = markdown(summary, methods, order, formats)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=float))
    (out / "guidance.md").write_text("\n".join(lines) + "\n")
    plot_all(out, by_method, methods, order, start, formats, moved)
    print("\n".join(lines))
    return summary
