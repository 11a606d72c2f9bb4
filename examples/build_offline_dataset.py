"""Build a multi-teacher offline data set for OGER (paper §3.1, App. A.1) and report Table 4 / Figure 4.

Examples::

    # CHAMP (embedded, offline): GPT-3.5, GPT-4, GPT-4 Turbo and PaLM 2 Medium as teachers (~5 min)
    python examples/build_offline_dataset.py --output_dir outputs/champ_offline

    # only CHAMP's zero-shot conversations, the paper's system prompt (Table 6), 4k tokens at most
    python examples/build_offline_dataset.py --output_dir outputs/champ0 --champ_settings 0-Shot \\
        --system_prompt oger --max_length 4096

    # a LUFFY-format data set saved with `save_to_disk` / a JSON(L) or Parquet file
    python examples/build_offline_dataset.py --source luffy --data_files openr1.parquet --output_dir outputs/luffy

    # one column per teacher
    python examples/build_offline_dataset.py --source columns --data_files sols.jsonl \\
        --teacher_columns r1 qwen3 glm --output_dir outputs/multi

    # add completions sampled from teacher models to any source
    python examples/build_offline_dataset.py --generate_with Qwen/Qwen3-32B --num_samples 1 --output_dir outputs/gen

Writes ``output_dir`` (``DatasetDict.save_to_disk``: splits ``train`` and ``test``) together with
``offline_stats.md``, ``offline_stats.json`` and ``offline_lengths.png``.
"""

import time
from dataclasses import dataclass, field

from trl_explore.cli import run_script
from trl_explore.data import (
    DEFAULT_OUTPUT_DIR,
    OfflineDatasetBuilder,
    champ_records,
    generated_records,
    luffy_records,
    save_offline_dataset,
    teacher_column_records,
)
from trl_explore.data.build_cache import default_folder
from trl_explore.data.gold_normalizers import gold_normalizer_for


@dataclass
class ScriptArguments:
    """Arguments of ``build_offline_dataset.py``.

    Parameters:
        output_dir (`str`, default ``"outputs/offline_dataset"``): where to save the data set and the statistics.
        source (`str`, default ``"champ"``): ``"champ"``, ``"luffy"`` or ``"columns"``.
        data_files (`list[str]`, optional): input files (JSON, JSONL, Parquet, CSV) or one
            ``save_to_disk`` folder, for ``luffy``/``columns``.
        data_split (`str`, default ``"train"``): split of the input to read.
        teacher_columns (`list[str]`, optional): teacher columns for ``source="columns"``.
        problem_column, answer_column, id_column: column names for ``source="columns"``
            (``id_column`` also for ``luffy``).
        luffy_teacher (`str`, default ``"DeepSeek-R1"``): teacher name of LUFFY targets.
        champ_settings (`list[str]`, optional): CHAMP prompt settings to keep (default: all 18).
        generate_with (`list[str]`, optional): teacher models that also generate completions.
        num_samples, max_new_tokens, temperature: teacher sampling.
        policy_tokenizer (`str`, default ``"embedded"``): tokenizer counting lengths (embedded SmolLM2).
        max_length (`int`, default 8192): length filter, policy tokens (paper: 8k).
        system_prompt (`str`, default ``"default"``): ``"default"``, ``"oger"`` (Table 6) or ``"none"``.
        test_fraction (`float`, default 0.1): held-out problems.
        seed (`int`, default 0): split seed.
        num_proc (`int`, default 1): Math-Verify processes.
        grader_mode (`str`, default ``"math_verify"``): how teacher answers are graded (as in training).
        build_cache (`str`, default ``"default"``): folder of cached teacher verdicts and token lengths
            (``"default"``: ``~/.cache/trl_explore/offline/build_cache``, ``"none"``: compute everything again).
    """

    output_dir: str = field(
        default=DEFAULT_OUTPUT_DIR, metadata={"help": "Where to save the data set (save_to_disk) and statistics."}
    )
    source: str = field(default="champ", metadata={"help": "Input format.", "choices": ["champ", "luffy", "columns"]})
    data_files: list[str] | None = field(default=None, metadata={"help": "Input files or a save_to_disk folder."})
    data_split: str = field(default="train", metadata={"help": "Split of the input data to read."})
    teacher_columns: list[str] | None = field(default=None, metadata={"help": "Teacher columns (source=columns)."})
    problem_column: str = field(default="problem", metadata={"help": "Problem column (source=columns)."})
    answer_column: str = field(default="answer", metadata={"help": "Gold answer column (source=columns)."})
    id_column: str | None = field(default=None, metadata={"help": "Problem id column (None: 'row-<index>')."})
    luffy_teacher: str = field(default="DeepSeek-R1", metadata={"help": "Teacher name of LUFFY targets."})
    champ_settings: list[str] | None = field(default=None, metadata={"help": "CHAMP settings to keep (None: all 18)."})
    generate_with: list[str] | None = field(
        default=None, metadata={"help": "Teacher models that generate completions."}
    )
    num_samples: int = field(default=1, metadata={"help": "Generated completions per teacher and problem."})
    max_new_tokens: int = field(default=8192, metadata={"help": "Teacher generation budget (tokens)."})
    temperature: float = field(default=0.6, metadata={"help": "Teacher sampling temperature (0: greedy)."})
    policy_tokenizer: str = field(
        default="embedded", metadata={"help": "Tokenizer counting lengths ('embedded': SmolLM2)."}
    )
    max_length: int = field(default=8192, metadata={"help": "Keep completions of at most this many policy tokens."})
    system_prompt: str = field(
        default="default",
        metadata={"help": "Prompt preset ('oger': Table 6).", "choices": ["default", "oger", "none"]},
    )
    test_fraction: float = field(default=0.1, metadata={"help": "Fraction of problems held out as test."})
    seed: int = field(default=0, metadata={"help": "Seed of the train/test split."})
    num_proc: int = field(default=1, metadata={"help": "Processes for Math-Verify."})
    grader_mode: str = field(
        default="math_verify",
        metadata={"help": "How teacher answers are graded (the trainers' option).",
                  "choices": ["math_verify", "trl", "strict", "boxed"]},
    )
    build_cache: str = field(
        default="default",
        metadata={"help": "Folder of cached teacher verdicts and token lengths: a rebuild with other settings "
                          "grades only new solutions ('default': the package cache, 'none': no cache)."},
    )


def load_rows(args: ScriptArguments):
    """The input table of a ``luffy``/``columns`` source as a ``datasets.Dataset``."""
    import os

    from datasets import load_dataset, load_from_disk

    if not args.data_files:
        raise ValueError(f"--source {args.source} needs --data_files.")
    if len(args.data_files) == 1 and os.path.isdir(args.data_files[0]):
        data = load_from_disk(args.data_files[0])
        return data[args.data_split] if hasattr(data, "keys") else data
    extension = args.data_files[0].rsplit(".", 1)[-1]
    builder = {"jsonl": "json", "json": "json", "parquet": "parquet", "csv": "csv"}.get(extension)
    if builder is None:
        raise ValueError(f"Unknown data file type {extension!r}: use JSON, JSONL, Parquet or CSV.")
    return load_dataset(builder, data_files=args.data_files, split=args.data_split)


def source_records(args: ScriptArguments):
    """The records of ``args.source``."""
    if args.source == "champ":
        return champ_records(settings=args.champ_settings)
    if args.source == "luffy":
        return luffy_records(load_rows(args), teacher=args.luffy_teacher, id_column=args.id_column)
    if args.source == "columns":
        return teacher_column_records(
            load_rows(args), args.teacher_columns or [], args.problem_column, args.answer_column, args.id_column
        )
    raise ValueError(f"--source must be champ, luffy or columns, got {args.source!r}.")


def main(args: ScriptArguments) -> None:
    start = time.perf_counter()
    sources = [list(source_records(args))]
    if args.generate_with:
        sources.append(
            generated_records(
                sources[0],
                args.generate_with,
                num_samples=args.num_samples,
                max_new_tokens=args.max_new_tokens,
                temperature=args.temperature,
                system_prompt=args.system_prompt,
                seed=args.seed,
            )
        )
    builder = OfflineDatasetBuilder(
        tokenizer=args.policy_tokenizer,
        max_length=args.max_length,
        system_prompt=args.system_prompt,
        test_fraction=args.test_fraction,
        seed=args.seed,
        num_proc=args.num_proc,
        grader_mode=args.grader_mode,
        build_cache={"default": default_folder(), "none": None}.get(args.build_cache, args.build_cache),
        gold_normalizer=gold_normalizer_for(args.source),  # CHAMP's golds are read with CHAMP's phrasing rules
    )
    dataset, report = builder.build(*sources)
    save_offline_dataset(dataset, args.output_dir)
    paths = report.save(args.output_dir)
    print(report.markdown())
    print(dataset)
    print(f"Saved to {args.output_dir} ({', '.join(p.name for p in paths.values())}).")
    print(f"Total time: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    run_script(main, ScriptArguments, "build_offline_dataset")  # a bad option or input: one line (--debug: traceback)
