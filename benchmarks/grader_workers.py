"""Grading throughput: 1 worker against 2 workers on the same 1,000 completions (target: 2 workers <= 0.6x).

The completions are realistic shapes (boxed answers, prose conclusions, several boxes, fractions, intervals) against
plain-text and LaTeX golds, generated with a fixed seed. Each variant first grades a warm-up batch so that pool start
is not timed; the variants alternate over ``--repeats`` rounds.

    python benchmarks/grader_workers.py [--n 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from trl_explore.rewards.math_verify_reward import grade_batch


def make_pairs(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``n`` (completion, gold) pairs of mixed answer kinds; about half are correct."""
    rng = random.Random(seed)
    completions, golds = [], []
    for _ in range(n):
        a, b = rng.randint(-40, 40), rng.randint(1, 20)
        right = rng.random() < 0.5
        kind = rng.choice(["int", "frac", "interval", "tuple", "prose", "ascii"])
        c = a if right else a + 1
        gold, answer = {
            "int": (f"{a}", f"{c}"),
            "frac": (rf"$\frac{{{a}}}{{{b}}}$", rf"\frac{{{c}}}{{{b}}}"),
            "interval": (f"$({a}, {a + b}]$", f"({c}, {a + b}]"),
            "tuple": (f"x={a}, y={b}", f"({c}, {b})"),
            "prose": (f"{a}", None),
            "ascii": (f"2^({abs(a)}+n)", f"2^{{{abs(c)}+n}}"),
        }[kind]
        filler = "Let us compute step by step. " * rng.randint(5, 40)
        text = (f"{filler}Therefore, the answer is {c}." if answer is None
                else f"{filler}So the answer is $\\boxed{{{answer}}}$.")
        completions.append(text)
        golds.append(gold)
    return completions, golds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    completions, golds = make_pairs(args.n)
    times: dict[int, list[float]] = {1: [], 2: []}
    reference = None
    for workers in (1, 2):  # warm the pools (fork, Math-Verify's grammar) outside the timings
        grade_batch(completions[:20], golds[:20], num_workers=workers)
    for repeat in range(args.repeats):
        for workers in ((1, 2) if repeat % 2 == 0 else (2, 1)):
            start = time.perf_counter()
            verdicts = grade_batch(completions, golds, num_workers=workers, timeout_seconds=10)
            times[workers].append(time.perf_counter() - start)
            reference = reference or verdicts
            assert verdicts == reference, "the verdicts depend on the number of workers"
    one, two = statistics.median(times[1]), statistics.median(times[2])
    print(f"{args.n} completions, {sum(reference)} correct; median of {args.repeats} rounds")
    print(f"1 worker : {one:.2f} s ({1000 * one / args.n:.2f} ms per completion), "
          f"min-max {min(times[1]):.2f}-{max(times[1]):.2f}")
    print(f"2 workers: {two:.2f} s, min-max {min(times[2]):.2f}-{max(times[2]):.2f}")
    print(f"ratio 2 workers / 1 worker: {two / one:.3f} (target <= 0.6)")


if __name__ == "__main__":
    main()
