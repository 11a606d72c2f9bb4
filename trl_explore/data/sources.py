"""Sources of multi-teacher offline trajectories (OGER §3.1), each yielding :class:`ProblemRecord`.

A source turns one input format into normalised records: one problem, its gold answer and the
``(teacher, completion)`` pairs found for it. Filtering (correctness, length, duplicates) happens
later, in :mod:`trl_explore.data.builder`, so that every source is counted the same way.

* :func:`champ_records`: CHAMP (package ``champ-dataset``), each model a teacher.
* :func:`luffy_records`: LUFFY's format (``prompt`` messages, ``target``, ``reward_model.ground_truth``).
* :func:`teacher_column_records`: one column per teacher.
* :func:`trl_explore.data.generation.generated_records`: completions sampled from teacher models.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from trl_explore.data.prompts import validate_messages

CHAMP_TRUNCATED = "LENGTH_CURRENT"
"""CHAMP error code of a message cut by the model's output limit (the summary turn after it then
carries ``LENGTH_PREVIOUS``)."""


@dataclass
class ProblemRecord:
    """One problem with its offline completions, as produced by every source.

    Attributes:
        problem_id: unique id (``str``); records with the same id are merged by the builder.
        problem: problem text (``str``) or a conversational prompt (list of ``{"role", "content"}``).
        answer: gold answer (``str``), checked later with the project's math verifier.
        completions: ``(teacher, text)`` pairs, in source order.
        truncated: per teacher, completions the source dropped because they were cut by a length
            limit (reported in the per-teacher table; nothing is dropped silently).
    """

    problem_id: str
    problem: str | list[dict]
    answer: str
    completions: list[tuple[str, str]] = field(default_factory=list)
    truncated: dict[str, int] = field(default_factory=dict)


def champ_solution(messages: Sequence[Mapping], where: str = "conversation") -> Mapping:
    """The message in which the model solves the problem itself, in one CHAMP conversation.

    Every CHAMP conversation ends ``User: <... solve the following problem ...>``, ``Model: <solution>``,
    ``User: Now, summarize the answer above ...``, ``Model: <one sentence>``; concept-explanation and
    example turns ("Please explain the following concept", "Please give an example ...") and few-shot
    imputations come before. The solution is the model message right after the LAST user message
    containing "solve the following problem" (case-insensitive).

    Args:
        messages: CHAMP messages, dicts with ``role``, ``text``, ``error``.
        where: names the conversation in error messages.

    Returns:
        The solution message (its ``error`` may be ``"LENGTH_CURRENT"``: truncated).

    Raises:
        ValueError: no such user message, or it is not followed by a ``Model.*`` message.
    """
    asks = [
        i
        for i, m in enumerate(messages)
        if m["role"] == "User" and "solve the following problem" in (m["text"] or "").lower()
    ]
    if not asks or asks[-1] + 1 >= len(messages) or not messages[asks[-1] + 1]["role"].startswith("Model."):
        raise ValueError(f"{where}: no model answer to a 'solve the following problem' request.")
    return messages[asks[-1] + 1]


def champ_records(
    problems: Iterable[Mapping] | None = None, settings: Sequence[str] | None = None
) -> Iterator[ProblemRecord]:
    """Records from CHAMP: each model (GPT-3.5, GPT-4, GPT-4 Turbo, PaLM 2 Medium) is a teacher.

    For every conversation ``"<model>|<setting>"`` the solution message (:func:`champ_solution`) is
    one completion of teacher ``<model>``; truncated solutions (``LENGTH_CURRENT``) are counted in
    ``record.truncated`` instead. Several settings reuse the same answer when their prompts coincide
    (e.g. ``0-Shot`` and ``No C w/o H``): the builder drops such exact duplicates and counts them.

    Args:
        problems: dicts shaped like :func:`trl_explore.defaults.champ_problems` (default: all 270, or the slice that
            ``$TRL_EXPLORE_CHAMP_PROBLEMS`` asks for, :func:`trl_explore.defaults.champ_problem_limit`).
        settings: prompt settings to keep, e.g. ``("0-Shot",)``; default ``None`` keeps all 18.

    Raises:
        ValueError: a conversation without a solution message, or a ``settings`` entry that no
            conversation has (names it).
    """
    if problems is None:
        from trl_explore.defaults import champ_problem_limit, champ_problems

        problems, limit = champ_problems(), champ_problem_limit()
        if limit is not None:
            problems = problems[:: len(problems) // limit][:limit]  # every k-th: each category in its share
    wanted = None if settings is None else set(settings)
    seen_settings: set[str] = set()
    for p in problems:
        record = ProblemRecord(problem_id=p["problem_id"], problem=p["problem"], answer=p["answer"])
        for key, messages in p["conversations"].items():
            teacher, setting = key.split("|", 1)
            seen_settings.add(setting)
            if wanted is not None and setting not in wanted:
                continue
            solution = champ_solution(messages, where=f"CHAMP {p['problem_id']} {key!r}")
            if solution["error"] == CHAMP_TRUNCATED:
                record.truncated[teacher] = record.truncated.get(teacher, 0) + 1
            else:
                record.completions.append((teacher, solution["text"]))
        yield record
    if wanted is not None and wanted - seen_settings:
        raise ValueError(f"CHAMP has no setting(s) {sorted(wanted - seen_settings)}; known: {sorted(seen_settings)}.")


def _column(row: Mapping, column: str, where: str):
    if column not in row:
        raise ValueError(f"{where}: missing column {column!r} (columns: {sorted(row)}).")
    return row[column]


def _problem_id(row: Mapping, id_column: str | None, index: int, where: str) -> str:
    return str(_column(row, id_column, where)) if id_column else f"row-{index}"


def _gold(value: object, where: str) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: the gold answer must be a non-empty string, got {value!r:.80}.")
    return value


def _completion_text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: a completion must be a string, got {type(value).__name__}.")
    return value


def luffy_target_text(target: object, where: str) -> str:
    """Text of a LUFFY ``target`` field: a ``{"role": "assistant", "content": str}`` dict or a list of them.

    A list is joined with no separator (LUFFY stores one assistant message per row).

    Raises:
        ValueError: any other shape or a non-string content (names ``where``).
    """
    messages = [target] if isinstance(target, dict) else target
    if not isinstance(messages, list) or not messages:
        kind = type(target).__name__
        raise ValueError(f"{where}: 'target' must be an assistant message or a list of them, got {kind}.")
    parts = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != "assistant":
            raise ValueError(f"{where}: 'target' holds a non-assistant entry {message!r:.80}.")
        parts.append(_completion_text(message.get("content"), f"{where}, target content"))
    return "".join(parts)


def luffy_records(
    rows: Iterable[Mapping],
    teacher: str = "DeepSeek-R1",
    prompt_column: str = "prompt",
    target_column: str = "target",
    answer_column: str = "reward_model",
    id_column: str | None = None,
) -> Iterator[ProblemRecord]:
    """Records from a data set in LUFFY's format (one teacher trajectory per row).

    Columns: ``prompt`` (message list, kept as the prompt), ``target`` (see
    :func:`luffy_target_text`), ``reward_model`` (a dict whose ``ground_truth`` is the gold answer,
    or directly the gold string).

    Args:
        rows: a ``datasets.Dataset`` or any iterable of dicts.
        teacher: teacher name of every target (LUFFY's OpenR1 set holds DeepSeek-R1 trajectories).
        id_column: column holding the problem id; default ``None`` uses ``"row-<index>"``.

    Raises:
        ValueError: a missing column, a bad prompt/target, or a missing ground truth, naming the row.
    """
    for index, row in enumerate(rows):
        where = f"row {index}"
        prompt = validate_messages(_column(row, prompt_column, where), f"{where}, column {prompt_column!r}")
        reward_model = _column(row, answer_column, where)
        if isinstance(reward_model, Mapping):
            if "ground_truth" not in reward_model:
                raise ValueError(f"{where}: column {answer_column!r} has no 'ground_truth' field.")
            reward_model = reward_model["ground_truth"]
        answer = _gold(reward_model, f"{where}, column {answer_column!r}")
        text = luffy_target_text(_column(row, target_column, where), where)
        yield ProblemRecord(_problem_id(row, id_column, index, where), prompt, answer, [(teacher, text)])


def teacher_column_records(
    rows: Iterable[Mapping],
    teacher_columns: Sequence[str] | Mapping[str, str],
    problem_column: str = "problem",
    answer_column: str = "answer",
    id_column: str | None = None,
) -> Iterator[ProblemRecord]:
    """Records from a table with one column per teacher.

    Each teacher cell holds a completion (``str``), a list of completions, or ``None`` (no
    completion from that teacher for this problem).

    Args:
        rows: a ``datasets.Dataset`` or any iterable of dicts.
        teacher_columns: column names (the column name is the teacher name) or a mapping
            ``{column: teacher name}``.
        problem_column: problem text (``str``) or conversational prompt (message list).
        answer_column: gold answer.
        id_column: column holding the problem id; default ``None`` uses ``"row-<index>"``.

    Raises:
        ValueError: an empty teacher list, a missing column, a non-string completion, or an empty
            gold answer, naming the row and column.
    """
    columns = dict(teacher_columns) if isinstance(teacher_columns, Mapping) else {c: c for c in teacher_columns}
    if not columns:
        raise ValueError("teacher_columns is empty: name at least one column holding teacher completions.")
    for index, row in enumerate(rows):
        where = f"row {index}"
        answer = _gold(_column(row, answer_column, where), f"{where}, column {answer_column!r}")
        record = ProblemRecord(_problem_id(row, id_column, index, where), _column(row, problem_column, where), answer)
        for column, teacher in columns.items():
            cell = _column(row, column, where)
            cells = [] if cell is None else cell if isinstance(cell, list) else [cell]
            for j, text in enumerate(cells):
                record.completions.append((teacher, _completion_text(text, f"{where}, column {column!r}, item {j}")))
        yield record
