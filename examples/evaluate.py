"""Evaluate a policy in the papers' protocols: tables, per-sample files, pass@k curves, sweeps.

    python examples/evaluate.py                                   # the main job's checkpoint on held-out CHAMP, k = 8
    python examples/evaluate.py --benchmarks ladder               # ... on the ladder's held-out test split
    python examples/evaluate.py --model_name_or_path embedded     # the base SmolLM2
    python examples/evaluate.py --model_name_or_path me/oger-qwen-7b --protocol oger \
        --benchmarks aime2024 aime2025 amc minerva olympiadbench math500 arc_challenge gpqa_diamond mmlu_pro
    python examples/evaluate.py --benchmarks aime2024 --benchmark_files aime2024=data/aime_2024.jsonl   # no Hub
    python examples/evaluate.py --model_name_or_path outputs/my-run --dataset_name my_problems.jsonl  # your own data
    python examples/evaluate.py --temperatures 0.1 0.2 0.3 0.4 0.5 0.6 0.7 0.8 0.9 1.0   # OGER App. E (pass@8)
    python examples/evaluate.py --protocol ase --steering_bank out/ase-run/steering_bank  # ASE ^S with a saved bank
    python examples/evaluate.py --steering_build_from champ:train --steering_num_clusters 3 4 \
        --steering_fractions 0.25 0.5 --steering_alphas 0.25 0.5    # ASE App. D sweep over (K, f, alpha)

`--model_name_or_path main` (the default) is the main job's output folder (the `output_dir` of its recipe,
`recipes/oger_smollm2_ladder_cpu.yaml`: `outputs/oger-smollm2-ladder`) when it holds a saved model, else the
embedded base SmolLM2 (a warning says so). Writes to `--output_dir`
(default `outputs/eval/<model>`): `samples.jsonl`, `samples.parquet`, `summary.json`, `results.md`,
`pass_at_k.png`, and with sweeps `temperature_sweep.json` / `.png` / `temperature_samples.parquet`,
`steering_sweep.json` / `.md` / `steering_samples.parquet`. Finished batches are kept in `<output_dir>/partial/`
while the run lasts: after a kill, the same command with `--resume` generates only the missing batches.
"""

from __future__ import annotations

import json
import logging
import pathlib
import re
import shutil
import time
from dataclasses import dataclass, field

import yaml

from trl_explore.cli import run_script

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
# the main job is examples/train_oger.py on its default recipe; its output folder is that recipe's output_dir
MAIN_JOB_RECIPE = REPO_ROOT / "recipes" / "oger_smollm2_ladder_cpu.yaml"
MAIN_JOB_OUTPUT = yaml.safe_load(MAIN_JOB_RECIPE.read_text())["output_dir"]


@dataclass
class EvalArguments:
    """Options of `examples/evaluate.py` (each is also a command-line flag)."""

    model_name_or_path: str = field(
        default="main",
        metadata={"help": "Folder, Hub id, 'embedded' (base SmolLM2), or 'main' (the main job's checkpoint "
                  f"{MAIN_JOB_OUTPUT}, else the base SmolLM2)."},
    )
    benchmarks: list[str] = field(
        default_factory=lambda: ["champ"],
        metadata={"help": "Benchmarks: ladder (the ladder's held-out test split, all levels; the main job's task), "
                  "champ (held-out CHAMP, the CHAMP recipe's set), aime2024, aime2025, amc, math500, minerva, "
                  "olympiadbench, arc_challenge, gpqa_diamond, mmlu_pro, bbh."},
    )
    dataset_name: str | None = field(
        default=None,
        metadata={"help": "Your own data set in the training format (prompt, answer, optional problem_id): a "
                  ".jsonl/.json/.parquet/.csv file, a save_to_disk folder or a Hub id, evaluated with its own prompts "
                  "as the benchmark 'own' (alone, unless --benchmarks names others too, e.g. 'own champ')."},
    )
    dataset_split: str = field(default="test", metadata={"help": "The split of --dataset_name (a file has one)."})
    benchmark_files: list[str] = field(
        default_factory=list,
        metadata={"help": "Local files in the Hub schema, as NAME=PATH (.jsonl/.json/.parquet), for machines "
                  "without Hub access."},
    )
    protocol: str = field(default="demo", metadata={"help": "oger (App. A.2), ase (Tables 1-3) or demo (CPU, k=8)."})
    num_samples: int | None = field(default=None, metadata={"help": "Samples per problem (overrides the protocol)."})
    temperature: float | None = field(
        default=None, metadata={"help": "Sampling temperature (overrides the protocol)."}
    )
    top_p: float | None = field(default=None, metadata={"help": "Top-p (overrides the protocol)."})
    top_k: int | None = field(default=None, metadata={"help": "Top-k, 0 = off (overrides the protocol)."})
    max_new_tokens: int | None = field(
        default=None, metadata={"help": "Completion token cap (overrides the protocol)."}
    )
    limit: int | None = field(default=None, metadata={"help": "Evaluate only the first N problems of each benchmark."})
    backend: str = field(default="auto", metadata={"help": "auto (vLLM when installed), vllm or transformers."})
    batch_size: int = field(default=256, metadata={"help": "Rows per decoding call (transformers backend; larger "
                                                                 "calls decode more tokens per second on a CPU)."})
    dtype: str = field(default="float32", metadata={"help": "Weights dtype (transformers backend)."})
    seed: int = field(default=0, metadata={"help": "Sampling seed."})
    grader_mode: str = field(
        default="math_verify",
        metadata={"help": "How maths answers are graded, the trainers' option ('boxed': only inside \\boxed{}).",
                  "choices": ["math_verify", "trl", "strict", "boxed"]},
    )
    output_dir: str | None = field(default=None, metadata={"help": "Output folder (default outputs/eval/<model>)."})
    resume: bool = field(
        default=False,
        metadata={"help": "Continue a killed run: reuse the batches it finished (kept in <output_dir>/partial/ "
                  "until the run completes; transformers backend). Without it, a new run starts from scratch."},
    )
    label: str | None = field(default=None, metadata={"help": "Row label in tables and legends."})
    baseline_dir: str | None = field(
        default=None, metadata={"help": "Evaluation folder of a baseline run: the table then shows deltas."}
    )
    temperatures: list[float] = field(
        default_factory=list, metadata={"help": "Temperature sweep grid (OGER App. E uses 0.1 ... 1.0)."}
    )
    sweep_k: int = field(default=8, metadata={"help": "k of the pass@k reported by the temperature sweep."})
    steering_bank: str | None = field(
        default=None,
        metadata={"help": "Folder of a saved SteeringVectorBank: inference-time steering sweep over alpha."},
    )
    steering_build_from: str | None = field(
        default=None,
        metadata={"help": "Build steering banks from the policy's rollouts on this benchmark ('champ:train' = the "
                  "CHAMP training split), one per (K, f)."},
    )
    steering_num_clusters: list[int] = field(default_factory=lambda: [3], metadata={"help": "K grid."})
    steering_fractions: list[float] = field(default_factory=lambda: [0.25], metadata={"help": "Readout f grid."})
    steering_alphas: list[float] = field(default_factory=lambda: [0.25, 0.5], metadata={"help": "Strength grid."})
    steering_layer: int = field(default=0, metadata={"help": "Steered decoder block."})
    steering_build_limit: int | None = field(default=None, metadata={"help": "Problems used to build banks."})


def resolve_model(name: str) -> str:
    """'main' -> the main job's saved model if there is one, else 'embedded' (with a warning)."""
    if name != "main":
        return name
    for candidate in (pathlib.Path(MAIN_JOB_OUTPUT), REPO_ROOT / MAIN_JOB_OUTPUT):
        if (candidate / "config.json").is_file():
            return str(candidate)
    logging.warning("%s holds no saved model yet: evaluating the embedded base SmolLM2 instead", MAIN_JOB_OUTPUT)
    return "embedded"


def parse_files(items: list[str]) -> dict[str, str]:
    """['aime2024=a.jsonl'] -> {'aime2024': 'a.jsonl'}."""
    files = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--benchmark_files expects NAME=PATH, got {item!r}")
        files[name] = path
    return files


def main(args: EvalArguments) -> dict:
    import pandas as pd

    from trl_explore.evaluation import results, runner, sweeps
    from trl_explore.evaluation.benchmarks import load_benchmark
    from trl_explore.evaluation.plots import plot_pass_at_k, plot_temperature_sweep
    from trl_explore.evaluation.protocols import get_protocol
    from trl_explore.sampling import make_generator

    start = time.perf_counter()
    model = resolve_model(args.model_name_or_path)
    label = args.label or ("SmolLM2 (base)" if model == "embedded" else pathlib.Path(model).name or model)
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", "smollm2-base" if model == "embedded" else pathlib.Path(model).name)
    out = pathlib.Path(args.output_dir or f"outputs/eval/{slug}")
    files = parse_files(args.benchmark_files)
    benchmarks = list(args.benchmarks)
    if args.dataset_name:  # your own data: the benchmark "own" (trl_explore.evaluation.own_data)
        files["own"] = args.dataset_name
        benchmarks = ["own"] if benchmarks == ["champ"] else list(dict.fromkeys([*benchmarks, "own"]))
    elif "own" in benchmarks and "own" not in files:
        raise ValueError("--benchmarks own needs --dataset_name PATH (your data set in the training format)")
    if "own" in benchmarks:  # your data checked when loaded, before the model (a missing column, an empty gold)
        load_benchmark("own", files["own"], limit=args.limit, own_split=args.dataset_split)
    overrides = dict(num_samples=args.num_samples, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                     max_new_tokens=args.max_new_tokens)
    steering = args.steering_bank is not None or args.steering_build_from is not None
    partial_dir = out / "partial"  # finished batches; a killed run continues from them with --resume
    if partial_dir.exists() and not args.resume:
        shutil.rmtree(partial_dir)
    generator = make_generator(model, backend=args.backend, batch_size=args.batch_size, seed=args.seed,
                               steering=steering, dtype=args.dtype, partial_dir=partial_dir)
    records, summary = runner.evaluate(generator, benchmarks=benchmarks, protocol=args.protocol,
                                       benchmark_files=files, limit=args.limit, seed=args.seed,
                                       grader_mode=args.grader_mode, own_split=args.dataset_split, **overrides)
    summary["model"] = model
    baseline = results.load_summary(args.baseline_dir) if args.baseline_dir else None
    results.save_run(out, records, summary, label=label, baseline=baseline)
    curves = ({label: summary} if baseline is None
              else {f"{results.run_label(baseline)} (baseline)": baseline, label: summary})  # --label in the legend
    plot_pass_at_k(curves, out / "pass_at_k.png")
    print((out / results.RESULTS_MD).read_text())

    protocol = get_protocol(args.protocol)
    datasets = None
    if args.temperatures or steering:
        datasets = {b: load_benchmark(b, files.get(b), limit=args.limit, own_split=args.dataset_split)
                    for b in benchmarks}
    if args.temperatures:
        sweep_records, sweep = sweeps.temperature_sweep(generator, datasets, protocol, args.temperatures,
                                                        k=args.sweep_k, seed=args.seed, **overrides)
        (out / "temperature_sweep.json").write_text(json.dumps(sweep, indent=2))
        pd.DataFrame(sweep_records).to_parquet(out / "temperature_samples.parquet", index=False)
        plot_temperature_sweep({label: sweep}, out / "temperature_sweep.png")
        print(f"temperature sweep (average pass@{args.sweep_k}): "
              + ", ".join(f"T={t}: {100 * v:.2f}" for t, v in zip(sweep["temperatures"], sweep["average"])))
    if steering:
        from trl_explore.ase import inference

        banks = {}
        if args.steering_bank:
            from trl_explore.ase.bank import SteeringVectorBank

            bank = SteeringVectorBank.load(args.steering_bank)
            banks[(bank.num_vectors, None)] = bank
        if args.steering_build_from:
            source, _, split = args.steering_build_from.partition(":")
            build_set = load_benchmark(source, files.get(source), limit=args.steering_build_limit,
                                       champ_split=split or "train")
            built, _ = inference.build_steering_banks(
                generator, build_set, protocol.plan(source, **overrides), num_clusters=args.steering_num_clusters,
                fractions=args.steering_fractions, layer=args.steering_layer, seed=args.seed,
            )  # fmt: skip
            banks.update(built)
        steer_records, rows = inference.steering_sweep(generator, datasets, protocol, banks, args.steering_alphas,
                                                       layer=args.steering_layer, seed=args.seed, **overrides)
        (out / "steering_sweep.json").write_text(json.dumps(rows, indent=2))
        pd.DataFrame(steer_records).to_parquet(out / "steering_samples.parquet", index=False)
        (out / "steering_sweep.md").write_text(inference.steering_table(rows) + "\n")
        print(inference.steering_table(rows))
    shutil.rmtree(partial_dir, ignore_errors=True)  # everything is saved: the finished batches are no longer needed
    print(f"[evaluate] {model} on {', '.join(benchmarks)} in {time.perf_counter() - start:.1f} s "
          f"(generation {sum(b['generation_seconds'] for b in summary['benchmarks'].values()):.1f} s); wrote {out}")
    return summary


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    run_script(main, EvalArguments, "evaluate")  # a bad option or data set: one line (--debug: the traceback)
