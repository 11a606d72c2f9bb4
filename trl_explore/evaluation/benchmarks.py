"""Benchmark registry: the papers' evaluation sets, loadable from the Hub or from a local file.

Benchmarks (OGER §4 / Table 1, ASE Tables 1-2):

==================  ======  ================  ==========================================================
name                domain  grading           Hub source (config, split): question / answer fields
==================  ======  ================  ==========================================================
``aime2024``        math    math              ``HuggingFaceH4/aime_2024`` (train): problem / answer
``aime2025``        math    math              ``math-ai/aime25`` (test): problem / answer
``amc``             math    math              ``AI-MO/aimo-validation-amc`` (train): problem / answer
``math500``         math    math              ``HuggingFaceH4/MATH-500`` (test): problem / answer
``minerva``         math    math              ``math-ai/minervamath`` (test): question / answer
``olympiadbench``   math    math              ``Hothan/OlympiadBench`` (OE_TO_maths_en_COMP, train):
                                              question / final_answer (a list)
``arc_challenge``   ood     multiple_choice   ``allenai/ai2_arc`` (ARC-Challenge, test): question,
                                              choices {text, label} / answerKey
``gpqa_diamond``    ood     multiple_choice   ``Idavidrein/gpqa`` (gpqa_diamond, train): Question /
                                              Correct Answer + Incorrect Answer 1-3
``mmlu_pro``        ood     multiple_choice   ``TIGER-Lab/MMLU-Pro`` (test): question, options / answer
``bbh``             ood     exact_match       ``lukaemon/bbh`` (27 configs, test): input / target
``champ``           math    math              embedded: the held-out ``test`` split of
                                              :func:`trl_explore.data.load_default_offline_dataset`
``ladder``          math    math              embedded: the held-out ``test`` split of the arithmetic
                                              ladder, :func:`trl_explore.data.ladder_dataset` (levels
                                              selectable; ``validation`` for choosing settings)
==================  ======  ================  ==========================================================

This machine has no Hub, so every benchmark also loads from a local file in the same (Hub) schema:
``load_benchmark("aime2024", path="aime_2024.jsonl")`` (``.jsonl``, ``.json`` or ``.parquet``; for
``bbh`` a ``task`` column, if present, names each row's sub-task).

:func:`load_benchmark` returns a ``datasets.Dataset`` with one row per problem and the columns of
:data:`BENCHMARK_COLUMNS`: ``benchmark``, ``problem_id``, ``problem`` (the text shown to the model,
options included for multiple choice), ``answer`` (the gold answer; a letter for multiple choice),
``grading``, ``domain``, ``choices`` (``list[str]``, empty unless multiple choice) and ``prompt``
(``list`` of chat messages; empty unless the source has its own prompt, as CHAMP and the ladder have: the
runner then builds it from the evaluation protocol). The ladder's problem ids are its own
(``ladder:<level>:<canonical form>``), so the level of a row is ``problem_id.split(":")[1]``.

Grading (``math``, ``multiple_choice``, ``exact_match``) lives with the rewards, in
:mod:`trl_explore.rewards.benchmark_grading` (:func:`~trl_explore.rewards.benchmark_grading.grade_completion`); its
names are re-exported here for the old import path.
"""

from __future__ import annotations

import json
import pathlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trl_explore.rewards.benchmark_grading import (  # noqa: F401  (GRADINGS and LETTERS are used; the rest: old path)
    GRADINGS,
    LETTERS,
    answer_text,
    extract_choice_letter,
    extract_final_text,
    grade_completion,
    normalise_exact,
)

BENCHMARK_COLUMNS = ("benchmark", "problem_id", "problem", "answer", "grading", "domain", "choices", "prompt")
"""Columns of every data set returned by :func:`load_benchmark`."""


BBH_TASKS = (
    "boolean_expressions", "causal_judgement", "date_understanding", "disambiguation_qa", "dyck_languages",
    "formal_fallacies", "geometric_shapes", "hyperbaton", "logical_deduction_five_objects",
    "logical_deduction_seven_objects", "logical_deduction_three_objects", "movie_recommendation",
    "multistep_arithmetic_two", "navigate", "object_counting", "penguins_in_a_table",
    "reasoning_about_colored_objects", "ruin_names", "salient_translation_error_detection", "snarks",
    "sports_understanding", "temporal_sequences", "tracking_shuffled_objects_five_objects",
    "tracking_shuffled_objects_seven_objects", "tracking_shuffled_objects_three_objects", "web_of_lies",
    "word_sorting",
)  # fmt: skip
"""The 27 configs of ``lukaemon/bbh`` (BIG-Bench Hard)."""


@dataclass(frozen=True)
class BenchmarkSpec:
    """Where a benchmark lives and how its Hub rows map onto :data:`BENCHMARK_COLUMNS`.

    Attributes:
        name: canonical name (the registry key).
        title: column title in tables (``"AIME 2024"``).
        domain: ``"math"`` (counts in "Math Avg.") or ``"ood"`` (counts in "OOD Avg.").
        grading: one of :data:`GRADINGS`.
        hub_id: Hugging Face data set id (``None``: not on the Hub, e.g. ``champ``).
        hub_configs: configs to load and concatenate (``(None,)``: the default config).
        split: split to load.
        question_field: field holding the question text.
        answer_field: field holding the gold answer (a string, a number, or a list of strings, which
            are stripped of ``$...$`` and joined with ``", "``); for GPQA the correct option's text.
        id_field: field holding a problem id (``None``: the row index is used).
        choices_style: ``None`` (free-form answer), ``"arc"`` (``choices = {text: [...], label: [...]}``
            and the answer is a label), ``"options"`` (a list of options in ``choices_field``, the
            answer a letter) or ``"gpqa"`` (the correct option and ``incorrect_fields``; the order is
            shuffled per problem with a fixed seed).
        choices_field: field of the options for ``"arc"`` / ``"options"``.
        incorrect_fields: GPQA's fields of the wrong options.
        task_field: field naming a row's sub-task (BBH), used in problem ids.
        source: paper and table that use it.
    """

    name: str
    title: str
    domain: str
    grading: str
    hub_id: str | None
    split: str
    question_field: str
    answer_field: str
    id_field: str | None = None
    hub_configs: tuple[str | None, ...] = (None,)
    choices_style: str | None = None
    choices_field: str | None = None
    incorrect_fields: tuple[str, ...] = ()
    task_field: str | None = None
    source: str = ""


BENCHMARKS: dict[str, BenchmarkSpec] = {
    spec.name: spec
    for spec in (
        BenchmarkSpec("aime2024", "AIME 2024", "math", "math", "HuggingFaceH4/aime_2024", "train", "problem", "answer",
                      "id", source="OGER Table 1, ASE Tables 1-2 (AIME24)"),
        BenchmarkSpec("aime2025", "AIME 2025", "math", "math", "math-ai/aime25", "test", "problem", "answer", "id",
                      source="OGER Table 1, ASE Tables 1-2 (AIME25)"),
        BenchmarkSpec("amc", "AMC", "math", "math", "AI-MO/aimo-validation-amc", "train", "problem", "answer", "id",
                      source="OGER Table 1 (AMC, Li et al. 2024); ASE uses AMC24"),
        BenchmarkSpec("math500", "MATH-500", "math", "math", "HuggingFaceH4/MATH-500", "test", "problem", "answer",
                      "unique_id", source="OGER Table 1, ASE Tables 1-2"),
        BenchmarkSpec("minerva", "Minerva", "math", "math", "math-ai/minervamath", "test", "question", "answer",
                      source="OGER Table 1, ASE Tables 1-2"),
        BenchmarkSpec("olympiadbench", "OlympiadBench", "math", "math", "Hothan/OlympiadBench", "train", "question",
                      "final_answer", "id", hub_configs=("OE_TO_maths_en_COMP",),
                      source="OGER Table 1, ASE Tables 1-2"),
        BenchmarkSpec("arc_challenge", "ARC-C", "ood", "multiple_choice", "allenai/ai2_arc", "test", "question",
                      "answerKey", "id", hub_configs=("ARC-Challenge",), choices_style="arc", choices_field="choices",
                      source="OGER Table 1 (OOD)"),
        BenchmarkSpec("gpqa_diamond", "GPQA-D", "ood", "multiple_choice", "Idavidrein/gpqa", "train", "Question",
                      "Correct Answer", "Record ID", hub_configs=("gpqa_diamond",), choices_style="gpqa",
                      incorrect_fields=("Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3"),
                      source="OGER Table 1 (OOD), ASE Tables 1-2 (OOD)"),
        BenchmarkSpec("mmlu_pro", "MMLU-Pro", "ood", "multiple_choice", "TIGER-Lab/MMLU-Pro", "test", "question",
                      "answer", "question_id", choices_style="options", choices_field="options",
                      source="OGER Table 1 (OOD), ASE Tables 1-2 (OOD)"),
        BenchmarkSpec("bbh", "BBH", "ood", "exact_match", "lukaemon/bbh", "test", "input", "target",
                      hub_configs=BBH_TASKS, task_field="task", source="ASE Tables 1-2 (OOD)"),
        BenchmarkSpec("champ", "CHAMP (held-out)", "math", "math", None, "test", "problem", "answer", "problem_id",
                      source="embedded default: held-out CHAMP problems of the offline data set"),
        BenchmarkSpec("own", "Your data", "math", "math", None, "test", "prompt", "answer", "problem_id",
                      source="a data set in the training format (prompt, answer, problem_id): docs/own-data.md"),
        BenchmarkSpec("ladder", "Ladder (held-out)", "math", "math", None, "test", "problem", "answer", "problem_id",
                      source="embedded: held-out problems of the arithmetic ladder (trl_explore.data.ladder)"),
    )
}  # fmt: skip
"""The registry, keyed by canonical name."""

MATH_BENCHMARKS = ("aime2024", "aime2025", "amc", "minerva", "olympiadbench", "math500")
"""The six mathematical benchmarks of OGER Table 1 / ASE Tables 1-2, in OGER's column order."""
OOD_BENCHMARKS_OGER = ("arc_challenge", "gpqa_diamond", "mmlu_pro")
"""OGER's three out-of-domain benchmarks (Table 1, "OOD" column: their average)."""
OOD_BENCHMARKS_ASE = ("mmlu_pro", "gpqa_diamond", "bbh")
"""ASE's three out-of-distribution benchmarks (Tables 1-2, "OOD Avg.")."""

_ALIASES = {
    "aime24": "aime2024", "aime2024": "aime2024", "aime25": "aime2025", "aime2025": "aime2025",
    "amc": "amc", "amc23": "amc", "amc24": "amc", "math500": "math500", "math": "math500",
    "minerva": "minerva", "minervamath": "minerva", "olympiadbench": "olympiadbench", "olympiad": "olympiadbench",
    "arc": "arc_challenge", "arcc": "arc_challenge", "arcchallenge": "arc_challenge",
    "gpqa": "gpqa_diamond", "gpqad": "gpqa_diamond", "gpqadiamond": "gpqa_diamond",
    "mmlupro": "mmlu_pro", "bbh": "bbh", "bigbenchhard": "bbh", "champ": "champ", "ladder": "ladder",
    "own": "own",
}  # fmt: skip


def benchmark_spec(name: str) -> BenchmarkSpec:
    """The registry entry of ``name``, case, spaces, ``-`` and ``_`` ignored (``"AIME 2024"``, ``"aime24"``,
    ``"MATH-500"``, ``"ARC-C"``, ``"GPQA-Diamond"``, ``"MMLU-Pro"`` all work).

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    key = re.sub(r"[^a-z0-9]", "", str(name).lower())
    if key not in _ALIASES:
        raise ValueError(f"unknown benchmark {name!r}; known benchmarks: {', '.join(BENCHMARKS)}")
    return BENCHMARKS[_ALIASES[key]]


# --------------------------------------------------------------------------------------------------
# Reading raw rows
# --------------------------------------------------------------------------------------------------


def read_records(path: str | pathlib.Path) -> list[dict]:
    """Rows of a local file: JSON Lines (``.jsonl``), JSON (a list of objects, or ``{"data": [...]}``),
    Parquet (``.parquet``), or a folder written by ``datasets`` ``save_to_disk``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: unknown file type, a line that is not a JSON object (names the line), or no rows.
    """
    path = pathlib.Path(path)
    if not path.exists():
        raise FileNotFoundError(f"benchmark file {path} does not exist")
    if path.is_dir():
        from datasets import load_from_disk

        data = load_from_disk(str(path))
        records = list(data) if not hasattr(data, "keys") else list(data[next(iter(data.keys()))])
    elif path.suffix == ".jsonl":
        records = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}, line {number}: not valid JSON ({err.msg})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}, line {number}: expected a JSON object, got {type(record).__name__}")
            records.append(record)
    elif path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        records = data.get("data") if isinstance(data, dict) else data
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise ValueError(f"{path}: expected a list of JSON objects (or {{'data': [...]}})")
    elif path.suffix == ".parquet":
        import pyarrow.parquet as pq

        records = pq.read_table(path).to_pylist()
    else:
        raise ValueError(f"{path}: unsupported benchmark file type {path.suffix!r}; use .jsonl, .json or .parquet")
    if not records:
        raise ValueError(f"benchmark file {path} has no rows")
    return records


def _hub_records(spec: BenchmarkSpec) -> list[dict]:
    """Rows of every config of ``spec`` from the Hub (a ``task`` key is added for multi-config sets)."""
    from datasets import load_dataset

    records = []
    for config in spec.hub_configs:
        try:
            data = load_dataset(spec.hub_id, config, split=spec.split)
        except Exception as err:  # noqa: BLE001 - offline, missing repo, ...: say how to get around it
            raise RuntimeError(
                f"could not load benchmark {spec.name!r} from the Hub ({spec.hub_id}, config={config}, "
                f"split={spec.split}): {err}. Without Hub access pass a local file in the same schema "
                f"(path=... / --benchmark_files {spec.name}=FILE)."
            ) from err
        for record in data:
            if len(spec.hub_configs) > 1 and spec.task_field:
                record = {**record, spec.task_field: config}
            records.append(record)
    return records


# --------------------------------------------------------------------------------------------------
# Converting rows
# --------------------------------------------------------------------------------------------------


def _field(record: dict, name: str, where: str) -> Any:
    if name not in record:
        raise ValueError(f"{where}: no {name!r} field; the row has {sorted(record)}")
    return record[name]


def format_choices(question: str, choices: Sequence[str]) -> str:
    """The question followed by lettered options: ``"Q\\n\\nA. first\\nB. second"``.

    Raises:
        ValueError: fewer than 2 or more than 26 options.
    """
    if not 2 <= len(choices) <= len(LETTERS):
        raise ValueError(f"a multiple-choice question needs 2 to 26 options, got {len(choices)}")
    lines = [f"{LETTERS[i]}. {str(choice).strip()}" for i, choice in enumerate(choices)]
    return question.strip() + "\n\n" + "\n".join(lines)


def _choices_and_gold(spec: BenchmarkSpec, record: dict, problem_id: str, where: str) -> tuple[list[str], str]:
    """The options (in presentation order) and the gold letter of a multiple-choice row."""
    answer = _field(record, spec.answer_field, where)
    if spec.choices_style == "arc":
        choices = _field(record, spec.choices_field, where)
        if not isinstance(choices, dict) or "text" not in choices or "label" not in choices:
            raise ValueError(f"{where}: {spec.choices_field!r} must be {{'text': [...], 'label': [...]}}")
        texts, labels = list(choices["text"]), [str(label).strip() for label in choices["label"]]
        key = answer_text(answer, spec.answer_field, where)
        if key not in labels:
            raise ValueError(f"{where}: answer {key!r} is not one of the labels {labels}")
        return texts, LETTERS[labels.index(key)]
    if spec.choices_style == "options":
        options = _field(record, spec.choices_field, where)
        if not isinstance(options, (list, tuple)):
            raise ValueError(f"{where}: {spec.choices_field!r} must be a list of options")
        key = answer_text(answer, spec.answer_field, where).upper()
        if len(key) != 1 or key not in LETTERS[: len(options)]:
            raise ValueError(f"{where}: answer {key!r} is not a letter A-{LETTERS[len(options) - 1]}")
        return [str(o) for o in options], key
    if spec.choices_style == "gpqa":
        correct = answer_text(answer, spec.answer_field, where)
        wrong = [answer_text(_field(record, f, where), f, where) for f in spec.incorrect_fields]
        options = [correct, *wrong]
        random.Random(f"trl_explore-gpqa-{problem_id}").shuffle(options)  # fixed per problem
        return options, LETTERS[options.index(correct)]
    raise ValueError(f"benchmark {spec.name!r}: unknown choices_style {spec.choices_style!r}")


def convert_record(spec: BenchmarkSpec, record: dict, index: int) -> dict:
    """One raw row (Hub schema) as a row of :data:`BENCHMARK_COLUMNS`.

    Args:
        spec: the benchmark.
        record: the raw row.
        index: its position (used for the problem id when the spec has no id field, and in errors).

    Raises:
        ValueError: a missing or empty question / answer / option field, or a gold answer that is not
            among the options; the message names the benchmark, the row index and its id.
    """
    raw_id = record.get(spec.id_field) if spec.id_field else None
    task = record.get(spec.task_field) if spec.task_field else None
    if raw_id is None or str(raw_id).strip() == "":
        raw_id = f"{task}-{index}" if task else str(index)
    problem_id = f"{spec.name}/{raw_id}"
    where = f"benchmark {spec.name!r}, row {index} (id {problem_id!r})"
    question = answer_text(_field(record, spec.question_field, where), spec.question_field, where)
    if spec.grading == "multiple_choice":
        choices, gold = _choices_and_gold(spec, record, problem_id, where)
        problem = format_choices(question, choices)
    else:
        choices, gold = [], answer_text(_field(record, spec.answer_field, where), spec.answer_field, where)
        problem = question
    return {
        "benchmark": spec.name,
        "problem_id": problem_id,
        "problem": problem,
        "answer": gold,
        "grading": spec.grading,
        "domain": spec.domain,
        "choices": [str(c) for c in choices],
        "prompt": [],
    }


def _embedded_rows(name: str, split: str, options: dict) -> list[dict]:
    """The rows of an embedded data set's split (``champ``, ``ladder``), which bring their own chat prompts."""
    if name == "champ":
        from trl_explore.data import load_default_offline_dataset

        data = load_default_offline_dataset(**options)[split]
    else:
        from trl_explore.data.ladder import ladder_dataset

        data = ladder_dataset(**options)[split]
    rows = []
    for index, record in enumerate(data):
        where = f"benchmark {name!r}, row {index} (id {record.get('problem_id')!r})"
        prompt = [{"role": m["role"], "content": m["content"]} for m in _field(record, "prompt", where)]
        users = [m["content"] for m in prompt if m["role"] == "user"]
        if not users:
            raise ValueError(f"{where}: the prompt has no user message")
        rows.append(
            {
                "benchmark": name,
                "problem_id": str(record["problem_id"]),
                "problem": users[-1],
                "answer": answer_text(_field(record, "answer", where), "answer", where),
                "grading": "math",
                "domain": "math",
                "choices": [],
                "prompt": prompt,
            }
        )
    return rows


def load_benchmark(
    name: str,
    path: str | pathlib.Path | None = None,
    *,
    limit: int | None = None,
    champ_split: str = "test",
    champ_kwargs: dict | None = None,
    ladder_split: str = "test",
    ladder_kwargs: dict | None = None,
    own_split: str = "test",
):
    """Load one benchmark as a ``datasets.Dataset`` with the columns :data:`BENCHMARK_COLUMNS`.

    Args:
        name: a registry name or alias (see :func:`benchmark_spec`).
        path: a local file in the benchmark's Hub schema (see :func:`read_records`); default: the Hub
            (or, for ``champ``, the embedded offline data set).
        limit: keep only the first ``limit`` problems (``None``: all).
        champ_split: split of the offline data set used for ``champ`` (default ``"test"``, held out).
        champ_kwargs: keyword arguments of ``load_default_offline_dataset`` for ``champ`` (the default
            arguments give the split the training job uses).
        ladder_split: split of the ladder used for ``ladder`` (default ``"test"``, held out; ``"validation"`` to
            choose settings, never ``"test"``).
        ladder_kwargs: keyword arguments of :func:`trl_explore.data.ladder_dataset` for ``ladder`` (e.g.
            ``{"levels": ["two_digit"]}``; the defaults give the splits the training job uses).
        own_split: for ``own`` (``path``: a data set in the training format, see
            :func:`trl_explore.evaluation.own_data.load_own_rows`), its split (a single file has one).

    Returns:
        ``datasets.Dataset``, one row per problem, in source order.

    Raises:
        ValueError: unknown benchmark, a row without question / answer (names it), duplicate problem
            ids, ``limit < 1``, or an empty benchmark.
        RuntimeError: the Hub could not be reached and no ``path`` was given.
    """
    from datasets import Dataset, Features, List, Value

    spec = benchmark_spec(name)
    if limit is not None and limit < 1:
        raise ValueError(f"`limit` must be >= 1 or None, got {limit}")
    if spec.name == "champ" and path is None:
        rows = _embedded_rows("champ", champ_split, champ_kwargs or {})
    elif spec.name == "ladder" and path is None:
        rows = _embedded_rows("ladder", ladder_split, ladder_kwargs or {})
    elif spec.name == "own":  # a data set in the training format, its own prompts (trl_explore.evaluation.own_data)
        from trl_explore.evaluation.own_data import load_own_rows

        rows = load_own_rows(path, own_split)
    else:
        records = read_records(path) if path is not None else _hub_records(spec)
        if spec.task_field and path is not None:
            stem = pathlib.Path(path).stem
            records = [r if r.get(spec.task_field) else {**r, spec.task_field: stem} for r in records]
        rows = [convert_record(spec, record, index) for index, record in enumerate(records)]
    if not rows:
        raise ValueError(f"benchmark {spec.name!r} has no problems")
    seen: dict[str, int] = {}
    for index, row in enumerate(rows):
        if row["problem_id"] in seen:
            raise ValueError(
                f"benchmark {spec.name!r}: rows {seen[row['problem_id']]} and {index} share the id "
                f"{row['problem_id']!r}"
            )
        seen[row["problem_id"]] = index
    if limit is not None:
        rows = rows[:limit]
    features = Features(
        {
            "benchmark": Value("string"),
            "problem_id": Value("string"),
            "problem": Value("string"),
            "answer": Value("string"),
            "grading": Value("string"),
            "domain": Value("string"),
            "choices": List(Value("string")),
            "prompt": List({"role": Value("string"), "content": Value("string")}),
        }
    )
    return Dataset.from_list(rows, features=features)
