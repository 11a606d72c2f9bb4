"""Train the SFT baseline (the OGER paper's "SFT" row): TRL's SFTTrainer on the offline teacher solutions of the same
multi-teacher data the RL methods train on, with the same held-out evaluation.

    accelerate launch examples/train_sft.py                       # CPU demo: SmolLM2 + the arithmetic ladder
    accelerate launch --config_file accelerate_configs/multi_gpu.yaml examples/train_sft.py \
        --config recipes/sft_qwen2.5_math_1.5b.yaml                # the paper's setup (lr 1e-5, 2,000 steps)

Without `--config`, the CPU demo recipe `recipes/sft_smollm2_ladder_cpu.yaml` is used; any option given on the command
line overrides the recipe. `--help` lists the data and evaluation options first, then every `SFTConfig` /
`TrainingArguments` / `ModelConfig` field. Each (prompt, teacher solution) pair is one training row
(`trl_explore.sft.teacher_sft_dataset`); the loss covers the solution only.
"""

from pathlib import Path

from trl_explore.sft import run_sft

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "sft_smollm2_ladder_cpu.yaml"

if __name__ == "__main__":
    run_sft(RECIPE, "train_sft")
