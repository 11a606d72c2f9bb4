"""CHAMP Table 4 per teacher (OGER App. A.1) under this package's grader and under Math-Verify called directly.

Builds the default offline set (all 18 CHAMP settings, the embedded SmolLM2 tokenizer, ``--grader_mode``) and
re-grades the same judged (non-duplicate, gold-parseable) solutions with ``math_verify.verify(parse(gold),
parse(solution))`` at its defaults, then prints one markdown table: per teacher the valid solutions and the
accuracy of each grader, and the offline set's size.

    python benchmarks/champ_table.py [--grader_mode math_verify] [--num_proc 2]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grader_mode", default="math_verify")
    parser.add_argument("--num_proc", type=int, default=2)
    args = parser.parse_args()

    import math_verify

    from trl_explore.data.builder import load_default_offline_dataset, merge_records
    from trl_explore.data.filters import duplicate_flags, gold_is_parseable
    from trl_explore.data.sources import champ_records

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        dataset = load_default_offline_dataset(cache_root=root, num_proc=args.num_proc, grader_mode=args.grader_mode)
        (folder,) = pathlib.Path(root).glob("champ-*")
        stats = json.loads((folder / "offline_stats.json").read_text())
    build_seconds = time.perf_counter() - start

    records = merge_records(champ_records())
    per_teacher: dict[str, list[int]] = {}
    for record in records:
        if not gold_is_parseable(record.answer):
            continue
        gold = math_verify.parse(record.answer)
        for (teacher, text), duplicate in zip(record.completions, duplicate_flags(record.completions)):
            if not duplicate:
                per_teacher.setdefault(teacher, []).append(int(math_verify.verify(gold, math_verify.parse(text))))

    print(f"grader_mode={args.grader_mode}; build {build_seconds:.0f} s with {args.num_proc} grading processes\n")
    print("| teacher | judged | valid (this grader) | accuracy (this grader) | accuracy (Math-Verify directly) |")
    print("|---|---|---|---|---|")
    for row in stats["teachers"]:
        direct = per_teacher.get(row["teacher"], [])
        direct_accuracy = 100.0 * sum(direct) / len(direct) if direct else float("nan")
        print(f"| {row['teacher']} | {row['judged']} | {row['valid']} | {row['accuracy']:.1f}% "
              f"| {direct_accuracy:.1f}% |")
    print(f"\noffline set: {dataset['train'].num_rows} train + {dataset['test'].num_rows} test problems; "
          f"{stats['without_valid']} problems without a valid trajectory")


if __name__ == "__main__":
    main()
