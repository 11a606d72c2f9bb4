"""The SFT baseline of the OGER paper (its Table 1 "SFT" row): TRL's ``SFTTrainer`` on the offline teacher
trajectories of the same multi-teacher data the RL methods train on.

* :class:`SFTBaselineConfig`: TRL's ``SFTConfig`` plus the fields that tie it to this package's data and evaluation
  (the offline column, how many teacher solutions per prompt, the grader and the longest solution kept).
* :func:`teacher_sft_dataset`: one prompt-completion row per (prompt, teacher solution), in TRL's conversational
  prompt-completion format (the loss covers the completion only, TRL's default for that format).
* :func:`run_sft`: what ``examples/train_sft.py`` does, with the conventions of the other scripts
  (:func:`trl_explore.cli.run_training`): the default recipe without ``--config``, the data options first in
  ``--help``, the held-out evaluation before and after, the saved model, its card and one summary.

Paper (OGER, Ma et al. 2026, §4.1 and App. B): "supervised fine-tuning of the backbone directly on the offline teacher
trajectories", learning rate 1e-5, 2,000 steps for Qwen2.5-Math-1.5B.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from trl import SFTConfig

from trl_explore.data.gold_normalizers import GOLD_NORMALIZERS
from trl_explore.rewards.modes import GRADER_MODES


@dataclass
class SFTBaselineConfig(SFTConfig):
    r"""
    Configuration of the SFT baseline: TRL's [`~trl.SFTConfig`] plus the fields shared with the RL methods' configs.

    Parameters:
        offline_completions_column (`str`, defaults to `"offline_completions"`):
            Dataset column with each prompt's teacher trajectories (list of str), the one OGER reads.
        teachers_per_prompt (`int` or `None`, defaults to `None`):
            Use at most this many teacher solutions of each prompt (the first ones); None uses all (the paper).
        max_completion_length (`int`, defaults to `256`):
            Longest teacher solution kept, in policy tokens (the embedded sets keep those of at most this minus one,
            as the RL scripts do), and the held-out evaluation's generation length unless `eval_max_new_tokens` is
            set.
        grader_mode (`str`, defaults to `"math_verify"`):
            How the held-out evaluation grades answers (the RL configs' option of the same name).
        gold_normalizer (`str`, defaults to `"none"`):
            The data's phrasing rules for its golds (`"champ"` is chosen for the CHAMP set, as the RL scripts do).
    """

    offline_completions_column: str = field(
        default="offline_completions", metadata={"help": "Column with each prompt's teacher trajectories."}
    )
    teachers_per_prompt: int | None = field(
        default=None, metadata={"help": "At most this many teacher solutions per prompt (default: all)."}
    )
    max_completion_length: int = field(
        default=256, metadata={"help": "Longest teacher solution kept (policy tokens); the evaluation's length."}
    )
    grader_mode: str = field(
        default="math_verify",
        metadata={"help": "How the held-out evaluation reads answers: " + GRADER_MODES.describe() + ".",
                  "choices": list(GRADER_MODES)},
    )
    gold_normalizer: str = field(
        default="none",
        metadata={"help": "The data's phrasing rules for its golds: " + GOLD_NORMALIZERS.describe() + ".",
                  "choices": list(GOLD_NORMALIZERS)},
    )

    def __post_init__(self):
        GRADER_MODES.check(self.grader_mode, "grader_mode")
        GOLD_NORMALIZERS.check(self.gold_normalizer, "gold_normalizer")
        if self.teachers_per_prompt is not None and self.teachers_per_prompt < 1:
            raise ValueError(f"teachers_per_prompt must be >= 1 or None (all), got {self.teachers_per_prompt}")
        if self.max_completion_length < 2:
            raise ValueError(f"max_completion_length must be >= 2, got {self.max_completion_length}")
        super().__post_init__()


def teacher_sft_dataset(dataset, offline_column: str = "offline_completions", teachers_per_prompt: int | None = None):
    """Prompt-completion rows for ``SFTTrainer``: one per (prompt, teacher solution).

    Args:
        dataset: rows with a ``prompt`` (a list of chat messages, or a string) and ``offline_column`` (list of str).
        offline_column: the teacher-solutions column.
        teachers_per_prompt: keep the first ``n`` solutions of each prompt (None: all).

    Returns:
        A ``datasets.Dataset`` with ``prompt``, ``completion`` (conversational: ``[{"role": "assistant", "content":
        solution}]``; plain text when the prompt is a string), ``problem_id`` and ``teacher`` (the name from
        ``offline_teachers`` when present, else ``""``), in the order of the rows and of their solutions.

    Raises:
        ValueError: no column ``offline_column`` (naming the columns there are), a solution that is not a non-empty
            string (naming the row), or no solution at all.
    """
    from datasets import Dataset

    if offline_column not in dataset.column_names:
        raise ValueError(f"the dataset has no column {offline_column!r} of teacher solutions (its columns: "
                         f"{dataset.column_names}); name yours with --offline_completions_column")
    rows = []
    for index, row in enumerate(dataset):
        solutions = list(row[offline_column] or [])
        teachers = list(row.get("offline_teachers") or [""] * len(solutions))
        if teachers_per_prompt is not None:
            solutions = solutions[:teachers_per_prompt]
        for position, solution in enumerate(solutions):
            if not isinstance(solution, str) or not solution.strip():
                raise ValueError(f"row {index} (problem_id {row.get('problem_id')!r}): teacher solution {position} "
                                 f"is not a non-empty string: {solution!r}")
            conversational = isinstance(row["prompt"], list)
            completion = [{"role": "assistant", "content": solution}] if conversational else solution
            rows.append({"prompt": row["prompt"], "completion": completion,
                         "problem_id": str(row.get("problem_id", index)),
                         "teacher": teachers[position] if position < len(teachers) else ""})
    if not rows:
        raise ValueError(f"no teacher solution in column {offline_column!r}: the SFT baseline has nothing to imitate")
    return Dataset.from_list(rows)


def run_sft(recipe, tag: str = "train_sft", argv: Sequence[str] | None = None):
    """Parse, load the data, train ``SFTTrainer`` on the teacher solutions, evaluate before and after, save. Your own
    held-out problems come as in the RL scripts (``eval_fraction``, ``eval_dataset_split``, ``eval_dataset_name``:
    :mod:`trl_explore.evaluation.own_data`); user errors before training are one line (``trl_explore.cli.user_errors``;
    ``--debug`` shows the traceback).

    Args:
        recipe: the YAML used when no ``--config`` is given.
        tag: the prefix of the summary lines.
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        The trained ``SFTTrainer`` (its process group already ended).
    """
    import sys
    import time

    from transformers import AutoTokenizer
    from trl import ModelConfig, SFTTrainer, get_peft_config

    from trl_explore.cli import model_init_kwargs, parse_args, take_debug_flag, user_errors
    from trl_explore.data.gold_normalizers import gold_normalizer_for
    from trl_explore.data.training_data import DataArguments, load_training_data
    from trl_explore.defaults import resolve_model_path
    from trl_explore.evaluation.heldout import HeldoutEvalArguments, save_heldout
    from trl_explore.evaluation.heldout_evaluator import HeldoutEvaluator
    from trl_explore.evaluation.own_data import save_heldout_problems, training_and_eval_data
    from trl_explore.hub import check_hub_access
    from trl_explore.reporting import filter_known_warnings, finish_run

    filter_known_warnings()
    argv, debug = take_debug_flag(sys.argv[1:] if argv is None else argv)
    with user_errors(tag, debug):  # before training: a bad option or data set is one line, as in the RL scripts
        script_args, eval_args, training_args, model_args = parse_args(
            (DataArguments, HeldoutEvalArguments, SFTBaselineConfig, ModelConfig), recipe, argv,
            sections=(DataArguments, HeldoutEvalArguments))
        check_hub_access(training_args)
        if training_args.gold_normalizer == "none":
            training_args.gold_normalizer = gold_normalizer_for(script_args.dataset_name)
        start = time.perf_counter()
        training_args.model_init_kwargs = model_init_kwargs(model_args)
        model_path = resolve_model_path(model_args.model_name_or_path or "embedded")
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        rows = load_training_data(script_args, training_args.max_completion_length, offline=True,
                                  tokenizer=tokenizer if script_args.max_prompt_tokens is not None else None,
                                  offline_column=training_args.offline_completions_column, require_answer=False)
        rows, own_eval = training_and_eval_data(script_args, rows, seed=training_args.seed)  # your held-out problems
        dataset = teacher_sft_dataset(rows, training_args.offline_completions_column,
                                      training_args.teachers_per_prompt)
        trainer = SFTTrainer(model_path, args=training_args, train_dataset=dataset, processing_class=tokenizer,
                             peft_config=get_peft_config(model_args))
        if own_eval is not None and trainer.accelerator.is_main_process:  # as the RL scripts: saved for evaluate.py
            path = save_heldout_problems(own_eval, training_args.output_dir)
            print(f"[{tag}] your own evaluation set: {len(own_eval)} held-out problems ({len(rows)} to train on), "
                  f"saved to {path}", flush=True)
        evaluator = None
        if eval_args.eval_heldout:
            evaluator = HeldoutEvaluator(trainer, eval_args, levels=getattr(script_args, "ladder_levels", None),
                                         problems=own_eval)
            before = evaluator("before")
            if before is not None:  # a table per prompt format (as the training scripts print it)
                tables = "\n".join(evaluator.before_tables())
                print(f"[{tag}] held-out evaluation before training ({evaluator.took('before')}):\n{tables}",
                      flush=True)
    resume = training_args.resume_from_checkpoint
    resume = True if isinstance(resume, str) and resume.lower() in ("true", "1", "yes") else resume
    trainer.train(resume_from_checkpoint=resume)
    lines = (f"{len(dataset)} teacher solutions of {len(rows)} prompts",)
    if evaluator is not None:
        after = evaluator("after")
        before = evaluator.results.get("before")
        if after is not None and before is not None:
            lines += (f"held-out evaluation before and after training ({evaluator.took('after')} after):",
                      *evaluator.change_tables())
            save_heldout(training_args.output_dir, evaluator.results, evaluator.by_format.get("neutral"))
    finish_run(trainer, training_args.output_dir, script_args.dataset_name, tag,
               ("loss", "mean_token_accuracy", "entropy", "num_tokens"), time.perf_counter() - start, lines=lines)
    trainer.accelerator.end_training()
    return trainer
