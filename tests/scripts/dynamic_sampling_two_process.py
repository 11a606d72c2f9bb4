"""Run by tests/test_dynamic_sampling.py in 2 CPU processes (torchrun, gloo): DAPO's dynamic sampling with one group
per process per step (p0's group is always flat, so resampling runs), 3 steps saved at every step inside a 2-step
generation; then a run resumed from checkpoint 1. Each rank writes what the test compares to ``rank{i}.json`` in the
output directory given as argv[1]."""

import json
import sys
from pathlib import Path

from transformers import AutoTokenizer

from trl_explore import DynamicSamplingConfig, DynamicSamplingTrainer
from trl_explore.defaults import default_policy_path
from trl_explore.testing import doubling_dataset, make_tiny_causal_lm, tiny_training_args

out = Path(sys.argv[1])
tokenizer = AutoTokenizer.from_pretrained(default_policy_path())


def flat_on_p0(completions, problem_id, **kwargs):
    return [1.0 if p == "p0" else float(len(c[0]["content"]) % 2 == 0) for c, p in zip(completions, problem_id)]


def trainer(folder, seed, **overrides):
    args = DynamicSamplingConfig(**tiny_training_args(folder, per_device_train_batch_size=2, num_generations=4,
                                                      steps_per_generation=2, max_steps=3,
                                                      dynamic_sampling_max_gen_batches=4, **overrides))
    return DynamicSamplingTrainer(make_tiny_causal_lm(tokenizer, seed=seed), reward_funcs=[flat_on_p0], args=args,
                                  processing_class=tokenizer, train_dataset=doubling_dataset(4))


def history(t, key):
    return [e[key] for e in t.state.log_history if key in e]


full = trainer(out / "full", 0, save_strategy="steps", save_steps=1)
full.train()
resumed = trainer(out / "resumed", 1)
resumed.train(resume_from_checkpoint=str(out / "full" / "checkpoint-1"))
weights = dict(full.model.named_parameters())
diff = max((p.detach() - weights[n].detach()).abs().max().item() for n, p in resumed.model.named_parameters())
result = {"rounds": history(full, "resample/generation_rounds"),
          "zero_std_trained": history(full, "frac_reward_zero_std_trained"),
          "losses": {e["step"]: e["loss"] for e in full.state.log_history if "loss" in e},
          "resumed_losses": {e["step"]: e["loss"] for e in resumed.state.log_history if "loss" in e},
          "max_weight_diff": diff}
(out / f"rank{full.accelerator.process_index}.json").write_text(json.dumps(result))
full.accelerator.end_training()
