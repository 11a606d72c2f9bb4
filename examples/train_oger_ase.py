"""Train a policy with OGER and ASE-GRPO composed: hybrid groups of steered rollouts and teacher trajectories.

    accelerate launch examples/train_oger_ase.py                      # CPU demo: SmolLM2 + CHAMP + MiniLM
    accelerate launch --config_file accelerate_configs/zero2.yaml examples/train_oger_ase.py \
        --config recipes/oger_ase_qwen2.5_math_1.5b.yaml               # paper-scale setup (8 GPUs, vLLM)

Without `--config`, the CPU demo recipe `recipes/oger_ase_smollm2_champ_cpu.yaml` is used; any option given on the
command line overrides the recipe. Every `OGERASEConfig` field (all of `OGERConfig` and `ASEConfig`, plus
`include_offline_in_bank`) and every `ModelConfig` field is an option. The data is OGER's (prompts with their
teacher trajectories, see `examples/train_oger.py`). The final model goes to `output_dir`, the vector bank to
`output_dir/steering_bank/`.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from trl import ModelConfig, TrlParser, get_peft_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_oger import ScriptArguments, load_train_dataset  # noqa: E402

from trl_explore import OGERASEConfig, OGERASETrainer  # noqa: E402
from trl_explore.hub import check_hub_access  # noqa: E402
from trl_explore.reporting import finish_run, silence_trl_completion_panel  # noqa: E402

DEMO_RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "oger_ase_smollm2_champ_cpu.yaml"


def main(script_args: ScriptArguments, training_args: OGERASEConfig, model_args: ModelConfig) -> OGERASETrainer:
    start = time.perf_counter()
    check_hub_access(training_args)  # with --push_to_hub: token and Hub checked before any data or model
    if not script_args.completion_panel:
        silence_trl_completion_panel()
    model_name = model_args.model_name_or_path or "embedded"
    dtype = model_args.dtype if model_args.dtype in ("auto", None) else getattr(__import__("torch"), model_args.dtype)
    training_args.model_init_kwargs = {
        "revision": model_args.model_revision, "attn_implementation": model_args.attn_implementation, "dtype": dtype,
    }
    trainer = OGERASETrainer(
        model_name, args=training_args, train_dataset=load_train_dataset(script_args, training_args),
        peft_config=get_peft_config(model_args),
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    finish_run(trainer, training_args.output_dir, script_args.dataset_name, "train_oger_ase", ("oger/", "ase/"),
               time.perf_counter() - start, lines=(f"bank in {training_args.output_dir}/steering_bank: {trainer.ase.bank}",))
    return trainer


if __name__ == "__main__":
    argv = sys.argv[1:]
    if not any(a == "--config" or a.startswith("--config=") for a in argv):
        argv = ["--config", str(DEMO_RECIPE), *argv]
    parser = TrlParser((ScriptArguments, OGERASEConfig, ModelConfig))
    trainer = main(*parser.parse_args_and_config(args=argv))
    trainer.accelerator.end_training()  # end the process group before exit
