"""Console output of the example scripts: TRL's per-step completion panel off, one compact table at the end.

With ``log_completions`` on, TRL's ``GRPOTrainer.log`` prints a rich panel of prompts and completions at every
logging step (about 170 wrapped lines per step for the CPU demo) and writes the same rows to
``<output_dir>/completions/completions_<step>.parquet``. The CPU recipes keep the files and print
:func:`completion_table` of the last step once, after training.
"""

from __future__ import annotations

import pathlib

DEFAULT_COLUMNS = (
    "step", "route", "is_offline", "teacher", "divergence", "last_token_entropy", "math_reward", "oger_reward",
    "advantage", "completion",
)


def silence_trl_completion_panel() -> None:
    """Stop TRL's per-step rich panel of completions; the parquet files of ``log_completions`` are still written.

    TRL 1.16 prints it from ``GRPOTrainer.log`` through the name ``print_prompt_completions_sample`` of
    ``trl.trainer.grpo_trainer`` (only when ``rich`` is installed); that module-level name is replaced by a no-op
    for this process.
    """
    import trl.trainer.grpo_trainer as grpo_module

    grpo_module.print_prompt_completions_sample = lambda *args, **kwargs: None


def completion_table(folder: str | pathlib.Path, columns=DEFAULT_COLUMNS, max_chars: int = 60) -> str | None:
    """The last step's completion rows (written by TRL's ``log_completions``) as a fixed-width text table.

    Args:
        folder: ``<output_dir>/completions``.
        columns: columns to show, in order, when the file has them (others are left out).
        max_chars: each completion is cut to this many characters, newlines shown as spaces.

    Returns:
        The table as text (one row per completion), or None when the folder holds no ``completions_*.parquet``.
    """
    import pandas as pd

    files = sorted(pathlib.Path(folder).glob("completions_*.parquet"))
    if not files:
        return None
    table = pd.read_parquet(files[-1])
    table["completion"] = [
        str(c[-1]["content"] if len(c) else "")[:max_chars].replace("\n", " ") for c in table["completion"]
    ]
    shown = [c for c in columns if c in table.columns]
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.max_colwidth", max_chars,
                           "display.precision", 3):
        return table[shown].to_string(index=False)


def finish_run(trainer, output_dir: str, dataset_name: str | None, tag: str, metric_prefixes: tuple[str, ...],
               seconds: float, lines: tuple[str, ...] = ()) -> None:
    """What every example script does after ``trainer.train()``: save, card, push, and one readable summary.

    Saves the model and ``trainer_state.json`` (the logs ``examples/plot.py`` reads, also when no checkpoint was
    saved), writes TRL's model card with the training data named (``base_model`` only for a Hub id, see
    :mod:`trl_explore.hub`), pushes to the Hub when ``push_to_hub`` is set, and on the main process prints the step
    count and run time (``seconds``), the last value of every logged metric whose name starts with one of
    ``metric_prefixes``, the extra ``lines``, and the last step's completions (:func:`completion_table`), each line
    prefixed with ``[tag]``.
    """
    trainer.save_model(output_dir)
    trainer.save_state()
    trainer.create_model_card(model_name=pathlib.Path(output_dir).name, dataset_name=dataset_name)
    if trainer.args.push_to_hub:
        trainer.push_to_hub(dataset_name=dataset_name)
    if not trainer.accelerator.is_main_process:
        return
    logged = {k: v for entry in trainer.state.log_history for k, v in entry.items() if k.startswith(metric_prefixes)}
    print(f"[{tag}] {trainer.state.global_step} steps in {seconds:.1f} s; model saved to {output_dir}")
    print(f"[{tag}] last metrics: " + ", ".join(f"{k}={v:.4g}" for k, v in sorted(logged.items())))
    for line in lines:
        print(f"[{tag}] {line}")
    table = completion_table(pathlib.Path(output_dir) / "completions")
    if table is not None:
        print(f"[{tag}] completions of the last step (all in {output_dir}/completions/):")
        print(table)
