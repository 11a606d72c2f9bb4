"""Worked solutions of ladder problems in several styles: the ladder's multi-teacher offline set (OGER §3.1).

OGER replaces one online completion per group with a correct teacher trajectory drawn from several teachers, and
rewards online completions that diverge from all of them. On the ladder the "teachers" are programmatic solution
styles, each correct by construction:

* ``terse``: the expression and its value, then the box.
* ``steps``: numbered steps, or place-value steps (tens, then ones), groups for ×, the matching product for ÷.
* ``narrative``: one or two sentences of prose.
* ``check``: restates the task, computes, then checks the result with the inverse operation.

Every solution ends with ONE final answer, ``\\boxed{<answer>}``, as its last sentence: no second box, no hedge, no
alternative value or retraction after it, and a check that only restates true values (the default grader's
guard-rails turn such answers into 0). Every solution is at most :data:`MAX_SOLUTION_TOKENS` tokens of the embedded
SmolLM2 tokenizer, so it fits a completion of ``max_completion_length >= 96`` with its EOS (checked by the tests
over every split; measured lengths in ``benchmarks/results/ladder_pass_rates.md``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from trl_explore.data.ladder_problems import LadderProblem

TEACHER_STYLES = ("terse", "steps", "narrative", "check")
"""The solution styles, in the order of each row's ``offline_teachers``."""

MAX_SOLUTION_TOKENS = 90
"""Upper bound on any solution's length, tokens of the embedded SmolLM2 tokenizer (no special tokens)."""

_SYM = {"+": "+", "-": "-", "*": "×", "/": "÷"}
_VERB = {"+": "adding", "-": "taking away", "*": "multiplying by", "/": "dividing by"}
_INVERSE = {"+": "-", "-": "+", "*": "/", "/": "*"}


def check_styles(styles: Sequence[str] | None) -> list[str]:
    """The styles asked for (default: all of :data:`TEACHER_STYLES`).

    Raises:
        ValueError: an unknown style, a repeated one, or none at all.
    """
    styles = list(TEACHER_STYLES) if styles is None else ([styles] if isinstance(styles, str) else list(styles))
    unknown = [s for s in styles if s not in TEACHER_STYLES]
    if unknown or not styles or len(set(styles)) != len(styles):
        raise ValueError(f"styles must be distinct names from {list(TEACHER_STYLES)}, got {styles}")
    return styles


def solution(problem: LadderProblem, style: str) -> str:
    """The worked solution of ``problem`` in ``style`` (one of :data:`TEACHER_STYLES`).

    Raises:
        ValueError: an unknown style.
    """
    writers = {"terse": _terse, "steps": _steps, "narrative": _narrative, "check": _check}
    if style not in writers:
        raise ValueError(f"unknown teacher style {style!r}; choose from {list(TEACHER_STYLES)}")
    return writers[style](problem)


def _eq(a: int, op: str, b: int, value: int) -> str:
    return f"{a} {_SYM[op]} {b} = {value}"


def _boxed(value: int) -> str:
    return f"\\boxed{{{value}}}"


def _terse(p: LadderProblem) -> str:
    return f"{p.expression} = {p.answer}. The answer is {_boxed(p.answer)}."


def _steps(p: LadderProblem) -> str:
    v = p.answer
    if len(p.operators) > 1:
        value, lines = p.operands[0], []
        for i, (op, b, r) in enumerate(zip(p.operators, p.operands[1:], p.partial_results()), start=1):
            lines.append(f"Step {i}: {_eq(value, op, b, r)}.")
            value = r
        return "\n".join(lines + [f"So the answer is {_boxed(v)}."])
    (a, b), op = p.operands, p.operators[0]
    if p.word is not None:
        kind = {"+": "an addition", "-": "a subtraction", "*": "a multiplication", "/": "a division"}[op]
        return (f"Step 1: the story is {kind}, {a} {_SYM[op]} {b}.\nStep 2: {_eq(a, op, b, v)}.\n"
                f"So the answer is {_boxed(v)}.")
    return f"{_one_op_steps(a, op, b, v)}\nSo the answer is {_boxed(v)}."


def _one_op_steps(a: int, op: str, b: int, v: int) -> str:
    """Steps of one operation: place value for two-digit numbers, groups for ×, the product for ÷."""
    if op == "*":
        if min(a, b) == 0:
            return f"Any number times 0 is 0, so {_eq(a, op, b, v)}."
        n, m = (a, b) if a <= b else (b, a)
        return f"{a} × {b} is {n} groups of {m}: {' + '.join([str(m)] * n)} = {v}."
    if op == "/":
        return f"We need the number that times {b} gives {a}: {b} × {v} = {a}, so {_eq(a, op, b, v)}."
    if op == "+":
        big, small = (a, b) if a >= b else (b, a)
        if big < 10:
            return f"Start at {big} and count on {small}: {_eq(big, op, small, v)}."
        if small < 10:
            ones = big % 10 + small
            return f"Ones: {big % 10} + {small} = {ones}.\nThen {big - big % 10} + {ones} = {v}."
        tens, ones = big - big % 10 + small - small % 10, big % 10 + small % 10
        return (f"Tens: {big - big % 10} + {small - small % 10} = {tens}.\n"
                f"Ones: {big % 10} + {small % 10} = {ones}.\nTogether: {tens} + {ones} = {v}.")
    # subtraction
    if a < 10:
        return f"{b} + {v} = {a}, so {_eq(a, op, b, v)}."
    if b < 10:
        if a % 10 >= b:
            return f"Ones: {a % 10} - {b} = {a % 10 - b}.\nThen {a - a % 10} + {a % 10 - b} = {v}."
        down = a - a % 10
        return f"Step 1: {_eq(a, op, a % 10, down)}.\nStep 2: {_eq(down, op, b - a % 10, v)}."
    tens = a - (b - b % 10)
    return f"Take away the tens: {_eq(a, op, b - b % 10, tens)}.\nThen the ones: {_eq(tens, op, b % 10, v)}."


def _narrative(p: LadderProblem) -> str:
    v = p.answer
    if p.word is not None:
        (a, b), op, w = p.operands, p.operators[0], p.word
        story = {
            "+": f"{a} {w.item} and {b} more {w.item} make {v} {w.item}",
            "-": f"Taking {b} {w.item} from {a} {w.item} leaves {v} {w.item}",
            "*": f"{a} groups of {b} {w.item} make {v} {w.item}",
            "/": f"{a} {w.item} divided by {b} gives {v}, since {b} × {v} = {a}",
        }[op]
        return f"{story}. So the answer is {_boxed(v)}."
    first, clauses = p.operands[0], []
    for op, b, r in zip(p.operators, p.operands[1:], p.partial_results()):
        clauses.append(f"{_VERB[op]} {b} gives {r}")
    return f"Start with {first}; {' and '.join(clauses)}. So the answer is {_boxed(v)}."


def _inverse_check(value: int, op: str, b: int, before: int) -> str:
    """A true statement recovering ``before`` from ``value`` (``before op b == value``)."""
    if op == "*" and b == 0:
        return f"{before} × 0 = 0 for any number"
    return _eq(value, _INVERSE[op], b, before)


def _check(p: LadderProblem) -> str:
    v, results = p.answer, p.partial_results()
    steps, checks, value = [], [], p.operands[0]
    for op, b, r in zip(p.operators, p.operands[1:], results):
        steps.append(_eq(value, op, b, r))
        checks.append(_inverse_check(r, op, b, value))
        value = r
    if len(steps) > 1:  # the steps restate the expression already; a restated task would cost ~10 tokens
        task = "Working left to right: "
    else:
        task = f"The question asks for {p.expression}: " if p.word is not None else f"We need {p.expression}: "
    work = ", then ".join(steps)
    check = " and ".join(reversed(checks))
    return f"{task}{work}. Check: {check}, as it should. The final answer is {_boxed(v)}."


@functools.lru_cache(maxsize=1)
def _tokenizer():
    from transformers import AutoTokenizer

    from trl_explore.defaults import default_policy_path

    return AutoTokenizer.from_pretrained(default_policy_path())


def solution_lengths(texts: Sequence[str], tokenizer=None) -> list[int]:
    """Token counts of ``texts`` (no special tokens), by ``tokenizer`` (default: the embedded SmolLM2 tokenizer)."""
    texts = list(texts)
    if not texts:
        return []
    tokenizer = _tokenizer() if tokenizer is None else tokenizer
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
