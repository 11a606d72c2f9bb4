"""An embedded verifiable task ladder: procedurally generated arithmetic at graded difficulty (issue 23).

The embedded policy (SmolLM2-135M-Instruct) solves ~0% of CHAMP, so on CHAMP every GRPO group is all-wrong and
neither exploration method has anything to work with. On small arithmetic its groups mix right and wrong answers.
The ladder is such problems, generated (seeded, deterministic, nothing downloaded) at levels of graded difficulty,
with correct worked solutions in four styles as the multi-teacher offline set:

* :mod:`trl_explore.data.ladder_problems`: the levels (its docstring lists them), the problems and the splits;
* :mod:`trl_explore.data.ladder_teachers`: the solution styles;
* this module: the prompts, the rows and the ``datasets.DatasetDict`` (:func:`ladder_dataset`, also
  ``load_split("ladder", split, **options)``).

**Prompt** (:func:`ladder_prompt`, default ``"chat_example"``: of the formats measured, the one that gave the
highest pass rate and the most mixed groups): the level's worked example (a fixed problem that no split holds) as a
first user turn answered by an assistant turn in the ``terse`` teacher style, then the problem as the second user
turn; each user turn is the question followed by the instruction to end with ``\\boxed{}``. No system message:
SmolLM2's chat template then adds its own default one, as in the measurement.

**Rows** have the CHAMP offline set's columns (:data:`~trl_explore.data.builder.OFFLINE_COLUMNS`: ``problem_id``,
``prompt``, ``answer``, ``offline_completions``, ``offline_teachers``) plus ``level``, so every trainer takes them
unchanged. ``problem_id`` is ``ladder:<level>:<canonical form>``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trl_explore.data.ladder_problems import (
    LEVELS,
    SPLITS,
    LadderProblem,
    check_levels,
    ladder_problems,
    seeded_random,
)
from trl_explore.data.ladder_teachers import TEACHER_STYLES, check_styles, solution, solution_lengths

LADDER_COLUMNS = ("problem_id", "prompt", "answer", "offline_completions", "offline_teachers", "level")
"""Columns of every ladder split: the CHAMP offline set's (``OFFLINE_COLUMNS``) plus ``level``."""

INSTRUCTION = "Solve the problem. Give the final answer in \\boxed{}."
"""The instruction of every ladder prompt but the neutral one."""

NEUTRAL_INSTRUCTION = "Put the final answer in \\boxed{}."
"""The instruction of the ``"neutral"`` prompt format (worded unlike :data:`INSTRUCTION` on purpose)."""

__all__ = [
    "INSTRUCTION", "LADDER_COLUMNS", "LEVELS", "NEUTRAL_INSTRUCTION", "PROMPT_FORMATS", "SPLITS", "TEACHER_STYLES",
    "LadderProblem", "ladder_dataset", "ladder_features", "ladder_problems", "ladder_prompt", "ladder_row",
]  # fmt: skip


PROMPT_FORMATS = ("user_example", "chat_example", "system_example", "plain", "neutral")
"""Prompt formats (:func:`ladder_prompt`); the first four measured in ``benchmarks/results/ladder_pass_rates.md``;
``"neutral"`` is the held-out evaluation's second format (:mod:`trl_explore.evaluation.heldout`)."""


def ladder_prompt(problem: LadderProblem, prompt_format: str = "chat_example") -> list[dict[str, str]]:
    """The conversational prompt of one problem.

    Formats (the worked example is the level's fixed example, solved in the ``terse`` style):

    * ``"user_example"``: one user turn: the instruction, the worked example, then the problem.
    * ``"chat_example"``: the worked example as a first user/assistant exchange, then the problem as the second user
      turn (each user turn: the problem, then the instruction).
    * ``"system_example"``: a system message with the instruction and the worked example (replacing SmolLM2's default
      system prompt), then the problem alone as the user turn.
    * ``"plain"``: one user turn: the instruction and the problem, no example.
    * ``"neutral"``: one user turn, no example, the question phrased otherwise and another instruction
      (:data:`NEUTRAL_INSTRUCTION`): ``"Compute 3 + 4. Put the final answer in \\boxed{}."``; a word problem keeps
      its story (its wording is the problem) followed by that instruction. It tells a skill learned on the
      ``chat_example`` prompt from a learned prompt format (issue 28): nothing of it appears in training.

    Raises:
        ValueError: an unknown format.
    """
    example = LEVELS[problem.level].example
    shown = f"Problem: {example.question}\nSolution: {solution(example, 'terse')}"
    if prompt_format == "user_example":
        content = f"{INSTRUCTION}\n\nExample:\n{shown}\n\nNow solve this problem.\nProblem: {problem.question}"
        return [{"role": "user", "content": content}]
    if prompt_format == "chat_example":
        return [{"role": "user", "content": f"{example.question} {INSTRUCTION}"},
                {"role": "assistant", "content": solution(example, "terse")},
                {"role": "user", "content": f"{problem.question} {INSTRUCTION}"}]
    if prompt_format == "system_example":
        return [{"role": "system", "content": f"{INSTRUCTION}\n\nExample:\n{shown}"},
                {"role": "user", "content": f"Problem: {problem.question}"}]
    if prompt_format == "plain":
        return [{"role": "user", "content": f"{INSTRUCTION}\n\nProblem: {problem.question}"}]
    if prompt_format == "neutral":
        question = problem.question if problem.word is not None else f"Compute {problem.expression}."
        return [{"role": "user", "content": f"{question} {NEUTRAL_INSTRUCTION}"}]
    raise ValueError(f"unknown prompt_format {prompt_format!r}; choose from {list(PROMPT_FORMATS)}")


def ladder_row(
    problem: LadderProblem, styles: Sequence[str] | None = None, prompt_format: str = "chat_example"
) -> dict:
    """One data set row (:data:`LADDER_COLUMNS`) with one teacher solution per style."""
    styles = list(TEACHER_STYLES) if styles is None else list(styles)
    return {
        "problem_id": problem.problem_id,
        "prompt": ladder_prompt(problem, prompt_format),
        "answer": str(problem.answer),
        "offline_completions": [solution(problem, style) for style in styles],
        "offline_teachers": styles,
        "level": problem.level,
    }


def ladder_features():
    """``datasets.Features`` of the ladder: the CHAMP offline set's (``offline_features``) plus ``level``."""
    from datasets import Value

    from trl_explore.data.builder import offline_features

    features = offline_features()
    features["level"] = Value("string")
    return features


def ladder_dataset(
    levels: Sequence[str] | None = None,
    train_size: int | Mapping[str, int] = 100,
    validation_size: int | Mapping[str, int] = 64,
    test_size: int | Mapping[str, int] = 64,
    seed: int = 0,
    styles: Sequence[str] | None = None,
    prompt_format: str = "chat_example",
    max_length: int | None = None,
):
    """The ladder as a ``datasets.DatasetDict`` with splits ``train``, ``validation``, ``test``.

    Deterministic: the same arguments give byte-identical rows. Each split's rows are shuffled (seeded), so that
    the first N rows of a split mix its levels. Building takes well under a second; nothing is cached.

    Args:
        levels: level names (default: all of :data:`LEVELS`).
        train_size, validation_size, test_size: problems per level (int), or ``{level: n}``; defaults 100, 64, 64.
        seed: the generator's seed (default 0).
        styles: teacher styles of ``offline_completions`` (default: all of
            :data:`~trl_explore.data.ladder_teachers.TEACHER_STYLES`).
        prompt_format: one of :data:`PROMPT_FORMATS` (see :func:`ladder_prompt`; default the measured format).
        max_length: drop teacher solutions longer than this many tokens of the embedded SmolLM2 tokenizer (as the
            CHAMP builder's ``max_length``; default None: keep all; every solution is at most
            :data:`~trl_explore.data.ladder_teachers.MAX_SOLUTION_TOKENS` tokens).

    Returns:
        ``datasets.DatasetDict`` with columns :data:`LADDER_COLUMNS`.

    Raises:
        ValueError: an unknown level or style, a bad size, more problems than a level holds, a bad ``max_length``.
    """
    from datasets import Dataset, DatasetDict

    names = check_levels(list(LEVELS) if levels is None else levels)
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"unknown prompt_format {prompt_format!r}; choose from {list(PROMPT_FORMATS)}")
    styles = check_styles(styles)
    if max_length is not None and (not isinstance(max_length, int) or max_length <= 0):
        raise ValueError(f"max_length must be a positive number of tokens or None, got {max_length!r}")
    # an int size applies to the levels asked for only (the others are not drawn: the levels' problem spaces are
    # disjoint, so no level's problems depend on another's)
    sizes = [size if isinstance(size, Mapping) else dict.fromkeys(names, size)
             for size in (train_size, validation_size, test_size)]
    problems = ladder_problems(*sizes, seed=seed)
    splits = {}
    for split in SPLITS:
        rows = [ladder_row(p, styles, prompt_format) for p in problems[split] if p.level in names]
        seeded_random(seed, "shuffle", split).shuffle(rows)
        if max_length is not None:
            rows = _drop_long_solutions(rows, max_length)
        columns = {c: [row[c] for row in rows] for c in LADDER_COLUMNS}
        splits[split] = Dataset.from_dict(columns, features=ladder_features())
    return DatasetDict(splits)


def _drop_long_solutions(rows: list[dict], max_length: int) -> list[dict]:
    """The rows without their solutions longer than ``max_length`` SmolLM2 tokens."""
    lengths = iter(solution_lengths([text for row in rows for text in row["offline_completions"]]))
    out = []
    for row in rows:
        keep = [next(lengths) <= max_length for _ in row["offline_completions"]]
        out.append({**row, "offline_completions": [t for t, k in zip(row["offline_completions"], keep) if k],
                    "offline_teachers": [t for t, k in zip(row["offline_teachers"], keep) if k]})
    return out
