"""Train a policy with OGER and ASE-GRPO composed: hybrid groups of steered rollouts and teacher trajectories.

    accelerate launch examples/train_oger_ase.py                      # CPU demo: SmolLM2 + the arithmetic ladder
    accelerate launch --config_file accelerate_configs/zero2.yaml examples/train_oger_ase.py \
        --config recipes/oger_ase_qwen2.5_math_1.5b.yaml               # paper-scale setup (8 GPUs, vLLM)

Without `--config`, the CPU demo recipe `recipes/oger_ase_smollm2_ladder_cpu.yaml` is used; any option given on the
command line overrides the recipe. `--help` lists the data, OGER and ASE-GRPO options first. The final model goes to
`output_dir`, the vector bank to `output_dir/steering_bank/`.
"""

from pathlib import Path

from trl_explore import OGERASEConfig, OGERASETrainer
from trl_explore.cli import run_training
from trl_explore.data.training_data import DataArguments as ScriptArguments  # the script's data options

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "oger_ase_smollm2_ladder_cpu.yaml"


def bank_summary(trainer, script_args, dataset):
    return [f"bank in {trainer.args.output_dir}/steering_bank: {trainer.ase.bank}"]


if __name__ == "__main__":
    run_training(OGERASETrainer, OGERASEConfig, RECIPE, "train_oger_ase", script_cls=ScriptArguments,
                 after_train=bank_summary)
