"""Aggregation and plots of ``benchmarks/dynamics.py``: every finished run's ``result.json`` -> ``summary.json``,
``dynamics.md`` (method x metric: mean, standard deviation and range over seeds; differences from GRPO and from the
LUFFY-style baseline with bootstrap intervals over seeds and problems) and the PNG figures.

Per-run scalars (what a table cell averages over seeds):

* step metrics (``dynamics/*``, TRL's ``reward``, ``oger/*``): the mean over all steps ("run") and over the second
  half of the steps ("late"), plus the first step's value for the teacher-token probability;
* ASE bank: the mean over bank updates of the smallest and largest cluster share, the median temporal alignment;
* held-out: mean@k, pass@k, greedy accuracy, distinct-answer share and disagreement at the start, middle and end.
"""

from __future__ import annotations

import json
import pathlib
import statistics

import numpy as np

STEP_METRICS = {
    "reward": "training reward (TRL, all rows)",
    "dynamics/online_accuracy": "online accuracy (R_m)",
    "dynamics/online_entropy": "policy entropy, online tokens (nats)",
    "dynamics/all_entropy": "policy entropy, all tokens (TRL's; nats)",
    "dynamics/failed_ratio": "failed-response ratio (online)",
    "dynamics/mixed_groups": "groups mixing right and wrong",
    "dynamics/answer_disagreement": "answer disagreement within groups",
    "dynamics/teacher_token_prob": "teacher-token probability",
    "dynamics/online_length": "online completion length (tokens)",
    "oger/reward_mean": "OGER reward, mean",
    "oger/reward_max": "OGER reward, max",
    "ase/temporal_alignment": "ASE temporal alignment",
    "ase/inter_cluster_alignment": "ASE inter-cluster alignment",
}


def load_runs(out: pathlib.Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*/seed*/result.json"))]


def series(run: dict, key: str) -> tuple[list[int], list[float]]:
    """``(steps, values)`` of a logged metric (the per-step log entries only)."""
    points = [(e["step"], e[key]) for e in run["log_history"] if key in e and "train_runtime" not in e
              and e[key] is not None and e[key] == e[key]]
    return [s for s, _ in points], [float(v) for _, v in points]


def run_scalars(run: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    max_steps = run["settings"]["max_steps"]
    for key in STEP_METRICS:
        steps, values = series(run, key)
        if not values:
            continue
        out[f"{key} (run)"] = float(np.mean(values))
        late = [v for s, v in zip(steps, values) if s > max_steps / 2]
        if late:
            out[f"{key} (late)"] = float(np.mean(late))
        out[f"{key} (first)"] = values[0]
    banks = [b for b in run.get("bank_diagnostics") or [] if not b.get("skipped")]
    shares = [[v for k, v in b.items() if k.startswith("cluster_share/")] for b in banks]
    shares = [s for s in shares if s]
    if shares:
        out["ase/cluster_share_min (updates)"] = float(np.mean([min(s) for s in shares]))
        out["ase/cluster_share_max (updates)"] = float(np.mean([max(s) for s in shares]))
        out["ase/bank_updates"] = float(len(shares))
        out["ase/clusters"] = float(max(len(s) for s in shares))
    if run.get("bank_diagnostics") is not None:
        out["ase/skipped_updates"] = float(sum(bool(b.get("skipped")) for b in run["bank_diagnostics"]))
    for label, entry in run["heldout"].items():
        s = entry["summary"]
        tag = "end" if label == "end" else "mid"
        k = s["num_samples"]
        out[f"heldout {tag} mean@{k}"] = s["mean"]
        out[f"heldout {tag} pass@{k}"] = s["pass_at_k"][str(k)]
        out[f"heldout {tag} greedy"] = s["greedy_accuracy"]
        out[f"heldout {tag} distinct"] = s["distinct_answer_fraction"]
        out[f"heldout {tag} disagreement"] = s["answer_disagreement"]
        out[f"heldout {tag} tokens"] = s["mean_num_tokens"]
    out["seconds"] = run["seconds"]
    return out


def spread(values: list[float]) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {}
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "n": len(values), "values": values}


def heldout_entries(run: dict, prompt_format: str = "training") -> dict:
    """``{label: {"summary", "result"}}`` of a run's held-out evaluations in ``prompt_format`` (runs before the
    collapse study hold the training format only, under ``heldout``).

    Raises:
        KeyError: the run has no evaluation in that format.
    """
    by_format = run.get("heldout_by_format")
    if by_format is None and prompt_format == "training":
        return run["heldout"]
    if not by_format or prompt_format not in by_format:
        raise KeyError(f"{run['method']} seed {run['seed']}: no held-out evaluation in the {prompt_format!r} format")
    return by_format[prompt_format]


def start_summary(start: dict, prompt_format: str = "training") -> dict:
    """The initial policy's held-out summary in ``prompt_format`` (``start_eval.json``)."""
    return start["by_format"][prompt_format]["summary"] if "by_format" in start else start["summary"]


def pass_curve(summary: dict) -> list[float]:
    """pass@1 ... pass@k of a held-out summary, in increasing k."""
    return [float(v) for _, v in sorted(summary["pass_at_k"].items(), key=lambda kv: int(kv[0]))]


def per_problem(run: dict, label: str = "end", what: str = "mean", prompt_format: str = "training") -> np.ndarray:
    """``[P]`` per-problem mean@k (``what="mean"``), pass@k (``"pass"``) or greedy (``"greedy"``) of one evaluation
    (``label`` in ``prompt_format``; ``k``: its samples per problem)."""
    from trl_explore.evaluation.heldout import HeldoutResult
    from trl_explore.evaluation.metrics import pass_at_k_per_problem

    r = HeldoutResult.from_dict(heldout_entries(run, prompt_format)[label]["result"])
    if what == "mean":
        return r.accuracy_per_problem()
    if what == "greedy":
        return np.asarray(r.greedy_correct, dtype=float)
    correct = np.asarray(r.correct, dtype=bool)
    return pass_at_k_per_problem([r.num_samples] * r.num_problems, correct.sum(axis=1).tolist(), r.num_samples)


def compare(runs_a: list[dict], runs_b: list[dict], scalars_a, scalars_b) -> dict:
    """Differences ``b - a`` with bootstrap intervals: held-out end scores over seeds and problems, step metrics over
    seeds only."""
    from trl_explore.evaluation.metrics import seed_problem_bootstrap_interval

    out = {}
    for what in ("mean", "pass", "greedy"):
        a = np.stack([per_problem(r, "end", what) for r in runs_a])
        b = np.stack([per_problem(r, "end", what) for r in runs_b])
        out[f"heldout end {what}"] = seed_problem_bootstrap_interval(a, b)
    for key in ("dynamics/online_entropy (run)", "dynamics/online_entropy (late)", "dynamics/failed_ratio (late)",
                "dynamics/answer_disagreement (run)", "dynamics/teacher_token_prob (late)",
                "dynamics/online_length (late)"):
        a = [s[key] for s in scalars_a if key in s]
        b = [s[key] for s in scalars_b if key in s]
        if a and b:
            out[key] = seed_problem_bootstrap_interval(a, b)
    return out


def _fmt(entry: dict, digits: int = 3) -> str:
    if not entry:
        return "-"
    return (f"{entry['mean']:.{digits}f} ± {entry['sd']:.{digits}f} "
            f"[{entry['min']:.{digits}f}, {entry['max']:.{digits}f}]")


TABLE_KEYS = (
    "heldout end mean@{k}", "heldout mid mean@{k}", "heldout end pass@{k}", "heldout end greedy",
    "heldout end distinct", "heldout end disagreement", "heldout end tokens",
    "dynamics/online_entropy (run)", "dynamics/online_entropy (late)", "dynamics/all_entropy (run)",
    "dynamics/failed_ratio (run)", "dynamics/failed_ratio (late)", "reward (run)", "dynamics/mixed_groups (run)",
    "dynamics/answer_disagreement (run)", "dynamics/answer_disagreement (late)", "dynamics/teacher_token_prob (first)",
    "dynamics/teacher_token_prob (late)", "dynamics/online_length (late)", "oger/reward_mean (run)",
    "oger/reward_max (run)", "ase/cluster_share_min (updates)", "ase/cluster_share_max (updates)",
    "ase/temporal_alignment (run)", "ase/inter_cluster_alignment (run)", "ase/bank_updates", "ase/skipped_updates",
    "seconds",
)


CONTROLS_OF = {"oger": ("oger_batchscale", "oger_norefine"), "ase": ("ase_random",)}
"""Each control is also compared with the method it changes one setting of."""


def load_study(out: pathlib.Path, methods: dict, tag: str):
    """A study's finished runs: ``(runs, start, by_method, order)`` with ``start`` the parsed ``start_eval.json`` (or
    None), ``by_method`` the runs grouped by method and ``order`` the methods of ``methods`` that ran; None (after a
    ``[tag]`` line saying so) when no run has finished."""
    runs = load_runs(out)
    if not runs:
        print(f"[{tag}] no finished run under {out / 'runs'}")
        return None
    start = json.loads((out / "start_eval.json").read_text()) if (out / "start_eval.json").is_file() else None
    by_method: dict[str, list[dict]] = {}
    for run in runs:
        by_method.setdefault(run["method"], []).append(run)
    return runs, start, by_method, [m for m in methods if m in by_method]


def report(out: pathlib.Path, methods: dict) -> dict:
    """Write ``summary.json``, ``dynamics.md`` and the plots from the finished runs; returns the summary."""
    study = load_study(out, methods, "dynamics")
    if study is None:
        return {}
    runs, start, by_method, order = study
    scalars = {m: [run_scalars(r) for r in by_method[m]] for m in order}
    table = {m: {key: spread([s.get(key) for s in scalars[m]]) for key in sorted({k for s in scalars[m] for k in s})}
             for m in order}
    comparisons = {}
    for base, against in (("grpo", order), ("oger_noreward", order), *CONTROLS_OF.items()):
        if base not in by_method:
            continue
        rows = {m: compare(by_method[base], by_method[m], scalars[base], scalars[m])
                for m in against if m != base and m in by_method}
        if rows:  # a base without anything to compare writes no table
            comparisons[base] = rows
    summary = {"settings": runs[0]["settings"], "start": start["summary"] if start else None,
               "seeds": {m: sorted(r["seed"] for r in by_method[m]) for m in order}, "table": table,
               "comparisons": comparisons}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    k = runs[0]["settings"]["eval_samples"]
    lines = ["# Training dynamics on the task ladder (benchmarks/dynamics.py)", "",
             "Settings: " + ", ".join(f"{key}={value}" for key, value in runs[0]["settings"].items()), "",
             "Cells: mean ± standard deviation [min, max] over seeds (seeds per method below). \"run\": mean over all "
             "steps; \"late\": over the second half; held-out \"mid\" after step "
             f"{runs[0]['settings']['mid_step']}, \"end\" after the last step.", ""]
    if start:
        s = start["summary"]
        def num(x, fmt=".3f"):  # None: no answer was extracted from any sample (a tiny test policy)
            return "n/a" if x is None else format(x, fmt)

        lines += [f"Start (the initial policy, every run): mean@{k} {num(s['mean'])}, pass@{k} "
                  f"{num(s['pass_at_k'][str(k)])}, greedy {num(s['greedy_accuracy'])}, distinct "
                  f"{num(s['distinct_answer_fraction'])}, disagreement {num(s['answer_disagreement'])}, "
                  f"tokens {num(s['mean_num_tokens'], '.1f')}.", ""]
    lines += ["| metric | " + " | ".join(f"{methods[m][0]} (n={len(by_method[m])})" for m in order) + " |",
              "|---|" + "---|" * len(order)]
    for key in TABLE_KEYS:
        key = key.format(k=k)
        if any(table[m].get(key) for m in order):
            digits = 1 if key in ("seconds", "heldout end tokens") or "length" in key else 3
            lines.append(f"| {key} | " + " | ".join(_fmt(table[m].get(key, {}), digits) for m in order) + " |")
    for base, rows in comparisons.items():
        lines += ["", f"Differences from {methods[base][0]} (method minus it; 95% bootstrap interval: held-out over "
                  "seeds and problems, step metrics over seeds):", "",
                  "| method | " + " | ".join(next(iter(rows.values())).keys()) + " |",
                  "|---|" + "---|" * len(next(iter(rows.values())))]
        for m, entry in rows.items():
            lines.append(f"| {methods[m][0]} | " + " | ".join(
                f"{d:+.3f} [{lo:+.3f}, {hi:+.3f}]" for d, lo, hi in entry.values()) + " |")
    (out / "dynamics.md").write_text("\n".join(lines) + "\n")
    plot_all(out, by_method, methods, order, start)
    print("\n".join(lines))
    return summary


# ----------------------------------------------------------------------------------------------- plots
def _band(ax, runs, key, label, color):
    """Mean over seeds with the min-max band, on the steps every seed logged."""
    per_seed = [dict(zip(*series(r, key))) for r in runs]
    steps = sorted(set.intersection(*(set(p) for p in per_seed))) if per_seed else []
    if not steps:
        return False
    values = np.array([[p[s] for s in steps] for p in per_seed])
    ax.plot(steps, values.mean(0), label=f"{label} (n={len(runs)})", color=color, lw=1.8)
    ax.fill_between(steps, values.min(0), values.max(0), color=color, alpha=0.18, lw=0)
    return True


def _colors(order):
    import matplotlib.pyplot as plt

    cmap = plt.get_cmap("tab10")
    return {m: cmap(i % 10) for i, m in enumerate(order)}


def _step_figure(path, by_method, methods, order, panels, title):
    import matplotlib.pyplot as plt

    colors = _colors(list(methods))
    cols = 3
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.6 * rows), squeeze=False)
    for ax, (key, name, source) in zip(axes.flat, panels):
        drawn = [_band(ax, by_method[m], key, methods[m][0], colors[m]) for m in order]
        ax.set_title(f"{name}" + (f"  ({source})" if source else ""), fontsize=10)
        ax.set_xlabel("optimizer step")
        ax.grid(alpha=0.3)
        if any(drawn):
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not logged by these methods", ha="center", va="center", transform=ax.transAxes)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(title + "  (line: mean over seeds; band: min-max)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _heldout_figure(path, by_method, methods, order, start, prompt_format="training", title=None):
    """Held-out scores over the steps (start, middle, end) and the end's pass@k curve, in ``prompt_format``."""
    import matplotlib.pyplot as plt

    colors = _colors(list(methods))
    start = start and start_summary(start, prompt_format)
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.2))
    keys = [("mean", "held-out mean@k (OGER Fig. 2b / ASE Fig. 4)"), ("greedy_accuracy", "held-out greedy accuracy"),
            ("distinct_answer_fraction", "held-out: problems whose k answers differ")]
    for ax, (key, name) in zip(axes, keys):
        for m in order:
            points = {}
            for r in by_method[m]:
                seq = [(0, start[key])] if start else []
                for label, entry in heldout_entries(r, prompt_format).items():
                    step = r["settings"]["max_steps"] if label == "end" else int(label.split()[-1])
                    seq.append((step, entry["summary"][key]))
                for s, v in seq:
                    points.setdefault(s, []).append(v)
            steps = sorted(points)
            mean = [np.mean(points[s]) for s in steps]
            ax.plot(steps, mean, marker="o", color=colors[m], label=f"{methods[m][0]} (n={len(by_method[m])})")
            ax.fill_between(steps, [min(points[s]) for s in steps], [max(points[s]) for s in steps],
                            color=colors[m], alpha=0.15, lw=0)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("optimizer step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    ax = axes[3]
    for m in order:
        curves = [pass_curve(heldout_entries(r, prompt_format)["end"]["summary"]) for r in by_method[m]]
        ks = np.arange(1, len(curves[0]) + 1)
        ax.plot(ks, np.mean(curves, 0), marker="o", color=colors[m], label=methods[m][0])
        ax.fill_between(ks, np.min(curves, 0), np.max(curves, 0), color=colors[m], alpha=0.15, lw=0)
    if start:
        curve = pass_curve(start)
        ax.plot(np.arange(1, len(curve) + 1), curve, "k--", label="start")
    ax.set_title("held-out pass@k at the end (OGER Fig. 3 / ASE Fig. 3)", fontsize=10)
    ax.set_xlabel("k")
    ax.xaxis.get_major_locator().set_params(integer=True)  # k is a count of samples
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _bank_figure(path, by_method, methods):
    import matplotlib.pyplot as plt

    ase = [m for m in ("ase", "oger_ase", "ase_random") if m in by_method]
    if not ase:
        return
    fig, axes = plt.subplots(1, len(ase) + 1, figsize=(5.2 * (len(ase) + 1), 3.8), squeeze=False)
    for ax, m in zip(axes[0], ase):
        for r in by_method[m]:
            banks = [b for b in r.get("bank_diagnostics") or [] if not b.get("skipped")]
            keys = [key for b in banks for key in b if key.startswith("cluster_share/")]
            num_clusters = max((int(key.split("/")[1]) + 1 for key in keys), default=0)
            for k in range(num_clusters):
                pts = [(b["global_step"], b.get(f"cluster_share/{k}")) for b in banks if f"cluster_share/{k}" in b]
                if pts:
                    ax.plot(*zip(*pts), marker=".", lw=0.8, color=f"C{k}", alpha=0.7,
                            label=f"cluster {k}" if r is by_method[m][0] else None)
        ax.axhline(1 / 3, color="k", ls=":", lw=0.8)
        ax.set_title(f"{methods[m][0]}: cluster shares per update (ASE Fig. 5)", fontsize=9)
        ax.set_xlabel("optimizer step")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    ax = axes[0][-1]
    for i, m in enumerate(ase):
        for key, style in (("ase/temporal_alignment", "-"), ("ase/inter_cluster_alignment", "--")):
            for r in by_method[m]:
                steps, values = series(r, key)
                if steps:
                    ax.plot(steps, values, style, color=f"C{i}", alpha=0.6, marker=".",
                            label=f"{methods[m][0]}: {key.split('/')[1]}" if r is by_method[m][0] else None)
    ax.axhline(-0.5, color="k", ls=":", lw=0.8)
    ax.set_title("vector geometry: temporal (solid), inter-cluster (dashed)", fontsize=9)
    ax.set_xlabel("optimizer step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_all(out, by_method, methods, order, start) -> None:
    import matplotlib

    matplotlib.use("Agg")
    core = [m for m in ("grpo", "oger", "oger_noreward", "ase", "oger_ase") if m in by_method]
    panels = [("dynamics/online_entropy", "policy entropy, online tokens", "OGER Fig. 2a"),
              ("dynamics/failed_ratio", "failed-response ratio", "OGER Fig. 2c"),
              ("reward", "training reward", "ASE Fig. 4"),
              ("dynamics/answer_disagreement", "answer disagreement in groups", "ASE Fig. 4"),
              ("dynamics/teacher_token_prob", "teacher-token probability", ""),
              ("dynamics/online_length", "online completion length", "ASE Fig. 4")]
    _step_figure(out / "dynamics_training.png", by_method, methods, core, panels, "Training dynamics")
    oger = [m for m in ("oger", "oger_noreward", "oger_ase", "oger_batchscale", "oger_norefine") if m in by_method]
    _step_figure(out / "dynamics_oger_reward.png", by_method, methods, oger,
                 [("oger/reward_mean", "OGER reward, mean", "OGER Fig. 5"),
                  ("oger/reward_max", "OGER reward, max", "OGER Fig. 5"),
                  ("dynamics/all_entropy", "entropy, all tokens (TRL's)", "")], "OGER exploration reward")
    _heldout_figure(out / "dynamics_heldout.png", by_method, methods, core, start)
    controls = [m for base, of in CONTROLS_OF.items() for m in (base, *of) if m in by_method]
    if any(m in by_method for of in CONTROLS_OF.values() for m in of):  # a control (beside its method, if it ran)
        _step_figure(out / "dynamics_controls.png", by_method, methods, controls, panels, "Controls")
        _heldout_figure(out / "dynamics_controls_heldout.png", by_method, methods, controls, start)
    _bank_figure(out / "dynamics_ase_bank.png", by_method, methods)
