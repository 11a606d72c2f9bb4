"""Held-out accuracy and answer diversity of a policy, before and after training (issue 23: "see it learn").

:func:`evaluate_heldout` samples ``k`` completions (and one greedy completion) for each of the first ``P`` problems
of an embedded benchmark's split (default: the ladder's held-out ``test`` split; ``validation`` to choose settings),
through the evaluation stack (:func:`~trl_explore.evaluation.runner.evaluate_dataset`: the sampling stack's
:class:`~trl_explore.sampling.hf.TransformersGenerator`, the training reward's grader). It returns a
:class:`HeldoutResult`: per-problem verdicts and extracted answers, from which mean@k, pass@k, greedy accuracy and
the two answer-diversity measures are read. :func:`compare_heldout` gives the before/after differences with 95%
paired bootstrap intervals over problems; :func:`heldout_table` prints them as a short table.

**Two prompt formats** (issue 28: "tell skill from format"). The same problems are asked in the ``"training"``
format (the rows' own prompt: the ladder's chat prompt with one worked example, as in training) and, with
``eval_neutral_format``, in the ``"neutral"`` one (:data:`HELDOUT_PROMPT_FORMATS`): no worked example, the question
phrased otherwise (``"Compute 3 + 4. Put the final answer in \\boxed{}."``, the ladder's ``"neutral"`` prompt
format). A gain in the training format alone is a gain of that prompt; one in both carries over to a phrasing the
policy never trained on. The neutral format doubles the evaluation's ``generate`` calls (its prompts are shorter).

The training scripts run it before and after training when ``eval_heldout`` is set (:class:`HeldoutEvalArguments`,
wired in :func:`trl_explore.cli.run_training` through
:class:`~trl_explore.evaluation.heldout_evaluator.HeldoutEvaluator`); its ``heldout_callback`` runs it at chosen steps
(``benchmarks/dynamics.py``).

What the interval covers: problems are resampled with their ``k`` samples, so the interval reflects which problems
were drawn and the sampling noise of their completions; it does not cover the training run's own randomness (another
training seed gives another policy): that needs several runs (``benchmarks/dynamics.py``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from trl_explore.evaluation.metrics import (
    benchmark_pass_at_k,
    distinct_answer_fraction,
    paired_bootstrap_interval,
    pairwise_answer_disagreement,
)

logger = logging.getLogger(__name__)

HELDOUT_PROMPT_FORMATS: dict[str, str] = {
    "training": "training format (chat, one worked example)",
    "neutral": "neutral format (no worked example, rephrased)",
}
"""The held-out evaluation's prompt formats and how its table names them: ``"training"``, the rows' own prompt;
``"neutral"``, the ladder's ``"neutral"`` prompt format (:func:`trl_explore.data.ladder.ladder_prompt`; the ladder
only)."""


@dataclass
class HeldoutEvalArguments:
    """Options of the held-out evaluation the training scripts run before and after training."""

    section = "Held-out evaluation (trl_explore.evaluation.heldout)"

    eval_heldout: bool = field(
        default=False,
        metadata={"help": "Before and after training, print held-out accuracy (mean@k, pass@k, greedy) and answer "
                  "diversity, with paired bootstrap intervals (95 percent) on the change (the main job's recipe, "
                  "recipes/oger_smollm2_ladder_cpu.yaml, sets it)."},
    )
    eval_benchmark: str = field(
        default="ladder", metadata={"help": "Embedded benchmark to evaluate on: 'ladder' or 'champ'."}
    )
    eval_split: str = field(
        default="test",
        metadata={"help": "Its split: 'test' (held out) for the reported figures; 'validation' (ladder) to choose "
                  "settings, never 'test'."},
    )
    eval_levels: list[str] | None = field(
        default=None, metadata={"help": "Ladder levels to evaluate on (default: the training levels, ladder_levels)."}
    )
    eval_problems: int = field(default=64, metadata={"help": "Number of problems (the split's first N; >= 1)."})
    eval_samples: int = field(default=4, metadata={"help": "Sampled completions per problem, k (>= 1)."})
    eval_temperature: float = field(
        default=1.0, metadata={"help": "Sampling temperature of the k samples (1.0: the training one)."}
    )
    eval_greedy: bool = field(default=True, metadata={"help": "Also one greedy completion per problem."})
    eval_neutral_format: bool = field(
        default=True,
        metadata={"help": "Ask the same problems a second time in a neutral prompt format (no worked example, the "
                  "question rephrased: 'Compute 3 + 4. Put the final answer in \\boxed{}.') and print its table "
                  "beside the training format's, to tell a learned skill from a learned prompt. Doubles the "
                  "evaluation's generate calls; the ladder only (ignored with eval_benchmark 'champ')."},
    )
    eval_max_new_tokens: int | None = field(
        default=None, metadata={"help": "New-token budget (default: the training max_completion_length)."}
    )
    # 256: the main job's 64 problems x 4 samples in one call; on 2 CPU cores 256 rows decoded 1.6 times as many
    # tokens per second as 64 (docs/performance.md)
    eval_batch_size: int = field(default=256, metadata={"help": "Completions per decoding call."})
    eval_seed: int = field(default=0, metadata={"help": "Sampling seed (the same before and after training)."})
    eval_cache: bool = field(
        default=True,
        metadata={"help": "Reuse an evaluation of the same weights with the same settings from "
                  "~/.cache/trl_explore/heldout/ (keyed by a digest of the weights): a second run of a job skips the "
                  "evaluation of the unchanged initial policy."},
    )

    def __post_init__(self):
        for name in ("eval_problems", "eval_samples", "eval_batch_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"HeldoutEvalArguments.{name} must be an integer >= 1, got {value!r}")
        if not self.eval_temperature > 0:
            raise ValueError(f"HeldoutEvalArguments.eval_temperature must be > 0 (greedy is eval_greedy), got "
                             f"{self.eval_temperature!r}")
        if self.eval_benchmark not in ("ladder", "champ"):
            raise ValueError(f"HeldoutEvalArguments.eval_benchmark must be 'ladder' or 'champ', got "
                             f"{self.eval_benchmark!r}")


@dataclass(frozen=True)
class HeldoutResult:
    """One policy's held-out evaluation: per-problem verdicts and answers (problem-major, sample order kept).

    Attributes:
        benchmark, split: where the problems come from; levels: the ladder levels (None: all / not the ladder).
        problem_ids: ``P`` problem ids.
        temperature: of the sampled completions.
        correct: ``[P][k]`` verdicts of the sampled completions; answers: their extracted answers (None: none found).
        greedy_correct, greedy_answers: ``[P]`` of the greedy completion (None when not evaluated).
        mean_num_tokens: mean sampled completion length (tokens); truncated_fraction: share that hit the budget.
        seconds: wall time of generation and grading; cached: True when read back by :func:`cached_evaluation`.
        prompt_format: how the problems were asked, a key of :data:`HELDOUT_PROMPT_FORMATS` (default
            ``"training"``, also for results saved before the field existed).
    """

    benchmark: str
    split: str
    levels: tuple[str, ...] | None
    problem_ids: tuple[str, ...]
    temperature: float
    correct: tuple[tuple[bool, ...], ...]
    answers: tuple[tuple[str | None, ...], ...]
    greedy_correct: tuple[bool, ...] | None = None
    greedy_answers: tuple[str | None, ...] | None = None
    mean_num_tokens: float = float("nan")
    truncated_fraction: float = float("nan")
    seconds: float = 0.0
    cached: bool = False
    prompt_format: str = "training"

    @property
    def num_problems(self) -> int:
        return len(self.problem_ids)

    @property
    def num_samples(self) -> int:
        """k (every problem has the same number of samples)."""
        return len(self.correct[0])

    def accuracy_per_problem(self) -> np.ndarray:
        """``[P]`` fraction of correct samples of each problem (its mean@k)."""
        return np.asarray(self.correct, dtype=np.float64).mean(axis=1)

    @property
    def mean(self) -> float:
        """mean@k: the mean over problems of the fraction of correct samples (= pass@1 estimated from k)."""
        return float(self.accuracy_per_problem().mean())

    def pass_at(self, k: int) -> float:
        """Unbiased pass@k (``1 <= k <= num_samples``)."""
        correct = np.asarray(self.correct, dtype=bool)
        return benchmark_pass_at_k([self.num_samples] * self.num_problems, correct.sum(axis=1).tolist(), k)

    def pass_at_k_curve(self) -> dict[int, float]:
        """pass@k for every k from 1 to ``num_samples``."""
        return {k: self.pass_at(k) for k in range(1, self.num_samples + 1)}

    @property
    def greedy_accuracy(self) -> float | None:
        return None if self.greedy_correct is None else float(np.mean(self.greedy_correct))

    def _flat_answers(self) -> list[str | None]:
        return [a for group in self.answers for a in group]

    @property
    def distinct_answer_fraction(self) -> float:
        """Share of problems whose k answers are not all the same (no answer counts as an answer of its own)."""
        return distinct_answer_fraction(self._flat_answers(), self.num_samples)

    @property
    def answer_disagreement(self) -> float | None:
        """Pairwise answer disagreement within problems (ASE Fig. 4); None when no pair has two answers."""
        return pairwise_answer_disagreement(self._flat_answers(), self.num_samples)

    def distinct_per_problem(self) -> np.ndarray:
        """``[P]`` 1.0 where the k answers are not all the same."""
        return np.asarray([float(len(set(group)) > 1) for group in self.answers])

    def level_of(self, problem_id: str) -> str:
        """The ladder level of a problem (``ladder:<level>:...``); the benchmark name otherwise."""
        parts = problem_id.split(":")
        return parts[1] if self.benchmark == "ladder" and len(parts) >= 3 else self.benchmark

    def per_level(self) -> dict[str, dict[str, float]]:
        """``{level: {"problems", "mean", "greedy"}}`` (greedy only when evaluated)."""
        accuracy = self.accuracy_per_problem()
        out: dict[str, dict[str, float]] = {}
        for level in dict.fromkeys(self.level_of(p) for p in self.problem_ids):
            rows = [i for i, p in enumerate(self.problem_ids) if self.level_of(p) == level]
            entry = {"problems": len(rows), "mean": float(accuracy[rows].mean())}
            if self.greedy_correct is not None:
                entry["greedy"] = float(np.mean([self.greedy_correct[i] for i in rows]))
            out[level] = entry
        return out

    def summary(self) -> dict:
        """The aggregates as a JSON-able dict (mean, pass@k curve, greedy, diversity, lengths, per level)."""
        return {
            "benchmark": self.benchmark, "split": self.split, "prompt_format": self.prompt_format,
            "levels": None if self.levels is None else list(self.levels),
            "num_problems": self.num_problems, "num_samples": self.num_samples, "temperature": self.temperature,
            "mean": self.mean, "pass_at_k": {str(k): v for k, v in self.pass_at_k_curve().items()},
            "greedy_accuracy": self.greedy_accuracy, "distinct_answer_fraction": self.distinct_answer_fraction,
            "answer_disagreement": self.answer_disagreement, "mean_num_tokens": self.mean_num_tokens,
            "truncated_fraction": self.truncated_fraction, "per_level": self.per_level(), "seconds": self.seconds,
        }  # fmt: skip

    def to_dict(self) -> dict:
        """Everything, JSON-able (:meth:`from_dict` reads it back)."""
        out = dataclasses.asdict(self)
        out["levels"] = None if self.levels is None else list(self.levels)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> HeldoutResult:
        def tuples(value):
            return None if value is None else tuple(tuple(v) if isinstance(v, list) else v for v in value)

        fields = {f.name for f in dataclasses.fields(cls)}
        data = {k: v for k, v in data.items() if k in fields}
        for key in ("problem_ids", "correct", "answers", "greedy_correct", "greedy_answers", "levels"):
            data[key] = tuples(data.get(key))
        return cls(**data)


def heldout_problems(benchmark: str = "ladder", split: str = "test", levels: Sequence[str] | None = None,
                     num_problems: int = 64, prompt_format: str = "training"):
    """The first ``num_problems`` rows of ``benchmark``'s ``split`` (``load_benchmark`` rows; the ladder's splits are
    shuffled, so the first rows mix its levels), their prompts in ``prompt_format`` (a key of
    :data:`HELDOUT_PROMPT_FORMATS`; the row order does not depend on it: the same problems in both formats).

    Raises:
        ValueError: the split holds fewer problems than asked for (the message gives both numbers); an unknown
            ``prompt_format``, or ``"neutral"`` with a benchmark other than the ladder.
    """
    from trl_explore.evaluation.benchmarks import load_benchmark

    if prompt_format not in HELDOUT_PROMPT_FORMATS:
        raise ValueError(f"unknown held-out prompt_format {prompt_format!r}; choose from "
                         f"{list(HELDOUT_PROMPT_FORMATS)}")
    if prompt_format == "neutral" and benchmark != "ladder":
        raise ValueError(f"the neutral prompt format is the ladder's; benchmark {benchmark!r} has only its own "
                         f"prompts (prompt_format='training')")
    ladder = {"levels": list(levels)} if levels else {}
    if prompt_format == "neutral":
        ladder["prompt_format"] = "neutral"
    options = {"ladder_split": split, "ladder_kwargs": ladder}
    if benchmark == "champ":
        options = {"champ_split": split}
    dataset = load_benchmark(benchmark, **options)
    if len(dataset) < num_problems:
        raise ValueError(f"the {benchmark!r} {split!r} split holds {len(dataset)} problems (levels {levels}); "
                         f"eval_problems={num_problems}: ask for at most {len(dataset)}")
    return dataset.select(range(num_problems))


def evaluate_heldout(model, tokenizer, *, benchmark: str = "ladder", split: str = "test",
                     levels: Sequence[str] | None = None, num_problems: int = 64, num_samples: int = 4,
                     temperature: float = 1.0, greedy: bool = True, max_new_tokens: int = 96, seed: int = 0,
                     batch_size: int = 256, grader_mode: str = "math_verify", show_progress: bool = False,
                     prompt_format: str = "training", problems=None, chat_template_kwargs: dict | None = None,
                     chat_template: str | None = None, fast_decode: bool = True) -> HeldoutResult:
    """Evaluate ``model`` on held-out problems: ``num_samples`` sampled completions (top-p 1, no top-k) and, with
    ``greedy``, one greedy completion per problem, graded like the training reward.

    Args:
        model: a causal LM (a ``PreTrainedModel`` or PEFT model; not a DDP wrapper: unwrap it first). It is put in
            eval mode for the evaluation and back in its mode afterwards.
        tokenizer: its tokenizer (with a chat template).
        benchmark, split, levels, num_problems: the problems (:func:`heldout_problems`).
        num_samples, temperature: k and the temperature of the sampled completions.
        greedy: also one greedy completion per problem.
        max_new_tokens: new-token budget per completion.
        seed: sampling seed (the sampling stack seeds each batch with ``seed + batch index``).
        batch_size: completions per ``generate`` call.
        grader_mode: the grader's mode (the training reward's ``grader_mode``).
        show_progress: progress bars.
        prompt_format: how the problems are asked (:data:`HELDOUT_PROMPT_FORMATS`; default ``"training"``).
        problems: the rows to evaluate instead (benchmark rows with their own prompts, e.g. your own held-out
            problems: :func:`trl_explore.evaluation.own_data.own_rows`); ``benchmark`` then only names them.
        chat_template_kwargs, chat_template: the training run's rendering settings
            (``GRPOConfig.chat_template_kwargs``, TRL's ``chat_template``;
            :func:`trl_explore.sampling.render.rendering_of`), so that the ``"training"``
            format asks the prompt the policy was trained on (a thinking model's ``{"enable_thinking": False}``);
            default none.
        fast_decode: sample with the package's decoder (:mod:`trl_explore.sampling.decode`, default) or with
            ``model.generate`` (False); the same distribution, other samples for one seed.

    Returns:
        :class:`HeldoutResult`.

    Cost: ``num_problems * (num_samples + greedy)`` completions of at most ``max_new_tokens`` tokens (SmolLM2-135M on
    two CPU cores: measured in docs/performance.md, "Generation").
    """
    from trl_explore.evaluation.runner import evaluate_dataset
    from trl_explore.sampling.hf import TransformersGenerator
    from trl_explore.sampling.plan import SamplingPlan

    start = time.perf_counter()
    dataset = problems if problems is not None else heldout_problems(benchmark, split, levels, num_problems,
                                                                      prompt_format)
    generator = TransformersGenerator(model, tokenizer, batch_size=batch_size, show_progress=show_progress,
                                      chat_template_kwargs=chat_template_kwargs, chat_template=chat_template,
                                      fast_decode=fast_decode)
    plan = SamplingPlan(num_samples=num_samples, temperature=temperature, top_p=1.0, top_k=0,
                        max_new_tokens=max_new_tokens)
    was_training = model.training
    model.eval()
    try:
        records, summary = evaluate_dataset(generator, dataset, plan, seed=seed, grader_mode=grader_mode)
        greedy_records = None
        if greedy:
            greedy_plan = SamplingPlan(num_samples=1, temperature=0.0, max_new_tokens=max_new_tokens)
            greedy_records, _ = evaluate_dataset(generator, dataset, greedy_plan, seed=seed, grader_mode=grader_mode)
    finally:
        model.train(was_training)
    ids = tuple(dataset["problem_id"])
    by_problem = {pid: [] for pid in ids}
    for record in sorted(records, key=lambda r: r["sample_index"]):
        by_problem[record["problem_id"]].append(record)
    by_id = {r["problem_id"]: r for r in greedy_records} if greedy_records is not None else None
    return HeldoutResult(
        benchmark=benchmark, split=split, levels=None if levels is None else tuple(levels), problem_ids=ids,
        temperature=float(temperature),
        correct=tuple(tuple(bool(r["correct"]) for r in by_problem[p]) for p in ids),
        answers=tuple(tuple(r["extracted_answer"] for r in by_problem[p]) for p in ids),
        greedy_correct=None if by_id is None else tuple(bool(by_id[p]["correct"]) for p in ids),
        greedy_answers=None if by_id is None else tuple(by_id[p]["extracted_answer"] for p in ids),
        mean_num_tokens=float(summary["mean_num_tokens"]), truncated_fraction=float(summary["truncated_fraction"]),
        seconds=round(time.perf_counter() - start, 2), prompt_format=prompt_format,
    )  # fmt: skip


def compare_heldout(before: HeldoutResult, after: HeldoutResult, num_resamples: int = 10_000, seed: int = 0) -> dict:
    """The change from ``before`` to ``after`` of each per-problem measure, with its 95% paired bootstrap interval
    (:func:`~trl_explore.evaluation.metrics.paired_bootstrap_interval`, problems resampled).

    Returns:
        ``{name: (mean difference, low, high)}`` for ``"mean"`` (mean@k), ``"pass"`` (pass@k with k = the smaller
        number of samples of the two), ``"greedy"`` (when both have it) and ``"distinct"`` (share of problems whose
        answers are not all equal).

    Raises:
        ValueError: the two results are not on the same problems in the same order.
    """
    if before.problem_ids != after.problem_ids:
        raise ValueError("compare_heldout needs two evaluations of the same problems in the same order (same "
                         "benchmark, split, levels and eval_problems)")
    k = min(before.num_samples, after.num_samples)

    def solved(result: HeldoutResult) -> np.ndarray:  # per-problem unbiased pass@k
        from trl_explore.evaluation.metrics import pass_at_k_per_problem

        correct = np.asarray(result.correct, dtype=bool)
        return pass_at_k_per_problem([result.num_samples] * result.num_problems, correct.sum(axis=1).tolist(), k)

    pairs = {"mean": (before.accuracy_per_problem(), after.accuracy_per_problem()), "pass": (solved(before),
             solved(after)), "distinct": (before.distinct_per_problem(), after.distinct_per_problem())}
    if before.greedy_correct is not None and after.greedy_correct is not None:
        pairs["greedy"] = (np.asarray(before.greedy_correct, float), np.asarray(after.greedy_correct, float))
    return {name: paired_bootstrap_interval(a, b, num_resamples=num_resamples, seed=seed) for name, (a, b) in
            pairs.items()}


MIN_PROBLEMS_FOR_INTERVAL = 10
"""Fewer held-out problems than this get no bootstrap interval (issue 46: intervals were printed for 4): a
percentile bootstrap over ``P`` problems draws from at most ``P`` distinct values per resample and is known to be too
narrow for small samples (Efron & Tibshirani 1993, ch. 13), so with a handful of problems it claims a certainty the
data does not hold. The change is still printed, with "too few problems for an interval"."""


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _change(entry) -> str:
    diff, low, high = entry
    return f"{diff:+.3f} [{low:+.3f}, {high:+.3f}]"


def heldout_table(before: HeldoutResult, after: HeldoutResult | None = None,
                  comparison: dict | None = None) -> list[str]:
    """A short before/after table (lines of text): mean@k, pass@k, greedy accuracy, the two diversity measures and
    the completion length, with the change and its 95% interval where :func:`compare_heldout` gives one; without
    ``after``, the "before" column alone. The first line names the split, the prompt format and the sampling.

    Raises:
        ValueError: ``before`` and ``after`` were asked in different prompt formats."""
    if after is not None and after.prompt_format != before.prompt_format:
        raise ValueError(f"heldout_table compares one prompt format before and after; got {before.prompt_format!r} "
                         f"and {after.prompt_format!r}")
    k = before.num_samples if after is None else min(before.num_samples, after.num_samples)
    levels = ", ".join(before.levels) if before.levels else "all levels"
    form = HELDOUT_PROMPT_FORMATS.get(before.prompt_format, before.prompt_format)
    where = f"held-out {before.benchmark} {before.split} split, {form}: {before.num_problems} problems ({levels})"
    if before.benchmark == "own":  # your own problems, asked with their own prompts (no ladder format, no levels)
        where = f"your own held-out problems, their own prompts: {before.num_problems} problems"
    greedy = " + 1 greedy" if before.greedy_correct else ""
    head = f"{where}, k = {k} samples at T = {before.temperature:g}{greedy}"
    rows = [
        (f"mean@{k} (sampled accuracy)", lambda r: r.mean, "mean"),
        (f"pass@{k}", lambda r: r.pass_at(k), "pass"),
        ("greedy accuracy", lambda r: r.greedy_accuracy, "greedy"),
        (f"problems whose {k} answers differ", lambda r: r.distinct_answer_fraction, "distinct"),
        ("pairwise answer disagreement", lambda r: r.answer_disagreement, None),
        ("mean completion tokens", lambda r: r.mean_num_tokens, None),
    ]
    rows.append(("cut off at the token cap", lambda r: r.truncated_fraction, None))
    if comparison and before.num_problems < MIN_PROBLEMS_FOR_INTERVAL:  # the change alone, said why
        comparison = None
        interval = f"change (too few problems for an interval: {before.num_problems} < {MIN_PROBLEMS_FOR_INTERVAL})"
    else:
        interval = "change [95% paired bootstrap interval]"
    width = max(len(name) for name, _, _ in rows)
    columns = "" if after is None else f"  {'after':>7}  {interval}"  # alone: before
    lines = [head, f"{'':<{width}}  {'before':>7}{columns}"]
    for name, read, key in rows:
        if name == "greedy accuracy" and before.greedy_correct is None:
            continue
        a = read(before)
        b = None if after is None else read(after)
        change = _change(comparison[key]) if comparison and key in comparison else (
            f"{b - a:+.3f}" if a is not None and b is not None else "")
        if name == "mean completion tokens":
            line = f"{name:<{width}}  {a:>7.1f}  {'' if b is None else f'{b:.1f}':>7}  {change}"
        else:
            line = f"{name:<{width}}  {_cell(a):>7}  {'' if b is None else _cell(b):>7}  {change}"
        lines.append(line.rstrip())
    cut = max((r.truncated_fraction for r in (before, after) if r is not None
               and r.truncated_fraction == r.truncated_fraction), default=0.0)  # NaN: not measured
    from trl_explore.evaluation.results import CUT_OFF_WARNING_FRACTION

    if cut >= CUT_OFF_WARNING_FRACTION:
        lines.append(f"WARNING: {100 * cut:.0f}% of the samples were cut off at the token cap "
                     f"(--eval_max_new_tokens): most answers were lost; a cut-off answer counts only when boxed or "
                     f"after an answer phrase, as in training")
    return lines


def weights_digest(model) -> str:
    """SHA-256 (16 hex digits) of a model's parameters and buffers: names, dtypes, shapes and bytes (SmolLM2-135M:
    ~1 s on a CPU). Two models with this digest compute the same functions."""

    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted({**dict(model.named_parameters()), **dict(model.named_buffers())}.items()):
        data = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{data.dtype}|{tuple(data.shape)}|".encode())
        digest.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return digest.hexdigest()[:16]


def cached_evaluation(model, key: dict, evaluate, cache: bool = True) -> HeldoutResult:
    """``evaluate()``, or its stored result for the same weights (:func:`weights_digest`), settings ``key``, torch
    thread count and library versions (the samples depend on all of them) from
    ``trl_explore.defaults.cache_dir() / "heldout"``; a fresh result is stored there. ``cache=False``: evaluate."""
    import json

    if not cache:
        return evaluate()
    import torch
    import transformers

    from trl_explore.defaults import cache_dir

    full = {**key, "weights": weights_digest(model), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "transformers": transformers.__version__}
    name = hashlib.sha256(json.dumps(full, sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = cache_dir() / "heldout" / f"{name}.json"
    if path.is_file():
        try:
            result = HeldoutResult.from_dict(json.loads(path.read_text())["result"])
            logger.info("held-out evaluation read back from %s", path)
            return dataclasses.replace(result, cached=True)
        except (ValueError, KeyError, TypeError):  # a damaged file: evaluate again
            pass
    result = evaluate()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"key": full, "result": result.to_dict()}))
    tmp.replace(path)
    return result


def format_change_line(training: tuple, neutral: tuple, k: int, num_problems: int | None = None) -> str:
    """One line that sets the mean@k change of the two prompt formats side by side and says whether each 95%
    interval excludes zero.

    Args:
        training, neutral: ``(difference, low, high)`` of :func:`compare_heldout`'s ``"mean"`` in each format.
        k: the number of samples (for the name mean@k).
        num_problems: how many problems the changes are over; below :data:`MIN_PROBLEMS_FOR_INTERVAL` the changes
            are shown without their intervals (default None: not checked).

    Returns:
        e.g. ``"mean@4 change, training format +0.113 [+0.062, +0.168] (interval clear of 0); neutral format +0.036
        [-0.010, +0.080] (interval includes 0)"``.
    """

    def reading(entry) -> str:
        _, low, high = entry
        return "interval includes 0" if low <= 0.0 <= high else "interval clear of 0"

    if num_problems is not None and num_problems < MIN_PROBLEMS_FOR_INTERVAL:
        return (f"mean@{k} change, training format {training[0]:+.3f}; neutral format {neutral[0]:+.3f} (too few "
                f"problems for an interval: {num_problems} < {MIN_PROBLEMS_FOR_INTERVAL})")
    return (f"mean@{k} change, training format {_change(training)} ({reading(training)}); neutral format "
            f"{_change(neutral)} ({reading(neutral)})")


HELDOUT_JSON = "heldout_eval.json"
"""File of :func:`save_heldout` in a run's output folder."""


def save_heldout(output_dir, results: dict[str, HeldoutResult],
                 neutral: dict[str, HeldoutResult] | None = None) -> None:
    """Write ``{label: {"summary", "result"}}`` (the training format) to ``<output_dir>/heldout_eval.json`` (main
    process); a label's neutral-format evaluation, when ``neutral`` holds one, goes under its entry as
    ``"neutral": {"summary", "result"}``. Each summary names its ``prompt_format``."""
    import pathlib

    path = pathlib.Path(output_dir) / HELDOUT_JSON
    path.parent.mkdir(parents=True, exist_ok=True)
    neutral = neutral or {}
    payload = {}
    for label, r in results.items():
        if not isinstance(r, HeldoutResult):
            continue
        payload[label] = {"summary": r.summary(), "result": r.to_dict()}
        if isinstance(neutral.get(label), HeldoutResult):
            payload[label]["neutral"] = {"summary": neutral[label].summary(), "result": neutral[label].to_dict()}
    path.write_text(json.dumps(payload, indent=1))
