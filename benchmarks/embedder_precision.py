"""How much OGER's divergence moves when the embedder runs in bfloat16, and how much faster it is (CPU).

Run: ``python benchmarks/embedder_precision.py [--problems 60] [--online 4] [--threads 1]`` (about 10 minutes on
one core for 60 problems). Each CHAMP problem carries the answers of several models (about 180 per problem); the
first ``--online`` answers play the online completions and the rest the offline ones. For each problem the same
texts go through two ``TrajectoryEncoder``s of the bundled all-MiniLM-L6-v2, one in float32 and one with
``dtype="bfloat16"`` (``OGERConfig.embedding_dtype``), one after the other, and the script reports:

* the smallest cosine between the two embeddings of a text;
* ``|D_bf16 - D_fp32|`` of the online answers' divergences (OGER Eq. 3-5), max and median over problems;
* in how many problems the lowest-divergence answer (the one OGER replaces) is the same;
* the two encoders' total time and its ratio.

Results: ``benchmarks/results/embedder_precision_cpu.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import statistics
import time

import torch

from trl_explore.defaults import champ_problems
from trl_explore.oger.embedding import TrajectoryEncoder
from trl_explore.oger.exploration import divergence


def answers_of(problem: dict) -> list[str]:
    """Every non-empty model answer of a CHAMP problem, in the dataset's order."""
    return [turn["text"] for conversation in problem["conversations"].values() for turn in conversation
            if turn["role"] not in ("System", "User") and isinstance(turn["text"], str) and turn["text"].strip()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--problems", type=int, default=60, help="CHAMP problems (in the dataset's order)")
    p.add_argument("--online", type=int, default=4, help="answers per problem that play the online completions")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results" / "embedder_precision_cpu"))
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    exact, fast = TrajectoryEncoder("embedded"), TrajectoryEncoder("embedded", dtype="bfloat16")
    groups = [g for g in map(answers_of, champ_problems()) if len(g) > a.online][: a.problems]
    exact.encode(groups[0][:2]), fast.encode(groups[0][:2])  # load and warm up both
    cosines, div_errors, same_argmin, seconds, texts = [], [], 0, {"float32": 0.0, "bfloat16": 0.0}, 0
    for answers in groups:
        t0 = time.perf_counter()
        e32 = exact.encode(answers)
        t1 = time.perf_counter()
        e16 = fast.encode(answers)
        seconds["float32"] += t1 - t0
        seconds["bfloat16"] += time.perf_counter() - t1
        texts += len(answers)
        cosines.append((e32 * e16).sum(1).min().item())
        d32, d16 = divergence(e32[: a.online], e32[a.online :]), divergence(e16[: a.online], e16[a.online :])
        div_errors.append((d32 - d16).abs().max().item())
        same_argmin += int(d32.argmin() == d16.argmin())
    results = {
        "args": vars(a), "machine": {"cpu": platform.processor() or platform.machine(), "torch": torch.__version__},
        "problems": len(groups), "texts": texts, "min_cosine": min(cosines),
        "max_abs_divergence_diff": max(div_errors), "median_abs_divergence_diff": statistics.median(div_errors),
        "same_lowest_divergence": same_argmin, "seconds": seconds,
        "speedup": seconds["float32"] / seconds["bfloat16"],
    }
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=2))
    md = "\n".join([
        "# OGER embedder: bfloat16 autocast vs float32 (CPU)", "",
        f"Command: `python benchmarks/embedder_precision.py --problems {a.problems} --online {a.online} "
        f"--threads {a.threads}`; torch {torch.__version__}, all-MiniLM-L6-v2 (256 tokens, `truncate`).", "",
        f"{len(groups)} CHAMP problems, {texts} model answers ({a.online} online per problem, the rest offline).", "",
        "| measure | value |", "|---|---|",
        f"| smallest cosine(bf16 embedding, fp32 embedding) | {min(cosines):.6f} |",
        f"| max over problems of max \\|D_bf16 - D_fp32\\| | {max(div_errors):.2e} |",
        f"| median over problems of max \\|D_bf16 - D_fp32\\| | {statistics.median(div_errors):.2e} |",
        f"| problems whose lowest-divergence answer is the same | {same_argmin} / {len(groups)} |",
        f"| encode time float32 / bfloat16 (s) | {seconds['float32']:.1f} / {seconds['bfloat16']:.1f} |",
        f"| speed-up of bfloat16 | {results['speedup']:.2f}x |", "",
    ])
    out.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
