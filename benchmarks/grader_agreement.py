"""Agreement of this package's grader with Math-Verify on Math-Verify's own published test cases.

Downloads math-verify's source distribution (its ``tests/`` folder) from the package index into a temporary
folder, collects the parametrised cases that use Math-Verify's default settings (LaTeX + expression targets,
6-decimal float rounding, strict comparison, no set/relation comparison), and grades each one three ways:

* Math-Verify itself, ``verify(parse(gold), parse(pred))`` with the library's defaults;
* ``trl_explore.rewards.math_reward`` (``mode="math_verify"``, the default) as a TRL reward call;
* optionally other modes of the grader (``--modes``).

Nothing of Math-Verify's test suite is stored in this repository: the cases are read at run time.
Prints the agreement with the suite's expected verdicts and every disagreement with its gold, prediction and
expected value; ``--json PATH`` writes them too.

    python benchmarks/grader_agreement.py [--version 0.8.0] [--modes math_verify trl strict boxed]
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import pathlib
import subprocess
import sys
import tarfile
import tempfile

# Keyword values of the suite's helper that are Math-Verify's defaults.
_DEFAULT_MATCH_TYPES = ["latex", "expr"]


def download_tests(version: str, folder: pathlib.Path) -> pathlib.Path:
    """Download math-verify==version's sdist into ``folder``, unpack it, return its ``tests`` folder."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
         f"math-verify=={version}", "-d", str(folder)],
        check=True,
    )
    archive = next(folder.glob("math_verify-*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    return next(folder.glob("math_verify-*/tests"))


# The suite's helper keywords that may vary per case, with Math-Verify's default value.
_DEFAULT_KEYWORDS = {"precision": 6, "strict": True}


def _default_call(function: ast.FunctionDef) -> tuple[bool, dict[str, object]]:
    """Whether a test function grades with default settings, and the parameters that must hold defaults.

    Returns ``(False, {})`` for a test with other settings; else ``(True, {parameter: default})`` where a
    keyword of the helper is a parameter of the test (its cases are kept only where it has the default).
    """
    for node in ast.walk(function):
        name = getattr(node.func, "id", None) if isinstance(node, ast.Call) else None
        if name == "compare_strings":
            keywords = {k.arg: k.value for k in node.keywords}
            match_types = (ast.literal_eval(keywords.pop("match_types")) if "match_types" in keywords
                           else _DEFAULT_MATCH_TYPES)
            if match_types != _DEFAULT_MATCH_TYPES or set(keywords) - set(_DEFAULT_KEYWORDS):
                return False, {}
            per_case = {}
            for keyword, value in keywords.items():
                if isinstance(value, ast.Name):
                    per_case[value.id] = _DEFAULT_KEYWORDS[keyword]
                elif ast.literal_eval(value) != _DEFAULT_KEYWORDS[keyword]:
                    return False, {}
            return True, per_case
        if name == "verify":
            plain = not node.keywords and all(
                isinstance(a, ast.Call) and getattr(a.func, "id", None) == "parse" and len(a.args) == 1
                and not a.keywords
                for a in node.args
            )
            return plain, {}
    return False, {}


def collect_cases(tests: pathlib.Path) -> list[dict]:
    """Every (gold, pred, expected) case of the suite's tests that use default settings."""
    sys.path.insert(0, str(tests.parent))
    cases = []
    for path in sorted(tests.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        spec = importlib.util.spec_from_file_location(f"tests.{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as err:  # noqa: BLE001 - a module that needs more than math-verify is skipped
            print(f"skipped {path.name}: {err!r}", file=sys.stderr)
            continue
        for function in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
            default, per_case = _default_call(function)
            marks = getattr(getattr(module, function.name), "pytestmark", [])
            if not default or not marks:
                continue
            names = [n.strip() for n in marks[0].args[0].split(",")]
            for values in marks[0].args[1]:
                case = dict(zip(names, values))
                if any(case[name] != value for name, value in per_case.items()):
                    continue
                expected = case.get("expected", case.get("result"))
                cases.append({"test": f"{path.stem}::{function.name}", "gold": case["gold"], "pred": case["pred"],
                              "expected": int(expected)})
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default="0.8.0", help="math-verify version whose tests are read")
    parser.add_argument("--modes", nargs="+", default=["math_verify"], help="grader modes to compare")
    parser.add_argument("--json", default=None, help="write the cases and verdicts to this file")
    parser.add_argument("--tests", default=None, help="an unpacked tests/ folder to read instead of downloading")
    args = parser.parse_args()

    from math_verify import parse, verify

    from trl_explore.rewards import MathVerifyReward

    if args.tests:
        cases = collect_cases(pathlib.Path(args.tests))
    else:
        with tempfile.TemporaryDirectory() as folder:
            cases = collect_cases(download_tests(args.version, pathlib.Path(folder)))
    print(f"{len(cases)} default-setting cases from math-verify {args.version}'s tests")
    for case in cases:
        case["math_verify"] = int(verify(parse(case["gold"]), parse(case["pred"])))
    print(f"Math-Verify (installed) reproduces {sum(c['math_verify'] == c['expected'] for c in cases)}/{len(cases)}")
    for mode in args.modes:
        reward = MathVerifyReward(mode=mode)
        verdicts = reward(completions=[c["pred"] for c in cases], answer=[c["gold"] for c in cases])
        agree = 0
        print(f"\n## mode={mode}")
        for case, verdict in zip(cases, verdicts):
            case[mode] = verdict
            if verdict == case["expected"]:
                agree += 1
            else:
                print(f"- {case['test']}: gold {case['gold']!r} pred {case['pred']!r}: expected {case['expected']}, "
                      f"got {verdict}")
        print(f"mode={mode}: {agree}/{len(cases)} agree with the suite ({agree / len(cases):.1%})")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(cases, indent=1))


if __name__ == "__main__":
    main()
