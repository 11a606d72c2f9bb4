"""Train a policy with ExGRPO (experience replay of its own correct trajectories, Zhan et al. 2025), a baseline of the
OGER paper, on the same data and with the same held-out evaluation as the other scripts.

    accelerate launch examples/train_exgrpo.py                      # CPU demo: SmolLM2 + the arithmetic ladder
    accelerate launch --config_file accelerate_configs/zero2.yaml examples/train_exgrpo.py \
        --config recipes/exgrpo_qwen2.5_math_7b.yaml                 # the paper-scale setup (8 GPUs, vLLM)

Without `--config`, the CPU demo recipe `recipes/exgrpo_smollm2_ladder_cpu.yaml` is used; any option given on the
command line overrides the recipe. `--help` lists the data and ExGRPO options first. Checkpoints hold the replay
buffer (`exgrpo/buffer.json`); the final model folder holds it too (it is training state, not needed to deploy).
"""

from pathlib import Path

from trl_explore import ExGRPOConfig, ExGRPOTrainer
from trl_explore.cli import run_training
from trl_explore.data.training_data import DataArguments as ScriptArguments  # the script's data options

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "exgrpo_smollm2_ladder_cpu.yaml"


def buffer_summary(trainer, script_args, dataset):
    buffer = trainer.exgrpo.buffer
    return [f"replay buffer: {len(buffer)} prompts, {buffer.num_trajectories()} trajectories, buckets "
            f"{buffer.bucket_sizes()}, {len(buffer.retired)} prompts retired, replay started: {buffer.started}"]


if __name__ == "__main__":
    run_training(ExGRPOTrainer, ExGRPOConfig, RECIPE, "train_exgrpo", script_cls=ScriptArguments,
                 after_train=buffer_summary)
