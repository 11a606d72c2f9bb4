"""The SFT baseline of the OGER paper (its Table 1 "SFT" row): TRL's ``SFTTrainer`` on the offline teacher
trajectories of the same multi-teacher data the RL methods train on.

* :class:`SFTBaselineConfig`: TRL's ``SFTConfig`` plus the fields that tie it to this package's data and evaluation
  (the offline column, how many teacher solutions per prompt, the grader and the longest solution kept).
* :func:`teacher_sft_dataset`: one prompt-completion row per (prompt, teacher solution), in TRL's conversational
  prompt-completion format (the loss covers the completion only, TRL's default for that format).
* :func:`run_sft`: what ``examples/train_sft.py`` does, the run the other scripts share
  (:func:`trl_explore.cli.run_recipe`): the default recipe without ``--config``, the data options first in
  ``--help``, one-line user errors, your own held-out split, the held-out evaluation before and after, the saved
  model, its card and one summary; :func:`build_sft_trainer` is the part that differs.

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


SFT_METRICS = ("loss", "mean_token_accuracy", "entropy", "num_tokens")
"""The logged metrics the SFT run's summary shows (their last values)."""


def sft_eval_rows(own_eval, offline_column: str, teachers_per_prompt: int | None):
    """TRL's ``eval_dataset`` for the SFT baseline: the teacher solutions of your own held-out problems, on which
    ``--eval_strategy steps`` logs ``eval_loss``.

    Raises:
        ValueError: the held-out rows have no column ``offline_column`` (naming their columns and the fix).
    """
    if offline_column not in own_eval.column_names:
        raise ValueError(f"eval_strategy: the SFT baseline's evaluation loop measures the loss on the held-out "
                         f"problems' teacher solutions, and the evaluation data has no column {offline_column!r} (its "
                         f"columns: {own_eval.column_names}); set --eval_strategy no (--eval_heldout still grades "
                         f"sampled answers on them)")
    return teacher_sft_dataset(own_eval, offline_column, teachers_per_prompt)


def build_sft_trainer(model_name, training_args, model_args, rows, own_eval):
    """``SFTTrainer`` on the teacher solutions of ``rows`` (:func:`teacher_sft_dataset`), with the policy's tokenizer;
    the ``build_trainer`` of :func:`trl_explore.cli.run_recipe`.

    Returns:
        The trainer and the summary line ``"<n> teacher solutions of <m> prompts"``.
    """
    from transformers import AutoTokenizer
    from trl import SFTTrainer, get_peft_config

    from trl_explore.defaults import resolve_model_path

    model_path = resolve_model_path(model_name)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    column, per_prompt = training_args.offline_completions_column, training_args.teachers_per_prompt
    dataset = teacher_sft_dataset(rows, column, per_prompt)
    eval_dataset = None
    if own_eval is not None and training_args.eval_strategy != "no":
        eval_dataset = sft_eval_rows(own_eval, column, per_prompt)
    trainer = SFTTrainer(model_path, args=training_args, train_dataset=dataset, eval_dataset=eval_dataset,
                         processing_class=tokenizer, peft_config=get_peft_config(model_args))
    return trainer, (f"{len(dataset)} teacher solutions of {len(rows)} prompts",)


def run_sft(recipe, tag: str = "train_sft", argv: Sequence[str] | None = None):
    """Parse, load the data, train ``SFTTrainer`` on the teacher solutions, evaluate before and after, save: the
    training scripts' run (:func:`trl_explore.cli.run_recipe`: one-line user errors, ``--debug``, your own held-out
    problems with ``--eval_fraction`` / ``--eval_dataset_split`` / ``--eval_dataset_name``) without the readiness
    check, which asks whether sampled groups differ in reward: SFT samples nothing while training and learns from
    every teacher token.

    Args:
        recipe: the YAML used when no ``--config`` is given.
        tag: the prefix of the summary lines.
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        The trained ``SFTTrainer`` (its process group already ended).
    """
    from trl_explore.cli import run_recipe

    return run_recipe(SFTBaselineConfig, recipe, tag, build_sft_trainer, lambda trainer: SFT_METRICS, argv=argv,
                      rollouts=False)
