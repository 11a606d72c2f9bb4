"""Can this run learn? A readiness check before training and a watch during it (issue 32).

GRPO learns only from groups whose rewards differ: a problem the policy never solves, or always solves, or a
completion cap that cuts every answer off, gives zero advantages and a run that trains nothing while it looks like
any other. Two parts:

* before training, :func:`check_readiness` samples the policy on a handful of training prompts with the run's own
  generation settings (TRL's ``_generate_single_turn``: the cap, temperature, ``generation_kwargs``, vLLM when on;
  no steering), grades them with the run's verifier and prints a few lines: pass rate, share of mixed groups, share
  of completions cut off at the cap, and a warning with the fix when the run cannot learn
  (:func:`readiness_figures`, :func:`readiness_advice`: pure, tested on hand-made verdicts);
* during training, :class:`NothingLearnedWatch` (a ``TrainerCallback``) warns once when a "nothing is learned"
  signal holds for ``patience`` logged steps in a row (:func:`nothing_learned_signals`): every completion clipped,
  every group of equal rewards, OGER's exploration reward 0, ASE's bank without a contrast pair.

The training scripts run both (``--readiness_check false`` skips the check; :class:`ReadinessArguments`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import torch
from transformers import TrainerCallback

from trl_explore.rewards.correctness import correct_mask, threshold_of
from trl_explore.sampling.decode import rollout_sampling
from trl_explore.sampling.seeds import isolated_rng

logger = logging.getLogger(__name__)


@dataclass
class ReadinessArguments:
    """Options of the readiness check the training scripts run before training."""

    section = "Readiness check (trl_explore.readiness)"

    readiness_check: bool = field(
        default=True,
        metadata={"help": "Before training, sample the policy on a few training prompts with the run's settings and "
                  "print the pass rate, the share of mixed groups and of completions cut off at the cap, with a "
                  "warning when the run cannot learn (false: skip)."},
    )
    readiness_only: bool = field(
        default=False,
        metadata={"help": "Run the readiness check alone, then stop: no held-out evaluation, no training, nothing "
                  "saved (--max_steps 0 also trains and saves nothing, after the held-out evaluation)."},
    )
    readiness_prompts: int = field(
        default=8, metadata={"help": "Training prompts the readiness check samples (num_generations each; >= 1)."}
    )
    readiness_patience: int = field(
        default=3,
        metadata={"help": "During training, warn once when a 'nothing is learned' metric (all clipped, all groups "
                  "of equal rewards, ...) holds for this many logged steps in a row (0: never)."},
    )

    def __post_init__(self):
        for name, low in (("readiness_prompts", 1), ("readiness_patience", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"ReadinessArguments.{name} must be an integer >= {low}, got {value!r}")


@dataclass(frozen=True)
class ReadinessFigures:
    """What a run is about to see, from ``P`` prompts x ``G`` sampled completions.

    Attributes:
        num_prompts, group_size: ``P`` and ``G``.
        pass_rate: share of correct completions.
        mixed_fraction: share of groups with both a correct and a wrong completion (the groups GRPO learns from).
        all_correct_fraction, all_wrong_fraction: shares of groups entirely right / entirely wrong.
        truncated_fraction: share of completions cut off at the cap (no end-of-sequence token).
        mean_length: mean completion length, tokens.
    """

    num_prompts: int
    group_size: int
    pass_rate: float
    mixed_fraction: float
    all_correct_fraction: float
    all_wrong_fraction: float
    truncated_fraction: float
    mean_length: float


def readiness_figures(correct: torch.Tensor, truncated: torch.Tensor, lengths: torch.Tensor) -> ReadinessFigures:
    """The figures of ``P`` groups of ``G`` graded completions.

    Args:
        correct: ``[P, G]`` bool, the verifier's verdicts (reward > 0.5).
        truncated: ``[P, G]`` bool, completions that reached the cap without an end-of-sequence token.
        lengths: ``[P, G]`` completion lengths, tokens.

    Raises:
        ValueError: shapes that differ or are not ``[P, G]`` with ``P, G >= 1``.
    """
    if correct.dim() != 2 or not correct.shape == truncated.shape == lengths.shape or correct.numel() == 0:
        raise ValueError(f"correct, truncated and lengths must share one [P, G] shape (P, G >= 1), got "
                         f"{tuple(correct.shape)}, {tuple(truncated.shape)}, {tuple(lengths.shape)}")
    correct, truncated = correct.bool(), truncated.bool()
    any_right, all_right = correct.any(dim=1), correct.all(dim=1)
    return ReadinessFigures(
        num_prompts=correct.shape[0], group_size=correct.shape[1],
        pass_rate=correct.float().mean().item(),
        mixed_fraction=(any_right & ~all_right).float().mean().item(),
        all_correct_fraction=all_right.float().mean().item(),
        all_wrong_fraction=(~any_right).float().mean().item(),
        truncated_fraction=truncated.float().mean().item(),
        mean_length=lengths.float().mean().item(),
    )


BARELY_PASS_RATE = 0.10
"""Below this pass rate (but above 0) the run *barely* learns. Measured: the issue-46 data set read 0.03 (1 correct
completion in 32) and both of its training steps then had no correct online answer; on the arithmetic ladder
(benchmarks/results/ladder_pass_rates.md) the levels at or below 0.10 (one_digit_two_ops 0.10, two_plus_one 0.08,
word 0.07, two_digit_two_ops 0.02) leave 56-91% of groups of 4 entirely wrong, where one_digit (0.52) mixes 62%."""
BARELY_MIXED_FRACTION = 0.25
"""Below this share of mixed groups (but above 0) the run *barely* learns: GRPO learns only from mixed groups, and at
0.25 a batch of 8 groups gives about 2 that teach per step. Measured: the ladder demo that learns logs
``frac_reward_zero_std`` 0.4-0.6 (mixed 0.4-0.6, docs/metrics.md); the issue-46 data set read 0.12 and learned
nothing; the ladder's hard levels mix 9-22% of groups of 4."""
BARELY_TRUNCATED_FRACTION = 0.5
"""At or above this share of completions cut off at the cap, *most* answers are lost (graded without their end):
the run barely learns. The issue-46 data set read 0.84 (the old warning came only at 0.9)."""
CANNOT_TRUNCATED_FRACTION = 0.9
"""At or above this share cut off the run cannot learn: almost no answer reaches its end."""

VERDICTS = ("cannot learn", "barely", "can learn")
"""The readiness verdicts, worst first (:func:`readiness_verdict`)."""


def readiness_verdict(figures: ReadinessFigures) -> tuple[str, list[str]]:
    """The verdict, one of :data:`VERDICTS`, and the reasons for it (empty for "can learn").

    Rules (thresholds: :data:`BARELY_PASS_RATE`, :data:`BARELY_MIXED_FRACTION`, :data:`BARELY_TRUNCATED_FRACTION`,
    :data:`CANNOT_TRUNCATED_FRACTION`, each with the runs it was chosen from):

    * "cannot learn": no correct completion; every group entirely correct; no mixed group; or at least 90% cut off;
    * "barely": a pass rate below 0.10, fewer than 25% of groups mixed, or at least half the completions cut off;
    * "can learn" otherwise.
    """
    p, mixed, cut = figures.pass_rate, figures.mixed_fraction, figures.truncated_fraction
    cannot, barely = [], []
    if cut >= CANNOT_TRUNCATED_FRACTION:
        cannot.append(f"{100 * cut:.0f}% of the completions were cut off at the cap")
    elif cut >= BARELY_TRUNCATED_FRACTION:
        barely.append(f"{100 * cut:.0f}% of the completions were cut off at the cap (most answers lost)")
    if p == 0:
        cannot.append("no completion was correct")
    elif figures.all_correct_fraction == 1:
        cannot.append("every completion was correct")
    elif mixed == 0:
        cannot.append("no group mixes right and wrong answers")
    else:
        if p < BARELY_PASS_RATE:
            barely.append(f"correct answers are rare (pass rate {p:.2f} < {BARELY_PASS_RATE})")
        if mixed < BARELY_MIXED_FRACTION:
            barely.append(f"few groups mix right and wrong answers ({mixed:.2f} < {BARELY_MIXED_FRACTION}), the only "
                          "groups GRPO learns from")
    if cannot:
        return "cannot learn", cannot + barely
    return ("barely", barely) if barely else ("can learn", [])


def readiness_advice(figures: ReadinessFigures, max_completion_length: int) -> list[str]:
    """Warnings, each with its fix, when the figures say the run cannot learn or barely learns (empty when it can;
    :func:`readiness_verdict`)."""
    advice = []
    cut = figures.truncated_fraction
    if cut >= BARELY_TRUNCATED_FRACTION:
        advice.append(f"{100 * cut:.0f}% of the completions were cut off at max_completion_length="
                      f"{max_completion_length} tokens, so their answers are lost: raise --max_completion_length, or "
                      f"ask for a short answer in the prompt")
    if figures.pass_rate == 0:
        advice.append("no completion was correct: every online reward is 0 and the online completions teach "
                      "nothing; raise --max_completion_length (if cut off), change the prompt (e.g. ask for the final "
                      "answer in \\boxed{}), check the gold answers with the grader (docs/grading.md), pick easier "
                      "problems, or rely on the teacher rows only (OGER: they still train)")
    elif figures.all_correct_fraction == 1:
        advice.append("every completion was correct: every group has equal rewards and nothing is left to learn; "
                      "pick harder problems")
    elif figures.mixed_fraction == 0:
        advice.append("no group mixes correct and wrong completions: every advantage is 0; raise --num_generations, "
                      "or pick problems the policy solves sometimes")
    elif figures.pass_rate < BARELY_PASS_RATE or figures.mixed_fraction < BARELY_MIXED_FRACTION:
        advice.append(f"correct answers are rare (pass rate {figures.pass_rate:.2f}, mixed groups "
                      f"{figures.mixed_fraction:.2f}): most steps will have no group to learn from; pick easier "
                      f"problems, raise --num_generations, shorten the answers asked for, or rely on the teacher rows "
                      f"(OGER)")
    return advice


def readiness_lines(figures: ReadinessFigures, advice: list[str], seconds: float | None = None) -> list[str]:
    """The check's report: one line of figures, one line of verdict (:func:`readiness_verdict`), then
    ``WARNING: ...`` per piece of advice."""
    took = f" in {seconds:.0f} s" if seconds is not None else ""
    lines = [f"readiness check ({figures.num_prompts} training prompts x {figures.group_size} completions{took}): "
             f"pass rate {figures.pass_rate:.2f}, mixed groups {figures.mixed_fraction:.2f} (all right "
             f"{figures.all_correct_fraction:.2f}, all wrong {figures.all_wrong_fraction:.2f}), cut off at the cap "
             f"{figures.truncated_fraction:.2f}, mean length {figures.mean_length:.0f} tokens"]
    verdict, reasons = readiness_verdict(figures)
    if verdict == "can learn":
        mixed = round(figures.mixed_fraction * figures.num_prompts)
        lines.append(f"verdict: the run can learn ({mixed} of {figures.num_prompts} groups mix right and wrong "
                     f"answers)")
    else:
        says = {"cannot learn": "cannot learn", "barely": "barely learns"}[verdict]
        lines.append(f"verdict: the run {says}: {'; '.join(reasons)} (fixes below)")
    return lines + [f"WARNING: {text}" for text in advice]


@dataclass(frozen=True)
class ReadinessReport:
    """:func:`check_readiness`'s result: the figures, the advice, the printed lines and the wall time (s)."""

    figures: ReadinessFigures
    advice: list[str]
    lines: list[str]
    seconds: float


def _correctness_reward(trainer):
    index = getattr(trainer.args, "correctness_reward_index", 0)  # ASE's option; R_m comes first otherwise
    return trainer.reward_funcs[index]


def sample_and_grade(trainer, rows: list[dict]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sample ``G = trainer.num_generations`` completions of each row's prompt with TRL's generation of the run
    (``GRPOTrainer._generate_single_turn``: the run's cap, sampler, vLLM when on; no component's steering) and grade
    them with the run's correctness reward (``reward_funcs[correctness_reward_index]``, default the first: R_m).

    Returns:
        ``correct``, ``truncated``, ``lengths``: ``[P, G]`` (bool, bool, long).

    Raises:
        TypeError: the correctness reward is a reward model (a module), not a verifier function.
    """
    from trl import GRPOTrainer
    from trl.data_utils import is_conversational

    reward = _correctness_reward(trainer)
    if isinstance(reward, torch.nn.Module):
        raise TypeError("the readiness check grades with a verifier function; this run's correctness reward is a "
                        "model: skip the check with --readiness_check false")
    group = trainer.num_generations
    prompts = [row["prompt"] for row in rows for _ in range(group)]
    prompt_ids, images, fields = trainer._tokenize_prompts(prompts)
    was_training = trainer.model.training
    trainer.model.train()  # as in training: TRL generates with the model in training mode
    try:
        with torch.no_grad(), rollout_sampling(trainer):  # the run's precision and HF decoder
            completion_ids, _ = GRPOTrainer._generate_single_turn(trainer, prompt_ids, images, fields, group)
    finally:
        trainer.model.train(was_training)
    completion_ids = [list(ids) for ids in completion_ids]
    ends = {*trainer.eos_token_ids, trainer.processing_class.pad_token_id}
    truncated = [not ids or ids[-1] not in ends for ids in completion_ids]
    texts = trainer.processing_class.batch_decode(completion_ids, skip_special_tokens=True)
    if is_conversational({"prompt": prompts[0]}):
        completions = [[{"role": "assistant", "content": text}] for text in texts]
    else:
        completions = texts
    columns = {key: [row[key] for row in rows for _ in range(group)] for key in rows[0] if key != "prompt"}
    rewards = reward(prompts=prompts, completions=completions, completion_ids=completion_ids,
                     trainer_state=trainer.state, log_extra=lambda *a, **k: None, log_metric=lambda *a, **k: None,
                     **columns)
    threshold = threshold_of(trainer.args)  # one rule: rewards.correctness
    correct = correct_mask(list(rewards), threshold).view(len(rows), group)
    lengths = torch.tensor([len(ids) for ids in completion_ids]).view(len(rows), group)
    return correct, torch.tensor(truncated).view(len(rows), group), lengths


def check_readiness(trainer, dataset, num_prompts: int = 8) -> ReadinessReport:
    """Sample and grade the first ``num_prompts`` rows of ``dataset`` (:func:`sample_and_grade`) and report what the
    run is about to see. Every process takes part (generation may gather sharded weights); the caller prints on the
    main one. The random states are left as they were (:func:`~trl_explore.sampling.seeds.isolated_rng`).

    Raises:
        ValueError: an empty ``dataset``.
    """
    if len(dataset) == 0:
        raise ValueError("the readiness check needs at least one training prompt")
    start = time.perf_counter()
    rows = [dataset[i] for i in range(min(num_prompts, len(dataset)))]
    with isolated_rng(trainer.accelerator.device):  # the run's first rollouts draw as if no check had run
        correct, truncated, lengths = sample_and_grade(trainer, rows)
    figures = readiness_figures(correct, truncated, lengths)
    advice = readiness_advice(figures, trainer.max_completion_length)
    seconds = time.perf_counter() - start
    return ReadinessReport(figures, advice, readiness_lines(figures, advice, seconds), seconds)


NOTHING_LEARNED = {
    "all_clipped": "every completion was cut off at max_completion_length (completions/clipped_ratio = 1): raise "
                   "--max_completion_length or ask for shorter answers",
    "zero_variance": "every group had equal rewards (frac_reward_zero_std = 1): no advantage, nothing learned from "
                     "the online completions; pick problems the policy solves sometimes",
    "no_oger_reward": "OGER's exploration reward was 0 for every completion (rewards/oger_reward/mean = 0): no online "
                      "completion was correct, only teacher rows train",
    "no_ase_bank": "ASE's bank got no contrast pair (ase/num_pairs = 0): no problem had both a correct and a wrong "
                   "rollout, so no steering vector is estimated",
}
"""The "nothing is learned" signals of :func:`nothing_learned_signals`, with the warning each one gives."""


def nothing_learned_signals(logs: dict) -> dict[str, bool]:
    """Which :data:`NOTHING_LEARNED` signals the training metrics ``logs`` (one ``on_log`` dict) show; a signal whose
    metric is not in ``logs``, or is None / NaN there (no row was scored, e.g. unreadable golds), is left out (not
    measured at this step)."""
    import math

    tests = {"all_clipped": ("completions/clipped_ratio", lambda v: v >= 1.0),
             "zero_variance": ("frac_reward_zero_std", lambda v: v >= 1.0),
             "no_oger_reward": ("rewards/oger_reward/mean", lambda v: v == 0.0),
             "no_ase_bank": ("ase/num_pairs", lambda v: v == 0.0)}
    values = {name: _number(logs.get(key)) for name, (key, _) in tests.items()}
    return {name: bool(test(values[name])) for name, (_, test) in tests.items()
            if values[name] is not None and not math.isnan(values[name])}


def _number(value) -> float | None:
    """``value`` as a float, None where it is none (a metric TRL logged as None, or a non-number)."""
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def update_streaks(streaks: dict[str, int], signals: dict[str, bool]) -> dict[str, int]:
    """Consecutive logged steps each signal has held: +1 where it holds, 0 where it does not, unchanged where it was
    not measured."""
    out = dict(streaks)
    for name, holds in signals.items():
        out[name] = out.get(name, 0) + 1 if holds else 0
    return out


class NothingLearnedWatch(TrainerCallback):
    """Warn once per signal when a :data:`NOTHING_LEARNED` signal holds for ``patience`` logged training steps in a
    row (``patience`` 0: never). Reads the logs TRL passes to ``on_log`` (evaluation logs are skipped)."""

    def __init__(self, patience: int = 3):
        self.patience = patience
        self.streaks: dict[str, int] = {}
        self.warned: list[str] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or self.patience <= 0 or any(key.startswith("eval_") for key in logs):
            return
        self.streaks = update_streaks(self.streaks, nothing_learned_signals(logs))
        for name, count in self.streaks.items():
            if count >= self.patience and name not in self.warned:
                self.warned.append(name)
                if state.is_world_process_zero:
                    logger.warning("nothing is learned for %d logged steps (up to step %d): %s", count,
                                   state.global_step, NOTHING_LEARNED[name])

