"""Run by tests/test_resume.py in 2 CPU processes (torchrun, gloo): ASE, ``steps_per_generation=2``, 8 prompts (2
generations per epoch, 4 steps per epoch), 8 steps; then a run resumed from checkpoint 5 (inside epoch 1's first
generation; its next generation draws epoch 1's order after Accelerate skipped the batches). Each rank writes what
the test compares to ``rank{i}.json`` in the output directory given as argv[1]."""

import json
import sys
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoTokenizer

from trl_explore import ASEConfig, ASEGRPOTrainer
from trl_explore.defaults import default_policy_path
from trl_explore.testing import make_tiny_causal_lm, parity_reward

out = Path(sys.argv[1])
tokenizer = AutoTokenizer.from_pretrained(default_policy_path())
dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "answer": str(2 * i),
                              "problem_id": f"p{i}"} for i in range(8)])


def make(output_dir, save_steps=None):
    args = ASEConfig(output_dir=str(output_dir), per_device_train_batch_size=6, num_generations=6,
                     steps_per_generation=2, max_completion_length=8, max_steps=8, learning_rate=1e-3, logging_steps=1,
                     report_to="none", use_cpu=True, bf16=False, seed=0, log_completions=False, num_vectors=2,
                     pca_dim=4, kmeans_n_init=2, steering_alpha=4.0, min_pairs_per_cluster=1,
                     save_strategy="steps" if save_steps else "no",
                     save_steps=save_steps or 500)
    trainer = ASEGRPOTrainer(make_tiny_causal_lm(tokenizer), reward_funcs=[parity_reward], args=args,
                             train_dataset=dataset, processing_class=tokenizer)
    trainer.generated = []  # this process's prompts of every generation, one per group
    generate_and_score = trainer._generate_and_score_completions

    def spy(inputs):
        trainer.generated.append([row["problem_id"] for row in inputs][::6])
        return generate_and_score(inputs)

    trainer._generate_and_score_completions = spy
    return trainer


def losses(trainer):
    return {e["step"]: e["loss"] for e in trainer.state.log_history if "loss" in e}


full = make(out / "full", save_steps=5)
full.train()
resumed = make(out / "resumed")
resumed.train(resume_from_checkpoint=str(out / "full" / "checkpoint-5"))
weights = dict(full.model.named_parameters())
diff = max((p.detach() - weights[n].detach()).abs().max().item() for n, p in resumed.model.named_parameters())
banks = full.ase.bank.state_dict(), resumed.ase.bank.state_dict()
result = {
    "generated": full.generated, "resumed_generated": resumed.generated, "losses": losses(full),
    "resumed_losses": losses(resumed), "max_weight_diff": diff,
    "updates": [full.ase.bank.num_updates, resumed.ase.bank.num_updates],
    "bank_equal": all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
                      for a, b in zip(banks[0].values(), banks[1].values())),
}
(out / f"rank{full.accelerator.process_index}.json").write_text(json.dumps(result))
full.accelerator.end_training()  # ends the process group cleanly
