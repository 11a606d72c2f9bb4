"""The guidance study's setting, read off the VALIDATION split before any run (issue 47 item 1).

Run (CPU, offline, about a minute: it grades saved completions and generates nothing):
``python benchmarks/guidance_setting.py [--variant chat_example] [--group-sizes 4 8] [--budget 64]``

The question: on which levels of the task ladder does plain GRPO start with mostly all-wrong groups (every sample of a
group graded 0: no reward spread, no gradient), while the teachers' worked solutions fit the token budget? It reads the
embedded policy's saved validation samples of ``benchmarks/ladder_pass_rates.py`` (8 per problem, temperature 1.0,
96 new tokens at most; ``benchmarks/results/ladder/<variant>/samples.jsonl``), grades them again with the trainers'
reward (``MathVerifyReward()``), and writes, per level:

- the pass rate and the share of problems never solved in 8 samples;
- ``all-wrong (G)``: the expected share of GRPO groups of ``G`` samples that are all wrong at the start. For a problem
  with ``c`` correct of its ``n`` samples, a group drawn from them without replacement is all wrong with probability
  ``C(n - c, G) / C(n, G)`` (hypergeometric; ``G <= n``); the share is its mean over the level's problems;
- the completion lengths (tokens) of the policy beside the longest teacher solution of each style
  (``benchmarks/results/ladder_teachers.json``), against ``--budget`` (the study's ``max_completion_length``).

The criterion (written before the runs, docs/reproduction.md): a level is a candidate when ``all-wrong (G) >= 0.5``
at the study's group size and every teacher style's longest solution is below the budget; whether GRPO "improves
little on its own" there is read off the validation pilots, never the test split.

Writes ``benchmarks/results/guidance/setting.json`` and ``setting.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = pathlib.Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "results" / "guidance"
sys.path.insert(0, str(REPO / "benchmarks"))


def all_wrong_probability(num_samples: int, num_correct: int, group_size: int) -> float:
    """P(a group of ``group_size`` drawn without replacement from ``num_samples`` samples, ``num_correct`` of them
    correct, holds no correct sample) = C(n - c, G) / C(n, G). Raises ValueError when ``group_size > num_samples``."""
    if not 0 < group_size <= num_samples or not 0 <= num_correct <= num_samples:
        raise ValueError(f"need 0 < group_size <= num_samples and 0 <= num_correct <= num_samples, got "
                         f"n={num_samples}, c={num_correct}, G={group_size}")
    return math.comb(num_samples - num_correct, group_size) / math.comb(num_samples, group_size)


def level_table(rows: list[dict], scores: list[float], group_sizes: list[int]) -> dict[str, dict]:
    """Per level: problems, pass rate, never-solved share, expected all-wrong share per group size, completion
    tokens (mean, max) of the sampled completions."""
    by_problem: dict[str, list] = {}
    levels: dict[str, list] = {}
    for row, score in zip(rows, scores):
        if row["kind"] != "sampled":
            continue
        by_problem.setdefault(row["problem_id"], []).append(score)
        levels.setdefault(row["level"], []).append(len(row["completion_ids"]))
    out = {}
    for level, lengths in levels.items():
        problems = {p: s for p, s in by_problem.items() if p.startswith(f"ladder:{level}:")}
        counts = [(len(s), sum(1 for x in s if x >= 0.5)) for s in problems.values()]
        out[level] = {
            "problems": len(counts),
            "pass_rate": sum(c for _, c in counts) / sum(n for n, _ in counts),
            "never": sum(1 for _, c in counts if c == 0) / len(counts),
            "all_wrong": {str(g): sum(all_wrong_probability(n, c, g) for n, c in counts) / len(counts)
                          for g in group_sizes},
            "tokens_mean": sum(lengths) / len(lengths), "tokens_max": max(lengths),
        }
    return out


def teacher_lengths(level: str) -> dict[str, int]:
    """The longest teacher solution (SmolLM2 tokens) of each style on ``level``, every split."""
    saved = json.loads((REPO / "benchmarks" / "results" / "ladder_teachers.json").read_text())["lengths"]
    return {key.split("/")[1]: int(v[2]) for key, v in saved.items() if key.split("/")[0] == level}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", default="chat_example")
    parser.add_argument("--group-sizes", nargs="+", type=int, default=[4, 8])
    parser.add_argument("--budget", type=int, default=64, help="the study's max_completion_length (tokens)")
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    args = parser.parse_args(argv)

    from ladder_pass_rates import OUT as SAMPLES
    from ladder_pass_rates import grade, validation_problems

    rows = [json.loads(line) for line in (SAMPLES / args.variant / "samples.jsonl").read_text().splitlines()]
    levels = sorted({r["level"] for r in rows}, key=[r["level"] for r in rows].index)
    prompts = {p["problem_id"]: p["prompt"] for p in validation_problems(levels, args.variant)}
    table = level_table(rows, grade(rows, prompts), args.group_sizes)
    for level, entry in table.items():
        entry["teacher_max_tokens"] = teacher_lengths(level)
        entry["teachers_fit"] = max(entry["teacher_max_tokens"].values()) < args.budget
        entry["candidate"] = {str(g): entry["all_wrong"][str(g)] >= 0.5 and entry["teachers_fit"]
                              for g in args.group_sizes}
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"variant": args.variant, "budget": args.budget, "group_sizes": args.group_sizes, "levels": table}
    (args.out / "setting.json").write_text(json.dumps(record, indent=1))
    head = ["level", "problems", "pass rate", "never (8)", *[f"all-wrong (G={g})" for g in args.group_sizes],
            "policy tokens mean / max", "longest teacher (terse / steps / narrative / check)",
            *[f"candidate (G={g})" for g in args.group_sizes]]
    lines = ["# Guidance study: the setting on the validation split (issue 47 item 1)", "",
             f"Written by `benchmarks/guidance_setting.py` from the saved `{args.variant}` validation samples of "
             "`benchmarks/ladder_pass_rates.py` (8 per problem, temperature 1.0), graded again by "
             f"`MathVerifyReward()`. Budget: {args.budget} completion tokens. all-wrong (G): the expected share of "
             "groups of G samples with no correct one at the start (hypergeometric over each problem's 8 samples). "
             "Candidate: all-wrong >= 0.5 and every teacher style shorter than the budget.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for level, e in table.items():
        t = e["teacher_max_tokens"]
        cells = [level, e["problems"], f"{e['pass_rate']:.2f}", f"{e['never']:.2f}",
                 *[f"{e['all_wrong'][str(g)]:.2f}" for g in args.group_sizes],
                 f"{e['tokens_mean']:.0f} / {e['tokens_max']}",
                 " / ".join(str(t.get(s, "-")) for s in ("terse", "steps", "narrative", "check")),
                 *["yes" if e["candidate"][str(g)] else "no" for g in args.group_sizes]]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    (args.out / "setting.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
