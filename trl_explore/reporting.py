"""Console output of the example scripts: one compact line per logged step, no third-party noise, one table at the end.

* Per-step logs: Transformers prints every logged dict whole (``ProgressCallback.on_log`` / ``PrinterCallback.on_log``:
  about 1,450 characters of quoted strings a step, 45 keys with OGER + ASE). :class:`CompactLogCallback` prints one
  line of the key numbers instead (:func:`use_compact_logs` swaps it in); the full dict still goes to ``report_to``
  and ``trainer_state.json`` (``Trainer.log`` writes those before any callback prints).
* Warnings: :func:`filter_known_warnings` hides, by message, third-party deprecation notices that say nothing to a
  user of the example scripts (:data:`KNOWN_WARNINGS`).
* Completions: with ``log_completions`` on, TRL's ``GRPOTrainer.log`` prints a rich panel of prompts and completions
  at every logging step (about 170 wrapped lines per step for the CPU demo) and writes the same rows to
  ``<output_dir>/completions/completions_<step>.parquet``. The CPU recipes keep the files and print
  :func:`completion_table` of the last step once, after training.
"""

from __future__ import annotations

import contextlib
import fnmatch
import math
import pathlib
import time
import warnings
from collections.abc import Mapping, Sequence

from transformers.trainer_callback import PrinterCallback, ProgressCallback

KNOWN_WARNINGS = (
    # transformers 5.x, four times per run: TRL 1.16 and Trainer still use the old names (training_args.py,
    # modeling_utils.py); nothing a user of these scripts sets or can change
    (FutureWarning, r"`(is_)?gradient_checkpointing(_enable|_disable)?` is deprecated and will be removed in v6"),
    # torch's DataLoader on a CPU-only machine: Trainer asks for pinned memory (dataloader_pin_memory=True)
    (UserWarning, r"'pin_memory' argument is set as true but no accelerator is found"),
)
"""``(category, message regex)`` of the third-party warnings :func:`filter_known_warnings` hides; seen on stderr of
``accelerate launch examples/train_oger.py --max_steps 1`` (transformers 5.24, TRL 1.16, torch 2.13 CPU)."""

CORE_LOG_KEYS = ("loss", "reward", "entropy", "completions/mean_length", "step_time")
"""The keys of TRL's GRPO logs every compact line shows (when logged), before the method keys."""

_FILTERS_INSTALLED = False


def filter_known_warnings() -> None:
    """Hide the warnings of :data:`KNOWN_WARNINGS`, matched by category and message (installed once per process).

    For the example scripts only, called before their options are parsed (``TrainingArguments`` emits the first
    one); a library must not change its user's warning filters. Every other warning is shown as before.
    """
    global _FILTERS_INSTALLED
    if _FILTERS_INSTALLED:
        return
    for category, message in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    _FILTERS_INSTALLED = True


def format_number(value) -> str:
    """A logged value with 4 significant digits (``0.07961``, ``203.2``, ``1.5e-05``); ints and strings as they are."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return str(value)
    return "nan" if math.isnan(value) else f"{value:.4g}"


def _steps(count: int) -> str:
    """``"1 step"``, ``"2 steps"``, ``"0 steps"``."""
    return f"{count} step{'' if count == 1 else 's'}"


def compact_log_line(logs: Mapping, step: int, max_steps: int, method_keys: Sequence[str] = ()) -> str | None:
    """One line for a person to scan, from one dict that ``Trainer.log`` hands to the callbacks.

    Args:
        logs: the logged dict (training, evaluation ``eval_*`` or the final ``train_runtime`` summary).
        step, max_steps: the optimizer step and the run's total.
        method_keys: method metrics to show after the core ones (:data:`CORE_LOG_KEYS`), in this order; shell-style
            patterns allowed (``"ase/route_*_accuracy"``). Keys not logged at this step are left out.

    Returns:
        e.g. ``"step 3/30 | loss 0.0796 | reward 0.25 ± 0.4629 | entropy 2.237 | len 203.2 | 102.9 s/step |
        oger/reward_mean 0"``; None for an empty dict.
    """
    if not logs:
        return None
    if "train_runtime" in logs:
        parts = [f"done: {_steps(step)} in {format_number(logs['train_runtime'])} s"]
        if "train_loss" in logs:
            parts.append(f"mean loss {format_number(logs['train_loss'])}")
        return " | ".join(parts)
    evaluation = any(k.startswith("eval_") for k in logs)
    prefix = "eval_" if evaluation else ""
    parts = [f"{'eval ' if evaluation else ''}step {step}/{max_steps}"]
    labels = {"completions/mean_length": "len", "step_time": None}
    for key in CORE_LOG_KEYS:
        value = logs.get(prefix + key)
        if value is None:
            continue
        if key == "reward" and logs.get(prefix + "reward_std") is not None:
            parts.append(f"reward {format_number(value)} ± {format_number(logs[prefix + 'reward_std'])}")
        elif key == "step_time":
            parts.append(f"{format_number(value)} s/step")
        else:
            parts.append(f"{labels.get(key, key)} {format_number(value)}")
    shown = set()
    for pattern in method_keys:
        for key in (k for k in logs if fnmatch.fnmatchcase(k, prefix + pattern) and k not in shown):
            shown.add(key)
            parts.append(f"{key} {format_number(logs[key])}")
    return " | ".join(parts)


def nesting_garbles(training_bar) -> bool:
    """Whether a second tqdm bar opened while ``training_bar`` is open would leave cursor-up codes (``ESC[A``) in the
    output: the bar is open and writes to a stream that is not a terminal (a log file, a pipe). In a terminal, or as
    notebook widgets, the two bars nest cleanly."""
    if training_bar is None or type(training_bar).__module__.startswith("tqdm.notebook"):  # widgets: no codes
        return False
    stream = getattr(training_bar, "fp", None)
    try:
        return not stream.isatty()
    except (AttributeError, ValueError):  # no stream, or a closed one
        return True


def open_training_bar(trainer):
    """The training progress bar of ``trainer``'s ``ProgressCallback`` (or :class:`CompactLogCallback`) while training
    runs, else None."""
    for callback in getattr(getattr(trainer, "callback_handler", None), "callbacks", ()):
        if isinstance(callback, ProgressCallback) and getattr(callback, "training_bar", None) is not None:
            return callback.training_bar
    return None


class CompactLogCallback(ProgressCallback):
    """Transformers' progress bar with one compact line per log (:func:`compact_log_line`) instead of the dict.

    Subclasses ``ProgressCallback`` and overrides ``on_log`` (the method that prints the dict); the bar, when
    ``progress_bar`` is True, is Transformers' own, except that no evaluation bar opens under the training bar when
    the output is not a terminal (:func:`nesting_garbles`). Prints on the main process only.

    Args:
        method_keys: the method metrics to show (e.g. ``("oger/reward_mean", "oger/failed_ratio")``).
        progress_bar: keep the tqdm bar (False: lines only, as with ``disable_tqdm``).
    """

    def __init__(self, method_keys: Sequence[str] = (), progress_bar: bool = True):
        super().__init__()
        self.method_keys = tuple(method_keys)
        self.progress_bar = progress_bar

    def on_train_begin(self, args, state, control, **kwargs):
        if self.progress_bar:
            super().on_train_begin(args, state, control, **kwargs)
        self.current_step = 0

    def on_step_end(self, args, state, control, **kwargs):
        if self.training_bar is not None:
            super().on_step_end(args, state, control, **kwargs)

    def on_prediction_step(self, args, state, control, eval_dataloader=None, **kwargs):
        # Overrides ProgressCallback.on_prediction_step: no evaluation bar under the training bar when the output is
        # no terminal (nested bars leave ESC[A codes in a log); the "eval step" line reports the evaluation.
        if self.progress_bar and not nesting_garbles(self.training_bar):
            super().on_prediction_step(args, state, control, eval_dataloader=eval_dataloader, **kwargs)

    def on_log(self, args, state, control, logs=None, **kwargs):
        # Overrides ProgressCallback.on_log, which writes str(logs) above the bar.
        if not state.is_world_process_zero:
            return
        line = compact_log_line(logs or {}, state.global_step, state.max_steps, self.method_keys)
        if line is not None:
            (self.training_bar.write if self.training_bar is not None else print)(line)

    def on_train_end(self, args, state, control, **kwargs):
        if self.training_bar is not None:
            super().on_train_end(args, state, control, **kwargs)


def use_compact_logs(trainer, method_keys: Sequence[str] | None = None) -> CompactLogCallback:
    """Replace ``trainer``'s dict-printing callbacks (``ProgressCallback``, ``PrinterCallback``) by a
    :class:`CompactLogCallback` showing ``method_keys`` (default: the ``console_keys`` its components declare); keeps a
    progress bar where Transformers had one.

    Returns:
        The installed callback.
    """
    if method_keys is None:
        method_keys = [key for c in getattr(trainer, "components", ()) for key in getattr(c, "console_keys", ())]
    handler = trainer.callback_handler
    printers = [c for c in handler.callbacks if type(c) in (ProgressCallback, PrinterCallback, CompactLogCallback)]
    had_bar = any(isinstance(c, ProgressCallback) and getattr(c, "progress_bar", True) for c in printers)
    for printer in printers:
        trainer.remove_callback(printer)  # the instance: removing by class would match subclasses too
    callback = CompactLogCallback(method_keys, progress_bar=had_bar)
    trainer.add_callback(callback)
    return callback

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


def process_seconds() -> float:
    """Wall seconds since this process started (``psutil``; 0.0 where it cannot tell)."""
    try:
        import psutil

        return max(0.0, time.time() - psutil.Process().create_time())
    except Exception:  # a missing psutil or an unreadable process table: no start-up figure
        return 0.0


class PhaseClock:
    """Where a script's wall time went: ``with clock("evaluation before"): ...`` adds that block's seconds to the
    phase; :meth:`line` puts them beside the rest of the process's time ("start-up and the rest")."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, phase: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - start

    def line(self, total: float | None = None) -> str:
        """E.g. ``"where the time went: start-up and the rest 31 s, readiness check 12 s, evaluation before 45 s,
        training 150 s, evaluation after 44 s, saving 9 s; 291 s in all (4 min 51 s)"``.

        Args:
            total: the run's wall seconds (default: :func:`process_seconds`); the phases' remainder is named
                "start-up and the rest".
        """
        total = process_seconds() if total is None else total
        measured = sum(self.seconds.values())
        total = max(total, measured)
        parts = [f"start-up and the rest {total - measured:.0f} s"]
        parts += [f"{phase} {seconds:.0f} s" for phase, seconds in self.seconds.items()]
        minutes, rest = divmod(round(total), 60)
        return f"where the time went: {', '.join(parts)}; {total:.0f} s in all ({minutes} min {rest:02d} s)"


def finish_run(trainer, output_dir: str, dataset_name: str | None, tag: str, metric_prefixes: tuple[str, ...],
               seconds: float, lines: tuple[str, ...] = (), clock: PhaseClock | None = None) -> None:
    """What every example script does after ``trainer.train()``: save, card, push, and one readable summary.

    Saves the model and ``trainer_state.json`` (the logs ``examples/plot.py`` reads, also when no checkpoint was
    saved), writes the model card (methods, papers, base model, data, hyperparameters: :mod:`trl_explore.hub`),
    pushes to the Hub when ``push_to_hub`` is set, and on the main process prints the step count and run time
    (``seconds``), the last value of every logged metric whose name starts with one of ``metric_prefixes``, the
    extra ``lines``, and the last step's completions (:func:`completion_table`), each line prefixed with ``[tag]``;
    with a ``clock`` (:class:`PhaseClock`), the saving is timed as its phase ``"saving"`` and the summary ends with
    where the process's time went.
    """
    clock = PhaseClock() if clock is None else clock
    with clock("saving"):
        trainer.save_model(output_dir)
        trainer.save_state()
        trainer.create_model_card(model_name=pathlib.Path(output_dir).name, dataset_name=dataset_name)
        if trainer.args.push_to_hub:
            trainer.push_to_hub(dataset_name=dataset_name)
    if not trainer.accelerator.is_main_process:
        return
    logged = {k: v for entry in trainer.state.log_history for k, v in entry.items() if k.startswith(metric_prefixes)}
    print(f"[{tag}] {_steps(trainer.state.global_step)} in {seconds:.1f} s; model saved to {output_dir}")
    print(f"[{tag}] last metrics: " + ", ".join(f"{k}={v:.4g}" for k, v in sorted(logged.items())))
    for line in lines:
        print(f"[{tag}] {line}")
    table = completion_table(pathlib.Path(output_dir) / "completions")
    if table is not None:
        print(f"[{tag}] completions of the last step (all in {output_dir}/completions/):")
        print(table)
    print(f"[{tag}] {clock.line()}")
