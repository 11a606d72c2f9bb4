"""Run by tests/test_row_drop.py in 2 CPU processes (torchrun, gloo): a component drops every row of process 0's
micro-batches and none of process 1's, for 2 steps. Before the fix the processes' collectives went out of step (TRL's
objective, whose metric gathers are collectives, was skipped on process 0) and gloo failed. Each rank writes its
logged losses and its parameters' checksum to ``rank{i}.json`` in the folder given as argv[1]."""

import json
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer

from trl_explore import ExplorationTrainer
from trl_explore.defaults import default_policy_path
from trl_explore.driver.components import Component, Needs
from trl_explore.driver.config import ExplorationConfig
from trl_explore.testing import doubling_dataset, make_tiny_causal_lm, parity_reward, tiny_training_args

out = Path(sys.argv[1])
tokenizer = AutoTokenizer.from_pretrained(default_policy_path())


class DropAllOnProcessZero(Component):
    name = "drop_all_on_p0"

    def needs(self, mode):
        return Needs(loss_forward=mode == "train")

    def drop_rows(self, batch):
        rows = batch.output["completion_ids"].shape[0]
        return torch.full((rows,), self.trainer.accelerator.process_index == 0, dtype=torch.bool)


args = ExplorationConfig(**tiny_training_args(out / "run", per_device_train_batch_size=2, num_generations=4,
                                              max_steps=2, learning_rate=1e-2))
model = make_tiny_causal_lm(tokenizer, seed=0)
before = {name: p.detach().clone() for name, p in model.named_parameters()}
trainer = ExplorationTrainer(model, reward_funcs=[parity_reward], args=args, processing_class=tokenizer,
                             train_dataset=doubling_dataset(4), components=[DropAllOnProcessZero()])
trainer.train()
changed = max((p.detach() - before[name]).abs().max().item() for name, p in trainer.model.named_parameters())
rank = trainer.accelerator.process_index
(out / f"rank{rank}.json").write_text(json.dumps({
    "losses": [e["loss"] for e in trainer.state.log_history if "loss" in e], "changed": changed}))
