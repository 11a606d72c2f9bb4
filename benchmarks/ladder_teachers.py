"""The task ladder's multi-teacher offline set: split sizes, solution lengths, grader verdicts, style diversity.

Run (CPU, offline): ``python benchmarks/ladder_teachers.py [--samples benchmarks/results/ladder/v1/samples.jsonl]``

Writes ``benchmarks/results/ladder_teachers.md`` (and ``.json``) with, for the default ladder
(``trl_explore.data.ladder_dataset()``, every split):

1. problems per split and level;
2. solution lengths per level and style, in tokens of the embedded SmolLM2 tokenizer (no special tokens);
3. the verdict of the package's default reward, ``MathVerifyReward()``, on every solution, called as TRL calls it
   (prompt, completion, completion ids with EOS);
4. style diversity under the default embedder (all-MiniLM-L6-v2, sentence-transformers, normalised embeddings):
   per problem, the mean over the style pairs of ``1 - cos``, averaged over problems, per level and per pair;
5. with ``--samples`` (the embedded policy's completions saved by ``benchmarks/ladder_pass_rates.py``, validation
   split), OGER's divergence of each policy sample from the problem's teachers, ``D = 1 - mean_j cos(e, e_j)``
   (OGER Eq. 3-5), per level, for correct and wrong samples; beside it each style's divergence from the OTHER
   styles (the same formula, leave-one-out), for scale.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import statistics
from collections import defaultdict

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = pathlib.Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "results" / "ladder_teachers"


def _mean(values) -> float:
    values = list(values)
    return round(statistics.fmean(values), 4) if values else float("nan")


def main() -> None:
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    from trl_explore.data.ladder import LEVELS, SPLITS, ladder_dataset
    from trl_explore.data.ladder_teachers import TEACHER_STYLES
    from trl_explore.defaults import default_policy_path, resolve_embedder_path
    from trl_explore.rewards.math_verify_reward import MathVerifyReward

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", default=str(REPO / "benchmarks" / "results" / "ladder" / "v1" / "samples.jsonl"))
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    dataset = ladder_dataset()
    rows = [row for split in SPLITS for row in dataset[split]]
    record: dict = {"sizes": {split: {level: sum(r["level"] == level for r in dataset[split]) for level in LEVELS}
                              for split in SPLITS}}

    tokenizer = AutoTokenizer.from_pretrained(default_policy_path())
    pairs = [(row, style, text) for row in rows
             for style, text in zip(row["offline_teachers"], row["offline_completions"])]
    ids = tokenizer([text for _, _, text in pairs], add_special_tokens=False)["input_ids"]
    lengths = defaultdict(list)
    for (row, style, _), i in zip(pairs, ids):
        lengths[(row["level"], style)].append(len(i))
    record["lengths"] = {f"{level}/{style}": [min(v), _mean(v), max(v)]
                         for (level, style), v in sorted(lengths.items())}

    scores = MathVerifyReward()(
        prompts=[row["prompt"] for row, _, _ in pairs],
        completions=[[{"role": "assistant", "content": text}] for _, _, text in pairs],
        completion_ids=[i + [tokenizer.eos_token_id] for i in ids],
        answer=[row["answer"] for row, _, _ in pairs], problem_id=[row["problem_id"] for row, _, _ in pairs],
    )
    record["graded_1"] = {style: [sum(s == 1.0 for (_, st, _), s in zip(pairs, scores) if st == style),
                                  sum(st == style for _, st, _ in pairs)] for style in TEACHER_STYLES}

    encoder = SentenceTransformer(resolve_embedder_path("embedded"), device="cpu")
    emb = encoder.encode([text for _, _, text in pairs], batch_size=128, normalize_embeddings=True,
                         convert_to_tensor=True)
    n = len(TEACHER_STYLES)
    per_problem = emb.view(len(rows), n, -1)  # every row has all styles, in TEACHER_STYLES order
    div = 1 - per_problem @ per_problem.transpose(1, 2)  # [P, n, n]
    iu = list(itertools.combinations(range(n), 2))
    pair_mean = torch.stack([div[:, i, j] for i, j in iu], dim=1).mean(dim=1)  # [P]
    record["style_diversity"] = {
        "all": _mean(pair_mean.tolist()),
        "per_level": {level: _mean(d for r, d in zip(rows, pair_mean.tolist()) if r["level"] == level)
                      for level in LEVELS},
        "per_pair": {f"{TEACHER_STYLES[i]}-{TEACHER_STYLES[j]}": _mean(div[:, i, j].tolist()) for i, j in iu},
        # each style against the other styles of its problem: OGER's D of a teacher text, leave-one-out
        "leave_one_out": {style: _mean((div[:, k].sum(dim=1) / (n - 1)).tolist())
                          for k, style in enumerate(TEACHER_STYLES)},
    }

    samples_file = pathlib.Path(args.samples)
    record["policy_vs_teachers"] = None
    if samples_file.is_file():
        record["policy_vs_teachers"] = policy_divergence(samples_file, rows, per_problem, encoder)

    OUT.with_suffix(".json").write_text(json.dumps(record, indent=1))
    OUT.with_suffix(".md").write_text(markdown(record, samples_file))
    print(OUT.with_suffix(".md").read_text())


def policy_divergence(samples_file: pathlib.Path, rows: list[dict], teacher_emb, encoder) -> dict:
    """Per level: mean OGER divergence of the policy's sampled completions from their problem's teachers."""
    from trl_explore.rewards.math_verify_reward import MathVerifyReward

    index = {row["problem_id"]: i for i, row in enumerate(rows)}
    samples = [s for s in map(json.loads, samples_file.read_text().splitlines())
               if s["kind"] == "sampled" and s["problem_id"] in index]
    scores = MathVerifyReward()(
        prompts=[rows[index[s["problem_id"]]]["prompt"] for s in samples],
        completions=[[{"role": "assistant", "content": s["completion"]}] for s in samples],
        completion_ids=[s["completion_ids"] for s in samples], answer=[s["answer"] for s in samples],
    )
    emb = encoder.encode([s["completion"] for s in samples], batch_size=128, normalize_embeddings=True,
                         convert_to_tensor=True)
    teachers = teacher_emb[[index[s["problem_id"]] for s in samples]]  # [S, n, d]
    d = (1 - (teachers @ emb.unsqueeze(-1)).squeeze(-1).mean(dim=1)).tolist()  # [S]
    out = {}
    for level in dict.fromkeys(s["level"] for s in samples):
        picked = [(x, sc) for s, x, sc in zip(samples, d, scores) if s["level"] == level]
        out[level] = {"samples": len(picked), "all": _mean(x for x, _ in picked),
                      "correct": _mean(x for x, sc in picked if sc == 1.0),
                      "wrong": _mean(x for x, sc in picked if sc != 1.0)}
    out["all"] = {"samples": len(d), "all": _mean(d), "correct": _mean(x for x, sc in zip(d, scores) if sc == 1.0),
                  "wrong": _mean(x for x, sc in zip(d, scores) if sc != 1.0)}
    return out


def markdown(record: dict, samples_file: pathlib.Path) -> str:
    from trl_explore.data.ladder_teachers import TEACHER_STYLES

    levels = list(record["sizes"]["train"])
    lines = ["# Task ladder: teacher solutions (default ladder, every split)", "",
             "Written by `benchmarks/ladder_teachers.py`.", "", "## Problems per split", "",
             "| split | " + " | ".join(levels) + " | total |", "|---|" + "---|" * (len(levels) + 1)]
    for split, sizes in record["sizes"].items():
        lines.append(f"| {split} | " + " | ".join(str(sizes[lv]) for lv in levels) + f" | {sum(sizes.values())} |")
    lines += ["", "## Solution lengths (SmolLM2 tokens: min / mean / max)", "",
              "| level | " + " | ".join(TEACHER_STYLES) + " |", "|---|" + "---|" * len(TEACHER_STYLES)]
    for level in levels:
        cells = [record["lengths"][f"{level}/{s}"] for s in TEACHER_STYLES]
        lines.append(f"| {level} | " + " | ".join(f"{a} / {b:.1f} / {c}" for a, b, c in cells) + " |")
    longest = max(v[2] for v in record["lengths"].values())
    lines += ["", f"Longest solution: {longest} tokens.", "", "## Default grader (`MathVerifyReward()`)", "",
              "| style | graded 1 |", "|---|---|"]
    lines += [f"| {style} | {a} / {b} |" for style, (a, b) in record["graded_1"].items()]
    sd = record["style_diversity"]
    lines += ["", "## Style diversity (all-MiniLM-L6-v2, mean pairwise 1 - cos between the styles of one problem)", "",
              f"All problems: **{sd['all']:.3f}**.", "", "| level | diversity |", "|---|---|"]
    lines += [f"| {level} | {v:.3f} |" for level, v in sd["per_level"].items()]
    lines += ["", "| style pair | 1 - cos |", "|---|---|"] + [f"| {k} | {v:.3f} |" for k, v in sd["per_pair"].items()]
    lines += ["", "Each style's OGER divergence from the other styles of its problem (D = 1 - mean cos, "
              "leave-one-out): "
              + ", ".join(f"{k} {v:.3f}" for k, v in sd["leave_one_out"].items()) + "."]
    pv = record["policy_vs_teachers"]
    if pv:
        where = samples_file.relative_to(REPO) if samples_file.is_relative_to(REPO) else samples_file
        lines += ["", f"## Policy samples vs teachers (OGER D, Eq. 3-5; samples: `{where}`)", "",
                  "| level | samples | D (all) | D (correct) | D (wrong) |", "|---|---|---|---|---|"]
        lines += [f"| {k} | {v['samples']} | {v['all']:.3f} | {v['correct']:.3f} | {v['wrong']:.3f} |"
                  for k, v in pv.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
