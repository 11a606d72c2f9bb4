"""Batch-level resampling and dropped rows: the driver's side of ``Component.select_groups`` and
``Component.drop_rows`` (``docs/architecture.md``, "Batch-level resampling").

One training batch may take several generation rounds. Round 0 is TRL's own generation of the rows its sampler gave;
when a component's :meth:`~trl_explore.driver.components.Component.select_groups` refuses groups, the driver draws new
prompts (:func:`resample_rows`: from the training set, with the driver's random stream ``"driver/resample"``, a
function of the seed, the optimizer step and the round only, so a resumed run draws the same), generates and scores
them with every hook, and asks again. The batch is built from the first kept groups of each process, in round then
row order (:func:`choose_groups`, :func:`merge_rounds`). At the cap (``GroupSelection.max_rounds``) it is filled with
refused groups, dropped from the objective (``on_cap="drop"``, logged) or refused (``on_cap="error"``).

Metrics (:meth:`ExplorationTrainer.log_metric`): ``resample/generation_rounds`` (rounds made for the batch),
``resample/extra_completions`` (completions generated beyond round 0, all processes), ``resample/extra_seconds``
(wall time of those rounds), ``resample/kept_group_frac`` (kept groups over generated groups), ``resample/cap_reached``
(1 when the batch was filled with refused groups); ``frac_reward_zero_std_trained``: TRL's ``frac_reward_zero_std``
computed on the batch that is trained, after every component's edits, selections and drops (groups whose every row
was dropped are not counted), beside TRL's raw one (which averages over every round).
"""

from __future__ import annotations

import logging
import time

import torch

from trl_explore.driver.components import Component, GroupSelection
from trl_explore.driver.objective import DROPPED, ITEMS_BEFORE_DROPS, kept_items, loss_mask

logger = logging.getLogger(__name__)

LEFT_PADDED = ("prompt_ids", "prompt_mask")
"""Batch keys TRL pads on the left (the prompts); every other ``[B, T]`` value is right padded."""

ROUND_KEY = "resample_round"
"""Batch key (``[B]`` long) of the generation round each row comes from (0: TRL's own), set when resampling ran."""


class GenerationRound:
    """One generation round: TRL's output dict, its :class:`ScoredBatch`, the union of the components' dropped rows
    (``[B]`` bool or None) and their combined :class:`GroupSelection` (or None: every group kept)."""

    def __init__(self, trainer, scored):
        self.scored, self.output = scored, scored.output
        num_rows = scored.rollout.num_rows
        dropped = None
        for component in trainer.components:
            rows = component.drop_rows(scored)
            if rows is None:
                continue
            rows = torch.as_tensor(rows, dtype=torch.bool).reshape(-1).cpu()
            if rows.numel() != num_rows:
                raise ValueError(f"drop_rows of component {component.name!r} returned {rows.numel()} values for this "
                                 f"process's {num_rows} rows: give one bool per row ([B], True = dropped)")
            dropped = rows if dropped is None else dropped | rows
        if dropped is not None or _any_override(trainer.components, "drop_rows", "select_groups"):
            dropped = torch.zeros(num_rows, dtype=torch.bool) if dropped is None else dropped
            self.output[DROPPED] = dropped.to(trainer.accelerator.device)
        self.selection = None
        if scored.mode == "train":  # resampling draws from the training set: training batches only
            self.selection = combine_selections(trainer, scored)


def _any_override(components, *hooks) -> bool:
    return any(getattr(type(c), h) is not getattr(Component, h) for c in components for h in hooks)


def combine_selections(trainer, scored) -> GroupSelection | None:
    """The components' :class:`GroupSelection` of one round, combined: a group is kept when every component keeps
    it; the smallest positive ``max_rounds`` (``<= 0``: no cap) and ``"error"`` over ``"drop"``.

    Raises:
        ValueError: a selection of the wrong length, an unknown ``on_cap``, or groups that span processes.
    """
    group = scored.rollout.num_generations
    num_rows = scored.rollout.num_rows
    combined = None
    for component in trainer.components:
        selection = component.select_groups(scored)
        if selection is None:
            continue
        if num_rows % group:
            raise ValueError(f"select_groups of component {component.name!r}: this process holds {num_rows} rows, "
                             f"not whole groups of num_generations={group}; make per_device_train_batch_size x "
                             "steps_per_generation a multiple of num_generations")
        keep = torch.as_tensor(selection.keep, dtype=torch.bool).reshape(-1).cpu()
        if keep.numel() != num_rows // group:
            raise ValueError(f"select_groups of component {component.name!r} returned {keep.numel()} values for this "
                             f"process's {num_rows // group} groups: give one bool per group")
        if selection.on_cap not in ("drop", "error"):
            raise ValueError(f"select_groups of component {component.name!r}: on_cap={selection.on_cap!r}; valid: "
                             "drop, error")
        if combined is None:
            combined = GroupSelection(keep, selection.max_rounds, selection.on_cap)
        else:
            caps = [c for c in (combined.max_rounds, selection.max_rounds) if c > 0]
            combined = GroupSelection(combined.keep & keep, min(caps) if caps else 0,
                                      "error" if "error" in (combined.on_cap, selection.on_cap) else "drop")
    return combined


def resample_rows(trainer, round_index: int, num_rows: int) -> list[dict]:
    """This process's rows of generation round ``round_index`` (``>= 1``): ``num_rows / num_generations`` prompts per
    process drawn from ``trainer.train_dataset`` without replacement (with replacement when the set is smaller than
    the batch), each repeated ``num_generations`` times, laid out as TRL's sampler lays out a generation batch (every
    process draws the same list and takes its contiguous slice). The draw is a function of ``args.seed``, the
    optimizer step and ``round_index`` (``trainer.step_generator(round_index, stream="driver/resample")``)."""
    group, processes = trainer.num_generations, trainer.accelerator.num_processes
    prompts = num_rows // group * processes
    dataset = trainer.train_dataset
    draws = trainer.step_generator(round_index, stream="driver/resample")
    if len(dataset) >= prompts:
        indices = torch.randperm(len(dataset), generator=draws)[:prompts].tolist()
    else:
        indices = torch.randint(len(dataset), (prompts,), generator=draws).tolist()
    rows = [dataset[i] for i in indices for _ in range(group)]
    start = trainer.accelerator.process_index * num_rows
    return rows[start:start + num_rows]


def choose_groups(keeps: list[torch.Tensor], needed: int) -> tuple[list[tuple[int, int]], int]:
    """``([(round, group)] * needed or fewer, number kept)``: the first ``needed`` kept groups in round then group
    order, then (when fewer are kept) the first refused groups in the same order.

    Args:
        keeps: per round, ``[G]`` bool (True = kept).
        needed: groups of the training batch on this process.
    """
    kept = [(r, g) for r, keep in enumerate(keeps) for g in range(keep.numel()) if keep[g]]
    refused = [(r, g) for r, keep in enumerate(keeps) for g in range(keep.numel()) if not keep[g]]
    chosen = kept[:needed]
    return chosen + refused[:needed - len(chosen)], len(chosen)


def _pad_cat(values: list[torch.Tensor], left: bool, pad_value) -> torch.Tensor:
    width = max(v.shape[1] for v in values)
    padded = []
    for v in values:
        extra = width - v.shape[1]
        if extra:
            fill = torch.full((v.shape[0], extra, *v.shape[2:]), pad_value, dtype=v.dtype, device=v.device)
            v = torch.cat([fill, v] if left else [v, fill], dim=1)
        padded.append(v)
    return torch.cat(padded, dim=0)


def merge_rounds(outputs: list[dict], rows: list[tuple[int, int]], pad_token_id: int) -> dict:
    """One batch dict of the given ``(round, row)`` rows of the rounds' output dicts: batch-first tensors indexed and
    concatenated (``[B, T]`` values padded to the widest: prompts on the left, the rest on the right; ids with
    ``pad_token_id``, everything else with 0), lists of length B likewise, 0-d tensors and other values from round 0
    (the driver recomputes ``num_items_in_batch``).

    Raises:
        ValueError: a key missing from some round, or a tensor that is neither 0-d nor batch-first.
    """
    first = outputs[0]
    num_rows = [next(v.shape[0] for k, v in o.items() if k == "completion_ids") for o in outputs]
    merged = {}
    for key, value in first.items():
        if any(key not in o for o in outputs):
            raise ValueError(f"resampling: batch key {key!r} is missing from a later generation round")
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            if any(o[key].shape[0] != n for o, n in zip(outputs, num_rows)):
                raise ValueError(f"resampling: batch key {key!r} is not batch-first; it cannot be merged")
            parts = [outputs[r][key][i:i + 1] for r, i in rows]
            if value.dim() == 1:
                merged[key] = torch.cat(parts, dim=0)
            else:
                pad = pad_token_id if key.endswith("_ids") else 0
                merged[key] = _pad_cat(parts, key in LEFT_PADDED, pad)
        elif isinstance(value, list) and len(value) == num_rows[0]:
            merged[key] = [outputs[r][key][i] for r, i in rows]
        else:
            merged[key] = value
    return merged


def resample_batch(trainer, inputs: list, first: GenerationRound) -> dict:
    """The training batch after batch-level resampling (module docstring), starting from round 0 ``first``.

    Raises:
        RuntimeError: the cap was reached with too few kept groups and the selection says ``on_cap="error"``.
    """
    accelerator = trainer.accelerator
    group, num_rows = first.scored.rollout.num_generations, first.scored.rollout.num_rows
    needed = num_rows // group
    selection = first.selection
    rounds, keeps = [first], [first.selection.keep]
    start = time.perf_counter()
    while True:
        kept = sum(int(k.sum()) for k in keeps)
        short = accelerator.gather(torch.tensor([max(needed - kept, 0)], device=accelerator.device)).max().item()
        if short == 0:
            break
        if 0 < selection.max_rounds <= len(rounds):
            break
        round_index = len(rounds)
        current = trainer._generation_round(resample_rows(trainer, round_index, num_rows), round_index)
        rounds.append(current)
        keeps.append(current.selection.keep if current.selection is not None
                     else torch.ones(needed, dtype=torch.bool))
    extra_seconds = time.perf_counter() - start
    chosen, num_kept = choose_groups(keeps, needed)
    cap_reached = accelerator.gather(torch.tensor([needed - num_kept], device=accelerator.device)).max().item() > 0
    if cap_reached:
        message = (f"batch-level resampling: the cap of {selection.max_rounds} generation rounds was reached at step "
                   f"{trainer.state.global_step} with {num_kept} of the {needed} groups this process needs kept")
        if selection.on_cap == "error":
            raise RuntimeError(message + "; raise the cap (e.g. DynamicSamplingOptions.dynamic_sampling_max_gen_"
                               "batches) or use on_cap='drop'")
        if accelerator.is_main_process:
            logger.warning(message + "; the batch is filled with refused groups, dropped from the objective")
    rows = [(r, g * group + i) for r, g in chosen for i in range(group)]
    output = merge_rounds([r.output for r in rounds], rows, trainer.processing_class.pad_token_id
                          if hasattr(trainer.processing_class, "pad_token_id")
                          else trainer.processing_class.tokenizer.pad_token_id)
    filled = torch.tensor([not keeps[r][g] for r, g in chosen for _ in range(group)], dtype=torch.bool,
                          device=accelerator.device)
    previous = output.get(DROPPED)
    output[DROPPED] = filled if previous is None else previous.bool() | filled
    output[ROUND_KEY] = torch.tensor([r for r, _ in rows], dtype=torch.long, device=accelerator.device)
    generated = accelerator.gather(torch.tensor([num_rows * (len(rounds) - 1)], device=accelerator.device)).sum()
    groups_made = len(rounds) * needed * accelerator.num_processes
    kept_all = accelerator.gather(torch.tensor([sum(int(k.sum()) for k in keeps)], device=accelerator.device)).sum()
    trainer.log_metric("resample/generation_rounds", len(rounds), "none", "train")
    trainer.log_metric("resample/extra_completions", generated.item(), "none", "train")
    trainer.log_metric("resample/extra_seconds", extra_seconds, "max", "train")
    trainer.log_metric("resample/kept_group_frac", kept_all.item() / max(groups_made, 1), "none", "train")
    trainer.log_metric("resample/cap_reached", float(cap_reached), "none", "train")
    return output


def finish_drops(trainer, output: dict) -> None:
    """Set ``num_items_in_batch`` to the loss tokens of the rows not dropped (all processes) and keep the count
    before the drops under ``num_items_before_drops`` (``trl_explore.driver.objective``)."""
    accelerator = trainer.accelerator
    mask = loss_mask(output)
    dropped = output.get(DROPPED)
    dropped = torch.zeros(mask.shape[0], dtype=torch.bool, device=mask.device) if dropped is None else dropped.bool()
    output[DROPPED] = dropped
    output[ITEMS_BEFORE_DROPS] = accelerator.gather(mask.sum().reshape(1)).sum()
    output["num_items_in_batch"] = accelerator.gather(kept_items(mask, dropped).reshape(1)).sum()


def log_trained_zero_std(trainer, output: dict, mode: str) -> None:
    """``frac_reward_zero_std_trained`` (module docstring): the share of the trained batch's groups (all processes;
    groups with a row left in the objective) whose rewards, as TRL's advantages saw them, have zero spread (TRL's
    ``isclose(std, 0)``). The rewards are read back from the advantages: a group with zero spread has every
    advantage 0 under every ``scale_rewards``."""
    accelerator = trainer.accelerator
    group = trainer.num_generations if mode == "train" else trainer.num_generations_eval
    advantages = output["advantages"]
    advantages = advantages if advantages.dim() == 1 else advantages[:, 0]
    dropped = output.get(DROPPED)
    dropped = torch.zeros_like(advantages, dtype=torch.bool) if dropped is None else dropped.bool()
    advantages, dropped = accelerator.gather(advantages), accelerator.gather(dropped.long()).bool()
    if advantages.numel() % group:
        return
    flat = torch.isclose(advantages.view(-1, group), torch.zeros(())).all(dim=1)
    trained = ~dropped.view(-1, group).all(dim=1)
    frac = (flat & trained).sum().float() / trained.sum().clamp(min=1)
    trainer.log_metric("frac_reward_zero_std_trained", frac.item(), "none", mode)


def finish_batch(trainer, inputs: list, first: GenerationRound) -> dict:
    """The training batch from round 0 ``first``: resampled when a component asked for it (:func:`resample_batch`),
    ``num_items_in_batch`` without the dropped rows (:func:`finish_drops`), and ``frac_reward_zero_std_trained``
    (:func:`log_trained_zero_std`) when some component edits, drops or selects rows."""
    output = first.output if first.selection is None else resample_batch(trainer, inputs, first)
    components = trainer.components
    if _any_override(components, "drop_rows", "select_groups"):
        finish_drops(trainer, output)
    if _any_override(components, "edit_scored", "drop_rows", "select_groups") or any(c.edits_rows for c in components):
        log_trained_zero_std(trainer, output, first.scored.mode)
    return output
