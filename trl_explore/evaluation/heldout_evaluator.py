"""The held-out evaluation wired to a trainer: :class:`HeldoutEvaluator` evaluates the trainer's current policy
(before and after training in the scripts, at chosen steps through :func:`heldout_callback`) in each prompt format,
on a benchmark's split or on your own held-out problems; the evaluation itself, its tables and its cache are
:mod:`trl_explore.evaluation.heldout`."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Sequence

from trl_explore.evaluation.heldout import (
    HeldoutEvalArguments,
    HeldoutResult,
    cached_evaluation,
    compare_heldout,
    evaluate_heldout,
    format_change_line,
    heldout_problems,
    heldout_table,
)
from trl_explore.sampling.render import rendering_of

logger = logging.getLogger(__name__)


def _max_completion_length(trainer) -> int:
    """A ``GRPOTrainer``'s ``max_completion_length``, else its config's (the SFT baseline's ``SFTBaselineConfig``)."""
    length = getattr(trainer, "max_completion_length", None)
    return length if length is not None else trainer.args.max_completion_length


class HeldoutEvaluator:
    """Evaluates a trainer's current policy with the options of :class:`HeldoutEvalArguments`, in each of its
    prompt formats (:attr:`formats`).

    Args:
        trainer: a ``GRPOTrainer``, or the SFT baseline's ``SFTTrainer`` (its model and tokenizer, its
            ``max_completion_length`` or else ``args.max_completion_length``, and ``args.grader_mode``).
        options: the :class:`HeldoutEvalArguments`.
        levels: the levels to evaluate on when ``options.eval_levels`` is None (the training levels).
        problems: held-out rows of your own data (training format, e.g. from
            :func:`~trl_explore.evaluation.own_data.training_and_eval_data`) evaluated instead of ``eval_benchmark``
            (their first ``eval_problems``), with their own prompts.

    Attributes:
        formats: ``("training", "neutral")`` with ``eval_neutral_format`` on the ladder, else ``("training",)``.
        by_format: ``{format: {label: HeldoutResult}}``; results: ``by_format["training"]`` (the same dict).

    Runs on the main process only (the others wait); returns None elsewhere. A model sharded across processes
    (DeepSpeed ZeRO-3, FSDP) is not evaluated: a warning names the option.
    """

    def __init__(self, trainer, options: HeldoutEvalArguments, levels: Sequence[str] | None = None, problems=None):
        self.trainer = trainer
        self.problems = None
        if problems is not None:  # your own held-out problems (trl_explore.evaluation.own_data)
            from datasets import Dataset

            from trl_explore.evaluation.own_data import own_rows

            self.problems = Dataset.from_list(own_rows(problems.select(range(min(len(problems),
                                                                                 options.eval_problems)))))
        self.options = options
        self.levels = options.eval_levels if options.eval_levels is not None else levels
        neutral = options.eval_neutral_format and options.eval_benchmark == "ladder" and problems is None
        self.formats: tuple[str, ...] = ("training", "neutral") if neutral else ("training",)
        self.by_format: dict[str, dict[str, HeldoutResult]] = {f: {} for f in self.formats}
        self.results: dict[str, HeldoutResult] = self.by_format["training"]
        self._warned = False

    def sharded(self) -> bool:
        t = self.trainer
        if getattr(t, "is_fsdp_enabled", False):
            return True
        plugin = getattr(t.accelerator.state, "deepspeed_plugin", None)
        return plugin is not None and getattr(plugin, "zero_stage", 0) == 3

    def __call__(self, label: str) -> HeldoutResult | None:
        """Evaluate now in every format; the results are kept as ``by_format[format][label]`` (main process).
        Returns the training format's (``results[label]``). The random states are left as they were
        (:func:`~trl_explore.sampling.seeds.isolated_rng`), so training samples the same with or without it."""
        t = self.trainer
        if self.sharded():
            if t.accelerator.is_main_process and not self._warned:
                self._warned = True
                logger.warning("eval_heldout: the model is sharded across processes (ZeRO-3 / FSDP); the held-out "
                               "evaluation is skipped (evaluate the saved model with examples/evaluate.py)")
            return None
        if t.accelerator.is_main_process:
            from trl_explore.sampling.seeds import isolated_rng

            with isolated_rng(t.accelerator.device):  # training's next rollouts draw as if no evaluation had run
                for prompt_format in self.formats:
                    self.by_format[prompt_format][label] = self._evaluate(prompt_format)
        t.accelerator.wait_for_everyone()
        return self.results.get(label) if t.accelerator.is_main_process else None

    def _evaluate(self, prompt_format: str) -> HeldoutResult:
        """One evaluation of the current weights in ``prompt_format`` (cached: :func:`cached_evaluation`); your own
        held-out problems (``self.problems``) are asked with their own prompts."""
        t, o = self.trainer, self.options
        model = t.accelerator.unwrap_model(t.model)
        own = self.problems is not None
        settings = dict(benchmark="own" if own else o.eval_benchmark, split="held-out" if own else o.eval_split,
                        levels=None if own else self.levels,
                        num_problems=o.eval_problems, num_samples=o.eval_samples, temperature=o.eval_temperature,
                        greedy=o.eval_greedy, max_new_tokens=o.eval_max_new_tokens or _max_completion_length(t),
                        seed=o.eval_seed, batch_size=o.eval_batch_size,
                        grader_mode=getattr(t.args, "grader_mode", "math_verify"), prompt_format=prompt_format)
        # the decoder is part of the cache key: its samples differ from generate's, so neither is read for the other
        settings["fast_decode"] = bool(getattr(t.args, "fast_decode", True))
        rows = self.problems if own else heldout_problems(o.eval_benchmark, o.eval_split, self.levels,
                                                          o.eval_problems, prompt_format)
        text = json.dumps([list(rows["prompt"]), list(rows["answer"])])
        problems = hashlib.sha256(text.encode()).hexdigest()[:16]
        from trl_explore.precision import cpu_bf16_active, generation_autocast

        # the CPU bfloat16 tier: generate under the training run's autocast (trl_explore.precision); the cache key
        # names the tier only when it is on, so float32 entries keep matching
        autocast = generation_autocast(t.args, t.accelerator.device)
        precision = {"precision": "cpu-bfloat16"} if cpu_bf16_active(t.args, t.accelerator.device) else {}

        from trl_explore.reporting import nesting_garbles, open_training_bar

        bars = not nesting_garbles(open_training_bar(t))  # minutes on a CPU; none nested in a log during training

        # the prompt as training renders it (trl_explore.sampling.render): chat_template_kwargs, TRL's chat template;
        # the cache key names them only when set, so entries of runs without them keep matching
        rendering = rendering_of(t)
        rendered = {k: v for k, v in rendering.items() if v}

        def evaluate():
            with autocast:
                return evaluate_heldout(model, t.processing_class, **settings, problems=rows if own else None,
                                        show_progress=bars, **rendering)

        return cached_evaluation(model, {**settings, "problems": problems, **precision, **rendered}, evaluate,
                                 cache=o.eval_cache)

    def took(self, label: str) -> str:
        """How long the ``label`` evaluations took over every format (or that the cache answered), for the log."""
        done = [results[label] for results in self.by_format.values() if label in results]
        if all(result.cached for result in done):
            return "read back from the cache, eval_cache"
        return f"{sum(result.seconds for result in done if not result.cached):.0f} s"

    def before_tables(self, label: str = "before") -> list[str]:
        """The table of each format's ``label`` evaluation alone (lines; main process, after ``self(label)``)."""
        lines = []
        for prompt_format in self.formats:
            if label in self.by_format[prompt_format]:
                lines += heldout_table(self.by_format[prompt_format][label])
        return lines

    def change_tables(self, before: str = "before", after: str = "after") -> list[str]:
        """Each format's before/after table with its intervals (:func:`compare_heldout`), then, with two formats,
        one line that sets their mean@k changes side by side (:func:`format_change_line`). Empty where a result is
        missing (another process, a sharded model)."""
        lines, changes = [], {}
        for prompt_format in self.formats:
            results = self.by_format[prompt_format]
            if before in results and after in results:
                changes[prompt_format] = compare_heldout(results[before], results[after])
                lines += heldout_table(results[before], results[after], changes[prompt_format])
        if len(changes) == 2:
            k = min(self.results[before].num_samples, self.results[after].num_samples)
            lines.append(format_change_line(changes["training"]["mean"], changes["neutral"]["mean"], k,
                                            self.results[before].num_problems))
        return lines


def heldout_callback(evaluator: HeldoutEvaluator, steps: Iterable[int]):
    """A ``TrainerCallback`` that runs ``evaluator`` after each optimizer step in ``steps`` (label ``"step <n>"``)."""
    from transformers import TrainerCallback

    wanted = {int(s) for s in steps}

    class HeldoutEvalCallback(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step in wanted:
                evaluator(f"step {state.global_step}")

    return HeldoutEvalCallback()
