"""The training data of the example scripts: :class:`DataArguments` (their data options) and
:func:`load_training_data` (one split, checked and filtered, in the columns the trainers read)."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field

from trl_explore.data.difficulty import PassRateFilterArguments

logger = logging.getLogger(__name__)


@dataclass
class DataArguments(PassRateFilterArguments):
    """Which data the training scripts train on, and how it is filtered."""

    section = "Data options (trl_explore.data.DataArguments)"

    dataset_name: str = field(
        default="ladder",
        metadata={"help": "'ladder' (the generated arithmetic ladder with four teacher styles; splits train, "
                  "validation, test), 'champ' (the embedded CHAMP multi-teacher set, built and cached on first use), "
                  "a .jsonl/.json/.parquet/.csv file, a folder saved with save_to_disk, or a Hub dataset id (prompt "
                  "and answer columns; OGER also needs offline_completions: see docs/own-data.md)."},
    )
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    ladder_levels: list[str] | None = field(
        default=None,
        metadata={"help": "With dataset_name 'ladder': the levels to train on (default: all; "
                          "trl_explore.data.LEVELS)."},
    )
    champ_settings: list[str] | None = field(
        default=None,
        metadata={"help": "With dataset_name 'champ': the CHAMP prompt settings whose solutions are kept (default: "
                  "all 18)."},
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N prompts."})
    min_offline_completions: int = field(
        default=0, metadata={"help": "OGER: drop prompts with fewer offline trajectories than this (0 keeps all)."}
    )
    dedupe_prompts: bool = field(
        default=True,
        metadata={"help": "ASE-GRPO: drop repeated prompts (the Hub copy of DAPO-Math-17k holds its prompts ~100 "
                  "times)."},
    )
    max_prompt_tokens: int | None = field(
        default=None, metadata={"help": "Drop prompts longer than this many tokens (chat template applied)."}
    )
    eval_fraction: float = field(
        default=0.0,
        metadata={"help": "Hold out this share of the training problems (at least 0, below 1; 0: no held-out split; "
                  "chosen by a seeded hash of problem_id, taken out of training) as your own evaluation set, for "
                  "--eval_strategy steps and --eval_heldout; saved as <output_dir>/heldout_problems.jsonl for "
                  "examples/evaluate.py --dataset_name."},
    )
    eval_dataset_split: str | None = field(
        default=None,
        metadata={"help": "Evaluate on this split of dataset_name (e.g. 'test'), or of eval_dataset_name, with the "
                  "training prompt: for --eval_strategy steps and --eval_heldout."},
    )
    eval_dataset_name: str | None = field(
        default=None,
        metadata={"help": "A second data set in the training format to evaluate on (a .jsonl/.parquet file, a "
                  "save_to_disk folder or a Hub id; split eval_dataset_split, default 'train')."},
    )
    completion_panel: bool = field(
        default=False,
        metadata={"help": "With log_completions: print TRL's per-step panel of completions. Off: the rows are still "
                  "saved in <output_dir>/completions/, and the last step's are printed as one table at the end."},
    )


def _prompt_key(prompt) -> str:
    return hashlib.sha1(json.dumps(prompt, sort_keys=True, default=str).encode("utf-8")).hexdigest()


COLUMN_PURPOSES = {"prompt": "the problem the policy is asked", "answer": "each problem's gold answer, which the "
                   "reward grades against"}
"""What the scripts read from each column they require (for the error that names a missing one)."""


def _reload_call(dataset_name: str) -> str:
    """The ``datasets`` call that loads ``dataset_name`` as the scripts do, for a rename hint: a data file's builder
    (``json`` for .jsonl), ``load_from_disk`` for a saved folder, ``load_dataset`` for a Hub id."""
    import os

    from trl_explore.data.loading import DATA_FILE_TYPES

    suffix = dataset_name.rsplit(".", 1)[-1]
    if suffix in DATA_FILE_TYPES and not os.path.isdir(os.path.expanduser(dataset_name)):
        return f"load_dataset({DATA_FILE_TYPES[suffix]!r}, data_files={dataset_name!r}, split='train')"
    if os.path.isdir(os.path.expanduser(dataset_name)):
        return f"load_from_disk({dataset_name!r})"
    return f"load_dataset({dataset_name!r}, split='train')"


def rename_hint(dataset_name: str, renames: str) -> str:
    """How to rename columns of ``dataset_name`` and save it in the same kind: a data file is read with its builder
    and written back as a JSON-lines file (never ``load_from_disk``, which reads only a ``save_to_disk`` folder), a
    folder or a Hub set is saved as a folder. ``renames``: the inside of the ``{...}`` of ``rename_columns``."""
    import os

    from trl_explore.data.loading import DATA_FILE_TYPES

    call = f"{_reload_call(dataset_name)}.rename_columns({{{renames}}})"
    if dataset_name.rsplit(".", 1)[-1] in DATA_FILE_TYPES and not os.path.isdir(os.path.expanduser(dataset_name)):
        return f"the new file, e.g. {call}.to_json('my-data.jsonl')"
    return f"the saved folder, e.g. {call}.save_to_disk('my-data')"


def check_script_columns(dataset, dataset_name: str, required) -> None:
    """Refuse, when the data is loaded, a data set without the columns a training script reads by name (``prompt``,
    ``answer``; the scripts have no option that renames them), and a row whose gold ``answer`` is empty.

    Args:
        dataset: the loaded split (its ``column_names``; an ``IterableDataset`` whose columns are unknown is skipped).
        dataset_name: as given (``--dataset_name``), for the message.
        required: the columns this script needs, in order (OGER's teacher column last).

    Raises:
        ValueError: one line naming the missing column(s), the data set's columns, the columns required and the fix
            (rename with ``datasets``, then save); or the row index and the field of an empty gold.
    """
    from trl_explore.rewards.checks import empty_value_index, rename_example

    columns = dataset.column_names
    if columns is None:
        return
    missing = [c for c in required if c in COLUMN_PURPOSES and c not in columns]
    if missing:
        renames = {c: rename_example(columns, c) for c in missing}
        what = "; ".join(f"{c!r}: {COLUMN_PURPOSES[c]}" for c in missing)
        example = ", ".join(f"{old}: {new!r}" for new, old in renames.items())
        raise ValueError(
            f"dataset {dataset_name!r} has no column {' or '.join(repr(c) for c in missing)} ({what}); its columns: "
            f"{columns}; required: {', '.join(required)}. The scripts read these columns by name: rename yours with "
            f"datasets and pass {rename_hint(dataset_name, example)} (docs/own-data.md)"
        )
    if "answer" in required:
        index = empty_value_index(dataset["answer"])
        if index is not None:
            pid = f" (id {dataset[index]['problem_id']!r})" if "problem_id" in columns else ""
            raise ValueError(f"dataset {dataset_name!r}, row {index}{pid}: the 'answer' field is empty; give every "
                             f"problem its gold answer, or drop the row before training (dataset.filter)")


def _row_names(dataset, indices, limit: int = 5) -> str:
    """``"rows 0 (id 'p00'), 4 (id 'p04')"`` for ``indices`` (the first ``limit``, then how many more)."""
    ids = dataset["problem_id"] if "problem_id" in (dataset.column_names or []) else None
    named = [f"{i} (id {str(ids[i])!r})" if ids is not None else str(i) for i in indices[:limit]]
    more = f" and {len(indices) - limit} more" if len(indices) > limit else ""
    return f"row{'s' if len(indices) > 1 else ''} {', '.join(named)}{more}"


def check_gold_readable(dataset, dataset_name: str, gold_normalizer: str = "none") -> None:
    """Refuse, when the data is loaded, gold answers the grader cannot read (``"seven"``, ``"x=6, y=5"`` without a
    gold normaliser, a mark for a missing answer such as ``"n/a"``): their rows would never be scored (no reward,
    nothing learned) and used to crash a run after a whole step (issue 46).

    Args:
        dataset: the loaded split, with an ``answer`` column (an ``IterableDataset`` is skipped).
        dataset_name: as given (``--dataset_name``), for the message.
        gold_normalizer: the name of the data set's phrasing rules (``--gold_normalizer``;
            :data:`trl_explore.data.gold_normalizers.GOLD_NORMALIZERS`); default ``"none"``.

    Raises:
        ValueError: one line naming the rows (index, id, gold) and the fix: numbers or maths in the gold, or a gold
            normaliser.
    """
    from trl_explore.data.gold_normalizers import GOLD_NORMALIZERS
    from trl_explore.rewards.math_verify_reward import golds_parseable

    if dataset.column_names is None or "answer" not in dataset.column_names:
        return
    golds = [str(g) for g in dataset["answer"]]
    unique = sorted(set(golds))
    readable = dict(zip(unique, golds_parseable(unique, gold_normalizer=GOLD_NORMALIZERS[gold_normalizer])))
    bad = [i for i, gold in enumerate(golds) if not readable[gold]]
    if bad:
        examples = ", ".join(repr(golds[i]) for i in bad[:3])
        raise ValueError(
            f"dataset {dataset_name!r}: the grader cannot read the gold answer of {len(bad)} of {len(golds)} rows "
            f"({_row_names(dataset, bad)}: {examples}), so they would never be scored; write each gold as a number "
            f"or maths (e.g. '7', '\\frac{{1}}{{2}}', 'x=6'), or name a gold normaliser for words "
            f"(--gold_normalizer; gold_normalizer={gold_normalizer!r} now; docs/own-data.md#gold-answers-in-words)")


def check_teacher_solutions(dataset, dataset_name: str, offline_column: str = "offline_completions",
                            gold_normalizer: str = "none", grader_mode: str = "math_verify") -> list[tuple]:
    """Grade each teacher solution of your own data against its row's gold, once, when the data is loaded, and warn
    (one warning) naming those graded wrong: OGER would train on them as correct replacements (issue 46). They are
    kept (the data is yours); drop them with the offline builder (:func:`trl_explore.data.build_offline_dataset`), or
    fix the gold.

    Returns:
        ``[(row, problem_id, teacher, solution index)]`` of the solutions graded wrong (teacher ``None`` without an
        ``offline_teachers`` column).
    """
    from trl_explore.data.gold_normalizers import GOLD_NORMALIZERS
    from trl_explore.rewards.math_verify_reward import grade_batch

    columns = dataset.column_names or []
    if offline_column not in columns:
        return []
    teachers = dataset["offline_teachers"] if "offline_teachers" in columns else None
    pairs = [(row, j, text, gold) for row, (texts, gold) in enumerate(zip(dataset[offline_column], dataset["answer"]))
             for j, text in enumerate(texts or [])]
    if not pairs:
        return []
    verdicts = grade_batch([p[2] for p in pairs], [str(p[3]) for p in pairs], mode=grader_mode,
                           gold_normalizer=GOLD_NORMALIZERS[gold_normalizer])
    ids = dataset["problem_id"]
    wrong = []
    texts = {}
    for (row, j, text, _), verdict in zip(pairs, verdicts):
        if verdict is False:
            names = teachers[row] if teachers is not None else None
            wrong.append((row, ids[row], names[j] if names and j < len(names) else None, j))
            texts[row, j] = text
    if wrong:
        def shown(row, j):
            text = " ".join(str(texts[row, j]).split())
            return f"'{text if len(text) <= 60 else text[:57] + '...'}'"

        named = ", ".join(f"row {row} (id {str(pid)!r}, gold {str(dataset[row]['answer'])!r}): its solution {j + 1}"
                          + (f" of teacher {t!r}" if t else "") + f" {shown(row, j)}" for row, pid, t, j in wrong[:5])
        more = f" and {len(wrong) - 5} more" if len(wrong) > 5 else ""
        logger.warning("dataset %r: %d of %d teacher solutions are graded wrong against their gold (rows counted "
                       "from 0, solutions from 1): %s%s. They "
                       "are trained on as correct solutions (OGER's replacements, SFT's targets): fix the gold or the "
                       "solution, or remove the wrong solution from its row's list",
                       dataset_name, len(wrong), len(pairs), named, more)
    return wrong


def load_training_data(data_args: DataArguments, max_completion_length: int, offline: bool = True, tokenizer=None,
                       offline_column: str = "offline_completions", require_answer: bool = True,
                       teacher_use: str = "OGER", gold_normalizer: str = "none", grader_mode: str = "math_verify"):
    """The training split named by ``data_args``, with ``prompt``, ``answer`` and ``problem_id`` columns, and the
    offline columns when ``offline`` (OGER).

    The embedded sets keep only teacher trajectories of at most ``max_completion_length - 1`` tokens (with its EOS a
    longer one would lose its answer). A verl parquet layout (``reward_model.ground_truth``) is mapped to ``answer``;
    without a ``problem_id`` column, a hash of the prompt is used. Without ``offline``, repeated prompts are dropped
    (``dedupe_prompts``). Then the pass-rate filter and ``max_train_samples`` apply.

    Args:
        require_answer: refuse a data set without an ``answer`` column or with an empty gold (default True; the SFT
            baseline, which grades nothing during training, passes False).
        teacher_use: who reads the teacher column, for the message when it is missing: ``"OGER"`` (default; the
            message also points to ASE-GRPO, which needs no teachers) or ``"SFT"`` (the baseline trains on them).
        gold_normalizer, grader_mode: the run's grading options (``--gold_normalizer``, ``--grader_mode``): your own
            data's golds must be readable with them (:func:`check_gold_readable`), and its teacher solutions are
            graded against them once (:func:`check_teacher_solutions`: a warning names the wrong ones).

    Raises:
        ValueError: no ``prompt`` column, or (``require_answer``) no ``answer`` column or an empty gold
            (:func:`check_script_columns`); with ``offline``, no column ``offline_column`` (the message lists the
            columns there are and the fixes); no prompt left after filtering (the message names the filters).
    """
    from trl_explore.data.loading import load_split

    options = {}
    if data_args.dataset_name in ("champ", "ladder"):
        options["max_length"] = max_completion_length - 1
        if data_args.dataset_name == "champ":
            options["settings"] = data_args.champ_settings
        else:
            options["levels"] = data_args.ladder_levels
    dataset = load_split(data_args.dataset_name, data_args.dataset_train_split, **options)
    if "answer" not in dataset.column_names and "reward_model" in dataset.column_names:  # verl parquet layout
        dataset = dataset.map(lambda row: {"answer": str(row["reward_model"]["ground_truth"])})
    required = ["prompt", *(["answer"] if require_answer else []), *([offline_column] if offline else [])]
    check_script_columns(dataset, data_args.dataset_name, required)
    if offline and dataset.column_names is not None and offline_column not in dataset.column_names:
        other = (", or train without teachers with ASE-GRPO (examples/train_ase_grpo.py), which needs none"
                 if teacher_use == "OGER" else "")
        what = ("a list of teacher solutions per row; an empty list means no teacher, which "
                "--min_offline_completions 0 keeps" if teacher_use == "OGER" else
                "a list of teacher solutions per row, the targets SFT trains on")
        raise ValueError(
            f"dataset {data_args.dataset_name!r} has no column {offline_column!r}, where {teacher_use} reads each "
            f"prompt's teacher solutions; its columns: {dataset.column_names}. Add the column ({what}) or name "
            f"the column yours is in with --offline_completions_column{other}"
        )
    if "problem_id" not in dataset.column_names:
        dataset = dataset.map(lambda row: {"problem_id": _prompt_key(row["prompt"])[:16]})
    own = data_args.dataset_name not in ("champ", "ladder")  # the embedded sets are built graded
    if own and require_answer:
        check_gold_readable(dataset, data_args.dataset_name, gold_normalizer)
    if own and offline and "answer" in dataset.column_names:
        check_teacher_solutions(dataset, data_args.dataset_name, offline_column, gold_normalizer, grader_mode)
    if offline and data_args.min_offline_completions > 0:
        few = [i for i, c in enumerate(dataset[offline_column]) if len(c) < data_args.min_offline_completions]
        if few:
            share = ""
            if 2 * len(few) > len(dataset):  # most of the data gone: say so in words (a newcomer lost 35 of 40 rows)
                share = (f"{len(few)} of {len(dataset)} rows ({len(few) / len(dataset):.0%}) have no teacher solution "
                         "and are left out of training; ")
            logger.warning("%sdropped %s: fewer than min_offline_completions=%d teacher solutions (an empty list is "
                           "no teacher; --min_offline_completions 0 keeps such rows, trained on online answers only)",
                           share, _row_names(dataset, few), data_args.min_offline_completions)
        dataset = dataset.filter(lambda row: len(row[offline_column]) >= data_args.min_offline_completions)
    if not offline:
        dataset = dataset.select_columns(["prompt", "answer", "problem_id"])  # the offline trajectories are not used
        if data_args.dedupe_prompts:
            seen: set[str] = set()

            def first_time(row) -> bool:
                key = _prompt_key(row["prompt"])
                if key in seen:
                    return False
                seen.add(key)
                return True

            dataset = dataset.filter(first_time)  # single process: `seen` is shared across rows
    if data_args.max_prompt_tokens is not None and tokenizer is not None:
        def short_enough(row) -> bool:
            ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
            ids = ids["input_ids"] if isinstance(ids, dict) else ids
            return len(ids) <= data_args.max_prompt_tokens

        dataset = dataset.filter(short_enough)
    dataset = data_args.filter_dataset(dataset, max_completion_length)
    if data_args.max_train_samples is not None:
        dataset = dataset.select(range(min(data_args.max_train_samples, len(dataset))))
    if len(dataset) == 0:
        raise ValueError(
            f"no training prompt left in {data_args.dataset_name!r} after filtering (min_offline_completions="
            f"{data_args.min_offline_completions}, max_prompt_tokens={data_args.max_prompt_tokens}, min_pass_rate="
            f"{data_args.min_pass_rate}; teacher trajectories must fit in max_completion_length="
            f"{max_completion_length} tokens): relax a filter or raise max_completion_length"
        )
    return dataset
