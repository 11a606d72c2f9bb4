"""Per-teacher statistics of an offline data set: OGER Table 4 and Figure 4 (App. A.1).

Counting rules, per teacher (all lengths in policy tokens):

* ``truncated``: dropped by the source (cut by the teacher's own length limit).
* ``duplicates``: exact repeats of a completion of the same teacher for the same problem.
* ``unjudged``: completions of problems whose gold answer the verifier cannot parse.
* ``judged``: every other completion; ``correct`` of them verify against the gold answer.
* ``too_long``: judged completions longer than ``max_length`` (correct or not).
* ``valid``: correct AND not too long: the completions that enter the data set (Table 4's
  "Valid Samples"); ``mean_length`` is their mean length.
* ``accuracy``: ``100 * correct / judged`` (Table 4's "Accuracy (%)", before the length filter).
"""

from __future__ import annotations

import json
import pathlib
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class CompletionVerdict:
    """What the filters decided for one completion.

    Attributes:
        problem_id, teacher: where it comes from.
        n_tokens: length in policy tokens.
        correct: Math-Verify verdict; ``None`` when not judged (duplicate or unparseable gold).
        duplicate: an exact repeat (same problem, teacher, text).
    """

    problem_id: str
    teacher: str
    n_tokens: int
    correct: bool | None
    duplicate: bool = False

    def is_valid(self, max_length: int) -> bool:
        """Kept in the data set: correct and at most ``max_length`` tokens."""
        return bool(self.correct) and not self.duplicate and self.n_tokens <= max_length


def dropped_solutions(verdicts, max_length: int) -> list[tuple[str, str, str]]:
    """``(problem id, teacher, why)`` of each judged completion the filters left out: "graded wrong against the
    gold", "longer than max_length=... tokens (N)", "an exact duplicate"; completions not graded (an unreadable or
    undecided gold, a grading timeout) are counted elsewhere (``BuildReport``)."""
    out = []
    for v in verdicts:
        if v.duplicate:
            out.append((v.problem_id, v.teacher, "an exact duplicate"))
        elif v.correct is False:
            out.append((v.problem_id, v.teacher, "graded wrong against the gold"))
        elif v.correct and v.n_tokens > max_length:
            out.append((v.problem_id, v.teacher, f"longer than max_length={max_length} tokens ({v.n_tokens})"))
    return out


@dataclass(frozen=True)
class TeacherStats:
    """One row of Table 4 plus the counts that explain it (see the module docstring)."""

    teacher: str
    valid: int
    mean_length: float | None
    accuracy: float | None
    judged: int
    correct: int
    too_long: int
    duplicates: int
    truncated: int
    unjudged: int


def teacher_stats(
    verdicts: Sequence[CompletionVerdict], max_length: int, truncated: Mapping[str, int] | None = None
) -> list[TeacherStats]:
    """Table 4 rows, one per teacher (sorted by name), from the per-completion verdicts.

    Args:
        verdicts: one per completion received from the sources.
        max_length: the length filter, in tokens.
        truncated: per teacher, completions the sources dropped as truncated.

    Returns:
        ``list[TeacherStats]``; ``mean_length``/``accuracy`` are ``None`` when nothing to average.
    """
    truncated = dict(truncated or {})
    teachers = sorted({v.teacher for v in verdicts} | set(truncated))
    rows = []
    for teacher in teachers:
        mine = [v for v in verdicts if v.teacher == teacher]
        judged = [v for v in mine if v.correct is not None]
        valid_lengths = [v.n_tokens for v in mine if v.is_valid(max_length)]
        correct = sum(1 for v in judged if v.correct)
        rows.append(
            TeacherStats(
                teacher=teacher,
                valid=len(valid_lengths),
                mean_length=sum(valid_lengths) / len(valid_lengths) if valid_lengths else None,
                accuracy=100.0 * correct / len(judged) if judged else None,
                judged=len(judged),
                correct=correct,
                too_long=sum(1 for v in judged if v.n_tokens > max_length),
                duplicates=sum(1 for v in mine if v.duplicate),
                truncated=truncated.get(teacher, 0),
                unjudged=sum(1 for v in mine if v.correct is None and not v.duplicate),
            )
        )
    return rows


def total_stats(rows: Sequence[TeacherStats]) -> TeacherStats:
    """The ``"All"`` row: counts summed; mean length and accuracy re-weighted by ``valid``/``judged``."""
    valid = sum(r.valid for r in rows)
    judged = sum(r.judged for r in rows)
    correct = sum(r.correct for r in rows)
    length_sum = sum(r.mean_length * r.valid for r in rows if r.valid)
    return TeacherStats(
        teacher="All",
        valid=valid,
        mean_length=length_sum / valid if valid else None,
        accuracy=100.0 * correct / judged if judged else None,
        judged=judged,
        correct=correct,
        too_long=sum(r.too_long for r in rows),
        duplicates=sum(r.duplicates for r in rows),
        truncated=sum(r.truncated for r in rows),
        unjudged=sum(r.unjudged for r in rows),
    )


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.2f}"


def stats_markdown(rows: Sequence[TeacherStats]) -> str:
    """Markdown table: Table 4's three columns, then the explaining counts, then an ``All`` row."""
    names = ["Teacher", "Valid Samples", "Avg. Length", "Accuracy (%)", "Judged", "Correct", "Too long"]
    names += ["Duplicates", "Truncated", "Unjudged"]
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    for r in [*rows, total_stats(rows)] if rows else []:
        cells = [r.teacher, f"{r.valid:,}", _fmt(r.mean_length), _fmt(r.accuracy), f"{r.judged:,}", f"{r.correct:,}"]
        cells += [f"{r.too_long:,}", f"{r.duplicates:,}", f"{r.truncated:,}", f"{r.unjudged:,}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def correct_lengths_by_teacher(verdicts: Sequence[CompletionVerdict]) -> dict[str, list[int]]:
    """Lengths (tokens) of the correct, non-duplicate completions of each teacher: Figure 4's data."""
    out: dict[str, list[int]] = {}
    for v in verdicts:
        if v.correct and not v.duplicate:
            out.setdefault(v.teacher, []).append(v.n_tokens)
    return dict(sorted(out.items()))


def length_histogram_range(lengths: Sequence[int], max_length: int) -> tuple[int, str]:
    """The x-range of the length histogram, from the data, and a note on what it leaves out.

    The axis runs to the longest trajectory (not to ``max_length``, which is often far beyond it: 8,192 against
    trajectories mostly under 2,000 tokens), or, when a few outliers lie beyond 3x the 99th percentile, to 1.2x
    that percentile (engineering choice: the bulk stays readable; the outliers are counted in the note).

    Args:
        lengths: all trajectory lengths (tokens).
        max_length: the length filter; the note says where it lies when it is off the axis.

    Returns:
        ``(upper, note)``: the axis' right end in tokens, and a sentence (``""`` when nothing is left out).

    Raises:
        ValueError: no lengths.
    """
    import math

    if not len(lengths):
        raise ValueError("no lengths to plot")
    ordered = sorted(lengths)
    longest = ordered[-1]
    p99 = ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]  # nearest-rank percentile
    upper, notes = longest, []
    if p99 > 0 and longest > 3 * p99:
        upper = math.ceil(1.2 * p99)
        beyond = sum(1 for n in ordered if n > upper)
        notes.append(f"{beyond} {'trajectory' if beyond == 1 else 'trajectories'} longer than {upper} tokens not "
                     f"shown (up to {longest})")
    if max_length > longest:
        notes.append(f"max_length = {max_length} lies beyond the longest trajectory ({longest} tokens)")
    elif max_length > upper:
        notes.append(f"max_length = {max_length} lies beyond the axis")
    return max(upper, 1), "; ".join(notes)


def plot_length_distribution(
    lengths: Mapping[str, Sequence[int]], max_length: int, path: str | pathlib.Path, bins: int = 40
) -> pathlib.Path:
    """Figure 4: histogram of trajectory lengths per teacher, with the ``max_length`` cut marked.

    Args:
        lengths: ``{teacher: lengths in tokens}`` (e.g. from :func:`correct_lengths_by_teacher`).
        max_length: drawn as a dashed vertical line when it lies on the axis, else named in the title.
        path: output PNG.
        bins: number of bins shared by all teachers, over :func:`length_histogram_range`.

    Returns:
        ``pathlib.Path`` of the written PNG (Agg backend: no display needed).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = pathlib.Path(path)
    everything = [n for values in lengths.values() for n in values]
    fig, ax = plt.subplots(figsize=(7, 4))
    title = "Length distribution of correct teacher trajectories"
    if everything:
        upper, note = length_histogram_range(everything, max_length)
        edges = [upper * i / bins for i in range(bins + 1)]
        for teacher, values in lengths.items():
            ax.hist(values, bins=edges, histtype="step", linewidth=1.5, label=f"{teacher} (n={len(values)})")
        if max_length <= upper:
            ax.axvline(max_length, color="black", linestyle="--", label=f"max_length = {max_length}")
        ax.set_xlim(0, upper)
        ax.legend()
    else:
        note = "no correct teacher trajectory"
    notes = [textwrap.fill(f"({part})", 90) for part in note.split("; ")] if note else []
    ax.set_title("\n".join([title, *notes]), fontsize=10 if note else 12)
    ax.set_xlabel("Length (policy tokens)")
    ax.set_ylabel("Trajectories")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


@dataclass
class BuildReport:
    """Everything the builder counted: Table 4 rows, problem counts, split sizes, timing.

    Attributes:
        teachers: Table 4 rows (:func:`teacher_stats`).
        max_length: the length filter, tokens.
        problems: distinct problems received.
        unparseable_gold: ids of problems whose gold answer the verifier cannot parse (left out of
            both splits: they cannot be scored).
        without_valid: problems kept with empty offline lists (no valid completion; OGER then keeps
            all N online completions for them).
        train_problems, test_problems: split sizes.
        undecided: teacher solutions whose grading ran past the grader's timeout and its retry (left out of this
            build, not cached; a later build grades them again).
        undecided_gold: ids of problems whose gold answer could not be read within both budgets (left out of both
            splits, not cached).
        seconds: wall time of the build.
        lengths: Figure 4's data (:func:`correct_lengths_by_teacher`).
        dropped: ``(problem id, teacher, why)`` of each teacher solution left out (:func:`dropped_solutions`).
        without_valid_ids: the ids of the ``without_valid`` problems.
    """

    teachers: list[TeacherStats]
    max_length: int
    problems: int
    unparseable_gold: list[str]
    without_valid: int
    train_problems: int
    test_problems: int
    undecided: int = 0
    undecided_gold: list[str] = field(default_factory=list)
    seconds: float = 0.0
    lengths: dict[str, list[int]] = field(default_factory=dict, repr=False)
    dropped: list[tuple[str, str, str]] = field(default_factory=list)
    without_valid_ids: list[str] = field(default_factory=list)

    def markdown(self, max_dropped: int = 50) -> str:
        """The per-teacher table and a summary line, in markdown."""
        summary = (
            f"Problems: {self.problems} received, {len(self.unparseable_gold)} with an unparseable gold answer "
            f"(left out), {self.train_problems} train / {self.test_problems} test, {self.without_valid} without a "
            f"valid offline completion (kept, empty lists). Undecided (graded past the timeout twice, not cached): "
            f"{self.undecided} teacher solutions, {len(self.undecided_gold)} gold answers. "
            f"Length filter: <= {self.max_length} policy tokens. "
            f"Built in {self.seconds:.1f} s."
        )
        text = stats_markdown(self.teachers) + "\n\n" + summary + "\n"
        if self.dropped:  # issue 46: each dropped solution named, not only counted
            shown = [f"- problem {pid!r}, teacher {teacher!r}: {why}"
                     for pid, teacher, why in self.dropped[:max_dropped]]
            more = [f"- ... and {len(self.dropped) - max_dropped} more"] if len(self.dropped) > max_dropped else []
            text += f"\nDropped teacher solutions ({len(self.dropped)}):\n" + "\n".join(shown + more) + "\n"
        if self.without_valid_ids:
            ids = ", ".join(repr(i) for i in self.without_valid_ids[:max_dropped])
            more = f" and {len(self.without_valid_ids) - max_dropped} more" if len(
                self.without_valid_ids) > max_dropped else ""
            text += (f"\nProblems left without a teacher solution ({len(self.without_valid_ids)}; kept with an empty "
                     f"list, dropped by the OGER recipes' min_offline_completions: 1): {ids}{more}\n")
        return text

    def to_dict(self) -> dict:
        """JSON-ready dict (``lengths`` left out; the ``All`` row added as ``total``)."""
        out = asdict(self)
        out.pop("lengths")
        out["total"] = asdict(total_stats(self.teachers)) if self.teachers else None
        return out

    def save(self, out_dir: str | pathlib.Path, plot: bool = True) -> dict[str, pathlib.Path]:
        """Write ``offline_stats.md``, ``offline_stats.json`` and (if ``plot``) ``offline_lengths.png``.

        Returns:
            ``{"markdown": path, "json": path, "figure": path}`` of the files written.
        """
        out_dir = pathlib.Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = {"markdown": out_dir / "offline_stats.md", "json": out_dir / "offline_stats.json"}
        paths["markdown"].write_text(self.markdown())
        paths["json"].write_text(json.dumps(self.to_dict(), indent=2))
        if plot:
            paths["figure"] = plot_length_distribution(self.lengths, self.max_length, out_dir / "offline_lengths.png")
        return paths
