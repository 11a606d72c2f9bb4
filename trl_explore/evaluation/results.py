"""Evaluation folders and tables: write a run (per-sample files, summary, table), read it back, tabulate runs.

Files (:func:`save_run`): ``samples.jsonl`` and ``samples.parquet`` (one row per sample: benchmark, problem id,
sample index, route, temperature, completion, extracted answer, verdict, token count, truncated flag),
``summary.json`` and ``results.md`` (the table of :func:`results_table`).
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

SAMPLES_JSONL = "samples.jsonl"
SAMPLES_PARQUET = "samples.parquet"
SUMMARY_JSON = "summary.json"
RESULTS_MD = "results.md"


def save_run(output_dir: str | pathlib.Path, records: Sequence[Mapping[str, Any]], summary: Mapping[str, Any],
             label: str | None = None, baseline: Mapping[str, Any] | None = None) -> pathlib.Path:
    """Write ``samples.jsonl``, ``samples.parquet``, ``summary.json`` and ``results.md`` to ``output_dir``.

    Args:
        output_dir: folder (created).
        records: per-sample records.
        summary: run summary from :func:`~trl_explore.evaluation.runner.evaluate`.
        label: row label in the table (default: the model name).
        baseline: another run's summary; the table then shows deltas against it.

    Returns:
        ``output_dir`` as a ``Path``.
    """
    import pandas as pd

    out = pathlib.Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / SAMPLES_JSONL, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    pd.DataFrame(list(records)).to_parquet(out / SAMPLES_PARQUET, index=False)
    summary = {**summary, "label": label or summary.get("label") or str(summary.get("model"))}
    (out / SUMMARY_JSON).write_text(json.dumps(summary, indent=2))
    runs = {summary["label"]: summary}
    baseline_label = None
    if baseline is not None:
        baseline_label = f"{run_label(baseline)} (baseline)"
        runs = {baseline_label: baseline, **runs}
    notes = [line for name, s in runs.items() for line in truncation_lines(s, name)]
    (out / RESULTS_MD).write_text(results_table(runs, baseline=baseline_label) + "\n" + "".join(
        "\n" + line for line in notes) + ("\n" if notes else ""))
    return out


def run_label(summary: Mapping[str, Any]) -> str:
    """The label a run was saved with (``--label``; issue 46: a baseline's legend and row used its model name), else
    its model name."""
    return str(summary.get("label") or summary.get("model"))


CUT_OFF_WARNING_FRACTION = 0.5
"""At or above this share of samples cut off at the token cap, the evaluation warns: most answers were lost, and the
scores say more about the cap than the policy (the issue-46 base model: 94% cut off, its one "correct" sample
cut-off prose; the same threshold as the readiness check's "barely",
:data:`trl_explore.readiness.BARELY_TRUNCATED_FRACTION`)."""


def truncation_lines(summary: Mapping[str, Any], label: str) -> list[str]:
    """One line per benchmark of a run: the share of samples cut off at the cap, and the grading rule of cut-off
    answers; ``WARNING: ...`` at or above :data:`CUT_OFF_WARNING_FRACTION`."""
    lines = []
    for name, entry in summary.get("benchmarks", {}).items():
        cut = entry.get("truncated_fraction")
        if cut is None:
            continue
        text = (f"{label}, {entry.get('title', name)}: {100 * cut:.0f}% of the samples cut off at the token cap "
                f"(graded as in training: a cut-off answer counts only when boxed or after an answer phrase)")
        if cut >= CUT_OFF_WARNING_FRACTION:
            text = (f"WARNING: {text}; most answers were lost: raise --max_new_tokens, or read these scores as the "
                    f"cap's")
        lines.append(text)
    return lines


def load_summary(run_dir: str | pathlib.Path) -> dict:
    """The ``summary.json`` of an evaluation folder (or the file itself).

    Raises:
        FileNotFoundError: no summary there.
        ValueError: the summary has no benchmark results.
    """
    path = pathlib.Path(run_dir)
    path = path / SUMMARY_JSON if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"no evaluation summary at {path}")
    text = path.read_text()
    if not text.strip():
        raise ValueError(f"{path}: the evaluation summary file is empty")
    try:
        summary = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err.msg})") from None
    if not isinstance(summary, dict) or not summary.get("benchmarks"):
        raise ValueError(f"{path}: the evaluation summary has no benchmark results")
    return summary


def load_samples(run_dir: str | pathlib.Path) -> list[dict]:
    """The per-sample records of an evaluation folder (``samples.parquet``, else ``samples.jsonl``),
    or of such a file itself; :func:`~trl_explore.evaluation.scoring.summarize_benchmark` re-scores them.

    Raises:
        FileNotFoundError: no samples file.
        ValueError: the file has no records, or a record lacks a required field (names the row).
    """
    import pandas as pd

    path = pathlib.Path(run_dir)
    if path.is_dir():
        path = path / SAMPLES_PARQUET if (path / SAMPLES_PARQUET).is_file() else path / SAMPLES_JSONL
    if not path.is_file():
        raise FileNotFoundError(f"no per-sample results at {path}")
    if path.suffix == ".parquet":
        records = pd.read_parquet(path).to_dict(orient="records")
    else:
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not records:
        raise ValueError(f"{path}: the results file has no per-sample records")
    required = ("benchmark", "problem_id", "sample_index", "correct")
    for index, record in enumerate(records):
        missing = [k for k in required if k not in record]
        if missing:
            raise ValueError(f"{path}, record {index}: missing field(s) {missing}")
    return records


def _cell(value: float, base: float | None) -> str:
    text = f"{100 * value:.2f}"
    if base is not None:
        text += f" ({100 * (value - base):+.2f})"
    return text


def results_table(runs: Mapping[str, Mapping[str, Any]], baseline: str | None = None,
                  layout: str | None = None) -> str:
    """A markdown table of several runs: a row per run, a column per benchmark, then the averages.

    Layouts:

    * ``"oger"`` (OGER Table 1): each cell is pass@1 in percent (mean over the ``n`` samples: 32
      for AIME/AMC, 1 elsewhere under the OGER protocol); columns "Math AVG" and "OOD" (the mean of
      the out-of-domain benchmarks).
    * ``"ase"`` (ASE Tables 1-2): each cell is ``Mean@n / Pass@n`` in percent; "Math Avg." and
      "OOD Avg." columns.

    With ``baseline`` (a key of ``runs``), every other run's cells carry the difference in points,
    ``31.77 (+14.37)``, as in OGER Table 1.

    Args:
        runs: ``{label: run summary}`` (from :func:`~trl_explore.evaluation.runner.evaluate` / :func:`load_summary`).
        baseline: label of the baseline run, or ``None``.
        layout: ``"oger"`` or ``"ase"`` (default: the first run's ``layout``, else ``"ase"``).

    Returns:
        The table as a string.

    Raises:
        ValueError: no runs, an unknown baseline label, or an unknown layout.
    """
    if not runs:
        raise ValueError("results_table: no runs")
    if baseline is not None and baseline not in runs:
        raise ValueError(f"results_table: baseline {baseline!r} is not one of the runs {list(runs)}")
    layout = layout or next(iter(runs.values())).get("layout", "ase")
    if layout not in ("oger", "ase"):
        raise ValueError(f"layout must be 'oger' or 'ase', got {layout!r}")
    names: list[str] = []
    for summary in runs.values():
        names += [n for n in summary["benchmarks"] if n not in names]
    titles = {n: next(s["benchmarks"][n]["title"] for s in runs.values() if n in s["benchmarks"]) for n in names}
    domains = [d for d in ("math", "ood") if any(d in s.get("averages", {}) for s in runs.values())]
    avg_titles = {"math": "Math AVG" if layout == "oger" else "Math Avg.",
                  "ood": "OOD" if layout == "oger" else "OOD Avg."}
    base = runs[baseline] if baseline is not None else None

    def cell(entry: Mapping | None, base_entry: Mapping | None) -> str:
        if entry is None:
            return "-"
        if layout == "oger":
            return _cell(entry["mean"], base_entry["mean"] if base_entry else None)
        return _cell(entry["mean"], base_entry["mean"] if base_entry else None) + " / " + _cell(
            entry["pass_at_n"], base_entry["pass_at_n"] if base_entry else None
        )

    header = ["Model"] + [titles[n] for n in names] + [avg_titles[d] for d in domains]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + [":---:"] * (len(header) - 1)) + "|"]
    for label, summary in runs.items():
        use_base = base if (base is not None and label != baseline) else None
        cells = [cell(summary["benchmarks"].get(n), use_base["benchmarks"].get(n) if use_base else None)
                 for n in names]
        cells += [
            cell(summary.get("averages", {}).get(d), use_base.get("averages", {}).get(d) if use_base else None)
            for d in domains
        ]
        lines.append("| " + " | ".join([label] + cells) + " |")
    ns = sorted({b["num_samples"] for s in runs.values() for b in s["benchmarks"].values()})
    note = (
        f"pass@1 (%), mean over n = {'/'.join(map(str, ns))} samples per problem"
        if layout == "oger"
        else f"Mean@n / Pass@n (%), n = {'/'.join(map(str, ns))}"
    )
    return "\n".join(lines) + f"\n\n{note}."
