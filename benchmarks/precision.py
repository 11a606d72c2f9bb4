"""Step time of the CPU bfloat16 tier against float32, per trainer, in one run (issue 28, item 1).

Run: ``python benchmarks/precision.py [--kinds grpo,oger,ase,oger_ase] [--steps 3] [--threads 1]
[--time-budget 1500]`` (about 25 minutes on one core of a quiet host with the embedded SmolLM2 policy; one training
process at a time, each up to ~10 GB). ``--rollout-only`` runs the rollout comparison alone (about 2 minutes).

Each trainer is built as its CPU recipe builds it (``recipes/*_smollm2_ladder_cpu.yaml``, the arithmetic ladder, the
embedded policy and embedder), with the held-out evaluation, completion logs and checkpoints off, and trained
``--steps`` optimizer steps in a fresh process, once with ``cpu_precision=float32`` and once with
``cpu_precision=bfloat16``, back to back (the two precisions of a trainer run one after the other, so a change in
the host's load hits both). ``grpo`` is plain TRL: ``trl.GRPOTrainer`` with the main job's batch (4 prompts x 4
rollouts, at most 96 new tokens) and reward (``MathVerifyReward``, the main job's ``R_m``), ``bf16=False`` (float32,
TRL's CPU default) against ``bf16=True`` (Accelerate's autocast for the loss; TRL's rollouts then get it per
forward only, from Accelerate's wrapper of ``model.forward``, once the model is prepared); ``gradient_checkpointing``
off as in the recipes. Step 1 is warm-up (allocator, first-call costs) and is dropped; the step time is the wall
time between ``on_step_begin`` and ``on_step_end`` (generation, rewards, scoring, loss, backward, optimizer step).

The main job's step (``oger`` in bfloat16, its recipe) is compared with plain TRL GRPO in float32 at the same
batch: target at most 0.5 (issue 28).

The rollout comparison (before the trainers, or alone with ``--rollout-only``): HF ``generate`` of the main job's
batch (4 ladder prompts x 4 rollouts, 64 forced new tokens) in float32, with Accelerate's per-forward
autocast (what TRL's rollouts get under ``bf16=True``) and with one autocast around the whole call (what the driver
does), interleaved, ``--rollout-repeats`` times.

Results: ``benchmarks/results/precision_cpu.{json,md}`` (rewritten after every run: an interrupted run keeps the
finished ones).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")

ROOT = pathlib.Path(__file__).resolve().parent.parent
RECIPES = {"oger": "oger_smollm2_ladder_cpu.yaml", "ase": "ase_grpo_smollm2_ladder_cpu.yaml",
           "oger_ase": "oger_ase_smollm2_ladder_cpu.yaml", "grpo": "oger_smollm2_ladder_cpu.yaml"}
PRECISIONS = ("float32", "bfloat16")


def _trainer_classes(kind):
    from trl_explore import ASEConfig, ASEGRPOTrainer, OGERASEConfig, OGERASETrainer, OGERConfig, OGERTrainer

    return {"oger": (OGERTrainer, OGERConfig), "ase": (ASEGRPOTrainer, ASEConfig),
            "oger_ase": (OGERASETrainer, OGERASEConfig)}[kind]


def build_trainer(kind: str, precision: str, steps: int, output_dir: str, shared: bool = False):
    """The trainer of ``kind`` as its CPU recipe builds it, for ``steps`` steps in ``precision``; ``shared`` turns
    on ``share_prompt_forward`` (the package's trainers only)."""
    from trl import GRPOConfig, GRPOTrainer, ModelConfig

    from trl_explore.cli import parse_args
    from trl_explore.data.training_data import DataArguments, load_training_data
    from trl_explore.evaluation.heldout import HeldoutEvalArguments

    recipe = ROOT / "recipes" / RECIPES[kind]
    common = ["--max_steps", str(steps), "--output_dir", output_dir, "--log_completions", "false",
              "--save_strategy", "no", "--report_to", "none"]
    if shared and kind == "grpo":
        raise ValueError("share_prompt_forward is the package's option; plain TRL GRPO has no such field")
    common += ["--share_prompt_forward", "true"] if shared else []
    if kind == "grpo":  # plain TRL at the main job's batch: read the GRPO fields of the main job's recipe
        from trl_explore import OGERConfig

        data, _, oger_args, _ = parse_args((DataArguments, HeldoutEvalArguments, OGERConfig, ModelConfig), recipe,
                                           ["--config", str(recipe), *common, "--cpu_precision", "float32"])
        fields = {f: getattr(oger_args, f) for f in (
            "per_device_train_batch_size", "num_generations", "max_completion_length", "temperature",
            "learning_rate", "beta", "logging_steps", "seed", "gradient_checkpointing", "max_steps", "save_strategy",
            "report_to", "log_completions")}
        args = GRPOConfig(output_dir=output_dir, use_cpu=True, bf16=precision == "bfloat16", **fields)
        dataset = load_training_data(data, args.max_completion_length, offline=False)
        from trl_explore.defaults import resolve_model_path
        from trl_explore.driver.config import default_verifier

        return GRPOTrainer(resolve_model_path("embedded"), reward_funcs=[default_verifier(args)], args=args,
                           train_dataset=dataset)
    trainer_cls, config_cls = _trainer_classes(kind)
    if kind == "ase":  # its recipe carries the example script's own option (measure_rollout_overhead)
        import dataclasses

        DataArguments = dataclasses.make_dataclass(  # noqa: N806
            "ASEScriptArguments", [("measure_rollout_overhead", bool, dataclasses.field(default=False))],
            bases=(DataArguments,))
    data, _, args, _ = parse_args((DataArguments, HeldoutEvalArguments, config_cls, ModelConfig), recipe,
                                  ["--config", str(recipe), *common, "--cpu_precision", precision])
    offline = hasattr(args, "offline_completions_column")
    dataset = load_training_data(data, args.max_completion_length, offline=offline,
                                 offline_column=getattr(args, "offline_completions_column", ""))
    return trainer_cls("embedded", args=args, train_dataset=dataset)


def run_one(kind: str, precision: str, steps: int, shared: bool = False) -> dict:
    """Train ``steps`` steps in this process; per-step wall times, TRL's step_time, peak RSS. The result's
    ``precision`` reads ``"<precision>+shared"`` with ``shared`` (the shared-prompt forward)."""
    import torch
    from transformers import TrainerCallback

    times: list[float] = []
    cpu_times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.start, self.cpu_start = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kwargs):
            times.append(time.perf_counter() - self.start)
            cpu_times.append(time.process_time() - self.cpu_start)

    with tempfile.TemporaryDirectory() as tmp:
        trainer = build_trainer(kind, precision, steps, tmp, shared)
        trainer.add_callback(StepTimer())
        note = getattr(trainer, "precision_note", f"plain TRL, bf16={trainer.args.bf16}")
        trainer.train()
    history = trainer.state.log_history
    return {"kind": kind, "precision": precision + ("+shared" if shared else ""), "bf16": bool(trainer.args.bf16),
            "note": note,
            "step_seconds": times, "step_cpu_seconds": cpu_times,
            "trl_step_time": [h["step_time"] for h in history if "step_time" in h],
            "mean_length": [h.get("completions/mean_length") for h in history if "loss" in h],
            "entropy": [h.get("entropy") for h in history if "loss" in h],
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "threads": torch.get_num_threads()}


def rollout_comparison(repeats: int, tokens: int) -> dict:
    """HF ``generate`` of 16 rollouts x ``tokens`` forced new tokens: float32, Accelerate's per-forward autocast,
    one autocast around the call; interleaved, seconds per call."""
    import torch
    from accelerate.utils import convert_outputs_to_fp32
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_explore.data.ladder import ladder_dataset
    from trl_explore.defaults import resolve_model_path

    path = resolve_model_path("embedded")
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    rows = ladder_dataset(levels=["one_digit", "two_digit"])["train"].select(range(4))
    texts = [tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in rows]
    batch = tok([t for t in texts for _ in range(4)], return_tensors="pt", padding=True, add_special_tokens=False)
    plain_forward = model.forward
    wrapped = convert_outputs_to_fp32(torch.autocast("cpu", dtype=torch.bfloat16)(plain_forward))

    def generate(variant):
        model.forward = wrapped if variant != "float32" else plain_forward
        outer = torch.autocast("cpu", dtype=torch.bfloat16, enabled=variant == "one autocast around generate")
        torch.manual_seed(0)
        start, cpu_start = time.perf_counter(), time.process_time()
        with outer, torch.no_grad():
            model.generate(**batch, do_sample=True, max_new_tokens=tokens, min_new_tokens=tokens,
                           pad_token_id=tok.pad_token_id, top_k=0, top_p=1.0, temperature=1.0)
        return time.perf_counter() - start, time.process_time() - cpu_start

    variants = ("float32", "autocast per forward (Accelerate)", "one autocast around generate")
    generate("float32")  # warm-up
    seconds, cpu_seconds = {v: [] for v in variants}, {v: [] for v in variants}
    for _ in range(repeats):
        for v in variants:
            wall, cpu = generate(v)
            seconds[v].append(wall)
            cpu_seconds[v].append(cpu)
    model.forward = plain_forward
    return {"rollouts": 16, "new_tokens": tokens, "seconds": seconds, "cpu_seconds": cpu_seconds}


MATMULS = ((2048, 576, 1536), (16, 576, 1536), (16, 576, 49152), (640, 576, 49152))
"""``(m, k, n)`` of SmolLM2's products: an MLP product of a training batch, one of a decoding step of 16 rows, the
LM head of a decoding step, the LM head over a step's completion tokens."""


def matmul_comparison(repeats: int = 5) -> dict:
    """Milliseconds of CPU time of ``[m, k] @ [k, n]`` in float32, in bfloat16 (both operands bfloat16) and under
    autocast with a float32 weight (cast at every call), on the run's threads (``--threads``)."""
    import torch

    def ms(f):
        f()
        start = time.process_time()
        for _ in range(repeats):
            f()
        return (time.process_time() - start) / repeats * 1000

    out = {}
    for m, k, n in MATMULS:
        a, w = torch.randn(m, k), torch.randn(n, k)
        ab, wb = a.bfloat16(), w.bfloat16()

        def autocast(a=a, w=w):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                torch.nn.functional.linear(a, w)

        out[f"{m}x{k} @ {k}x{n}"] = {"float32": ms(lambda a=a, w=w: torch.nn.functional.linear(a, w)),
                                     "bfloat16": ms(lambda ab=ab, wb=wb: torch.nn.functional.linear(ab, wb)),
                                     "autocast, weight cast each call": ms(autocast)}
    return out


def child(a) -> None:
    import torch

    torch.set_num_threads(a.threads)
    if a.one:
        precision, _, variant = a.one[1].partition("+")
        result = run_one(a.one[0], precision, a.steps, shared=variant == "shared")
    else:
        result = {**rollout_comparison(a.rollout_repeats, a.tokens), "matmuls_ms": matmul_comparison()}
    pathlib.Path(a.result).write_text(json.dumps(result))


def summary(runs: list[dict]) -> dict:
    """Ratios of the mean measured step (steps 2+), in wall seconds and in CPU seconds of the process."""
    out = {}
    for clock, key in (("wall", "step_seconds"), ("cpu", "step_cpu_seconds")):
        step = {(r["kind"], r["precision"]): statistics.mean(r[key][1:] or r[key]) for r in runs}
        out[f"bf16_over_fp32_{clock}"] = {
            kind: step[(kind, "bfloat16")] / step[(kind, "float32")] for kind in dict.fromkeys(r["kind"] for r in runs)
            if (kind, "bfloat16") in step and (kind, "float32") in step}
        if ("oger", "bfloat16") in step and ("grpo", "float32") in step:
            out[f"main_job_bf16_over_trl_grpo_fp32_{clock}"] = step[("oger", "bfloat16")] / step[("grpo", "float32")]
        if ("oger", "bfloat16+shared") in step and ("grpo", "float32") in step:
            out[f"main_job_bf16_shared_over_trl_grpo_fp32_{clock}"] = (
                step[("oger", "bfloat16+shared")] / step[("grpo", "float32")])
    return out


def markdown(report: dict) -> str:
    lines = [f"# CPU bfloat16 tier: step times ({report['date']}, {report['threads']} thread(s), host load average "
             f"{report['load_before']} before, {report['load_after']} after)", ""]
    if report.get("rollout"):
        ro = report["rollout"]
        cpu = ro.get("cpu_seconds", {})
        base = statistics.median(ro["seconds"]["float32"])
        cpu_base = statistics.median(cpu["float32"]) if cpu else None
        lines += [f"## HF generate, {ro['rollouts']} rollouts x {ro['new_tokens']} forced new tokens", "",
                  "| variant | wall s per call (all) | / float32 | CPU s per call (all) | / float32 |",
                  "|---|---|---|---|---|"]
        for v, s in ro["seconds"].items():
            c = cpu.get(v)
            lines.append(f"| {v} | {', '.join(f'{x:.2f}' for x in s)} | {statistics.median(s) / base:.2f} | "
                         + (f"{', '.join(f'{x:.2f}' for x in c)} | {statistics.median(c) / cpu_base:.2f} |" if c
                            else "| |"))
        lines.append("")
    if report.get("rollout") and report["rollout"].get("matmuls_ms"):
        mm = report["rollout"]["matmuls_ms"]
        lines += [f"## Matmuls, {report['threads']} thread(s), CPU ms per call (summed over threads)", "",
                  "| product | " + " | ".join(next(iter(mm.values()))) + " | bfloat16 / float32 |",
                  "|---|" + "---|" * (len(next(iter(mm.values()))) + 1)]
        for name, v in mm.items():
            lines.append(f"| {name} | " + " | ".join(f"{x:.1f}" for x in v.values())
                         + f" | {v['bfloat16'] / v['float32']:.2f} |")
        lines.append("")
    if report["runs"]:
        lines += ["## Training steps (one process per run; step 1 is warm-up)", "",
                  "Wall seconds, and CPU seconds of the training process (what a loaded host disturbs least).", "",
                  "| trainer | precision | wall s/step, each | CPU s/step, each | peak RSS GB | mean length |",
                  "|---|---|---|---|---|---|"]
        for r in report["runs"]:
            lengths = [x for x in r["mean_length"] if x is not None]
            lines.append(f"| {r['kind']} | {r['precision']} | {', '.join(f'{x:.1f}' for x in r['step_seconds'])} | "
                         f"{', '.join(f'{x:.1f}' for x in r['step_cpu_seconds'])} | {r['peak_rss_gb']:.1f} | "
                         f"{statistics.mean(lengths) if lengths else float('nan'):.1f} |")
        s = report["summary"]
        lines += ["", "| ratio (mean of steps 2+) | wall | CPU |", "|---|---|---|"]
        for kind, ratio in s["bf16_over_fp32_wall"].items():
            lines.append(f"| {kind}: bfloat16 / float32 step | {ratio:.2f} | {s['bf16_over_fp32_cpu'][kind]:.2f} |")
        if "main_job_bf16_over_trl_grpo_fp32_wall" in s:
            lines.append(f"| main job (OGER, bfloat16) / plain TRL GRPO float32 step (target <= 0.5) | "
                         f"{s['main_job_bf16_over_trl_grpo_fp32_wall']:.2f} | "
                         f"{s['main_job_bf16_over_trl_grpo_fp32_cpu']:.2f} |")
        if "main_job_bf16_shared_over_trl_grpo_fp32_wall" in s:
            lines.append(f"| main job (OGER, bfloat16, shared-prompt forward) / plain TRL GRPO float32 step "
                         f"(target <= 0.5) | {s['main_job_bf16_shared_over_trl_grpo_fp32_wall']:.2f} | "
                         f"{s['main_job_bf16_shared_over_trl_grpo_fp32_cpu']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kinds", default="grpo,oger,ase,oger_ase")
    p.add_argument("--runs", help="explicit order, e.g. grpo:float32,oger:bfloat16,oger:bfloat16+shared (instead "
                                  "of --kinds; '+shared': with share_prompt_forward)")
    p.add_argument("--steps", type=int, default=3, help="optimizer steps per run (the first is warm-up)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--time-budget", type=float, default=1500, help="start no run after this many seconds")
    p.add_argument("--rollout-repeats", type=int, default=2)
    p.add_argument("--tokens", type=int, default=64, help="forced new tokens of the rollout comparison")
    p.add_argument("--rollout-only", action="store_true")
    p.add_argument("--no-rollout", action="store_true")
    p.add_argument("--append", action="store_true", help="keep the runs of an earlier --out file and add these")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "precision_cpu"))
    p.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a)
        return
    start = time.perf_counter()
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "threads": a.threads,
              "platform": platform.platform(), "load_before": round(os.getloadavg()[0], 1), "runs": [],
              "rollout": None}
    if a.append and out.with_suffix(".json").is_file():
        earlier = json.loads(out.with_suffix(".json").read_text())
        report.update(runs=earlier["runs"], rollout=earlier.get("rollout"), load_before=earlier["load_before"],
                      date=earlier["date"])

    def spawn(extra):
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            result = f.name
        cmd = [sys.executable, __file__, "--child", "--result", result, "--threads", str(a.threads),
               "--steps", str(a.steps), "--rollout-repeats", str(a.rollout_repeats), "--tokens", str(a.tokens),
               *extra]
        subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        data = json.loads(pathlib.Path(result).read_text())
        os.unlink(result)
        return data

    def save():
        report["load_after"] = round(os.getloadavg()[0], 1)
        report["seconds"] = round(time.perf_counter() - start, 1)
        report["summary"] = summary(report["runs"]) if report["runs"] else {}
        out.with_suffix(".json").write_text(json.dumps(report, indent=2))
        out.with_suffix(".md").write_text(markdown(report))

    if not a.no_rollout:
        report["rollout"] = spawn([])
        save()
    if not a.rollout_only:
        runs = [r.split(":") for r in a.runs.split(",")] if a.runs else [
            (kind, precision) for kind in a.kinds.split(",") for precision in PRECISIONS]
        for kind, precision in runs:
            if time.perf_counter() - start > a.time_budget:
                print(f"time budget spent: {kind} {precision} not run")
                continue
            report["runs"].append(spawn(["--one", kind, precision]))
            save()
            print(f"{kind} {precision}: {report['runs'][-1]['step_seconds']}", flush=True)
    save()
    print(markdown(report))


if __name__ == "__main__":
    main()
