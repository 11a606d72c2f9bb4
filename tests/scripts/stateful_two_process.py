"""Run by tests/test_stateful_method.py in 2 CPU processes (torchrun, gloo): success replay (a component with
per-process state), one group per process per step, 4 steps saved at every step; then a run resumed from checkpoint 2.
Each rank writes what the test compares to ``rank{i}.json`` in the output directory given as argv[1]."""

import importlib.util
import json
import sys
from pathlib import Path

from transformers import AutoTokenizer

from trl_explore.defaults import default_policy_path
from trl_explore.testing import make_tiny_causal_lm

# the method and its trainer, from the file that defines and tests them (the other half of this test), by its path
spec = importlib.util.spec_from_file_location("stateful_method", Path(__file__).resolve().parents[1] /
                                              "test_stateful_method.py")
method = importlib.util.module_from_spec(spec)
spec.loader.exec_module(method)
_trainer = method._trainer

out = Path(sys.argv[1])
tokenizer = AutoTokenizer.from_pretrained(default_policy_path())


def losses(trainer):
    return {e["step"]: e["loss"] for e in trainer.state.log_history if "loss" in e}


full = _trainer(out / "full", tokenizer, make_tiny_causal_lm(tokenizer), save_strategy="steps", save_steps=1)
full.train()
resumed = _trainer(out / "resumed", tokenizer, make_tiny_causal_lm(tokenizer, seed=1))
resumed.train(resume_from_checkpoint=str(out / "full" / "checkpoint-2"))
weights = dict(full.model.named_parameters())
diff = max((p.detach() - weights[n].detach()).abs().max().item() for n, p in resumed.model.named_parameters())
a, b = full.component("success_replay"), resumed.component("success_replay")
result = {"buffer": json.loads(json.dumps(a.buffer)), "resumed_buffer": b.buffer, "losses": losses(full),
          "resumed_losses": losses(resumed), "max_weight_diff": diff, "num_refilled": a.num_refilled,
          "resumed_num_refilled": b.num_refilled}
(out / f"rank{full.accelerator.process_index}.json").write_text(json.dumps(result))
full.accelerator.end_training()  # ends the process group cleanly
