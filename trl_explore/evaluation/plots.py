"""Figures of the two papers from training logs and evaluation results (matplotlib, PNG).

From training runs' ``trainer_state.json`` (``log_history``):

* :data:`SHARED_PANELS`: what every GRPO-based run logs (reward, policy entropy, zero-variance groups, response
  length, truncation, evaluation reward): runs of different methods (GRPO, OGER, ASE-GRPO, both, ExGRPO) overlaid.
* :data:`OGER_PANELS`: policy entropy (OGER Fig. 2a), failed-response ratio (Fig. 2c), OGER reward mean and max
  (Fig. 5), embedding divergence and last-token entropy, offline fraction, training and evaluation reward (Fig. 2b).
* :data:`ASE_PANELS`: cluster shares and vector geometry (ASE Fig. 5), contrast pairs and vector norm per bank
  update, pairwise answer disagreement, per-route accuracy, importance weights, training reward and response
  length (Fig. 4).

From evaluation folders (:mod:`trl_explore.evaluation.runner`): pass@k curves (OGER Fig. 3, ASE Fig. 3)
and pass@k against temperature (OGER Fig. 6).

Every function overlays several runs (one colour per run, labelled by run name), saves a PNG and returns the
``matplotlib.figure.Figure`` (no pyplot state, so it works without a display). A panel no run has data for is kept
and says so (which keys are missing and when they are logged); fractions are drawn on a 0-1 axis and constant
series on a readable one.
"""

from __future__ import annotations

import json
import pathlib
import re
import textwrap
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
        ylim: fixed y limits (e.g. ``(0, 1)`` for a fraction), else None (from the data).
        when: when the keys are logged, shown in the panel when no run has them (e.g. "at bank updates only").
    """

    title: str
    ylabel: str
    keys: tuple[str, ...] = ()
    pattern: str | None = None
    group_label: str = "{}"
    source: str = ""
    ylim: tuple[float, float] | None = None
    when: str = ""

    def series(self, columns: Sequence[str]) -> list[tuple[str, str]]:
        """``(column, legend suffix)`` pairs of this panel present in ``columns``."""
        found = [(k, k.split("/")[-1]) for k in self.keys if k in columns]
        if self.pattern:
            regex = re.compile(self.pattern)
            matched = [(c, m.group(1)) for c in columns if (m := regex.fullmatch(c))]
            matched.sort(key=lambda item: (len(item[1]), item[1]))
            found += [(c, self.group_label.format(group)) for c, group in matched]
        return found

    def key_names(self) -> list[str]:
        """The keys this panel reads, a ``pattern`` written with ``*`` (e.g. ``ase/cluster_share_*``)."""
        names = list(self.keys)
        if self.pattern:
            names.append(re.sub(r"\[(.)[^]]*\]", r"\1", re.sub(r"\([^)]*\)", "*", self.pattern)))
        return names


FRACTION = (0.0, 1.0)

_EVAL = "logged only with eval_strategy != 'no' and an eval_dataset"
_BANK = ("logged at bank updates only; an update needs K x min_pairs_per_cluster contrast pairs (problems with both "
         "right and wrong rollouts), else it is skipped: see ase/num_pairs, ase/skipped_updates")

SHARED_PANELS = (
    Panel("Training reward", "mean total reward", ("reward",)),
    Panel("Policy entropy", "entropy (nats)", ("entropy",)),
    Panel("Zero-variance groups", "groups with equal rewards (no signal)\nOGER: its teacher rows are in the groups",
          ("frac_reward_zero_std",), ylim=FRACTION),  # TRL's metric: a correct teacher row breaks an all-wrong tie
    Panel("Response length", "tokens", ("completions/mean_length",)),
    Panel("Truncated completions", "fraction at max_completion_length", ("completions/clipped_ratio",),
          ylim=FRACTION),
    Panel("Evaluation reward", "eval reward", ("eval_reward",), when=_EVAL),
)  # fmt: skip
"""Panels every GRPO-based run has: the figure that overlays runs of different methods."""

OGER_PANELS = (
    Panel("Policy entropy", "entropy (nats)", ("entropy",), source="OGER Fig. 2a"),
    Panel("Failed-response ratio", "online completions with R_m = 0", ("oger/failed_ratio",), source="OGER Fig. 2c",
          ylim=FRACTION),
    Panel("OGER exploration reward", "R_OGER", ("oger/reward_mean", "oger/reward_max"), source="OGER Fig. 5"),
    Panel("Embedding divergence", "D = 1 - mean cosine", ("oger/divergence_mean",), source="OGER Eq. 5"),
    Panel("Last-token entropy", "H_last (nats)", ("oger/last_token_entropy_mean",), source="OGER Eq. 6"),
    Panel("Offline fraction", "offline rows of the batch", ("oger/offline_fraction",), source="OGER §3.2",
          ylim=FRACTION),
    Panel("Training reward", "mean total reward", ("reward",), source="OGER Eq. 8"),
    Panel("Evaluation score", "eval reward", ("eval_reward",), source="OGER Fig. 2b", when=_EVAL),
)  # fmt: skip
"""Panels of the OGER training-dynamics figure."""

ASE_PANELS = (
    Panel("Cluster shares", "fraction of contrast pairs", pattern=r"ase/cluster_share[_/](\d+)",
          group_label="cluster {}", source="ASE Fig. 5", ylim=FRACTION, when=_BANK),
    Panel("Vector geometry", "cosine", ("ase/temporal_alignment", "ase/inter_cluster_alignment"), source="ASE Fig. 5",
          when=_BANK),
    Panel("Contrast pairs", "pairs / skipped updates (running count)", ("ase/num_pairs", "ase/skipped_updates"),
          source="ASE §3.2", when="logged at every step that tries a bank update"),
    Panel("Steering vector norm", "mean norm", ("ase/vector_norm",), source="ASE §3.2", when=_BANK),
    Panel("Answer disagreement", "pairwise disagreement", ("ase/answer_disagreement",), source="ASE Fig. 4",
          ylim=FRACTION),
    Panel("Per-route accuracy", "accuracy", pattern=r"ase/route_(\d+)_accuracy",
          group_label="route {}", source="ASE §3.1", ylim=FRACTION),
    Panel("Importance weights", "truncated IS weight", ("ase/is_weight_mean", "ase/is_weight_clipped_frac"),
          when="logged on steered tokens, from the first bank on"),
    Panel("Training reward", "mean reward", ("reward",), source="ASE Fig. 4"),
    Panel("Response length", "tokens", ("completions/mean_length",), source="ASE Fig. 4"),
)  # fmt: skip
"""Panels of the ASE diagnostics figure (the bank panels are kept, and say why, when no update happened)."""


METHOD_PREFIXES = (("oger/", "OGER"), ("ase/", "ASE-GRPO"), ("exgrpo/", "ExGRPO"))
"""(metric prefix, method name) of each method whose component logs under its own prefix."""


def run_method(frame) -> str:
    """The method a run's logs show: the names of the methods whose keys it logged (:data:`METHOD_PREFIXES`), joined
    by " + " (``"OGER + ASE-GRPO"``, ``"OGER"``, ``"ASE-GRPO"``, ``"ExGRPO"``), or ``"GRPO"`` (none of them)."""
    columns = [str(c) for c in frame.columns]
    found = [name for prefix, name in METHOD_PREFIXES if any(c.startswith(prefix) for c in columns)]
    return " + ".join(found) or "GRPO"


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
    ``outputs/plots/<label 1>+<label 2>+...`` (git-ignored; the overlaid runs named, none of their folders written
    into; a training folder and its evaluation folder count once)."""
    if len(run_dirs) == 1:
        return pathlib.Path(run_dirs[0]) / "plots"
    names = [re.sub(r"[^A-Za-z0-9._-]+", "_", n) for n in dict.fromkeys(run_labels(run_dirs, labels))]
    return pathlib.Path("outputs") / "plots" / "+".join(names)


def folder_kind(run_dir: str | pathlib.Path) -> str:
    """``"training"`` (a ``trainer_state.json``, also in a checkpoint), ``"evaluation"`` (``summary.json`` or
    ``temperature_sweep.json`` of ``examples/evaluate.py``), ``"training+evaluation"``, or ``"empty"``."""
    path = pathlib.Path(run_dir)
    try:
        find_trainer_state(path)
        training = True
    except FileNotFoundError:
        training = False
    evaluation = path.is_dir() and any((path / n).is_file() for n in ("summary.json", "temperature_sweep.json"))
    return {(True, True): "training+evaluation", (True, False): "training", (False, True): "evaluation"}.get(
        (training, evaluation), "empty")


def run_labels(run_dirs: Sequence[str | pathlib.Path], labels: Sequence[str] | None = None) -> list[str]:
    """The legend label of each folder: ``labels`` when given, else the run name (the folder's name).

    A training folder and its evaluation folder (``outputs/x`` and ``outputs/eval/x``: one is training-only, the
    other evaluation-only) are one run and get the same name, drawn in different figures. Folders of the same kind
    with the same name are told apart by their parent folders (``a/x``, ``b/x``), never by a number.

    Raises:
        ValueError: ``labels`` and ``run_dirs`` differ in length.
    """
    if labels is not None:
        if len(labels) != len(run_dirs):
            raise ValueError(f"{len(labels)} labels for {len(run_dirs)} runs")
        return list(labels)
    paths = [pathlib.Path(d).resolve() for d in run_dirs]
    kinds = [folder_kind(d) for d in run_dirs]
    depth = [1] * len(paths)
    while True:
        names = ["/".join(p.parts[-n:]) if len(p.parts) > 1 else str(p) for p, n in zip(paths, depth)]
        clashes = [i for i, n in enumerate(names) if any(
            j != i and names[j] == n and (kinds[j] == kinds[i] or "+" in kinds[i] + kinds[j] or paths[j] == paths[i])
            for j in range(len(names)))]
        grown = [i for i in clashes if depth[i] < len(paths[i].parts) - 1]
        if not grown:
            return names
        for i in grown:
            depth[i] += 1


# --------------------------------------------------------------------------------------------------
# Drawing
# --------------------------------------------------------------------------------------------------

_STYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def series_style(index: int, count: int) -> dict:
    """Line and marker style of series ``index`` of ``count`` drawn in one panel (all runs together).

    Series with equal values (e.g. the accuracies of steering routes that all stay at 0, or two runs with the same
    truncation ratio) would hide each other. Each gets its own line style and hollow marker shape, and the earlier
    ones are drawn wider and larger, so coinciding series stay visible as nested markers and stacked lines.

    Returns:
        keyword arguments of ``Axes.plot``: ``linestyle``, ``marker``, ``fillstyle``, ``linewidth``, ``markersize``.
    """
    rank = count - 1 - index  # 0 for the last (topmost) series
    return {"linestyle": _STYLES[index % len(_STYLES)], "marker": _MARKERS[index % len(_MARKERS)],
            "fillstyle": "none" if count > 1 else "full", "linewidth": 1.2 + 0.8 * rank,
            "markersize": 4.0 + 2.0 * rank}


def label_colors(labels: Sequence[str]) -> list[str]:
    """A colour per run label (matplotlib's ``C0``-``C9``) that does not depend on which other runs share the plot
    (issue 46: two overlaid plots swapped the runs' colours): the label's CRC-32 picks it, a final ``" (...)"`` left
    out (``" (baseline)"``, the method name ``plot_runs`` adds), so a run keeps its colour as a baseline; a label
    whose colour is taken in this plot gets the next free one."""
    import zlib

    colors, taken = [], set()
    for label in labels:
        key = re.sub(r" \([^()]*\)$", "", str(label))  # "base (baseline)", "run-a (OGER)": the run's own name
        index = zlib.crc32(key.encode("utf-8")) % 10
        for step in range(10):
            if (index + step) % 10 not in taken or len(taken) >= 10:
                index = (index + step) % 10
                break
        taken.add(index)
        colors.append(f"C{index}")
    return colors


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


def _empty_note(panel: Panel, runs: Mapping[str, object]) -> str:
    """Why a panel has no line: the keys no run logged, and when they are logged."""
    keys = ", ".join(panel.key_names())
    note = f"no {keys}\nin {'this run' if len(runs) == 1 else 'these runs'}"
    return note + (f":\n{textwrap.fill(panel.when, 44)}" if panel.when else "")


def readable_ylim(values: Sequence[float], bounds: tuple[float, float] | None = None) -> tuple[float, float] | None:
    """y limits for a panel: ``bounds`` (e.g. 0-1 for a fraction) with a 3% margin, else a band around a constant
    series (``v +- max(0.1 |v|, 0.5)``, where Matplotlib would zoom into float noise), else None (Matplotlib's)."""
    if bounds is not None:
        lo, hi = bounds
        pad = 0.03 * (hi - lo)
        return lo - pad, hi + pad
    if len(values) and max(values) - min(values) <= 1e-9 * max(1.0, abs(max(values))):
        center = float(values[0])
        half = max(0.1 * abs(center), 0.5)
        return center - half, center + half
    return None


def plot_training_dynamics(runs: Mapping[str, object], panels: Sequence[Panel], path: str | pathlib.Path | None = None,
                           title: str | None = None, smooth: int = 1):
    """Overlay the logged series of several training runs, one subplot per panel.

    Args:
        runs: ``{label: DataFrame from load_log_history}``.
        panels: e.g. :data:`SHARED_PANELS`, :data:`OGER_PANELS` or :data:`ASE_PANELS`. A panel no run has data for
            is kept, with a note naming the missing keys and when they are logged (``Panel.when``).
        path: PNG to write (``None``: do not save).
        title: figure title.
        smooth: centred rolling-mean window in steps (1: raw values).

    Returns:
        The ``Figure``; each drawn series is one ``Line2D`` (a run's colour, a line style per key); an empty panel
        has no line and one text.

    Raises:
        ValueError: no runs, ``smooth < 1``, or no panel has data in any run (lists the logged keys).
    """
    from matplotlib.ticker import MaxNLocator

    if not runs:
        raise ValueError("plot_training_dynamics: no runs")
    if smooth < 1:
        raise ValueError(f"smooth must be >= 1, got {smooth}")
    if not any(p.series(list(frame.columns)) for p in panels for frame in runs.values()):
        keys = sorted({c for frame in runs.values() for c in frame.columns})
        raise ValueError(f"none of the panels {[p.title for p in panels]} has data; the runs logged {keys}")
    fig, axes = _new_figure(len(panels))
    colors = label_colors(list(runs))
    for ax, panel in zip(axes, panels):
        lines = []  # (colour, legend name, values) of every series of every run
        for color, (label, frame) in zip(colors, runs.items()):
            series = panel.series(list(frame.columns))
            for column, suffix in series:
                values = frame[column].dropna()
                if not values.empty:
                    if smooth > 1:
                        values = values.rolling(smooth, center=True, min_periods=1).mean()
                    lines.append((color, f"{label}: {suffix}" if len(series) > 1 else label, values))
        steps, drawn = [], []
        for index, (color, name, values) in enumerate(lines):
            style = series_style(index, len(lines))  # nested markers: equal series of several runs stay visible
            if len(values) >= 12:  # dense series: lines only
                style["marker"] = None
            if len(values) == 1:  # a single point: a marker, no line
                style["linestyle"] = "none"
            ax.plot(values.index, values.values, color=color, label=name, **style)
            steps += list(values.index)
            drawn += [float(v) for v in values.values]
        ax.set_title(f"{panel.title} ({panel.source})" if panel.source else panel.title, fontsize=10)
        if not drawn:
            ax.text(0.5, 0.5, _empty_note(panel, runs), ha="center", va="center", fontsize=8, color="0.35",
                    transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        ax.set_xlabel("training step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if (limits := integer_step_limits(steps)) is not None:
            ax.set_xlim(*limits)
        if (ylim := readable_ylim(drawn, panel.ylim)) is not None:
            ax.set_ylim(*ylim)
        if panel.ylim == FRACTION:
            ax.set_yticks([0.0, 0.25, 0.5, 0.75, 1.0])
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
    colors = dict(zip(summaries, label_colors(list(summaries))))
    for ax, name in zip(axes, names):
        title, all_ks = name, set()
        for label, s in summaries.items():
            entry = s["benchmarks"].get(name)
            if entry is None:
                continue
            title = entry.get("title", name)
            ks = sorted(int(k) for k in entry["pass_at_k"])
            all_ks.update(ks)
            ax.plot(ks, [100 * entry["pass_at_k"][str(k)] for k in ks], marker="o", color=colors[label], label=label)
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
    for color, (label, sweep) in zip(label_colors(list(sweeps)), sweeps.items()):
        if len(sweep["temperatures"]) != len(sweep["average"]):
            raise ValueError(f"temperature sweep {label!r}: {len(sweep['temperatures'])} temperatures but "
                             f"{len(sweep['average'])} scores")
        ks.add(sweep["k"])
        ax.plot(sweep["temperatures"], [100 * v for v in sweep["average"]], marker="o", color=color, label=label)
    k_text = "/".join(str(k) for k in sorted(ks))
    ax.set_title(f"pass@{k_text} vs. temperature (OGER Fig. 6)", fontsize=10)
    ax.set_xlabel("decoding temperature")
    ax.set_ylabel(f"average pass@{k_text} (%)")
    ax.set_ylim(-3, 103)
    ax.set_yticks(range(0, 101, 20))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path)


def _with_method(label: str, method: str) -> str:
    """``label`` with the run's method appended, unless the label already names it (``"oger-run (OGER)"``)."""
    words = method.lower().replace("-grpo", "").split(" + ")
    return label if all(w in label.lower() for w in words) else f"{label} ({method})"


def plot_runs(run_dirs: Sequence[str | pathlib.Path], output_dir: str | pathlib.Path,
              labels: Sequence[str] | None = None, smooth: int = 1) -> list[pathlib.Path]:
    """Draw every figure the given folders have data for (``examples/plot.py``).

    A folder may be a training run (``trainer_state.json`` there or in a checkpoint), an evaluation folder
    (``summary.json``, optionally ``temperature_sweep.json``), or both; labels: :func:`run_labels`.

    Writes, when the data exist: ``training_dynamics.png`` (every training run on :data:`SHARED_PANELS`, labelled
    with its method: GRPO, OGER, ASE-GRPO, both or ExGRPO), ``training_dynamics_oger.png`` (runs with ``oger/`` keys,
    with the plain GRPO runs as baselines), ``training_dynamics_ase.png`` (runs with ``ase/`` keys, same),
    ``pass_at_k.png`` and ``temperature_sweep.png``.

    Returns:
        The written paths.

    Raises:
        ValueError: no run folder, or none of them holds anything to plot (names them).
        FileNotFoundError: a folder that does not exist.
    """
    from trl_explore.evaluation.runner import SUMMARY_JSON, load_summary

    if not run_dirs:
        raise ValueError("plot_runs: give at least one run folder")
    for run_dir in run_dirs:
        if not pathlib.Path(run_dir).exists():
            raise FileNotFoundError(f"run folder {run_dir} does not exist")
    names = run_labels(run_dirs, labels)
    out = pathlib.Path(output_dir)
    logs, summaries, sweeps = {}, {}, {}
    for label, run_dir in zip(names, run_dirs):
        run_dir = pathlib.Path(run_dir)
        try:
            logs[label] = load_log_history(run_dir)
        except FileNotFoundError:
            pass
        if (run_dir / SUMMARY_JSON).is_file():
            summaries[label] = load_summary(run_dir)
        if (run_dir / "temperature_sweep.json").is_file():
            sweeps[label] = json.loads((run_dir / "temperature_sweep.json").read_text())
    written = []
    methods = {label: run_method(frame) for label, frame in logs.items()}
    if logs:
        shared = {_with_method(label, methods[label]): frame for label, frame in logs.items()}
        kinds = list(dict.fromkeys(methods.values()))
        plot_training_dynamics(shared, SHARED_PANELS, out / "training_dynamics.png", smooth=smooth,
                               title="Training dynamics: " + " vs. ".join(kinds))
        written.append(out / "training_dynamics.png")
    plain = {_with_method(k, "GRPO"): v for k, v in logs.items() if methods[k] == "GRPO"}  # the baselines
    for prefix, panels, name, title in (("OGER", OGER_PANELS, "oger", "OGER training dynamics"),
                                        ("ASE", ASE_PANELS, "ase", "ASE-GRPO diagnostics")):
        runs = {k: v for k, v in logs.items() if prefix in methods[k]}
        if runs:
            plot_training_dynamics({**runs, **plain}, panels, out / f"training_dynamics_{name}.png", title=title,
                                   smooth=smooth)
            written.append(out / f"training_dynamics_{name}.png")
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
