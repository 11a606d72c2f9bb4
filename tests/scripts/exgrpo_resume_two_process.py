"""Run by tests/test_exgrpo_trainer.py in 2 CPU processes (torchrun, gloo): ExGRPO on 4 prompts (every prompt in every
step, 2 groups of 4 per process), 4 steps with a checkpoint after each; then a run resumed from checkpoint 3 (a
non-empty buffer). Each rank writes what the test compares to ``rank{i}.json`` in the directory given as argv[1]."""

import json
import sys
from pathlib import Path

from transformers import AutoTokenizer

from trl_explore import ExGRPOConfig, ExGRPOTrainer
from trl_explore.defaults import default_policy_path
from trl_explore.testing import doubling_dataset, make_tiny_causal_lm, parity_reward, tiny_training_args

out = Path(sys.argv[1])
tokenizer = AutoTokenizer.from_pretrained(default_policy_path())


def make(output_dir, **overrides):
    args = ExGRPOConfig(**tiny_training_args(output_dir, per_device_train_batch_size=8, max_steps=4, seed=1,
                                             replay_start_pass_rate=0.0, replay_ratio=1.0, **overrides))
    return ExGRPOTrainer(make_tiny_causal_lm(tokenizer), reward_funcs=[parity_reward], args=args,
                         train_dataset=doubling_dataset(4), processing_class=tokenizer)


def losses(trainer):
    return {e["step"]: e["loss"] for e in trainer.state.log_history if "loss" in e}


def replayed(trainer):
    return [e["exgrpo/replayed_fraction"] for e in trainer.state.log_history if "exgrpo/replayed_fraction" in e]


full = make(out / "full", save_strategy="steps", save_steps=1)
full.train()
checkpoint = out / "full" / "checkpoint-3"
saved = json.loads((checkpoint / "exgrpo" / "buffer.json").read_text())
resumed = make(out / "resumed")
resumed.train(resume_from_checkpoint=str(checkpoint))
weights = dict(full.model.named_parameters())
diff = max((p.detach() - weights[n].detach()).abs().max().item() for n, p in resumed.model.named_parameters())
result = {
    "losses": losses(full), "resumed_losses": losses(resumed), "max_weight_diff": diff,
    "replayed": replayed(full), "saved_entries": len(saved["entries"]),
    "buffer": full.exgrpo.buffer.state_dict(), "resumed_buffer": resumed.exgrpo.buffer.state_dict(),
}
(out / f"rank{full.accelerator.process_index}.json").write_text(json.dumps(result))
full.accelerator.end_training()
