"""Train a policy with OGER (offline-guided exploration reward) on a multi-teacher offline dataset.

    accelerate launch examples/train_oger.py                      # CPU demo: SmolLM2 + CHAMP + MiniLM
    accelerate launch --config_file accelerate_configs/multi_gpu.yaml examples/train_oger.py \
        --config recipes/oger_qwen2.5_math_7b.yaml                 # the paper's setup

Without `--config`, the CPU demo recipe `recipes/oger_smollm2_champ_cpu.yaml` is used; any option given on
the command line overrides the recipe. Every `OGERConfig` / `GRPOConfig` / `ModelConfig` field is an option.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from trl import ModelConfig, TrlParser, get_peft_config

from trl_explore import OGERConfig, OGERTrainer
from trl_explore.data.difficulty import PassRateFilterArguments
from trl_explore.reporting import finish_run, silence_trl_completion_panel

DEMO_RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "oger_smollm2_champ_cpu.yaml"


@dataclass
class ScriptArguments(PassRateFilterArguments):
    dataset_name: str = field(
        default="champ",
        metadata={
            "help": "'champ' (the embedded CHAMP multi-teacher set, built and cached on first use), 'ladder' (the "
            "generated arithmetic ladder with four teacher styles; splits train/validation/test), a folder saved "
            "by examples/build_offline_dataset.py, or a Hub dataset id with the same columns."
        },
    )
    ladder_levels: list[str] | None = field(
        default=None,
        metadata={"help": "With dataset_name 'ladder': the levels to train on (default: all; names in "
                  "trl_explore.data.LEVELS: one_digit, two_plus_one, two_digit, two_ops, word)."},
    )
    champ_settings: list[str] | None = field(
        default=None,
        metadata={"help": "With dataset_name 'champ': the CHAMP prompt settings whose solutions are kept (default: "
                  "all 18; the first build verifies every solution, about 20 s per setting on one core)."},
    )
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N prompts."})
    min_offline_completions: int = field(
        default=0, metadata={"help": "Drop prompts with fewer offline trajectories than this (0 keeps all prompts)."}
    )
    completion_panel: bool = field(
        default=False,
        metadata={"help": "With log_completions: print TRL's per-step panel of completions. Off: the rows are still "
                  "saved in <output_dir>/completions/, and the last step's are printed as one table at the end."},
    )


def load_train_dataset(script_args: ScriptArguments, training_args: OGERConfig):
    """The training split named by the script arguments (see `ScriptArguments.dataset_name`)."""
    from trl_explore.data.loading import load_split

    # teacher trajectories must fit in a completion (with its EOS), or their answer is cut off
    options = dict(max_length=training_args.max_completion_length - 1)
    if script_args.dataset_name == "champ":
        options["settings"] = script_args.champ_settings
    elif script_args.dataset_name == "ladder":
        options["levels"] = script_args.ladder_levels
    else:
        options = {}
    dataset = load_split(script_args.dataset_name, script_args.dataset_train_split, **options)
    if script_args.min_offline_completions > 0:
        column = training_args.offline_completions_column
        dataset = dataset.filter(lambda row: len(row[column]) >= script_args.min_offline_completions)
    dataset = script_args.filter_dataset(dataset, training_args.max_completion_length)
    if script_args.max_train_samples is not None:
        dataset = dataset.select(range(min(script_args.max_train_samples, len(dataset))))
    if len(dataset) == 0:
        raise ValueError(
            f"no training prompt left in {script_args.dataset_name!r} after filtering (min_offline_completions="
            f"{script_args.min_offline_completions}, min_pass_rate={script_args.min_pass_rate}; with CHAMP, teacher "
            f"trajectories must fit in max_completion_length="
            f"{training_args.max_completion_length} tokens): lower min_offline_completions or raise max_completion_length"
        )
    return dataset


def main(script_args: ScriptArguments, training_args: OGERConfig, model_args: ModelConfig) -> OGERTrainer:
    start = time.perf_counter()
    if not script_args.completion_panel:
        silence_trl_completion_panel()
    model_name = model_args.model_name_or_path or "embedded"
    dtype = model_args.dtype if model_args.dtype in ("auto", None) else getattr(__import__("torch"), model_args.dtype)
    training_args.model_init_kwargs = {
        "revision": model_args.model_revision,
        "attn_implementation": model_args.attn_implementation,
        "dtype": dtype,
    }
    trainer = OGERTrainer(
        model_name,
        args=training_args,
        train_dataset=load_train_dataset(script_args, training_args),
        peft_config=get_peft_config(model_args),
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    # "champ": the embedded CHAMP set (PyPI package champ-dataset)
    finish_run(trainer, training_args.output_dir, script_args.dataset_name, "train_oger", ("oger/",),
               time.perf_counter() - start)
    return trainer


if __name__ == "__main__":
    argv = sys.argv[1:]
    if not any(a == "--config" or a.startswith("--config=") for a in argv):
        argv = ["--config", str(DEMO_RECIPE), *argv]
    parser = TrlParser((ScriptArguments, OGERConfig, ModelConfig))
    trainer = main(*parser.parse_args_and_config(args=argv))
    trainer.accelerator.end_training()  # end the process group before exit (a ZeRO-3 run was seen to abort without it)
