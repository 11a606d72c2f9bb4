"""Train a policy with ASE-GRPO (activation-space exploration with a bank of steering vectors).

    accelerate launch examples/train_ase_grpo.py                      # CPU demo: SmolLM2 + the arithmetic ladder
    accelerate launch --config_file accelerate_configs/multi_gpu.yaml examples/train_ase_grpo.py \
        --config recipes/ase_grpo_qwen3_1.7b_base.yaml                 # the paper's setup

Without `--config`, the CPU demo recipe `recipes/ase_grpo_smollm2_ladder_cpu.yaml` is used; any option given on the
command line overrides the recipe. `--help` lists the data and ASE-GRPO options first, e.g. `--bank_control
shuffled_labels` for a control of the paper's Table 4 or `--loss_type dr_grpo` for ASE-Dr.GRPO. The final model goes
to `output_dir`, its vector bank (training state, not needed for deployment) to `output_dir/steering_bank/`.
"""

import time
from dataclasses import dataclass, field
from pathlib import Path

from trl_explore import ASEConfig, ASEGRPOTrainer
from trl_explore.cli import run_training
from trl_explore.data.training_data import DataArguments

RECIPE = Path(__file__).resolve().parent.parent / "recipes" / "ase_grpo_smollm2_ladder_cpu.yaml"


@dataclass
class ScriptArguments(DataArguments):
    measure_rollout_overhead: bool = field(
        default=False,
        metadata={"help": "After training, time one generation batch with and without steering (same prompts, same "
                  "length)."},
    )


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
    if trainer.ase.bank.vectors is None and trainer.ase.options.control.estimates_bank:
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


def after_train(trainer, script_args, dataset):
    lines = ["bank update: " + ", ".join(f"{k}={v:.4g}" for k, v in entry.items())
             for entry in trainer.ase.bank_diagnostics]
    lines.append(f"bank in {trainer.args.output_dir}/steering_bank: {trainer.ase.bank}")
    if script_args.measure_rollout_overhead:  # on every process: generation may gather sharded weights
        result = measure_rollout_overhead(trainer, dataset)
        lines.append("rollout time of one generation batch (s): "
                     + ", ".join(f"{k}={v:.4g}" for k, v in result.items()))
    return lines


if __name__ == "__main__":
    run_training(ASEGRPOTrainer, ASEConfig, RECIPE, "train_ase_grpo", script_cls=ScriptArguments,
                 after_train=after_train)
