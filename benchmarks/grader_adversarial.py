"""The grader on this repository's hand-labelled adversarial cases (``tests/data/grading_adversarial.jsonl``).

Each case has a gold, a completion, optionally the prompt and whether the completion ended with an EOS, the right
verdict (``label``) and why. Prints, per class and in all, the false positives (graded 1, label 0) and false
negatives (graded 0, label 1) of this package's default grader and of Math-Verify called directly
(``verify(parse(gold), parse(completion))``), then every case the default grader gets wrong.

    python benchmarks/grader_adversarial.py [--cases tests/data/grading_adversarial.jsonl] [--json PATH]

Run against an older checkout (``PYTHONPATH=<that checkout>``) to compare versions: a grader whose ``grade`` takes
no ``prompt``/``terminated`` is called without them.
"""

from __future__ import annotations

import argparse
import collections
import inspect
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_cases(path: pathlib.Path) -> list[dict]:
    """The cases of a JSON-lines file, one dict per line."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=str(ROOT / "tests" / "data" / "grading_adversarial.jsonl"))
    parser.add_argument("--json", default=None, help="write the cases with both verdicts to this file")
    args = parser.parse_args()

    import math_verify

    from trl_explore.rewards.grading import grade

    takes_context = "prompt" in inspect.signature(grade).parameters
    cases = load_cases(pathlib.Path(args.cases))
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for case in cases:
        context = {"prompt": case.get("prompt"), "terminated": case.get("terminated")} if takes_context else {}
        case["grader"] = int(grade(case["completion"], case["gold"], **context))
        gold, prediction = math_verify.parse(case["gold"]), math_verify.parse(case["completion"])
        case["math_verify"] = int(math_verify.verify(gold, prediction))
        for who in ("grader", "math_verify"):
            for cls in (case["class"], "all"):
                counts[cls][f"{who}_fp"] += case[who] == 1 and case["label"] == 0
                counts[cls][f"{who}_fn"] += case[who] == 0 and case["label"] == 1
                counts[cls]["cases"] += who == "grader"
    print("| class | cases | grader FP | grader FN | Math-Verify FP | Math-Verify FN |")
    print("|---|---|---|---|---|---|")
    for cls, c in sorted(counts.items(), key=lambda item: item[0] == "all"):
        row = [c["cases"], c["grader_fp"], c["grader_fn"], c["math_verify_fp"], c["math_verify_fn"]]
        print(f"| {cls} | " + " | ".join(str(n) for n in row) + " |")
    wrong = [c for c in cases if c["grader"] != c["label"]]
    print(f"\n{len(wrong)} of {len(cases)} cases graded wrong" + (":" if wrong else ""))
    for case in wrong:
        print(f"- {case['id']}: graded {case['grader']}, label {case['label']} ({case['why']})")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(cases, indent=1))


if __name__ == "__main__":
    main()
