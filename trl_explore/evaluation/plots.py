"""Figures of the two papers from training logs and evaluation results (matplotlib, PNG).

From a training run's ``trainer_state.json`` (``log_history``):

* :data:`OGER_PANELS`: policy entropy (OGER Fig. 2a), failed-response ratio (Fig. 2c), OGER reward
  mean and max (Fig. 5), embedding divergence and last-token entropy, training reward, and, when the
  run logged evaluations, the evaluation reward (Fig. 2b).
* :data:`ASE_PANELS`: cluster shares and vector geometry (temporal and inter-cluster alignment)
  (ASE Fig. 5), pairwise answer disagreement, training reward and response length (Fig. 4), per-route
  accuracy.

From evaluation folders (:mod:`trl_explore.evaluation.runner`): pass@k curves (OGER Fig. 3, ASE Fig. 3)
and pass@k against temperature (OGER Fig. 6).

Every function overlays several runs (one colour per run), draws only the panels for which at least
one run has data, saves a PNG and returns the ``matplotlib.figure.Figure`` (no pyplot state, so it
works without a display).
"""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

TRAINER_STATE = "trainer_state.json"


@dataclass(frozen=True)
class Panel:
    """One subplot: a title, a y label, and the logged series it draws.

    Attributes:
        title: subplot title.
        ylabel: y-axis label (with units).
        keys: exact ``log_history`` keys, one line each per run.
        pattern: a regular expression with one group; every matching key is drawn, labelled by
            ``group_label`` filled with the group (e.g. "cluster 0" for ``ase/cluster_share_0``).
        group_label: legend text of a ``pattern`` match, a ``{}`` field for the group.
        source: the paper figure it reproduces.
    """

    title: str
    ylabel: str
    keys: tuple[str, ...] = ()
    pattern: str | None = None
    group_label: str = "{}"
    source: str = ""

    def series(self, columns: Sequence[str]) -> list[tuple[str, str]]:
        """``(column, legend suffix)`` pairs of this panel present in ``columns``."""
        found = [(k, k.split("/")[-1]) for k in self.keys if k in columns]
        if self.pattern:
            regex = re.compile(self.pattern)
            matched = [(c, m.group(1)) for c in columns if (m := regex.fullmatch(c))]
            matched.sort(key=lambda item: (len(item[1]), item[1]))
            found += [(c, self.group_label.format(group)) for c, group in matched]
        return found


OGER_PANELS = (
    Panel("Policy entropy", "entropy (nats)", ("entropy",), source="OGER Fig. 2a"),
    Panel("Failed-response ratio", "online completions with R_m = 0", ("oger/failed_ratio",), source="OGER Fig. 2c"),
    Panel("OGER exploration reward", "R_OGER", ("oger/reward_mean", "oger/reward_max"), source="OGER Fig. 5"),
    Panel("Embedding divergence", "D = 1 - mean cosine", ("oger/divergence_mean",), source="OGER Eq. 5"),
    Panel("Last-token entropy", "H_last (nats)", ("oger/last_token_entropy_mean",), source="OGER Eq. 6"),
    Panel("Training reward", "mean total reward", ("reward",), source="OGER Eq. 8"),
    Panel("Evaluation score", "eval reward", ("eval_reward",), source="OGER Fig. 2b"),
)  # fmt: skip
"""Panels of the OGER training-dynamics figure."""

ASE_PANELS = (
    Panel("Cluster shares", "fraction of contrast pairs", pattern=r"ase/cluster_share[_/](\d+)",
          group_label="cluster {}", source="ASE Fig. 5"),
    Panel("Vector geometry", "cosine", ("ase/temporal_alignment", "ase/inter_cluster_alignment"), source="ASE Fig. 5"),
    Panel("Answer disagreement", "pairwise disagreement", ("ase/answer_disagreement",), source="ASE Fig. 4"),
    Panel("Per-route accuracy", "accuracy", pattern=r"ase/route_(\d+)_accuracy",
          group_label="route {}", source="ASE §3.1"),
    Panel("Training reward", "mean reward", ("reward",), source="ASE Fig. 4"),
    Panel("Response length", "tokens", ("completions/mean_length",), source="ASE Fig. 4"),
)  # fmt: skip
"""Panels of the ASE diagnostics figure."""


# --------------------------------------------------------------------------------------------------
# Reading runs
# --------------------------------------------------------------------------------------------------


def find_trainer_state(run_dir: str | pathlib.Path) -> pathlib.Path:
    """``run_dir/trainer_state.json``, else the one of the latest ``checkpoint-<step>`` folder, or the
    file itself when ``run_dir`` is a JSON file.

    Raises:
        FileNotFoundError: none found (the message names ``run_dir``).
    """
    path = pathlib.Path(run_dir)
    if path.is_file():
        return path
    if (path / TRAINER_STATE).is_file():
        return path / TRAINER_STATE
    checkpoints = [p for p in path.glob("checkpoint-*") if (p / TRAINER_STATE).is_file() and p.name[11:].isdigit()]
    if checkpoints:
        return max(checkpoints, key=lambda p: int(p.name[11:])) / TRAINER_STATE
    raise FileNotFoundError(f"no {TRAINER_STATE} in {path} or its checkpoint-* folders")


def load_log_history(run_dir: str | pathlib.Path):
    """The numeric training logs of a run as a ``pandas.DataFrame`` indexed by ``step``.

    Entries of ``log_history`` with the same step (train and eval logs) are merged; non-numeric values
    and the final summary entry (``train_runtime`` ...) are dropped.

    Raises:
        FileNotFoundError: see :func:`find_trainer_state`.
        ValueError: the file has no ``log_history`` entry with a step and a number (names the file).
    """
    import pandas as pd

    path = find_trainer_state(run_dir)
    state = json.loads(path.read_text())
    merged: dict[int, dict] = {}
    for entry in state.get("log_history", []):
        if "step" not in entry or "train_runtime" in entry:
            continue
        values = {
            k: float(v)
            for k, v in entry.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        merged.setdefault(int(entry["step"]), {}).update(values)
    if not any(merged.values()):
        raise ValueError(f"{path}: log_history has no logged metrics (empty or summary-only)")
    frame = pd.DataFrame.from_dict(merged, orient="index").sort_index()
    frame.index.name = "step"
    return frame


def default_plot_dir(run_dirs: Sequence[str | pathlib.Path], labels: Sequence[str] | None = None) -> pathlib.Path:
    """Where ``examples/plot.py`` writes without ``--output_dir``: ``RUN_DIR/plots`` for one run; for several,
    ``./plots/<label 1>+<label 2>+...`` (the overlaid runs named, none of their folders written into)."""
    if len(run_dirs) == 1:
        return pathlib.Path(run_dirs[0]) / "plots"
    names = [re.sub(r"[^A-Za-z0-9._-]+", "_", n) for n in _run_labels(run_dirs, labels)]
    return pathlib.Path("plots") / "+".join(names)


def _run_labels(run_dirs: Sequence[str | pathlib.Path], labels: Sequence[str] | None) -> list[str]:
    if labels is not None:
        if len(labels) != len(run_dirs):
            raise ValueError(f"{len(labels)} labels for {len(run_dirs)} runs")
        return list(labels)
    names = [pathlib.Path(d).resolve().name or str(d) for d in run_dirs]
    return [f"{n} ({i})" if names.count(n) > 1 else n for i, n in enumerate(names)]


# --------------------------------------------------------------------------------------------------
# Drawing
# --------------------------------------------------------------------------------------------------

_STYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def series_style(index: int, count: int) -> dict:
    """Line and marker style of series ``index`` of ``count`` drawn in one panel for one run.

    Series of one run share its colour, so series with equal values (e.g. the accuracies of steering routes that
    all stay at 0) would hide each other. Each gets its own line style and hollow marker shape, and the earlier
    ones are drawn wider and larger, so coinciding series stay visible as nested markers and stacked lines.

    Returns:
        keyword arguments of ``Axes.plot``: ``linestyle``, ``marker``, ``fillstyle``, ``linewidth``, ``markersize``.
    """
    rank = count - 1 - index  # 0 for the last (topmost) series
    return {"linestyle": _STYLES[index % len(_STYLES)], "marker": _MARKERS[index % len(_MARKERS)],
            "fillstyle": "none" if count > 1 else "full", "linewidth": 1.2 + 0.8 * rank,
            "markersize": 4.0 + 2.0 * rank}


def integer_step_limits(steps: Sequence[float]) -> tuple[float, float] | None:
    """x-limits that show at least two whole steps around ``steps``, or None when the data already span >= 2.

    Matplotlib's ``MaxNLocator(integer=True)`` falls back to fractional ticks when the view holds fewer than two
    integers, which a run with a single logged step gives (view 3.95-4.05 around step 4).
    """
    if not len(steps):
        return None
    lo, hi = min(steps), max(steps)
    return (lo - 1, hi + 1) if hi - lo < 2 else None


def _new_figure(num_panels: int, ncols: int = 3, size: tuple[float, float] = (4.6, 3.4)):
    from matplotlib.figure import Figure

    ncols = min(ncols, num_panels)
    nrows = -(-num_panels // ncols)
    fig = Figure(figsize=(size[0] * ncols, size[1] * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[num_panels:]:
        ax.set_visible(False)
    return fig, axes[:num_panels]


def _save(fig, path: str | pathlib.Path | None):
    if path is not None:
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=120)
    return fig


def plot_training_dynamics(runs: Mapping[str, object], panels: Sequence[Panel], path: str | pathlib.Path | None = None,
                           title: str | None = None, smooth: int = 1):
    """Overlay the logged series of several training runs, one subplot per panel.

    Args:
        runs: ``{label: DataFrame from load_log_history}``.
        panels: e.g. :data:`OGER_PANELS` or :data:`ASE_PANELS`; panels no run has data for are left out.
        path: PNG to write (``None``: do not save).
        title: figure title.
        smooth: centred rolling-mean window in steps (1: raw values).

    Returns:
        The ``Figure``; each drawn series is one ``Line2D`` (a run's colour, a line style per key).

    Raises:
        ValueError: no runs, ``smooth < 1``, or no panel has data in any run (lists the logged keys).
    """
    from matplotlib.ticker import MaxNLocator

    if not runs:
        raise ValueError("plot_training_dynamics: no runs")
    if smooth < 1:
        raise ValueError(f"smooth must be >= 1, got {smooth}")
    used = [p for p in panels if any(p.series(list(frame.columns)) for frame in runs.values())]
    if not used:
        keys = sorted({c for frame in runs.values() for c in frame.columns})
        raise ValueError(f"none of the panels {[p.title for p in panels]} has data; the runs logged {keys}")
    fig, axes = _new_figure(len(used))
    colors = [f"C{i % 10}" for i in range(len(runs))]
    for ax, panel in zip(axes, used):
        steps = []
        for color, (label, frame) in zip(colors, runs.items()):
            series = panel.series(list(frame.columns))
            for style_index, (column, suffix) in enumerate(series):
                values = frame[column].dropna()
                if values.empty:
                    continue
                if smooth > 1:
                    values = values.rolling(smooth, center=True, min_periods=1).mean()
                style = series_style(style_index, len(series))
                if len(values) >= 12:  # dense series: lines only
                    style["marker"] = None
                if len(values) == 1:  # a single point: a marker, no line
                    style["linestyle"] = "none"
                name = f"{label}: {suffix}" if len(series) > 1 else label
                ax.plot(values.index, values.values, color=color, label=name, **style)
                steps += list(values.index)
        ax.set_title(f"{panel.title} ({panel.source})" if panel.source else panel.title, fontsize=10)
        ax.set_xlabel("training step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if (limits := integer_step_limits(steps)) is not None:
            ax.set_xlim(*limits)
        ax.set_ylabel(panel.ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title)
    return _save(fig, path)


def plot_pass_at_k(summaries: Mapping[str, Mapping], path: str | pathlib.Path | None = None,
                   benchmarks: Sequence[str] | None = None):
    """pass@k against k (log2 axis), a subplot per benchmark, a line per run (OGER Fig. 3, ASE Fig. 3).

    Args:
        summaries: ``{label: evaluation summary}`` (``summary.json`` of the runner).
        path: PNG to write.
        benchmarks: benchmarks to draw (default: every benchmark of any run, in first-seen order).

    Returns:
        The ``Figure``; one ``Line2D`` per (run, benchmark) pair present.

    Raises:
        ValueError: no summaries, or a requested benchmark that no run has (names it).
    """
    if not summaries:
        raise ValueError("plot_pass_at_k: no evaluation results")
    seen: list[str] = []
    for s in summaries.values():
        seen += [b for b in s["benchmarks"] if b not in seen]
    names = list(benchmarks) if benchmarks is not None else seen
    missing = [b for b in names if b not in seen]
    if missing:
        raise ValueError(f"plot_pass_at_k: no run evaluated {missing}; have {seen}")
    fig, axes = _new_figure(len(names))
    for ax, name in zip(axes, names):
        title, all_ks = name, set()
        for i, (label, s) in enumerate(summaries.items()):
            entry = s["benchmarks"].get(name)
            if entry is None:
                continue
            title = entry.get("title", name)
            ks = sorted(int(k) for k in entry["pass_at_k"])
            all_ks.update(ks)
            ax.plot(ks, [100 * entry["pass_at_k"][str(k)] for k in ks], marker="o", color=f"C{i % 10}", label=label)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(all_ks), [str(k) for k in sorted(all_ks)])
        ax.minorticks_off()
        ax.set_title(f"{title}: pass@k", fontsize=10)
        ax.set_xlabel("k (samples)")
        ax.set_ylabel("pass@k (%)")
        ax.set_ylim(-3, 103)  # a percentage: the full 0-100 scale, also when every value is 0
        ax.set_yticks(range(0, 101, 20))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, path)


def plot_temperature_sweep(sweeps: Mapping[str, Mapping], path: str | pathlib.Path | None = None):
    """Average pass@k against the decoding temperature, a line per run (OGER App. E, Fig. 6).

    Args:
        sweeps: ``{label: temperature_sweep.json content}`` (keys ``k``, ``temperatures``, ``average``).
        path: PNG to write.

    Returns:
        The ``Figure`` (one ``Line2D`` per run).

    Raises:
        ValueError: no sweeps, or a sweep whose ``temperatures`` and ``average`` differ in length.
    """
    if not sweeps:
        raise ValueError("plot_temperature_sweep: no sweeps")
    fig, (ax,) = _new_figure(1, size=(5.5, 3.8))
    ks = set()
    for i, (label, sweep) in enumerate(sweeps.items()):
        if len(sweep["temperatures"]) != len(sweep["average"]):
            raise ValueError(f"temperature sweep {label!r}: {len(sweep['temperatures'])} temperatures but "
                             f"{len(sweep['average'])} scores")
        ks.add(sweep["k"])
        ax.plot(sweep["temperatures"], [100 * v for v in sweep["average"]], marker="o", color=f"C{i % 10}", label=label)
    k_text = "/".join(str(k) for k in sorted(ks))
    ax.set_title(f"pass@{k_text} vs. temperature (OGER Fig. 6)", fontsize=10)
    ax.set_xlabel("decoding temperature")
    ax.set_ylabel(f"average pass@{k_text} (%)")
    ax.set_ylim(-3, 103)
    ax.set_yticks(range(0, 101, 20))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_runs(run_dirs: Sequence[str | pathlib.Path], output_dir: str | pathlib.Path,
              labels: Sequence[str] | None = None, smooth: int = 1) -> list[pathlib.Path]:
    """Draw every figure the given folders have data for (``examples/plot.py``).

    A folder may be a training run (``trainer_state.json`` there or in a checkpoint), an evaluation
    folder (``summary.json``, optionally ``temperature_sweep.json``), or both.

    Writes, when the data exist: ``training_dynamics_oger.png`` (runs with ``oger/`` keys, or plain
    GRPO runs next to them), ``training_dynamics_ase.png`` (runs with ``ase/`` keys),
    ``pass_at_k.png`` and ``temperature_sweep.png``.

    Returns:
        The written paths.

    Raises:
        ValueError: no run folder, or none of them holds anything to plot (names them).
    """
    from trl_explore.evaluation.runner import SUMMARY_JSON, load_summary

    if not run_dirs:
        raise ValueError("plot_runs: give at least one run folder")
    names = _run_labels(run_dirs, labels)
    out = pathlib.Path(output_dir)
    logs, summaries, sweeps = {}, {}, {}
    for label, run_dir in zip(names, run_dirs):
        run_dir = pathlib.Path(run_dir)
        if not run_dir.exists():
            raise FileNotFoundError(f"run folder {run_dir} does not exist")
        try:
            logs[label] = load_log_history(run_dir)
        except FileNotFoundError:
            pass
        if (run_dir / SUMMARY_JSON).is_file():
            summaries[label] = load_summary(run_dir)
        if (run_dir / "temperature_sweep.json").is_file():
            sweeps[label] = json.loads((run_dir / "temperature_sweep.json").read_text())
    written = []
    oger_runs = {k: v for k, v in logs.items() if any(c.startswith("oger/") for c in v.columns)}
    ase_runs = {k: v for k, v in logs.items() if any(c.startswith("ase/") for c in v.columns)}
    plain = {k: v for k, v in logs.items() if k not in oger_runs and k not in ase_runs}
    if oger_runs or (plain and not ase_runs):
        plot_training_dynamics({**oger_runs, **plain}, OGER_PANELS, out / "training_dynamics_oger.png",
                               title="OGER training dynamics", smooth=smooth)
        written.append(out / "training_dynamics_oger.png")
    if ase_runs:
        plot_training_dynamics({**ase_runs, **plain}, ASE_PANELS, out / "training_dynamics_ase.png",
                               title="ASE-GRPO diagnostics", smooth=smooth)
        written.append(out / "training_dynamics_ase.png")
    if summaries:
        plot_pass_at_k(summaries, out / "pass_at_k.png")
        written.append(out / "pass_at_k.png")
    if sweeps:
        plot_temperature_sweep(sweeps, out / "temperature_sweep.png")
        written.append(out / "temperature_sweep.png")
    if not written:
        raise ValueError(f"nothing to plot in {[str(d) for d in run_dirs]}: no {TRAINER_STATE}, {SUMMARY_JSON} "
                         "or temperature_sweep.json")
    return written
