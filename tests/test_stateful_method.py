"""A second method written outside the package, in this one file: one that keeps state and rewrites rows after the
rewards (docs/architecture.md, "A method that keeps state").

The method: success replay, a small instance of self-imitation ("Self-Imitation Learning", Oh et al., ICML 2018): each
process remembers, per prompt, the last ``capacity`` completions it saw rewarded as correct; when a whole group of a
prompt fails, one of its rows (the last) is swapped for a remembered success, drawn at random. Everything else is the
driver's: the swapped row is scored again by every reward function and TRL computes the group's advantages with it,
so the remembered success gets a positive advantage in a group that had none.

    refill_g = [max_i R_m(g, i) < threshold]  and  the buffer holds a success of g's prompt

It uses one hook (``edit_scored``), per-process state (``save_process_state`` / ``load_process_state``: each process
remembers the prompts it saw), its own random stream (``Component.generator``) and an options dataclass. The tests
check the rule on hand-computed values, that TRL's objective receives the advantages of the refilled groups, and that a
run resumes exactly, buffers included, on 1 process here and on 2 in ``tests/scripts/stateful_two_process.py``.
"""

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from trl import GRPOTrainer

from trl_explore import ComponentOptions, ExplorationConfig, ExplorationTrainer
from trl_explore.driver.components import Component
from trl_explore.testing import run_two_cpu_processes, tiny_training_args

NUM_GENERATIONS = 4


# ---------------------------------------------------------------------------------------------------- the method
def groups_to_refill(correctness: torch.Tensor, group_size: int, threshold: float = 0.5) -> torch.Tensor:
    """``[G]`` bool: the groups in which no completion reached ``threshold`` (NaN, "not scored", counts as failed).

    Args:
        correctness: ``[N]`` correctness rewards of ``N = G * group_size`` completions, group by group.
        group_size: completions per prompt.
        threshold: the reward a success reaches.

    Raises:
        ValueError: ``N`` not a multiple of ``group_size``.
    """
    if correctness.numel() % group_size:
        raise ValueError(f"{correctness.numel()} rewards are not whole groups of {group_size}")
    passed = torch.nan_to_num(correctness, nan=-float("inf")) >= threshold
    return ~passed.view(-1, group_size).any(dim=1)


@dataclass
class SuccessReplayOptions(ComponentOptions):
    """Options of success replay."""

    section = "Success replay"

    replay_capacity: int = field(default=2, metadata={"help": "Successes remembered per prompt (per process)."})
    replay_threshold: float = field(default=0.5, metadata={"help": "Reward (function 0) that counts as a success."})

    def validate(self):
        if self.replay_capacity < 1:
            raise ValueError(f"replay_capacity must be >= 1, got {self.replay_capacity}")


def prompt_key(row) -> str:
    return json.dumps(row["prompt"], sort_keys=True)


class SuccessReplay(Component):
    """The method as a component: remembers successes per process, refills failed groups after the rewards."""

    name = "success_replay"
    options_class = SuccessReplayOptions
    edits_rows = True  # edit_scored rewrites rows

    def __init__(self, options=None):
        super().__init__(options)
        self.buffer: dict[str, list] = {}  # prompt -> [[completion ids, completion], ...], this process's
        self.num_refilled = 0

    def edit_scored(self, scored):
        rollout, size = scored.rollout, scored.rollout.num_generations
        if rollout.mode != "train":
            return rollout
        correctness = scored.local_rewards_per_func[:, 0].cpu()
        refill = groups_to_refill(correctness, size, self.options.replay_threshold).tolist()
        generator = self.generator(self.trainer.accelerator.process_index)  # this component's stream
        swaps = {}
        for g, start in enumerate(range(0, rollout.num_rows, size)):
            key = prompt_key(rollout.rows[start])
            remembered = self.buffer.get(key, [])
            if refill[g] and remembered:
                pick = int(torch.randint(len(remembered), (1,), generator=generator))
                swaps[start + size - 1] = tuple(remembered[pick])
            for i in range(start, start + size):  # remember this group's online successes (after the draw)
                if rollout.owner[i] is None and correctness[i] >= self.options.replay_threshold:
                    entry = [list(rollout.completion_ids[i]), rollout.completions[i]]
                    self.buffer[key] = (remembered + [entry])[-self.options.replay_capacity :]
                    remembered = self.buffer[key]
        self.num_refilled += len(swaps)
        return rollout.swap_rows(self.name, swaps) if swaps else rollout

    def save_process_state(self, folder):
        with open(os.path.join(folder, "buffer.json"), "w") as f:
            json.dump({"buffer": self.buffer, "num_refilled": self.num_refilled}, f)

    def load_process_state(self, folder):
        with open(os.path.join(folder, "buffer.json")) as f:
            state = json.load(f)
        self.buffer, self.num_refilled = state["buffer"], state["num_refilled"]


# ---------------------------------------------------------------------------------------------------- the rule
def test_groups_to_refill_on_hand_computed_values():
    # three groups of 2: one success in the first; none in the second (a 0.4 < 0.5 and a not-scored row); two in the
    # third
    rewards = torch.tensor([0.0, 1.0, 0.4, float("nan"), 0.5, 1.0])
    assert groups_to_refill(rewards, 2).tolist() == [False, True, False]
    assert groups_to_refill(rewards, 3, threshold=1.5).tolist() == [True, True]
    with pytest.raises(ValueError, match="5 rewards are not whole groups of 2"):
        groups_to_refill(rewards[:5], 2)
    with pytest.raises(ValueError, match="replay_capacity must be >= 1"):
        SuccessReplayOptions(replay_capacity=0)


# ---------------------------------------------------------------------------------------------------- runs
def step_verifier(completions, trainer_state, row_owner=None, **kwargs):
    """A stand-in verifier without state: at step 0 every completion is a success; later only the replayed ones (they
    were successes once; ``row_owner`` tells the reward functions which rows a component wrote). So the random policy
    fails every later group and a refilled group is the only one with a learning signal."""
    if trainer_state.global_step == 0:
        return [1.0] * len(completions)
    return [float(owner == SuccessReplay.name) for owner in row_owner or [None] * len(completions)]


def _dataset(num_prompts=2):
    return Dataset.from_list([{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "answer": str(2 * i)}
                              for i in range(num_prompts)])


def _trainer(output_dir, tokenizer, model, components=None, **overrides):
    args = ExplorationConfig(**tiny_training_args(output_dir, **{"max_steps": 4, **overrides}))
    # one prompt per step, two prompts: steps 2 and 3 meet the prompts of steps 0 and 1 again
    components = [SuccessReplay(SuccessReplayOptions())] if components is None else components
    return ExplorationTrainer(model, reward_funcs=[step_verifier], args=args, train_dataset=_dataset(),
                              processing_class=tokenizer, components=components)


@pytest.mark.slow
def test_trl_objective_receives_the_advantages_of_refilled_groups(tmp_path, smollm2_tokenizer, tiny_model,
                                                                  monkeypatch):
    trainer = _trainer(tmp_path, smollm2_tokenizer, tiny_model)
    seen = []
    objective = GRPOTrainer._compute_loss
    monkeypatch.setattr(GRPOTrainer, "_compute_loss",
                        lambda self, model, batch: seen.append(batch["advantages"].clone()) or objective(self, model,
                                                                                                         batch))
    trainer.train()

    replay = trainer.component("success_replay")
    assert replay.num_refilled >= 1  # a prompt of step 0 failed again later and was refilled
    refilled = [a for a in seen if (a != 0).any()]
    assert refilled, "no group with signal reached TRL's objective"
    # a refilled group: rewards [0, 0, 0, 1] -> TRL's (r - mean) / (std + 1e-4) on the replayed (last) row
    r = torch.tensor([0.0, 0.0, 0.0, 1.0])
    expected = (r - r.mean()) / (r.std() + 1e-4)
    for advantages in refilled:  # TRL shuffles a generation's rows before its micro-batches: the values, in order
        assert torch.allclose(advantages.reshape(-1).sort().values, expected.sort().values, atol=1e-6)
    assert [len(v) for v in replay.buffer.values()] == [2]  # step 0's prompt, its last 2 successes


@pytest.mark.slow
def test_a_run_resumes_exactly_with_its_buffer(tmp_path, smollm2_tokenizer, make_tiny_lm):
    full = _trainer(tmp_path / "full", smollm2_tokenizer, make_tiny_lm(), save_strategy="steps", save_steps=1)
    full.train()
    folder = tmp_path / "full" / "checkpoint-2" / "component_state" / "success_replay" / "process_0"
    assert json.loads((folder / "buffer.json").read_text())["buffer"]  # the buffer went into the checkpoint
    resumed = _trainer(tmp_path / "resumed", smollm2_tokenizer, make_tiny_lm(seed=1))
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    for (name, a), b in zip(full.model.named_parameters(), resumed.model.parameters()):
        assert torch.equal(a, b), name
    a, b = full.component("success_replay"), resumed.component("success_replay")
    assert json.loads(json.dumps(a.buffer)) == b.buffer and a.num_refilled == b.num_refilled
    # a checkpoint without this component's state for this process (a run without it, or another number of
    # processes) is refused, not resumed inexactly with an empty buffer
    plain = _trainer(tmp_path / "plain", smollm2_tokenizer, make_tiny_lm(), components=[], max_steps=1,
                     save_strategy="steps", save_steps=1)
    plain.train()
    with pytest.raises(FileNotFoundError, match="no state of component 'success_replay' for process 0"):
        _trainer(tmp_path / "again", smollm2_tokenizer, make_tiny_lm()).train(
            resume_from_checkpoint=str(tmp_path / "plain" / "checkpoint-1"))


@pytest.mark.slow
def test_two_processes_keep_their_own_buffers_and_resume_exactly(tmp_path):
    script = Path(__file__).parent / "scripts" / "stateful_two_process.py"
    result = run_two_cpu_processes(script, tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in ranks:
        assert r["buffer"] == r["resumed_buffer"] and r["losses"] == r["resumed_losses"]
        assert r["max_weight_diff"] == 0.0 and r["num_refilled"] == r["resumed_num_refilled"]
        assert len(r["buffer"]) == 1  # each process saw one prompt
    assert ranks[0]["buffer"].keys() != ranks[1]["buffer"].keys()  # per-process state: the two differ
