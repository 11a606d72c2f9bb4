"""Ladder problems: the structured problem, the levels and their random draws, and the seeded split into train,
validation and test (see :mod:`trl_explore.data.ladder` for the data set built from them).

Levels (:data:`LEVELS`), easiest first: the embedded policy's mean pass rate and greedy accuracy on 32 validation
problems x 8 samples (T = 1, no top-k, <= 96 tokens, the default prompt; ``benchmarks/results/ladder_pass_rates.md``,
which also gives the fraction of mixed groups and the rates per operator):

=====================  =============  =============================================================================
level                  pass / greedy  problems
=====================  =============  =============================================================================
``one_digit``          0.52 / 0.88    ``a op b``, ``a, b`` in 0-9, ``op`` one of + - × ÷ (``a >= b`` for -;
                                      ``a = b * q`` with ``b`` in 1-9 and ``q`` in 0-9 for ÷): 255 distinct problems
``two_digit``          0.16 / 0.34    ``a ± b``, ``a, b`` in 10-99, ``a >= b`` for - (8,190 problems)
``one_digit_two_ops``  0.10 / 0.12    ``a ± b ± c``, ``a, b, c`` in 0-9, every partial result >= 0 (2,605 problems)
``two_plus_one``       0.08 / 0.06    two-digit ± one-digit: ``a`` in 10-99, ``b`` in 1-9, either order for +
                                      (1,620 problems)
``word``               0.07 / 0.22    one-step word problems, three templates per operation: + with ``a`` in 2-20 and
                                      ``b`` in 2-9, - with ``a`` in 5-20, × with factors in 2-9, ÷ with divisor and
                                      quotient in 2-9 (376 problems: 124 +, 152 -, 36 ×, 64 ÷)
``two_digit_two_ops``  0.02 / 0.00    ``a ± b ± c``, ``a, b, c`` in 10-99, every partial result >= 0 (1,829,790
                                      problems); 88% of problems never solved in 8 samples: too hard for this policy
=====================  =============  =============================================================================

Every answer is a non-negative integer. No level mixes × or ÷ with another operation, so every expression is
evaluated left to right.

**Canonical form and splits.** A problem's canonical form is its expression in ASCII with the operands of a
single + or × sorted (``3+4`` for both ``3 + 4`` and ``4 + 3``); a word problem's is ``word:`` + the expression
(the same numbers in words and bare are different prompts; the template, name and item are surface only). The
bare levels' spaces are disjoint by construction. For each level, a random stream seeded by ``(seed, level)``
draws problems; the first ``test_size`` distinct canonical forms become ``test``, the next ``validation_size``
``validation``, the next ``train_size`` ``train`` (each level's worked example is never drawn). So no canonical
form appears twice in the ladder, a level's problems do not depend on which other levels are asked for, and
``test`` and ``validation`` do not change with ``train_size``. Random streams are ``random.Random`` seeded with
integers derived by SHA-256 (never Python's ``hash``), so the rows are byte-identical across runs and
``PYTHONHASHSEED`` values. A size larger than a level holds (``one_digit``: 255 in all) is refused, naming the level.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

SPLITS = ("train", "validation", "test")
"""Split names; they are drawn in the order test, validation, train (see the module docstring)."""

SYMBOLS = {"+": "+", "-": "-", "*": "×", "/": "÷"}
"""How each ASCII operator is written in prompts and solutions."""


# --------------------------------------------------------------------------------------------------
# Problems
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WordSurface:
    """The surface of a word problem: template index (into :data:`WORD_TEMPLATES` of its operator), a name, its
    pronoun, and a plural item noun."""

    template: int
    name: str
    pronoun: str
    item: str


WORD_TEMPLATES: dict[str, tuple[str, ...]] = {
    "+": (
        "{name} has {a} {item}. {Pronoun} gets {b} more {item}. How many {item} does {name} have now?",
        "There are {a} {item} in a box. {name} puts {b} more {item} in the box. How many {item} are in the box now?",
        "{name} found {a} {item} on Monday and {b} {item} on Tuesday. How many {item} did {name} find in all?",
    ),
    "-": (
        "{name} has {a} {item} and gives {b} of them to a friend. How many {item} does {name} have left?",
        "There are {a} {item} on a table. {name} takes {b} of them away. How many {item} are on the table now?",
        "{name} had {a} {item}. {Pronoun} lost {b} of them. How many {item} does {name} have now?",
    ),
    "*": (
        "{name} has {a} bags with {b} {item} in each bag. How many {item} does {name} have in all?",
        "There are {a} rows of {item} with {b} {item} in each row. How many {item} are there in total?",
        "{name} buys {a} packs of {item}. Each pack holds {b} {item}. How many {item} does {name} buy?",
    ),
    "/": (
        "{name} shares {a} {item} equally among {b} friends. How many {item} does each friend get?",
        "{a} {item} are put into {b} equal groups. How many {item} are in each group?",
        "{name} packs {a} {item} into boxes of {b}. How many boxes does {name} fill?",
    ),
}
"""One-step word problem templates, three surface forms per operator (``{a} op {b}`` is the arithmetic)."""

WORD_NAMES = (("Tom", "He"), ("Anna", "She"), ("Ben", "He"), ("Mia", "She"), ("Leo", "He"), ("Zoe", "She"))
WORD_ITEMS = ("apples", "pencils", "marbles", "stickers", "books", "cookies", "shells", "stamps")


@dataclass(frozen=True)
class LadderProblem:
    """One ladder problem, in the structured form its text, answer and solutions are rendered from.

    Attributes:
        level: its level's name (a key of :data:`LEVELS`).
        operands: the numbers, in the order the problem states them.
        operators: ASCII operators (``"+"``, ``"-"``, ``"*"``, ``"/"``) between consecutive operands, applied left
            to right.
        word: the word-problem surface, or None for a bare expression.
    """

    level: str
    operands: tuple[int, ...]
    operators: tuple[str, ...]
    word: WordSurface | None = None

    def partial_results(self) -> list[int]:
        """Result after each operator, left to right (the last one is the answer).

        Raises:
            ValueError: a division that is not exact, or a negative partial result (no level generates either).
        """
        value, out = self.operands[0], []
        for op, b in zip(self.operators, self.operands[1:]):
            if op == "/":
                if b == 0 or value % b:
                    raise ValueError(f"{self}: {value} / {b} is not an exact division")
                value //= b
            else:
                value = {"+": value + b, "-": value - b, "*": value * b}[op]
            if value < 0:
                raise ValueError(f"{self}: negative partial result {value}")
            out.append(value)
        return out

    @property
    def answer(self) -> int:
        """The exact value (a non-negative integer)."""
        return self.partial_results()[-1]

    @property
    def expression(self) -> str:
        """The expression as the problem states it, e.g. ``"48 + 27"`` or ``"56 ÷ 8"``."""
        parts = [str(self.operands[0])]
        for op, b in zip(self.operators, self.operands[1:]):
            parts += [SYMBOLS[op], str(b)]
        return " ".join(parts)

    @property
    def canonical(self) -> str:
        """Canonical form: ASCII expression, operands of one + or × sorted; ``word:`` first for a word problem."""
        operands = self.operands
        if len(self.operators) == 1 and self.operators[0] in "+*":
            operands = tuple(sorted(operands))
        text = str(operands[0]) + "".join(op + str(b) for op, b in zip(self.operators, operands[1:]))
        return ("word:" if self.word is not None else "") + text

    @property
    def problem_id(self) -> str:
        """Stable unique id: ``ladder:<level>:<canonical form>``."""
        return f"ladder:{self.level}:{self.canonical}"

    @property
    def question(self) -> str:
        """The problem text, e.g. ``"What is 48 + 27?"`` or a word problem."""
        if self.word is None:
            return f"What is {self.expression}?"
        w = self.word
        a, b = self.operands
        template = WORD_TEMPLATES[self.operators[0]][w.template]
        return template.format(a=a, b=b, name=w.name, Pronoun=w.pronoun, item=w.item)


# --------------------------------------------------------------------------------------------------
# Levels
# --------------------------------------------------------------------------------------------------


def _draw_one_digit(rng: random.Random) -> tuple[tuple[int, ...], tuple[str, ...]]:
    op = rng.choice("+-*/")
    if op == "/":
        b, q = rng.randint(1, 9), rng.randint(0, 9)
        return (b * q, b), (op,)
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    if op == "-" and a < b:
        a, b = b, a
    return (a, b), (op,)


def _draw_two_plus_one(rng: random.Random) -> tuple[tuple[int, ...], tuple[str, ...]]:
    op, a, b = rng.choice("+-"), rng.randint(10, 99), rng.randint(1, 9)
    if op == "+" and rng.random() < 0.5:
        a, b = b, a
    return (a, b), (op,)


def _draw_two_digit(rng: random.Random) -> tuple[tuple[int, ...], tuple[str, ...]]:
    op, a, b = rng.choice("+-"), rng.randint(10, 99), rng.randint(10, 99)
    if op == "-" and a < b:
        a, b = b, a
    return (a, b), (op,)


def _draw_two_ops(low: int, high: int) -> Callable[[random.Random], tuple[tuple[int, ...], tuple[str, ...]]]:
    """``a ± b ± c`` with operands in ``[low, high]`` and every partial result >= 0 (redrawn until so)."""

    def draw(rng: random.Random) -> tuple[tuple[int, ...], tuple[str, ...]]:
        while True:
            ops = (rng.choice("+-"), rng.choice("+-"))
            a, b, c = rng.randint(low, high), rng.randint(low, high), rng.randint(low, high)
            first = a + b if ops[0] == "+" else a - b
            last = first + c if ops[1] == "+" else first - c
            if first >= 0 and last >= 0:
                return (a, b, c), ops

    return draw


def _draw_word(rng: random.Random) -> tuple[tuple[int, ...], tuple[str, ...]]:
    op = rng.choice("+-*/")
    if op == "+":
        a, b = rng.randint(2, 20), rng.randint(2, 9)
    elif op == "-":
        a = rng.randint(5, 20)
        b = rng.randint(2, a - 2)
    elif op == "*":
        a, b = rng.randint(2, 9), rng.randint(2, 9)
    else:
        b, q = rng.randint(2, 9), rng.randint(2, 9)
        a = b * q
    return (a, b), (op,)


def _word_surface(rng: random.Random) -> WordSurface:
    name, pronoun = rng.choice(WORD_NAMES)
    return WordSurface(rng.randrange(3), name, pronoun, rng.choice(WORD_ITEMS))


@dataclass(frozen=True)
class LadderLevel:
    """One rung of the ladder.

    Attributes:
        name: the level's name.
        description: one line for tables.
        draw: ``draw(rng) -> (operands, operators)``, one random problem of the level.
        example: the fixed worked example of its prompts (no split holds it).
        word: word problems (a surface is drawn for each).
    """

    name: str
    description: str
    draw: Callable[[random.Random], tuple[tuple[int, ...], tuple[str, ...]]]
    example: LadderProblem
    word: bool = False


def _level(name, description, draw, example_operands, example_operators, word=None) -> LadderLevel:
    example = LadderProblem(name, example_operands, example_operators, word)
    return LadderLevel(name, description, draw, example, word is not None)


LEVELS: dict[str, LadderLevel] = {
    level.name: level
    for level in (
        _level("one_digit", "one-digit + - × ÷", _draw_one_digit, (7, 3), ("-",)),
        _level("two_digit", "two-digit ± two-digit", _draw_two_digit, (52, 31), ("+",)),
        _level("one_digit_two_ops", "one-digit a ± b ± c", _draw_two_ops(0, 9), (6, 3, 4), ("+", "-")),
        _level("two_plus_one", "two-digit ± one-digit", _draw_two_plus_one, (36, 5), ("+",)),
        _level("word", "one-step word problems", _draw_word, (9, 4), ("-",), WordSurface(0, "Sam", "He", "cards")),
        _level("two_digit_two_ops", "two-digit a ± b ± c", _draw_two_ops(10, 99), (25, 14, 12), ("+", "-")),
    )
}
"""The levels, easiest first by the embedded policy's measured pass rate (see the module docstring)."""


def seeded_random(seed: int, *key: str) -> random.Random:
    """A ``random.Random`` seeded by SHA-256 of ``(seed, *key)``: reproducible across runs and hash seeds."""
    digest = hashlib.sha256(":".join(["trl_explore.ladder", str(seed), *key]).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def check_levels(levels: Sequence[str]) -> list[str]:
    """The level names asked for (a name or a list), without repeats, in the order given.

    Raises:
        ValueError: an unknown name, or none at all (the message lists the levels).
    """
    if isinstance(levels, str):
        levels = [levels]
    unknown = [name for name in levels if name not in LEVELS]
    if unknown or not levels:
        raise ValueError(f"unknown ladder level(s) {unknown}; choose from {list(LEVELS)}")
    return list(dict.fromkeys(levels))


def _sizes(size: int | Mapping[str, int], split: str) -> dict[str, int]:
    """Per-level count of one split: an int for every level, or ``{level: n}`` (levels left out get 0)."""
    sizes = dict(size) if isinstance(size, Mapping) else dict.fromkeys(LEVELS, size)
    bad = {k: v for k, v in sizes.items() if k not in LEVELS or not isinstance(v, int) or isinstance(v, bool) or v < 0}
    if bad:
        raise ValueError(f"{split}_size must be a non-negative int or {{level: int}} with levels from {list(LEVELS)}, "
                         f"got {bad}")
    return {name: sizes.get(name, 0) for name in LEVELS}


MAX_DRAWS_PER_PROBLEM = 200
"""A level gives up (ValueError) after this many draws per problem asked for without enough new ones."""


def ladder_problems(
    train_size: int | Mapping[str, int] = 100,
    validation_size: int | Mapping[str, int] = 64,
    test_size: int | Mapping[str, int] = 64,
    seed: int = 0,
) -> dict[str, list[LadderProblem]]:
    """The problems of every split (see the module docstring for how they are drawn).

    Args:
        train_size, validation_size, test_size: problems per level (an int: every level), or ``{level: n}`` (levels
            left out get none).
        seed: the generator's seed.

    Returns:
        ``{"train": [...], "validation": [...], "test": [...]}``, each in level order, then draw order.

    Raises:
        ValueError: a bad size, or more problems asked of a level than it holds (names the level and split).
    """
    sizes = {"test": _sizes(test_size, "test"), "validation": _sizes(validation_size, "validation"),
             "train": _sizes(train_size, "train")}
    seen = {level.example.canonical for level in LEVELS.values()}
    streams = {name: seeded_random(seed, name) for name in LEVELS}
    out: dict[str, list[LadderProblem]] = {split: [] for split in SPLITS}
    for split in ("test", "validation", "train"):
        for name, level in LEVELS.items():
            rng, wanted, got, draws = streams[name], sizes[split][name], 0, 0
            while got < wanted:
                draws += 1
                if draws > MAX_DRAWS_PER_PROBLEM * wanted:
                    raise ValueError(
                        f"ladder level {name!r} holds too few distinct problems for {split}_size={wanted} after the "
                        f"splits drawn before it (got {got}): ask for fewer {name!r} problems"
                    )
                operands, operators = level.draw(rng)
                problem = LadderProblem(name, operands, operators, _word_surface(rng) if level.word else None)
                if problem.canonical not in seen:
                    seen.add(problem.canonical)
                    out[split].append(problem)
                    got += 1
    return out
