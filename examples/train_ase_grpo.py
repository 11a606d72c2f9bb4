"""Train a policy with ASE-GRPO (activation-space exploration with a bank of steering vectors).

    accelerate launch examples/train_ase_grpo.py                      # CPU demo: SmolLM2 + CHAMP
    accelerate launch --config_file accelerate_configs/multi_gpu.yaml examples/train_ase_grpo.py \
        --config recipes/ase_grpo_qwen3_1.7b_base.yaml                 # the paper's setup

Without `--config`, the CPU demo recipe `recipes/ase_grpo_smollm2_champ_cpu.yaml` is used; any option given on
the command line overrides the recipe. Every `ASEConfig` / `GRPOConfig` / `ModelConfig` field is an option, e.g.
`--bank_control shuffled_labels` for a control of the paper's Table 4 or `--loss_type dr_grpo` for ASE-Dr.GRPO.
The final model goes to `output_dir`, its vector bank (training state, not needed for deployment) to
`output_dir/steering_bank/`.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from trl import ModelConfig, TrlParser, get_peft_config

from trl_explore import ASEConfig, ASEGRPOTrainer
from trl_explore.data.difficulty import PassRateFilterArguments
from trl_explore.hub import check_hub_access
from trl_explore.reporting import finish_run, silence_trl_completion_panel

DEMO_RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "ase_grpo_smollm2_champ_cpu.yaml"


@dataclass
class ScriptArguments(PassRateFilterArguments):
    dataset_name: str = field(
        default="champ",
        metadata={
            "help": "'champ' (the embedded CHAMP problems), a folder saved with `save_to_disk`, or a Hub dataset id "
            "(e.g. BytedTsinghua-SIA/DAPO-Math-17k). Rows need `prompt` and `answer` (verl's "
            "`reward_model.ground_truth` is mapped to `answer`)."
        },
    )
    dataset_train_split: str = field(default="train", metadata={"help": "Split to train on."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N prompts."})
    dedupe_prompts: bool = field(
        default=True,
        metadata={"help": "Drop repeated prompts (the Hub copy of DAPO-Math-17k holds its 17k prompts ~100 times)."},
    )
    max_prompt_tokens: int | None = field(
        default=None, metadata={"help": "Drop prompts longer than this many tokens (chat template applied)."}
    )
    measure_rollout_overhead: bool = field(
        default=False,
        metadata={
            "help": "After training, time one generation batch with and without steering (same prompts, same length)."
        },
    )
    completion_panel: bool = field(
        default=False,
        metadata={"help": "With log_completions: print TRL's per-step panel of completions. Off: the rows are still "
                  "saved in <output_dir>/completions/, and the last step's are printed as one table at the end."},
    )


def _prompt_key(prompt) -> str:
    return hashlib.sha1(json.dumps(prompt, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def load_train_dataset(script_args: ScriptArguments, tokenizer=None, max_completion_length: int | None = None):
    """The training split named by the script arguments, with `prompt`, `answer` and `problem_id` columns.

    With `min_pass_rate`, only problems whose measured pass rate (graded at `max_completion_length` tokens) is in
    range are kept."""
    from trl_explore.data.loading import load_split

    dataset = load_split(script_args.dataset_name, script_args.dataset_train_split)
    if "answer" not in dataset.column_names and "reward_model" in dataset.column_names:  # verl parquet layout
        dataset = dataset.map(lambda row: {"answer": str(row["reward_model"]["ground_truth"])})
    if "problem_id" not in dataset.column_names:
        dataset = dataset.map(lambda row: {"problem_id": _prompt_key(row["prompt"])[:16]})
    dataset = dataset.select_columns(["prompt", "answer", "problem_id"])  # the offline trajectories are not used
    if script_args.dedupe_prompts:
        seen: set[str] = set()

        def first_time(row) -> bool:
            key = _prompt_key(row["prompt"])
            if key in seen:
                return False
            seen.add(key)
            return True

        dataset = dataset.filter(first_time)  # single process: `seen` is shared across rows
    if script_args.max_prompt_tokens is not None and tokenizer is not None:
        def short_enough(row) -> bool:
            ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
            ids = ids["input_ids"] if isinstance(ids, dict) else ids
            return len(ids) <= script_args.max_prompt_tokens

        dataset = dataset.filter(short_enough)
    dataset = script_args.filter_dataset(dataset, max_completion_length)
    if len(dataset) == 0:
        raise ValueError(f"no training prompt left in {script_args.dataset_name!r} after filtering")
    if script_args.max_train_samples is not None:
        dataset = dataset.select(range(min(script_args.max_train_samples, len(dataset))))
    return dataset


def measure_rollout_overhead(trainer: ASEGRPOTrainer, dataset, repeats: int = 3) -> dict:
    """Time the HF generation of one generation batch with and without ASE (steering hook + behaviour log-probs).

    Same prompts, both at exactly `max_completion_length` tokens (`min_new_tokens` set to it), runs alternated,
    after one warm-up each. Uses the trained bank, or random unit vectors when the bank is still empty (the cost
    of the hook does not depend on the vectors).
    """
    import torch
    from trl import GRPOTrainer

    n = trainer.num_generations
    num_prompts = max(trainer.args.generation_batch_size // trainer.accelerator.num_processes // n, 1)
    prompts = [row["prompt"] for row in dataset.select(range(min(num_prompts, len(dataset)))) for _ in range(n)]
    prompt_ids, _, _ = trainer._tokenize_prompts(prompts)
    bank_state = trainer.ase.bank.state_dict()
    if trainer.ase.bank.vectors is None and trainer.args.bank_control != "unstructured_random":
        trainer.ase.bank.load_state_dict({**bank_state, "active": torch.nn.functional.normalize(
            torch.randn(trainer.ase.bank.num_vectors, trainer.ase.bank.hidden_size), dim=1)})
    trainer.model.train()  # training mode: the trainer steers
    config = trainer.generation_config
    saved_min = config.min_new_tokens
    config.min_new_tokens = trainer.max_completion_length
    runs = {"unsteered": lambda: GRPOTrainer._generate_single_turn(trainer, prompt_ids, None, {}, n),
            "steered": lambda: trainer._generate_single_turn(prompt_ids, None, {}, n)}
    times = {name: [] for name in runs}
    try:
        for repeat in range(repeats + 1):
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                if repeat > 0:  # the first round warms up
                    times[name].append(time.perf_counter() - start)
    finally:
        config.min_new_tokens = saved_min
        trainer.ase.bank.load_state_dict(bank_state)
    mean = {name: sum(values) / len(values) for name, values in times.items()}
    ratio = mean["steered"] / mean["unsteered"]
    return {"rows": len(prompts), "tokens": trainer.max_completion_length, **mean, "ratio": ratio}


def main(script_args: ScriptArguments, training_args: ASEConfig, model_args: ModelConfig) -> ASEGRPOTrainer:
    start = time.perf_counter()
    check_hub_access(training_args)  # with --push_to_hub: token and Hub checked before any data or model
    if not script_args.completion_panel:
        silence_trl_completion_panel()
    model_name = model_args.model_name_or_path or "embedded"
    dtype = model_args.dtype if model_args.dtype in ("auto", None) else getattr(__import__("torch"), model_args.dtype)
    training_args.model_init_kwargs = {
        "revision": model_args.model_revision,
        "attn_implementation": model_args.attn_implementation,
        "dtype": dtype,
    }
    tokenizer = None
    if script_args.max_prompt_tokens is not None:
        from transformers import AutoTokenizer

        from trl_explore.defaults import resolve_model_path

        tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(model_name))
    dataset = load_train_dataset(script_args, tokenizer, training_args.max_completion_length)
    trainer = ASEGRPOTrainer(
        model_name, args=training_args, train_dataset=dataset, peft_config=get_peft_config(model_args)
    )
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    bank_lines = tuple("bank update: " + ", ".join(f"{k}={v:.4g}" for k, v in entry.items())
                       for entry in trainer.ase.bank_diagnostics)
    finish_run(trainer, training_args.output_dir, script_args.dataset_name, "train_ase_grpo", ("ase/",),
               time.perf_counter() - start,
               lines=(*bank_lines, f"bank in {training_args.output_dir}/steering_bank: {trainer.ase.bank}"))
    if script_args.measure_rollout_overhead:  # on every process: generation may gather sharded weights
        result = measure_rollout_overhead(trainer, dataset)
        if trainer.accelerator.is_main_process:
            print("[train_ase_grpo] rollout time of one generation batch (s): " + ", ".join(
                f"{k}={v:.4g}" for k, v in result.items()))
    return trainer


if __name__ == "__main__":
    argv = sys.argv[1:]
    if not any(a == "--config" or a.startswith("--config=") for a in argv):
        argv = ["--config", str(DEMO_RECIPE), *argv]
    parser = TrlParser((ScriptArguments, ASEConfig, ModelConfig))
    trainer = main(*parser.parse_args_and_config(args=argv))
    trainer.accelerator.end_training()  # end the process group before exit (a ZeRO-3 run was seen to abort without it)
