"""Train a policy with GRPO and DAPO's dynamic sampling (Yu et al. 2025, arXiv 2503.14476, §3.2): groups whose rewards
all agree are refused and the batch is refilled with groups of new prompts, on the same data and with the same
held-out evaluation as the other scripts.

    accelerate launch examples/train_dynamic_sampling.py            # CPU demo: SmolLM2 + the arithmetic ladder

Without `--config`, the CPU demo recipe `recipes/dynamic_sampling_smollm2_ladder_cpu.yaml` is used; any option given
on the command line overrides the recipe. The log says how many generation rounds each batch took
(`resample/generation_rounds`, `resample/extra_completions`) and how many groups were flat before
(`dynamic_sampling/flat_group_frac`) and after (`frac_reward_zero_std_trained`).
"""

from pathlib import Path

from trl_explore import DynamicSamplingConfig, DynamicSamplingTrainer
from trl_explore.cli import run_training
from trl_explore.data.training_data import DataArguments as ScriptArguments  # the script's data options

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "dynamic_sampling_smollm2_ladder_cpu.yaml"

if __name__ == "__main__":
    run_training(DynamicSamplingTrainer, DynamicSamplingConfig, RECIPE, "train_dynamic_sampling",
                 script_cls=ScriptArguments)
