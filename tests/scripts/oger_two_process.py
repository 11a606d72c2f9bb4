"""Run by tests/test_oger_distributed.py under `accelerate launch --num_processes 2 --cpu` (gloo).

Each process records, for every group it builds, the prompts of the group's rows and which row was
replaced; rank files are written to the output directory given as argv[1].
"""

import json
import sys
from pathlib import Path

from transformers import AutoTokenizer

from trl_explore import OGERConfig, OGERTrainer
from trl_explore.defaults import default_policy_path
from trl_explore.oger import component as oger_trainer_module
from trl_explore.oger import trainer as oger_trainer
from trl_explore.testing import make_tiny_causal_lm, teacher_math_dataset

out = Path(sys.argv[1])
tokenizer = AutoTokenizer.from_pretrained(default_policy_path())
records = []


class RecordingOGERComponent(oger_trainer_module.OGERComponent):
    def offline_for_group(self, rows, group, need_embeddings=True):
        records.append({"step": self.trainer.state.global_step,
                        "prompts": [rows[i]["prompt"][0]["content"] for i in group]})
        return super().offline_for_group(rows, group, need_embeddings)


oger_trainer.OGERComponent = RecordingOGERComponent  # OGERTrainer builds its component from this name


original = oger_trainer_module.select_replacements


def spy(divergence, k, rule="lowest_divergence", generator=None):
    chosen = original(divergence, k, rule, generator)
    records[-1].update(divergence=divergence.tolist(), chosen=chosen.tolist())
    return chosen


oger_trainer_module.select_replacements = spy
args = OGERConfig(
    output_dir=str(out / "run"), per_device_train_batch_size=4, num_generations=4, max_completion_length=12,
    max_steps=2, learning_rate=1e-3, logging_steps=1, report_to="none", save_strategy="no", use_cpu=True,
    bf16=False, embedding_model="embedded", seed=0,
)
trainer = OGERTrainer(make_tiny_causal_lm(tokenizer), args=args, train_dataset=teacher_math_dataset(),
                      processing_class=tokenizer)
trainer.train()
rank = trainer.accelerator.process_index
(out / f"rank{rank}.json").write_text(json.dumps({"records": records, "log_history": trainer.state.log_history}))
trainer.accelerator.end_training()  # ends the process group cleanly
