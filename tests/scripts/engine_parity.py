"""Run by tests/test_distributed_engines.py: 2 CPU processes (gloo) under one distributed engine.

    <ENGINES[ENGINE]["launch"]> tests/scripts/engine_parity.py ENGINE OUT_DIR TRAINER [TRAINER ...]

Trains each named trainer of ``TRAINERS`` in turn, 2 steps on a tiny model, under one of ``ENGINES`` (one launch per
engine) and writes ``OUT_DIR/{TRAINER}-rank{r}.json`` per trainer and process: the completions of every step, the
logged ``grad_norm`` of every step, and what each trainer keeps beside the policy (OGER: the embedder's parameter
sizes and checksum; ASE: the steering bank). The test compares every engine's files with the DDP run's.

To add a trainer to the tier, add one entry to ``TRAINERS``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# How each engine is launched (the command before the script) and what it adds to the trainer's config.
# DeepSpeed and FSDP2 use the shipped accelerate_configs/ with 2 processes, no mixed precision and gloo.
_ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--mixed_precision", "no",
               "--dynamo_backend", "no"]
ENGINES = {
    # the 2-process DDP command that works on CPU (`accelerate launch --cpu --num_processes 2` starts ONE process
    # unless MPI is set up): accelerate's MULTI_CPU with gloo
    "ddp": {"launch": [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"],
            "env": {"ACCELERATE_USE_CPU": "true"}, "config": {"use_cpu": True}},
    # ddp_backend="gloo": with no GPU accelerate otherwise picks no backend and counts ONE process
    "zero2": {"launch": [*_ACCELERATE, "--config_file", "accelerate_configs/zero2.yaml"], "env": {},
              "config": {"ddp_backend": "gloo"}},
    "zero3": {"launch": [*_ACCELERATE, "--config_file", "accelerate_configs/zero3.yaml"], "env": {},
              "config": {"ddp_backend": "gloo"}},
    # fsdp2.yaml turns on cpu_ram_efficient_loading: while it is on, transformers leaves models uninitialised (older
    # versions: on meta) on rank 1, to be filled by FSDP; the OGER embedder must load outside it.
    # See _fsdp_on_cpu_state for the private state FSDP needs on CPU.
    "fsdp2": {"launch": [*_ACCELERATE, "--config_file", "accelerate_configs/fsdp2.yaml"], "env": {},
              "config": {"accelerator_config": {"use_configured_state": True}}},
}


def launch_command(engine: str, out: Path, port: int) -> tuple[list[str], dict]:
    """The command that runs every trainer of ``TRAINERS`` under ``engine``, and the environment it adds."""
    launch = ENGINES[engine]["launch"]
    port_flag = "--master_port" if "torch.distributed.run" in launch else "--main_process_port"
    return [*launch, port_flag, str(port), __file__, engine, str(out), *TRAINERS], ENGINES[engine]["env"]


def _grpo():
    from trl import GRPOConfig, GRPOTrainer

    from trl_explore.testing import doubling_dataset, parity_reward

    return GRPOTrainer, GRPOConfig, doubling_dataset(), {"reward_funcs": [parity_reward]}, {
        "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 8}


def _oger():
    from trl_explore import OGERConfig, OGERTrainer
    from trl_explore.testing import teacher_math_dataset

    # each process holds one whole group of 4 (OGER replaces within groups); the default rewards (R_m + R_OGER)
    return OGERTrainer, OGERConfig, teacher_math_dataset(), {}, {
        "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 8,
        "embedding_model": "embedded"}


def _ase():
    from trl_explore import ASEConfig, ASEGRPOTrainer
    from trl_explore.testing import doubling_dataset, parity_reward

    # a group of 6 split 3 + 3 over the processes (ASE gathers readouts and rewards for one bank)
    return ASEGRPOTrainer, ASEConfig, doubling_dataset(), {"reward_funcs": [parity_reward]}, {
        "per_device_train_batch_size": 3, "num_generations": 6, "num_vectors": 2, "pca_dim": 8, "kmeans_n_init": 2,
        "max_completion_length": 8, "min_pairs_per_cluster": 1}


def _oger_ase():
    from trl_explore import OGERASEConfig, OGERASETrainer, OGERRewardFunction
    from trl_explore.testing import parity_reward, teacher_math_dataset

    # whole groups of 4 per process (OGER), 2 routes of 2 rollouts, one bank from both processes' pairs (ASE)
    return OGERASETrainer, OGERASEConfig, teacher_math_dataset(), {
        "reward_funcs": [parity_reward, OGERRewardFunction(verifier=parity_reward)]}, {
        "per_device_train_batch_size": 4, "num_generations": 4, "max_completion_length": 8,
        "embedding_model": "embedded", "num_vectors": 1, "pca_dim": 8, "kmeans_n_init": 2, "min_pairs_per_cluster": 1}


# name -> a function returning (trainer class, config class, dataset, trainer kwargs, config kwargs)
TRAINERS = {"grpo": _grpo, "oger": _oger, "ase": _ase, "oger_ase": _oger_ase}


def _fsdp_on_cpu_state():
    """Make accelerate enable FSDP on CPU processes (gloo).

    Accelerate 1.15 turns FSDP on only for multi-device distributed types (MULTI_GPU, MULTI_XPU, ...): with
    ``use_cpu=True`` an FSDP config silently runs DDP, with ``use_cpu=False`` and no accelerator it runs without any
    distribution. No documented switch changes that, so this sets accelerate's shared (private) ``distributed_type``
    of an initialised ``PartialState`` to MULTI_GPU before the config is built, and the config reuses that state
    (``accelerator_config={"use_configured_state": True}``, documented). Test-only: GPU users need none of this.
    """
    from accelerate import PartialState
    from accelerate.utils import DistributedType

    state = PartialState(backend="gloo")
    state.distributed_type = DistributedType.MULTI_GPU  # private state: see the docstring


def _parameter_summary(module) -> dict:
    """Sizes and a checksum of a module's parameters as this process holds them (a ZeRO-3 partition is (0,))."""
    params = list(module.parameters())
    return {"numel": sum(p.numel() for p in params), "shapes": [list(p.shape) for p in params[:3]],
            "abs_sum": float(sum(p.detach().double().abs().sum() for p in params)),
            "devices": sorted({str(p.device) for p in params})}


def _train(trainer_name: str, model, tokenizer, engine: str, out: Path):
    """Train ``trainer_name`` for 2 steps; return the trainer and this process's record."""
    trainer_cls, config_cls, dataset, trainer_kwargs, config_kwargs = TRAINERS[trainer_name]()
    args = config_cls(
        output_dir=str(out / "run"), max_steps=2, learning_rate=1e-3, logging_steps=1, report_to="none",
        save_strategy="no", bf16=False, seed=0, log_completions=False, **config_kwargs, **ENGINES[engine]["config"],
    )
    completions = []

    class Recording(trainer_cls):
        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            ids, mask = output["completion_ids"].tolist(), output["completion_mask"].tolist()
            completions.append([[t for t, m in zip(row, row_mask) if m] for row, row_mask in zip(ids, mask)])
            return output

    trainer = Recording(model, args=args, train_dataset=dataset, processing_class=tokenizer, **trainer_kwargs)
    distributed_type = str(trainer.accelerator.distributed_type)
    trainer.train()
    record = {
        "distributed_type": distributed_type,
        "completions": completions,
        "grad_norm": [e["grad_norm"] for e in trainer.state.log_history if "grad_norm" in e],
    }
    if hasattr(trainer, "oger"):
        record["embedder"] = _parameter_summary(trainer.oger.encoder.model)
    if hasattr(trainer, "ase"):
        record["bank"] = None if trainer.ase.bank.vectors is None else trainer.ase.bank.vectors.tolist()
        record["bank_updates"] = trainer.ase.bank.num_updates
    return trainer, record


def main(engine: str, out: Path, trainer_names: list[str]) -> None:
    """Train each trainer in turn in this process (one launch per engine: start-up dominates a launch)."""
    from transformers import AutoTokenizer

    from trl_explore.defaults import default_policy_path
    from trl_explore.testing import make_tiny_causal_lm

    tokenizer = AutoTokenizer.from_pretrained(default_policy_path())
    # every model before the first config: once a ZeRO-3 config exists, transformers builds models through
    # zero.Init (other initial weights)
    models = [make_tiny_causal_lm(tokenizer) for _ in trainer_names]
    if engine == "fsdp2":
        _fsdp_on_cpu_state()
    for name, model in zip(trainer_names, models):
        trainer, record = _train(name, model, tokenizer, engine, out)
        (out / f"{name}-rank{trainer.accelerator.process_index}.json").write_text(json.dumps(record))
    trainer.accelerator.end_training()  # end the process group before exit (a ZeRO-3 run was seen to abort without it)


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), sys.argv[3:])
