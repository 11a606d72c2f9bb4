"""Train a policy with OGER (offline-guided exploration reward) on a multi-teacher offline dataset.

    accelerate launch examples/train_oger.py                      # CPU demo: SmolLM2 + the arithmetic ladder + MiniLM
    accelerate launch --config_file accelerate_configs/multi_gpu.yaml examples/train_oger.py \
        --config recipes/oger_qwen2.5_math_7b.yaml                 # the paper's setup

Without `--config`, the CPU demo recipe `recipes/oger_smollm2_ladder_cpu.yaml` is used; any option given on the
command line overrides the recipe. `--help` lists the data and OGER options first, then every `GRPOConfig` /
`TrainingArguments` / `ModelConfig` field.
"""

from pathlib import Path

from trl_explore import OGERConfig, OGERTrainer
from trl_explore.cli import run_training
from trl_explore.data.training_data import DataArguments as ScriptArguments  # the script's data options

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "oger_smollm2_ladder_cpu.yaml"

if __name__ == "__main__":
    run_training(OGERTrainer, OGERConfig, RECIPE, "train_oger", script_cls=ScriptArguments)
