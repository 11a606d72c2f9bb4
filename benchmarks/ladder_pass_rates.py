"""Pass rates of the embedded policy on the task ladder's VALIDATION split, per level (issue 23 item 1).

Run (CPU, offline; the package's `defaults` extra installed):
``python benchmarks/ladder_pass_rates.py [--variant chat_example] [--levels ...] [--problems-per-level 32] [--k 8]``

What it does:

1. Takes the first ``--problems-per-level`` validation problems of each level (never the test split) of the default
   ladder, in draw order (:func:`validation_problems`), with the variant's prompt format.
2. Samples ``--k`` completions per problem from SmolLM2-135M-Instruct (the embedded policy, float32) as TRL's
   transformers path does: its chat template, temperature 1.0, top-p 1, no top-k, at most ``--max-new-tokens`` new
   tokens, ``generate`` on batches of ``--batch-size`` rows (left padding); then one greedy completion per problem.
3. Saves every completion (text and token ids up to and including EOS, as TRL keeps them) to
   ``<out>/<variant>/samples.jsonl`` as soon as its batch is done: a killed run resumes where it stopped, and
   ``--grade-only`` grades the saved completions again (e.g. after the grader changes) without generating.
4. Grades them with the package's default reward, ``MathVerifyReward()`` (the trainers' ``R_m``), called as TRL calls
   it, and writes ``<out>/<variant>/summary.json`` and the markdown table of every variant measured so far to
   ``benchmarks/results/ladder_pass_rates.md``.

Per level: mean pass rate, the fraction of problems whose k samples mix right and wrong (also for the first 4
samples: a GRPO group of 4), the quartiles of the per-problem pass rates, greedy accuracy, the fraction of
completions that ended (EOS) within the budget, and their mean length.

Variants (``--variant``, the ladder's ``prompt_format``; ``--name`` names the cache folder, default the variant):
``chat_example`` (the ladder's default), ``user_example``, ``system_example``, ``plain`` (see
``trl_explore.data.ladder.ladder_prompt``). Under a loaded host ``--threads 1`` generated about twice as fast as 2
threads (a thread that waits for the other at every op); the thread count changes float sums, hence the exact
samples, so resume a run with the thread count it started with.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import pathlib
import re
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = pathlib.Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "results" / "ladder"
TABLE = REPO / "benchmarks" / "results" / "ladder_pass_rates.md"
VARIANTS = {name: {"prompt_format": name} for name in ("user_example", "chat_example", "system_example", "plain")}


def validation_problems(levels: list[str], variant: str) -> list[dict]:
    """Every validation problem of the default ladder in ``levels``, level by level in draw order (an order that does
    not depend on which levels are asked for, unlike the split's shuffled rows), with the variant's prompt."""
    from trl_explore.data.ladder import ladder_problems, ladder_row

    problems = ladder_problems()["validation"]  # the default sizes: the problems of load_split("ladder", ...)
    out = []
    for level in levels:
        rows = [ladder_row(p, prompt_format=VARIANTS[variant]["prompt_format"]) for p in problems if p.level == level]
        out += [{k: r[k] for k in ("problem_id", "prompt", "answer", "level")} for r in rows]
    return out


def pick_problems(levels: list[str], per_level: int, variant: str) -> list[dict]:
    """The first ``per_level`` validation problems of each level (draw order, see :func:`validation_problems`)."""
    problems = validation_problems(levels, variant)
    out = []
    for level in levels:
        rows = [p for p in problems if p["level"] == level][:per_level]
        if len(rows) < per_level:
            raise SystemExit(f"level {level!r} has only {len(rows)} validation problems")
        out += rows
    return out


def _done(samples_file: pathlib.Path) -> set[tuple[str, str]]:
    if not samples_file.is_file():
        return set()
    return {(r["problem_id"], r["kind"]) for r in map(json.loads, samples_file.read_text().splitlines()) if r}


def generate(problems: list[dict], args, samples_file: pathlib.Path) -> float:
    """Sampled (k per problem) and greedy (1 per problem) completions, appended one JSON line each.

    Returns:
        The seconds spent in ``generate``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_explore.defaults import default_policy_path

    done = _done(samples_file)
    torch.set_num_threads(args.threads)
    path = default_policy_path()
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    eos, total = tokenizer.eos_token_id, 0.0
    kinds = (("sampled", args.k),) + ((("greedy", 1),) if args.greedy else ())
    for kind, per_problem in kinds:
        todo = [p for p in problems if (p["problem_id"], kind) not in done]
        step = max(1, args.batch_size // per_problem)
        for first in range(0, len(todo), step):
            batch = todo[first:first + step]
            texts = [tokenizer.apply_chat_template(p["prompt"], add_generation_prompt=True, tokenize=False)
                     for p in batch for _ in range(per_problem)]
            inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            # seeded by the batch's first problem id: a resumed run samples what an uninterrupted one would (with the
            # same --threads: the thread count changes float sums, hence samples)
            digest = hashlib.sha256(f"{batch[0]['problem_id']}:{kind}".encode()).digest()
            torch.manual_seed(args.seed + int.from_bytes(digest[:4], "big"))
            sampling = dict(do_sample=True, temperature=1.0, top_p=1.0, top_k=0) if kind == "sampled" \
                else dict(do_sample=False)
            t0 = time.perf_counter()
            with torch.no_grad():
                out = model.generate(**inputs, max_new_tokens=args.max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                     **sampling)
            seconds = time.perf_counter() - t0
            total += seconds
            new = out[:, inputs["input_ids"].shape[1]:].tolist()
            with samples_file.open("a") as f:
                for i, ids in enumerate(new):
                    problem = batch[i // per_problem]
                    finished = eos in ids
                    ids = ids[:ids.index(eos) + 1] if finished else ids
                    f.write(json.dumps({"problem_id": problem["problem_id"], "level": problem["level"], "kind": kind,
                                        "sample": i % per_problem, "answer": problem["answer"],
                                        "finished": finished, "completion_ids": ids,
                                        "completion": tokenizer.decode(ids, skip_special_tokens=True)}) + "\n")
            print(f"[ladder] {kind}: {first + len(batch)}/{len(todo)} problems, {len(texts)} rows in {seconds:.0f} s "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
    return total


def grade(rows: list[dict], prompts: dict[str, list]) -> list[float]:
    """``MathVerifyReward()`` (default mode) of each saved completion, called as TRL calls it."""
    from trl_explore.rewards.math_verify_reward import MathVerifyReward

    reward = MathVerifyReward()
    scores = reward(prompts=[prompts[r["problem_id"]] for r in rows],
                    completions=[[{"role": "assistant", "content": r["completion"]}] for r in rows],
                    completion_ids=[r["completion_ids"] for r in rows],
                    answer=[r["answer"] for r in rows], problem_id=[r["problem_id"] for r in rows])
    if any(s is None for s in scores):
        raise SystemExit("a gold answer could not be parsed: the ladder's answers are integers, this is a bug")
    return scores


def quartiles(values: list[float]) -> list[float]:
    """25th, 50th and 75th percentiles (``statistics.quantiles``, inclusive method)."""
    return [round(q, 3) for q in statistics.quantiles(values, n=4, method="inclusive")]


def summarize(rows: list[dict], scores: list[float], levels: list[str]) -> dict:
    """Per level: the figures of the table (see the module docstring)."""
    out = {}
    for level in levels:
        sampled = [(r, s) for r, s in zip(rows, scores) if r["level"] == level and r["kind"] == "sampled"]
        greedy = [s for r, s in zip(rows, scores) if r["level"] == level and r["kind"] == "greedy"]
        per_problem: dict[str, list[float]] = {}
        for r, s in sorted(sampled, key=lambda x: (x[0]["problem_id"], x[0]["sample"])):
            per_problem.setdefault(r["problem_id"], []).append(s)
        rates = [sum(v) / len(v) for v in per_problem.values()]
        first4 = [v[:4] for v in per_problem.values()]
        out[level] = {
            "problems": len(per_problem),
            "samples": len(sampled),
            "pass_rate": round(statistics.fmean(rates), 3),
            "mixed": round(sum(0 < r < 1 for r in rates) / len(rates), 3),
            "mixed_first4": round(sum(0 < sum(v) < len(v) for v in first4) / len(first4), 3),
            "never": round(sum(r == 0 for r in rates) / len(rates), 3),
            "always": round(sum(r == 1 for r in rates) / len(rates), 3),
            "quartiles": quartiles(rates),
            "greedy": round(statistics.fmean(greedy), 3) if greedy else None,
            "finished": round(statistics.fmean(r["finished"] for r, _ in sampled), 3),
            "mean_tokens": round(statistics.fmean(len(r["completion_ids"]) for r, _ in sampled), 1),
            # graded 1 although the gold number is written nowhere (e.g. the question's expression echoed and
            # evaluated by Math-Verify): likely false positives, for the grader's guard-rails to remove
            "unwritten_1s": sum(s == 1.0 and not re.search(rf"(?<![\d.]){r['answer']}(?![\d.])", r["completion"])
                                for r, s in sampled),
        }
    return out


def operator_breakdown(rows: list[dict], scores: list[float]) -> dict[str, dict]:
    """Per level and operator pattern (``+``, ``-+``, ...; ``+ carry`` / ``- borrow`` for the two-operand levels with
    a two-digit operand): problems, sampled pass rate, greedy accuracy."""
    table: dict[str, dict] = {}
    for r, s in zip(rows, scores):
        expression = r["problem_id"].split(":", 2)[2].removeprefix("word:")
        ops = re.sub(r"\d", "", expression)
        if len(ops) == 1 and r["level"] in ("two_plus_one", "two_digit"):
            a, b = map(int, re.split(r"[-+]", expression))
            if (ops == "+" and a % 10 + b % 10 >= 10) or (ops == "-" and a % 10 < b % 10):
                ops += " carry" if ops == "+" else " borrow"
        entry = table.setdefault(f"{r['level']} {ops}", {"problems": set(), "sampled": [], "greedy": []})
        entry["problems"].add(r["problem_id"])
        entry[r["kind"]].append(s)
    return {key: {"problems": len(e["problems"]), "pass_rate": round(statistics.fmean(e["sampled"]), 3),
                  "greedy": round(statistics.fmean(e["greedy"]), 3) if e["greedy"] else None}
            for key, e in sorted(table.items())}


def write_table() -> None:
    """``ladder_pass_rates.md``: one table per variant measured (every ``summary.json`` under ``OUT``)."""
    lines = ["# Embedded policy on the task ladder (validation split)", "",
             "SmolLM2-135M-Instruct (embedded, float32), its chat template, temperature 1.0, top-p 1, no top-k, "
             "HF `generate`; graded by `MathVerifyReward()` (default mode). Written by "
             "`benchmarks/ladder_pass_rates.py`; samples cached under `benchmarks/results/ladder/<variant>/`.", "",
             "Columns: mean per-problem pass rate; mixed = fraction of problems with 0 < pass < 1 over all k samples "
             "(and over the first 4, a GRPO group of 4); never / always = pass 0 / 1; quartiles of the per-problem "
             "pass rates; greedy accuracy (one greedy completion per problem); finished = completions that ended with "
             "EOS within the budget; mean completion length in tokens; samples graded 1 whose text never writes "
             "the gold number (likely false positives, e.g. an echoed question expression that Math-Verify "
             "evaluates).", ""]
    for summary_file in sorted(OUT.glob("*/summary.json")):
        s = json.loads(summary_file.read_text())
        lines += [f"## `{s['name']}`: prompt format `{s['settings']['prompt_format']}`", "",
                  f"{s['date']}; {s['k']} samples per problem, at most {s['max_new_tokens']} new tokens; generation "
                  + (f"{s['generation_seconds']:.0f} s" if s["generation_seconds"] else "time not recorded")
                  + " on a shared 2-core host (loaded by other jobs: not a timing).", "",
                  "| level | problems | pass rate | mixed (k) | mixed (first 4) | never | always | quartiles | greedy "
                  "| finished | tokens | 1s, gold unwritten |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for level, f in s["levels"].items():
            lines.append(f"| {level} | {f['problems']} | {f['pass_rate']:.2f} | {f['mixed']:.2f} | "
                         f"{f['mixed_first4']:.2f} | {f['never']:.2f} | {f['always']:.2f} | "
                         f"{' / '.join(f'{q:.2f}' for q in f['quartiles'])} | "
                         f"{'-' if f['greedy'] is None else format(f['greedy'], '.2f')} | {f['finished']:.2f} | "
                         f"{f['mean_tokens']:.0f} | {f.get('unwritten_1s', '-')} |")
        if s.get("operators"):
            lines += ["", "<details><summary>By operator pattern</summary>", "",
                      "| level and operators | problems | pass rate | greedy |", "|---|---|---|---|"]
            for key, e in s["operators"].items():
                greedy = "-" if e["greedy"] is None else f"{e['greedy']:.2f}"
                lines.append(f"| {key} | {e['problems']} | {e['pass_rate']:.2f} | {greedy} |")
            lines += ["", "</details>"]
        if s.get("note"):
            lines += ["", s["note"]]
        lines.append("")
    TABLE.write_text("\n".join(lines))


def main() -> None:
    from trl_explore.data.ladder import LEVELS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", default="chat_example", choices=sorted(VARIANTS))
    parser.add_argument("--levels", nargs="+", default=list(LEVELS))
    parser.add_argument("--problems-per-level", type=int, default=32)
    parser.add_argument("--k", type=int, default=8, help="sampled completions per problem")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=64, help="rows per generate call")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--greedy", action=argparse.BooleanOptionalAction, default=True,
                        help="also one greedy completion per problem (--no-greedy: skip, for quick pilots)")
    parser.add_argument("--grade-only", action="store_true", help="grade the saved completions; generate nothing")
    parser.add_argument("--note", default=None, help="free text printed under the variant's table")
    parser.add_argument("--out", default=str(OUT), help="cache root (elsewhere: kept out of the table)")
    parser.add_argument("--name", default=None, help="cache folder under --out (default: the variant's name)")
    args = parser.parse_args()

    name = args.name or args.variant
    out = pathlib.Path(args.out) / name
    out.mkdir(parents=True, exist_ok=True)
    samples_file = out / "samples.jsonl"
    if args.grade_only:  # every saved problem of these levels (a pilot may hold other problems than the first N)
        saved = {json.loads(line)["problem_id"] for line in samples_file.read_text().splitlines()}
        problems = [p for p in validation_problems(args.levels, args.variant) if p["problem_id"] in saved]
        generation_seconds = 0.0
    else:
        problems = pick_problems(args.levels, args.problems_per_level, args.variant)
        generation_seconds = generate(problems, args, samples_file)
    wanted = {p["problem_id"] for p in problems}
    rows = [r for r in map(json.loads, samples_file.read_text().splitlines()) if r["problem_id"] in wanted]
    scores = grade(rows, {p["problem_id"]: p["prompt"] for p in problems})
    previous = json.loads((out / "summary.json").read_text()) if (out / "summary.json").is_file() else {}
    summary = {
        "name": name, "variant": args.variant, "settings": VARIANTS[args.variant], "k": args.k,
        "max_new_tokens": args.max_new_tokens, "date": datetime.date.today().isoformat(),
        "generation_seconds": previous.get("generation_seconds", 0.0) + generation_seconds,
        "note": args.note if args.note is not None else previous.get("note"),
        "command": " ".join([pathlib.Path(sys.executable).name, *sys.argv]),
        "levels": summarize(rows, scores, args.levels),
        "operators": operator_breakdown(rows, scores),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    if pathlib.Path(args.out) == OUT:
        write_table()
        print(TABLE.read_text())
    else:
        print(json.dumps(summary["levels"], indent=1))


if __name__ == "__main__":
    main()
