"""Training-dynamics probes: the same per-step measurements for every method (GRPO, OGER, ASE-GRPO, compositions).

The methods log their own diagnostics (``oger/*``, ``ase/*``), each over the rows it sees: TRL's ``entropy`` averages
every completion token, the teacher rows' included (the policy finds those surprising, so OGER's reads high), OGER's
failed ratio exists only where OGER runs, ASE's answer disagreement counts steered and teacher rows alike.
:class:`DynamicsProbe` is a :class:`~trl_explore.driver.components.Component` that measures, for any trainer it is
added to, on the rows the policy itself sampled ("online" rows: ``Rollout.offline`` False):

==================================  ==================================================================================
metric                              what
==================================  ==================================================================================
``dynamics/online_entropy``         mean policy entropy (nats, at the sampling temperature) over the online rows'
                                    completion tokens, from the loss forward (OGER Fig. 2a, on policy tokens only)
``dynamics/all_entropy``            the same over every completion token (TRL's ``entropy``, for comparison)
``dynamics/online_accuracy``        share of online rows with R_m = 1
``dynamics/failed_ratio``           share of online rows with R_m = 0 (OGER Fig. 2c)
``dynamics/mixed_groups``           share of groups whose online rows mix R_m = 0 and 1 (the groups GRPO learns from)
``dynamics/all_correct_groups``     share of groups whose online rows are all correct
``dynamics/answer_disagreement``    pairwise disagreement of the online rows' extracted answers within a group
                                    (ASE Fig. 4), pooled over pairs
``dynamics/online_length``          mean online completion length (tokens)
``dynamics/teacher_token_prob``     mean probability the policy gives the tokens of the batch prompts' teacher
                                    solutions (every teacher of each prompt, teacher-forced, no gradient), before the
                                    step's update: how far the policy is from the teachers, for every method
==================================  ==================================================================================

Under OGER's replacement the online rows are the ones left after it: the replaced completion (the one closest to the
teachers, usually a correct one) is not counted, so a method that replaces reads a higher failed ratio and fewer mixed
groups than one that does not, on the same samples (in ``benchmarks/dynamics.py`` at step 1, where GRPO and OGER of
one seed sample the same completions, 5/16 failed reads 5/14). Compare OGER's failed ratio with another replacing
method (the LUFFY-style baseline), as OGER Fig. 2c does.

Cost: the online entropy reads the loss forward the driver makes anyway; the teacher probability is one no-grad
forward over (prompts x teachers) short rows per generation; answers are extracted once per online row.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from trl_explore.driver.components import Component, Needs
from trl_explore.rewards.correctness import correctness_values, threshold_of


def online_token_mean(values: torch.Tensor, completion_mask: torch.Tensor, is_offline: torch.Tensor | None = None):
    """``(sum, count)`` of ``values`` over the completion tokens of the online rows.

    Args:
        values: ``[B, T]`` per-token values (e.g. entropies, nats).
        completion_mask: ``[B, T]`` 1 on completion tokens.
        is_offline: ``[B]`` bool, True on rows not sampled from the policy (left out); None: all rows count.

    Returns:
        Two 0-d float tensors: the sum and the number of counted tokens (divide for the mean).
    """
    mask = completion_mask.bool()
    if is_offline is not None:
        mask = mask & ~is_offline.bool().reshape(-1, 1)
    mask = mask.to(values.dtype)
    return (values * mask).sum(), mask.sum()


def group_outcomes(correct: Sequence[float], online: Sequence[bool], group_size: int) -> dict[str, float]:
    """Outcome shares of the online rows of each group of ``group_size`` consecutive rows.

    Args:
        correct: ``[B]`` R_m per row (1 correct, 0 wrong; NaN or None: not scored, left out).
        online: ``[B]`` True on rows the policy sampled.
        group_size: rows per prompt (N).

    Returns:
        ``{"accuracy", "failed_ratio"}`` over scored online rows and ``{"mixed_groups", "all_correct_groups",
        "all_wrong_groups"}`` over groups with at least one scored online row; an empty dict when there is none.

    Raises:
        ValueError: lengths that differ or are not a multiple of ``group_size``.
    """
    if len(correct) != len(online) or group_size < 1 or len(correct) % group_size:
        raise ValueError(f"need equal lengths that are a multiple of group_size={group_size}, got {len(correct)} "
                         f"and {len(online)}")
    values, groups = [], {"mixed": 0, "all_correct": 0, "all_wrong": 0}
    for start in range(0, len(correct), group_size):
        group = [float(c) for c, o in zip(correct[start:start + group_size], online[start:start + group_size])
                 if o and c is not None and c == c]
        if not group:
            continue
        values.extend(group)
        solved = [c > 0.5 for c in group]
        groups["all_correct" if all(solved) else "all_wrong" if not any(solved) else "mixed"] += 1
    if not values:
        return {}
    num_groups = sum(groups.values())
    accuracy = sum(c > 0.5 for c in values) / len(values)
    return {"accuracy": accuracy, "failed_ratio": 1.0 - accuracy,
            **{f"{k}_groups": v / num_groups for k, v in groups.items()}}


def within_group_disagreement(answers: Sequence[str | None], online: Sequence[bool], group_size: int) -> float | None:
    """Pairwise answer disagreement among the online rows of each group, pooled over all counted pairs (ASE Fig. 4).

    Pairs with a missing answer (None) are left out, as in
    :func:`~trl_explore.evaluation.metrics.pairwise_answer_disagreement`; groups may hold different numbers of online
    rows (e.g. OGER replaced some).

    Returns:
        Differing pairs / counted pairs, or None when no pair is counted.
    """
    if len(answers) != len(online) or group_size < 1 or len(answers) % group_size:
        raise ValueError(f"need equal lengths that are a multiple of group_size={group_size}, got {len(answers)} "
                         f"and {len(online)}")
    counted = differing = 0
    for start in range(0, len(answers), group_size):
        group = [a for a, o in zip(answers[start:start + group_size], online[start:start + group_size])
                 if o and a is not None]
        for i in range(len(group)):
            for j in range(i + 1, len(group)):
                counted += 1
                differing += group[i] != group[j]
    return differing / counted if counted else None


def online_rows(owner: Sequence[str | None], offline: Sequence[bool]) -> list[bool]:
    """The rows the policy sampled in this generation: ``[B]`` True where no component wrote the row (``owner`` None)
    and it is not a teacher row (``offline`` False). OGER's teacher rows and ExGRPO's replayed trajectories (written
    by an earlier policy) are not online."""
    if len(owner) != len(offline):
        raise ValueError(f"owner and offline differ in length: {len(owner)} and {len(offline)}")
    return [o is None and not off for o, off in zip(owner, offline)]


class DynamicsProbe(Component):
    """Per-step dynamics of any trainer's online rows (module docstring); add it last to ``components``.

    Args:
        teacher_column: the dataset column of each prompt's teacher solutions (list of str) for
            ``dynamics/teacher_token_prob`` (rows without it: no teacher probability).
        correctness_reward_index: the reward function that is R_m in {0, 1} (default 0: the driver's default verifier).
        teacher_prob: measure ``dynamics/teacher_token_prob`` (one extra no-grad forward per generation).

    Example:
        ``ExplorationTrainer(model, args=OGERConfig(...), components=[OGERComponent(), DynamicsProbe()])``; with no
        other component it measures plain GRPO.
    """

    name = "dynamics"
    console_keys = ("dynamics/online_entropy", "dynamics/failed_ratio", "dynamics/answer_disagreement")
    # no per-row state from generation: batch_fields reads Rollout.owner / Rollout.offline as they are after every
    # rewrite (ExGRPO's replay in edit_scored included), observe_forward the loss batch's is_offline
    follows_row_owners = True

    def __init__(self, teacher_column: str = "offline_completions", correctness_reward_index: int = 0,
                 teacher_prob: bool = True):
        super().__init__(None)
        self.teacher_column = teacher_column
        self.correctness_reward_index = correctness_reward_index
        self.teacher_prob = teacher_prob

    def setup(self, trainer) -> None:
        super().setup(trainer)
        if self.correctness_reward_index >= len(trainer.reward_funcs):
            raise ValueError(f"DynamicsProbe: correctness_reward_index={self.correctness_reward_index} but the "
                             f"trainer has {len(trainer.reward_funcs)} reward functions")

    def needs(self, mode):
        return Needs(loss_forward=mode == "train")

    def _log(self, mode: str, name: str, value: float) -> None:
        self.trainer._metrics[mode][f"dynamics/{name}"].append(float(value))

    def observe_forward(self, result):
        if result.call.kind != "loss" or result.forward.entropies is None:
            return
        t, inputs = self.trainer, result.call.inputs
        entropies = result.forward.entropies.detach().float()
        mask = inputs["completion_mask"]
        online = online_token_mean(entropies, mask, inputs.get("is_offline"))
        every = online_token_mean(entropies, mask)
        stats = t.accelerator.reduce(torch.stack([*online, *every]), reduction="sum")
        if stats[1] > 0:
            self._log(result.mode, "online_entropy", stats[0] / stats[1])
        if stats[3] > 0:
            self._log(result.mode, "all_entropy", stats[2] / stats[3])

    def batch_fields(self, batch):
        from accelerate.utils import gather_object

        from trl_explore.rewards.math_verify_reward import extract_answer

        t, rollout, mode = self.trainer, batch.rollout, batch.mode
        correct = batch.rewards_per_func[:, self.correctness_reward_index].detach().float().cpu()
        threshold = threshold_of(t.args)  # one rule: rewards.correctness
        correct = correctness_values(correct, threshold).tolist()  # 1 correct, 0 wrong, NaN not scored
        online_local = online_rows(rollout.owner, rollout.offline)
        online = gather_object(online_local)
        group = rollout.num_generations
        for key, value in group_outcomes(correct, online, group).items():
            self._log(mode, "online_" + key if key == "accuracy" else key, value)
        grader_mode = getattr(t.args, "grader_mode", "math_verify")
        answers = gather_object([extract_answer(c, mode=grader_mode) if o else None
                                 for c, o in zip(rollout.completions, online_local)])
        disagreement = within_group_disagreement(answers, online, group)
        if disagreement is not None:
            self._log(mode, "answer_disagreement", disagreement)
        lengths = torch.tensor([float(len(ids)) for ids, o in zip(rollout.completion_ids, online_local) if o] or [0.0])
        stats = t.accelerator.reduce(torch.tensor([lengths.sum().item(), float(sum(online_local))],
                                                  device=t.accelerator.device), reduction="sum")
        if stats[1] > 0:
            self._log(mode, "online_length", stats[0] / stats[1])
        if self.teacher_prob and mode == "train":
            self._teacher_token_prob(rollout, mode)
        return {}

    def _teacher_token_prob(self, rollout, mode: str) -> None:
        """Mean probability of the teacher tokens of this process's prompts (one per group), no gradient. A teacher
        text is tokenized as OGER's replacement does (no special tokens, cut to ``max_completion_length - 1``, EOS
        appended)."""
        t = self.trainer
        eos = t._tokenizer.eos_token_id
        prompt_ids, completion_ids = [], []
        for first in range(0, len(rollout.rows), rollout.num_generations):
            texts = rollout.rows[first].get(self.teacher_column) or ()
            for text in texts:
                if isinstance(text, str) and text:
                    ids = t._tokenizer(text, add_special_tokens=False)["input_ids"][: t.max_completion_length - 1]
                    ids = [*ids, eos]
                    prompt_ids.append(rollout.prompt_ids[first])
                    completion_ids.append(ids)
        stats = torch.zeros(2, device=t.accelerator.device)
        if completion_ids:
            forward = t.policy_forward(prompt_ids, completion_ids, compute_entropy=False)
            lengths = torch.tensor([len(c) for c in completion_ids])
            mask = (torch.arange(forward.logps.size(1))[None, :] < lengths[:, None]).to(forward.logps.device)
            probs = forward.logps.float().exp()
            stats = torch.stack([(probs * mask).sum(), mask.sum().float()]).to(t.accelerator.device)
        stats = t.accelerator.reduce(stats, reduction="sum")
        if stats[1] > 0:
            self._log(mode, "teacher_token_prob", stats[0] / stats[1])
