"""The row-editing surface of trl_explore/driver/components.py and trl_explore/driver/trainer.py:
``Component.edit_scored`` (rows swapped after the rewards, re-scored and given TRL's advantages),
``Rollout.swap_rows`` / ``settle_rewrites`` (the fields of a replaced row), ``Needs.behaviour_logps``, row ownership,
field-name collisions and random streams."""

import dataclasses

import pytest
import torch

from trl_explore import ExplorationConfig, ExplorationTrainer
from trl_explore.driver.components import Component, Needs, Rollout
from trl_explore.driver.scoring import (
    _merge_rescored_logs,
    check_component_fields,
    check_row_owners,
    settle_rewrites,
    stream_seed,
)
from trl_explore.testing import doubling_dataset, tiny_training_args

SWAP_TEXT = "Swapped in: \\boxed{0}"


def _rollout(num_rows=3, extra=None, logprobs=True):
    return Rollout("train", tuple({"i": i} for i in range(num_rows)), num_rows, [[1, 2]] * num_rows,
                   [[10 + i, 11] for i in range(num_rows)], [[1, 1] for _ in range(num_rows)],
                   [f"c{i}" for i in range(num_rows)], [[-0.5, -0.25] for _ in range(num_rows)] if logprobs else None,
                   extra or {}, None, None, offline=(False,) * num_rows, owner=(None,) * num_rows)


# ---------------------------------------------------------------------------------------------------- pure rules
def test_swap_rows_replaces_or_clears_every_per_row_field():
    extra = {"env_text_len": [28, 30, 31], "tag": ["a", "b", "c"], "run": "shared"}
    rollout = dataclasses.replace(_rollout(extra=extra), tool_images=[["img0"], ["img1"], []])
    swapped = rollout.swap_rows("replay", {1: ([7, 8, 9], "new text")}, extra_fields={1: {"tag": "replayed"}})
    assert swapped.completion_ids[1] == [7, 8, 9] and swapped.completions[1] == "new text"
    assert swapped.logprobs[1] == [None, None, None] and swapped.tool_mask[1] == [1, 1, 1]
    assert swapped.extra_fields == {"env_text_len": [28, None, 31], "tag": ["a", "replayed", "c"], "run": "shared"}
    assert swapped.offline == (False, True, False) and swapped.owner == (None, "replay", None)
    assert swapped.tool_images == [["img0"], [], []]
    assert rollout.extra_fields["env_text_len"] == [28, 30, 31]  # the original is untouched
    with pytest.raises(IndexError, match="replay: rows \\[5\\] are outside"):
        rollout.swap_rows("replay", {5: ([1], "x")})


def test_settle_rewrites_clears_what_a_direct_rewrite_left_behind():
    # a hook that rewrote row 0's ids and text only (dataclasses.replace), as OGER's replacement did before
    rollout = dataclasses.replace(_rollout(extra={"env_text_len": [28, 30, 31]}), tool_images=[["img"], [], []])
    ids, texts = list(rollout.completion_ids), list(rollout.completions)
    ids[0], texts[0] = [5, 5, 5, 5], "teacher text"
    after = dataclasses.replace(rollout, completion_ids=ids, completions=texts)
    settled, changed = settle_rewrites(rollout, after, "oger")
    assert changed == [0] and settled.owner == ("oger", None, None) and settled.offline == (False,) * 3
    assert settled.logprobs[0] == [None] * 4 and settled.tool_mask[0] == [1] * 4
    assert settled.extra_fields["env_text_len"] == [None, 30, 31] and settled.tool_images == [[], [], []]
    assert settled.logprobs[1] == [-0.5, -0.25]  # untouched rows keep theirs
    forced, _ = settle_rewrites(rollout, after, "replay", force_offline=True)
    assert forced.offline == (True, False, False)
    same, none = settle_rewrites(rollout, dataclasses.replace(rollout), "x")
    assert none == [] and same.owner == rollout.owner
    with pytest.raises(ValueError, match="component 'x' changed the prompt of row 2"):
        settle_rewrites(rollout, dataclasses.replace(rollout, prompt_ids=[[1, 2], [1, 2], [3]]), "x")


def test_two_components_with_one_reward_field_are_refused_naming_both():
    class A(Component):
        name, reward_field_names = "a", ("shared_field",)

    class B(Component):
        name, reward_field_names = "b", ("other", "shared_field")

    with pytest.raises(ValueError, match="component 'b' declares reward field 'shared_field', which component 'a'"):
        check_component_fields([A(), B()])
    with pytest.raises(ValueError, match="'completions', which TRL's reward kwargs declares"):
        check_component_fields([type("C", (Component,), {"name": "c", "reward_field_names": ("completions",)})()],
                               ("completions",))
    with pytest.raises(ValueError, match="two components are named 'a'"):
        check_component_fields([A(), A()])


class Steers(Component):
    """Keeps per-row state from generation (like a route per row) and does not follow row owners."""

    name = "steers"

    def transform_rollout(self, rollout):
        self.routes = list(range(rollout.num_rows))
        return rollout


class Rewrites(Component):
    name, edits_rows = "rewrites", True

    def transform_rollout(self, rollout):
        return rollout


class EditsLate(Component):
    name, edits_rows = "late", True

    def edit_scored(self, scored):
        return scored.rollout


def test_a_rewrite_after_a_component_that_kept_row_state_is_refused_naming_both():
    with pytest.raises(ValueError, match="component 'rewrites' rewrites rows after component 'steers'"):
        check_row_owners([Steers(), Rewrites()])
    check_row_owners([Rewrites(), Steers()])  # steers sees the rewritten rows first-hand
    with pytest.raises(ValueError, match="component 'late' rewrites rows after component 'steers'"):
        check_row_owners([EditsLate(), Steers()])  # edit_scored runs after every generation hook
    follows = type("Follows", (Steers,), {"follows_row_owners": True, "name": "follows"})
    rewrites_following = type("RewritesFollowing", (Rewrites,), {"follows_row_owners": True})
    check_row_owners([follows(), rewrites_following(), EditsLate()])


def test_what_reward_functions_log_while_rows_are_rescored_replaces_the_changed_rows():
    pending = {"route": [0, 1, 2, 3], "is_offline": [False] * 4 + [True, True], "new": ["x", "y"], "odd": [1, 2, 3]}
    lengths = {"route": 4, "is_offline": 4, "odd": 2}
    _merge_rescored_logs(pending, lengths, changed=[1, 3], num_rows=4)
    assert pending == {"route": [0, 1, 2, 3], "is_offline": [False, True, False, True], "new": [None, "x", None, "y"],
                       "odd": [1, 2]}  # "odd": one value for two re-scored rows is kept out of the table


def test_edit_scored_with_environments_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"component\(s\) \['late'\] edit rows after scoring .*environment_factory"):
        ExplorationTrainer("unused", args=ExplorationConfig(**tiny_training_args(tmp_path)), components=[EditsLate()],
                           environment_factory=object)


def test_streams_are_keyed_by_name_and_ordered_terms():
    assert stream_seed(0, 3, (1, 2), "oger") == stream_seed(0, 3, (1, 2), "oger")
    seeds = {stream_seed(0, 3, (1, 2), "oger"), stream_seed(0, 3, (2, 1), "oger"), stream_seed(0, 3, (1, 2), "ase"),
             stream_seed(0, 4, (1, 2), "oger"), stream_seed(1, 3, (1, 2), "oger"), stream_seed(0, 3, (3,), "oger")}
    assert len(seeds) == 6 and all(0 <= s < 2**63 for s in seeds)


# ---------------------------------------------------------------------------------------------- the hook in a run
class CountingReward:
    """Parity of the text length; records the size of each call and the kwargs it saw."""

    __name__ = "counting_reward"

    def __init__(self):
        self.calls = []

    def __call__(self, completions, **kwargs):
        self.calls.append({"n": len(completions), "completions": list(completions),
                           "row_owner": kwargs.get("row_owner"), "replay_tag": kwargs.get("replay_tag")})
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        return [1.0 if t == SWAP_TEXT else 0.0 for t in texts]


class SwapFirstOfFailedGroups(Component):
    """In every group whose rewards are all 0, row 0 is swapped for a fixed text (an experience-replay stand-in)."""

    name, edits_rows, reward_field_names = "replay", True, ("replay_tag",)

    def __init__(self):
        super().__init__()
        self.seen, self.behaviour = [], []

    def needs(self, mode):
        return Needs(behaviour_logps=True)

    def reward_fields(self, rollout):
        return {"replay_tag": ["mine" if o == self.name else None for o in rollout.owner]}

    def edit_scored(self, scored):
        self.seen.append(scored)
        t, rollout = self.trainer, scored.rollout
        local = scored.local_rewards_per_func
        group = rollout.num_generations
        swaps = {}
        for start in range(0, rollout.num_rows, group):
            if (local[start : start + group, 0] == 0).all():
                ids = t.processing_class(SWAP_TEXT, add_special_tokens=False)["input_ids"]
                text = [{"role": "assistant", "content": SWAP_TEXT}] if isinstance(rollout.completions[start], list) \
                    else SWAP_TEXT
                swaps[start] = (ids, text)
        return rollout.swap_rows(self.name, swaps)

    def batch_fields(self, batch):
        self.behaviour.append((batch.behaviour_logps, batch.output.get("old_per_token_logps")))
        self.final = batch
        return {}


def _trainer(tmp_path, tokenizer, model, components, reward, **overrides):
    args = ExplorationConfig(**tiny_training_args(tmp_path, **{"max_steps": 1, **overrides}))
    return ExplorationTrainer(model, reward_funcs=[reward], args=args, train_dataset=doubling_dataset(2),
                              processing_class=tokenizer, components=components)


@pytest.mark.slow
def test_swapped_rows_are_rescored_alone_and_get_trls_advantages(tmp_path, smollm2_tokenizer, tiny_model):
    reward = CountingReward()
    replay = SwapFirstOfFailedGroups()
    # two micro-steps per generation: TRL keeps old log-probs (its scoring forward), which behaviour_logps reuses
    trainer = _trainer(tmp_path, smollm2_tokenizer, tiny_model, [replay], reward, per_device_train_batch_size=2,
                       steps_per_generation=2, max_steps=1)
    outputs, forwards = [], []
    behaviour_forward = trainer.behaviour_forward
    trainer.behaviour_forward = lambda *a, **k: forwards.append(a) or behaviour_forward(*a, **k)
    original = ExplorationTrainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: outputs.append(original(trainer, inputs)) or outputs[-1]
    trainer.train()

    # the first call scored all 4 rows; the second only the swapped row (the random policy never writes SWAP_TEXT)
    assert [c["n"] for c in reward.calls[:2]] == [4, 1]
    assert reward.calls[0]["row_owner"] == [None] * 4 and reward.calls[1]["row_owner"] == ["replay"]
    assert reward.calls[1]["replay_tag"] == ["mine"] and reward.calls[1]["completions"][0][0]["content"] == SWAP_TEXT
    scored = replay.seen[0]
    assert scored.rewards_per_func.shape == (4, 1) and scored.reward_func_names == ("counting_reward",)
    final = replay.final
    assert final.rollout.owner == ("replay", None, None, None) and final.rollout.offline == (True, False, False, False)
    assert final.rewards_per_func[:, 0].tolist() == [1.0, 0.0, 0.0, 0.0]
    output = outputs[0]
    # TRL's advantages of the final rewards (group of 4, scale_rewards="group"): (r - mean) / (std + 1e-4)
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    expected = (rewards - rewards.mean()) / (rewards.std() + 1e-4)
    assert torch.allclose(output["advantages"], expected, atol=1e-6)
    swapped_ids = smollm2_tokenizer(SWAP_TEXT, add_special_tokens=False)["input_ids"]
    assert output["completion_ids"][0, : len(swapped_ids)].tolist() == swapped_ids
    assert output["completion_mask"][0].sum().item() == len(swapped_ids)
    # behaviour log-probs: TRL's old_per_token_logps of the same rows, before and after the edit (no extra forward)
    assert forwards == []
    behaviour, old = replay.behaviour[0]
    width = behaviour.shape[1]
    mask = output["completion_mask"][:, :width].bool()
    assert torch.equal(behaviour[mask], old[:, :width][mask])
    assert scored.behaviour_logps.shape[0] == 4
