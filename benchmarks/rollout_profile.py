"""Where ASE-GRPO's rollout time goes, next to a plain GRPO rollout (CPU).

Run (package installed; CPU only, offline):
``python benchmarks/rollout_profile.py [--model embedded|tiny] [--repeats 5]
[--out benchmarks/results/rollout_profile_cpu]`` (about 4-5 minutes on 2 CPU cores with SmolLM2-135M-Instruct,
16 rollouts of 48 tokens as in ``overhead.py``; a minute with ``--model tiny``).

One rollout is one call of the trainer's ``_generate_single_turn`` (TRL's HF ``generate`` path, which is what
``transformers.generate`` times in ``overhead.py``) on the same prompts. Four variants run interleaved,
``--repeats`` times each, on two copies of the same model:

* ``grpo``:          TRL ``GRPOTrainer``.
* ``+ steering``:    the GRPO rollout under ``ActivationSteeringGenerator.steering`` alone (the forward hook that
                     adds ``alpha * v_route`` to block 0's output, balanced routes over K = 3 random unit vectors).
* ``+ log-probs``:   the GRPO rollout with ASE's behaviour log-prob recorder alone (a forward hook on the model
                     that takes ``log_softmax`` over the 49,152-token vocabulary of each decoding step's last logits
                     and keeps the sampled token's value).
* ``ase``:           ``ASEGRPOTrainer`` with an active bank (both hooks), as in training.

Then ``torch.profiler`` records one ``grpo`` and one ``ase`` rollout; the markdown lists the top operators by
self CPU time of each and the operators whose self time grew the most from GRPO to ASE.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import overhead

VARIANTS = ["grpo", "+ steering", "+ log-probs", "ase"]


def prompt_batch(tokenizer, dataset, num_prompts: int, num_generations: int) -> list[list[int]]:
    """Token ids of ``num_prompts`` chat prompts, each repeated ``num_generations`` times (TRL's batch layout)."""
    ids = []
    for row in dataset.select(range(num_prompts)):
        prompt = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True,
                                               return_dict=False)
        ids += [list(prompt)] * num_generations
    return ids


def profile_table(fn, row_limit: int) -> tuple[str, dict[str, float]]:
    """Run ``fn`` under torch.profiler; return the top-``row_limit`` table and self CPU ms per operator."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    averages = prof.key_averages()
    table = averages.table(sort_by="self_cpu_time_total", row_limit=row_limit)
    return table, {e.key: e.self_cpu_time_total / 1e3 for e in averages}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["embedded", "tiny"], default="embedded",
                   help="embedded: SmolLM2-135M-Instruct (30 layers); tiny: the 2-layer model of overhead.py")
    p.add_argument("--prompts", type=int, default=2, help="prompts per rollout batch")
    p.add_argument("--num-generations", type=int, default=8, help="rollouts per prompt")
    p.add_argument("--max-completion-length", type=int, default=48, help="tokens per rollout (forced)")
    p.add_argument("--repeats", type=int, default=5, help="interleaved timings of each variant")
    p.add_argument("--row-limit", type=int, default=12, help="operators listed per profile")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results" / "rollout_profile_cpu"),
                   help="output path without suffix (.json and .md are written)")
    a = p.parse_args()

    from trl_explore.ase.recording import SampledTokenLogProbs as _SampledTokenLogProbs
    from trl_explore.ase.steering import ActivationSteeringGenerator

    if a.threads:
        torch.set_num_threads(a.threads)
    t_all = time.perf_counter()
    tokenizer = overhead.load_tokenizer()
    dataset = overhead.synthetic_dataset(max(a.prompts, 4))
    bench_args = overhead.build_parser().parse_args([
        "--batch-size", str(a.prompts * a.num_generations), "--num-generations", str(a.num_generations),
        "--max-completion-length", str(a.max_completion_length), "--seed", str(a.seed),
    ])
    bench_args.embedder_path = "embedded"
    prompts = prompt_batch(tokenizer, dataset, a.prompts, a.num_generations)
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {}
        for variant in ("grpo", "ase"):
            model = overhead.make_model(a.model, tokenizer, a.seed)
            trainers[variant] = overhead.build_trainer(variant, model, tokenizer, dataset, tmp, bench_args,
                                                       overhead._StepClock())
            trainers[variant].model.train()  # ASE steers training rollouts only
        grpo, ase = trainers["grpo"], trainers["ase"]
        steerer = ActivationSteeringGenerator(grpo.model, layer=ase.args.steering_layer, alpha=ase.args.steering_alpha)
        routes = torch.arange(len(prompts)) % (ase.args.num_vectors + 1)  # balanced: clean route 0, then 1..K
        vectors = ase.ase.bank.vectors

        def rollout(variant):
            torch.manual_seed(a.seed)
            if variant == "grpo":
                return grpo._generate_single_turn(prompts, None, {}, a.num_generations)
            if variant == "ase":
                return ase._generate_single_turn(prompts, None, {}, a.num_generations)
            if variant == "+ steering":
                with steerer.steering(routes, vectors):
                    return grpo._generate_single_turn(prompts, None, {}, a.num_generations)
            recorder = _SampledTokenLogProbs(grpo.model, grpo.temperature)
            with recorder:
                completion_ids, _ = grpo._generate_single_turn(prompts, None, {}, a.num_generations)
            return completion_ids, recorder.per_completion(completion_ids)

        for variant in VARIANTS:  # warm-up
            rollout(variant)
        seconds = {v: [] for v in VARIANTS}
        for rep in range(a.repeats):
            for variant in VARIANTS:
                start = time.perf_counter()
                completion_ids, _ = rollout(variant)
                seconds[variant].append(time.perf_counter() - start)
                assert all(len(c) == a.max_completion_length for c in completion_ids)
            print(f"rep {rep}: " + ", ".join(f"{v} {seconds[v][-1]:.2f}s" for v in VARIANTS), flush=True)

        # the per-step work that the log-prob recorder adds, alone: one [B, V] log-softmax and a gather per token
        logits = torch.randn(len(prompts), len(tokenizer))
        token = torch.zeros(len(prompts), 1, dtype=torch.long)

        def log_softmax_work():
            for _ in range(a.max_completion_length):
                torch.log_softmax(logits.float(), dim=-1).gather(1, token)

        log_softmax_work()
        isolated = []
        for _ in range(a.repeats):
            start = time.perf_counter()
            log_softmax_work()
            isolated.append(time.perf_counter() - start)

        table_grpo, ops_grpo = profile_table(lambda: rollout("grpo"), a.row_limit)
        table_ase, ops_ase = profile_table(lambda: rollout("ase"), a.row_limit)

    grown = sorted(((ops_ase.get(k, 0.0) - ops_grpo.get(k, 0.0), k) for k in set(ops_ase) | set(ops_grpo)),
                   reverse=True)[: a.row_limit]
    med = {v: statistics.median(s) for v, s in seconds.items()}
    per_rep = {v: [x / g for x, g in zip(seconds[v], seconds["grpo"])] for v in VARIANTS}
    results = {
        "machine": overhead.machine_info(), "args": vars(a), "command": "python " + " ".join(sys.argv),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()), "seconds": seconds, "median": med,
        "ratio_to_grpo": {v: med[v] / med["grpo"] for v in VARIANTS}, "per_repeat_ratio": per_rep,
        "isolated_log_softmax_s": isolated, "profile_ops_grpo_ms": ops_grpo, "profile_ops_ase_ms": ops_ase,
        "total_wall_s": time.perf_counter() - t_all,
    }
    m = results["machine"]
    lines = [
        f"# Rollout profile: ASE-GRPO vs GRPO ({a.model} model, CPU)", "",
        (f"Machine: {m['nproc']} CPU cores, {m['cpu']}; torch {m['torch']} ({m['torch_threads']} threads), "
        f"transformers {m['transformers']}, TRL {m['trl']}; load average at the end {results['load']}."), "",
        (f"Command: `{results['command']}`; {len(prompts)} rollouts ({a.prompts} prompts x {a.num_generations}) of "
        f"{a.max_completion_length} forced tokens, vocabulary {len(tokenizer)}; {a.repeats} interleaved repeats; "
        f"total wall time {results['total_wall_s']:.0f} s."), "",
        "| variant | rollout median (s) | min-max (s) | ratio to GRPO | per-repeat ratio min-max |",
        "|---|---|---|---|---|",
    ]
    for v in VARIANTS:
        lines.append(f"| {v} | {med[v]:.3f} | {min(seconds[v]):.3f}-{max(seconds[v]):.3f} | "
                     f"{med[v] / med['grpo']:.3f} | {min(per_rep[v]):.3f}-{max(per_rep[v]):.3f} |")
    lines += [
        "", (f"The recorder's arithmetic alone ({a.max_completion_length} x `log_softmax` of a [{len(prompts)}, "
        f"{len(tokenizer)}] float32 table + gather): {statistics.median(isolated) * 1e3:.0f} ms "
        f"({100 * statistics.median(isolated) / med['grpo']:.1f}% of the GRPO rollout)."), "",
        "Operators whose self CPU time grew the most from one GRPO rollout to one ASE rollout (ms):", "",
        "| operator | GRPO | ASE | difference |", "|---|---|---|---|",
    ]
    for diff, key in grown:
        lines.append(f"| `{key}` | {ops_grpo.get(key, 0.0):.1f} | {ops_ase.get(key, 0.0):.1f} | {diff:+.1f} |")
    lines += ["", "Top operators of one GRPO rollout (torch.profiler, self CPU time):", "", "```", table_grpo.strip(),
              "```", "", "Top operators of one ASE rollout:", "", "```", table_ase.strip(), "```", ""]
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=2, default=str))
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
