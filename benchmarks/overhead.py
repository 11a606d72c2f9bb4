"""Per-step overhead of OGER and ASE-GRPO over TRL's ``GRPOTrainer``, as ratios measured in ONE run (SPEC §7).

Run (package installed, e.g. ``pip install -e .``; CPU only, offline):
``python benchmarks/overhead.py [--repeats 5] [--steps 3] [--threads 1] [--model tiny|embedded|both]
[--max-completion-length 48]`` (defaults: about 10 minutes on 2 CPU cores with the tiny model; torch's CPU threads
are pinned, to 1 by default, which a shared host disturbs least).

Variants (same seed, data, model initialisation and config; only the trainer class / switches differ):

* ``grpo``:           TRL ``GRPOTrainer``, reward ``trl_explore.math_reward``.
* ``oger_off``:       ``OGERTrainer`` with both OGER parts off (``num_replacements=0``,
  ``use_exploration_reward=False``).
* ``oger_noreward``:  ``OGERTrainer`` with replacement kept and the OGER reward off (``use_exploration_reward=False``).
* ``oger_full``:      ``OGERTrainer`` with its defaults (replacement + OGER reward). The embedder's precision follows
                      the training precision (``embedding_dtype="auto"``): float32 in the CPU benchmark.
* ``oger_bf16emb``:   ``oger_full`` with ``embedding_dtype="bfloat16"`` (the embedder's matrix products under bf16
                      autocast, what ``"auto"`` picks when training in bf16).
* ``ase``:            ``ASEGRPOTrainer`` with a bank of random unit vectors loaded before training, so every
                      training rollout batch is steered from step 1 on.

Protocol: for each repeat ``r`` the variants run interleaved (``grpo, oger_off, ..., ase, grpo, ...``); each run
builds a fresh model (same seed) and trainer and trains ``1 + steps`` optimizer steps; step 1 is warm-up and is
dropped. Timings per step:

* ``step_time``: TRL's own metric (``GRPOTrainer.training_step``: generation, rewards, scoring, loss, backward;
  no optimizer step, no callbacks), read from ``trainer.state.log_history`` (``logging_steps=1``).
* ``wall``: time between successive ``on_step_end`` callbacks (everything: optimizer step, logging, callbacks).
* phases: TRL's ``profiling_context`` timings (``profiling/Time taken: ...``; TRL only sends them to
  wandb/mlflow/trackio, so they are captured here by wrapping ``ProfilingContext._log_metrics``). OGER times each of
  its additions itself, under names that start with ``oger:`` (the work inside ``generate``'s hooks included:
  ``oger: H_last (generate hooks)``); its reward function is timed by TRL as ``oger_reward``. ASE's bank update and
  readouts get method timers here.

Generation is forced to full length so that every variant does the same amount of decoding: the switch is
``--force-length`` (on by default; ``--no-force-length`` turns it off, ``completions/mean_length`` is reported), and
:func:`force_completion_length` sets ``min_new_tokens = max_completion_length`` on each trainer's sampler after it was
built. It is not passed as ``generation_kwargs``: a forced length bans the end-of-sequence token, a distribution OGER's
``H_last`` and ASE-GRPO's behaviour log-probs cannot reproduce, so the trainers' sampler guard
(``trl_explore.trl_guards.sampler_settings.check_reproducible``) refuses it in training. A benchmark measures time,
not those values, and sets it here, past the guard, for every variant alike (plain GRPO included).

Ratios: median step time of a variant over the median of its baseline, plus min-max of the per-repeat ratios
(ratio of the per-repeat means), which shows how much of a difference is noise on a shared host. Whole-step ratios
of a 25 s SmolLM2 step vary by 5-20% between repeats, so OGER's cost is also given as the sum of its phases (``oger:``
timers and ``oger_reward``, per measured step of the ``oger_full`` run) over the GRPO step time of the same repeat:
a figure that does not depend on the noise of the rest of the step.

Other machines and models (all off by default; the defaults above are the CPU benchmark): ``--device cuda
--dtype bfloat16`` trains on a GPU in bf16; ``--model qwen2.5-1.5b`` is a randomly initialised model of
Qwen2.5-1.5B's shape (``qwen2-tiny``: the same code path at toy size), vocabulary sized to ``--tokenizer``;
``--embedder bge-large-random`` gives OGER a random embedder of bge-large's shape (``benchmarks/bench_models.py``);
``--time-budget S`` starts no further run that could end after S seconds (the variants of an unfinished repeat
are then missing), and ``--save-partial`` rewrites the results after every run. ``benchmarks/gpu/run.sh`` uses
these for the H200 profile.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")

import torch
from datasets import Dataset
from transformers import TrainerCallback

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench_models

VARIANTS = ["grpo", "oger_off", "oger_noreward", "oger_full", "oger_bf16emb", "ase"]

# (name, numerator, denominator, kind, target) ; kind "max": ratio <= target; "throughput": den/num >= target
TARGETS = [
    ("OGER full / GRPO (step time; issue 13's target on the tiny model)", "oger_full", "grpo", "max", 1.05),
    ("OGER full, bf16 embedder / GRPO (step time)", "oger_bf16emb", "grpo", "max", 1.05),
    ("OGER full / OGER reward-off (replacement kept)", "oger_full", "oger_noreward", "max", 1.03),
    ("ASE / GRPO (step time)", "ase", "grpo", "max", 1.02),
    ("OGER both-off throughput / GRPO throughput", "oger_off", "grpo", "throughput", 0.98),
]
INFO_RATIOS = [
    ("OGER reward-off / OGER both-off (cost of replacement)", "oger_noreward", "oger_off"),
]
OGER_PHASE_TARGET = 0.02  # OGER's added phases / GRPO step time, on SmolLM2 (issue 13)


def is_oger_phase(name: str) -> bool:
    """OGER's own timers (``oger: ...``) and TRL's timer of the OGER reward function."""
    return name.startswith("oger:") or name == "oger_reward"


# ----------------------------------------------------------------------------------------------- data / model
def synthetic_dataset(num_prompts: int) -> Dataset:
    """Arithmetic prompts with two short, correct teacher trajectories each (distinct texts for every prompt)."""
    rows = []
    for i in range(num_prompts):
        a, b = 3 + 7 * i, 11 + 5 * i
        s = a + b
        rows.append(
            {
                "prompt": [{"role": "user", "content": f"What is {a} + {b}? Put the final answer in \\boxed{{}}."}],
                "answer": str(s),
                "offline_completions": [
                    f"We add the two numbers: {a} + {b} = {s}. The answer is \\boxed{{{s}}}.",
                    f"Start from {a} and count up {b} more, which gives {s}. So the result is \\boxed{{{s}}}.",
                ],
                "offline_teachers": ["teacher-a", "teacher-b"],
                "problem_id": f"p{i}",
            }
        )
    return Dataset.from_list(rows)


def load_tokenizer(path: str | None = None):
    """The policy tokenizer: ``path``, or by default the embedded SmolLM2-135M-Instruct's."""
    from transformers import AutoTokenizer

    if path is None:
        from trl_explore.defaults import default_policy_path

        path = default_policy_path()
    return AutoTokenizer.from_pretrained(str(path))


def make_model(kind: str, tokenizer, seed: int, device: str = "cpu", dtype: torch.dtype = torch.float32):
    from transformers import AutoModelForCausalLM, LlamaConfig

    if kind in bench_models.POLICY_SHAPES:  # random weights, a real model's shape
        return bench_models.random_policy(kind, tokenizer, seed=seed, dtype=dtype, device=device)
    if kind == "embedded":
        from trl_explore.defaults import default_policy_path

        model = AutoModelForCausalLM.from_pretrained(default_policy_path(), dtype=torch.float32)
    else:  # same as tests/conftest.py::make_tiny_causal_lm (2 layers, hidden 64, real 49k vocabulary)
        config = LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
            bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True,
        )
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


# ----------------------------------------------------------------------------------------------- timing hooks
class _PhaseSink:
    """Collects ``(global_step, name, seconds)`` for the run in progress."""

    def __init__(self):
        self.records: list[tuple[int, str, float]] = []
        self.trainer = None

    def add(self, name: str, seconds: float, step: int | None = None):
        if step is None:
            step = self.trainer.state.global_step if self.trainer is not None else -1
        self.records.append((int(step) if step is not None else -1, name, seconds))


SINK = _PhaseSink()


def _install_profiling_capture():
    from trl.extras import profiling

    original = profiling.ProfilingContext._log_metrics

    def capture(self, duration):
        # "GRPOTrainer.transformers.generate" -> "transformers.generate": same row for every trainer class
        name = self.name.split(".", 1)[1] if self.name.split(".", 1)[0].endswith("Trainer") else self.name
        SINK.add(name, duration, self.step)
        return original(self, duration)

    profiling.ProfilingContext._log_metrics = capture


def _wrap_timer(obj, attr: str, label: str):
    fn = getattr(obj, attr, None)
    if fn is None or not callable(fn):
        return

    @functools.wraps(fn)
    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            SINK.add(label, time.perf_counter() - t0)

    setattr(obj, attr, timed)


class _StepClock(TrainerCallback):
    def __init__(self):
        self.ends: list[float] = []
        self.t_begin = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.t_begin = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.ends.append(time.perf_counter())


# ----------------------------------------------------------------------------------------------- one run
def build_trainer(variant: str, model, tokenizer, dataset, out_dir: str, a, clock):
    from trl import GRPOConfig, GRPOTrainer

    from trl_explore import (
        ASEConfig,
        ASEGRPOTrainer,
        OGERConfig,
        OGERTrainer,
        math_reward,
    )

    common = {
        "output_dir": out_dir,
        "per_device_train_batch_size": a.batch_size,
        "num_generations": a.num_generations,
        "max_completion_length": a.max_completion_length,
        "max_steps": 1 + a.steps,
        "learning_rate": 1e-5,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "use_cpu": a.device == "cpu",
        "bf16": a.dtype == "bfloat16",
        "seed": a.seed,
        "data_seed": a.seed,
        "log_completions": False,
        "disable_tqdm": True,
        # the same objective for every variant: OGERConfig's default entropy bonus (0.01, OGER App. B) would
        # otherwise add a backward pass through the per-token entropies that GRPOConfig's 0.0 does not
        "entropy_coef": 0.01,
    }
    kw = {"train_dataset": dataset, "processing_class": tokenizer, "callbacks": [clock]}
    if variant == "grpo":
        trainer = GRPOTrainer(model, reward_funcs=[math_reward], args=GRPOConfig(**common), **kw)
    elif variant.startswith("oger"):
        extra = {"embedding_model": a.embedder_path}
        if variant == "oger_off":
            extra.update(num_replacements=0, use_exploration_reward=False)
        elif variant == "oger_noreward":
            extra.update(use_exploration_reward=False)
        elif variant == "oger_bf16emb":
            extra.update(embedding_dtype="bfloat16")
        trainer = OGERTrainer(model, args=OGERConfig(**common, **extra), **kw)  # times its phases itself ("oger: ...")
    elif variant == "ase":
        # min_pairs_per_cluster=1: the bank update runs (and is timed) on the few pairs of a short benchmark step
        trainer = ASEGRPOTrainer(model, reward_funcs=[math_reward], args=ASEConfig(**common, min_pairs_per_cluster=1),
                                 **kw)
        bank = trainer.ase.bank
        state = bank.state_dict()
        g = torch.Generator().manual_seed(a.seed + 17)
        vecs = torch.randn(bank.num_vectors, bank.hidden_size, generator=g)
        state["active"] = vecs / vecs.norm(dim=1, keepdim=True)
        bank.load_state_dict(state)
        assert trainer.ase.bank.vectors is not None
        _wrap_timer(trainer.ase, "_update_bank", "ase: _update_bank")
        _wrap_timer(trainer.ase.bank, "update", "ase: bank.update")
        _wrap_timer(trainer.ase, "_store_readouts", "ase: _store_readouts")
        _wrap_timer(trainer.ase, "plan_routes", "ase: plan_routes")
        steering = trainer.ase.steerer.steering

        def counted_steering(*args, **kwargs):  # proves the rollouts were steered (count per step, as "seconds")
            SINK.add("ase: steered generate calls (count)", 1.0)
            return steering(*args, **kwargs)

        trainer.ase.steerer.steering = counted_steering
    else:
        raise ValueError(variant)
    if a.force_length:
        force_completion_length(trainer, a.max_completion_length)
    return trainer


def force_completion_length(trainer, num_tokens: int) -> None:
    """Benchmarking only: every completion of ``trainer``'s HF ``generate`` is ``num_tokens`` long (``min_new_tokens``,
    the end-of-sequence token banned below it), set on the sampler TRL built (``GRPOTrainer.generation_config`` and
    the ``generation_kwargs`` it passes to ``generate``), after the trainer's construction checks (module docstring:
    why the sampler guard refuses it in training). Any trainer of TRL's ``GRPOTrainer`` family, HF generation only.

    Raises:
        ValueError: a trainer that samples with vLLM (its sampling parameters are built elsewhere).
    """
    if getattr(trainer, "use_vllm", False):
        raise ValueError("force_completion_length: HF generation only (use_vllm=False)")
    trainer.generation_config.min_new_tokens = num_tokens
    if getattr(trainer, "generation_kwargs", None) is not None:
        trainer.generation_kwargs["min_new_tokens"] = num_tokens


def run_once(variant: str, model_kind: str, tokenizer, dataset, a) -> dict:
    clock = _StepClock()
    gc.collect()  # the previous run's model and trainer: collected here, not inside this run's measured steps
    with tempfile.TemporaryDirectory() as tmp:
        model = make_model(model_kind, tokenizer, a.seed, a.device, getattr(torch, a.dtype))
        if a.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        trainer = build_trainer(variant, model, tokenizer, dataset, tmp, a, clock)
        t_init = time.perf_counter() - t0
        SINK.records, SINK.trainer = [], trainer
        torch.manual_seed(a.seed)
        t0 = time.perf_counter()
        trainer.train()
        t_train = time.perf_counter() - t0
        SINK.trainer = None
    logs = [e for e in trainer.state.log_history if "step_time" in e]
    step_times = [e["step_time"] for e in logs][1:]  # drop warm-up step
    walls = [b - a_ for a_, b in zip(clock.ends, clock.ends[1:])]  # step 2.. (warm-up excluded)
    lengths = [e.get("completions/mean_length") for e in logs][1:]
    phases = defaultdict(float)
    for step, name, sec in SINK.records:
        if step >= 1:  # global_step is 0 during the warm-up step
            phases[name] += sec
    phases = {k: v / max(1, a.steps) for k, v in phases.items()}  # seconds per measured step
    extra = {}
    if variant == "ase":
        extra["bank_active"] = trainer.ase.bank.vectors is not None
    if a.device.startswith("cuda"):
        extra["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    del trainer, model
    if a.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return {
        "variant": variant, "init_s": t_init, "train_s": t_train, "step_time": step_times, "wall": walls,
        "mean_length": lengths, "phases": phases, **extra,
    }


# ----------------------------------------------------------------------------------------------- summary
def _stats(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def summarize(runs: list[dict], metric: str) -> dict:
    out = {}
    for v in VARIANTS:
        vals = [x for r in runs if r["variant"] == v for x in r[metric]]
        if vals:
            out[v] = _stats(vals)
    return out


def ratio(runs, num, den, metric):
    """Median ratio (median/median) and min-max over repeats of per-repeat mean ratios."""
    pooled = summarize(runs, metric)
    if num not in pooled or den not in pooled:
        return None
    per_rep = []
    reps = sorted({r["repeat"] for r in runs})
    for rep in reps:
        n = [x for r in runs if r["repeat"] == rep and r["variant"] == num for x in r[metric]]
        d = [x for r in runs if r["repeat"] == rep and r["variant"] == den for x in r[metric]]
        if n and d:
            per_rep.append(statistics.mean(n) / statistics.mean(d))
    if not per_rep:  # no repeat holds both variants (a run cut short by --time-budget)
        return None
    return {"ratio": pooled[num]["median"] / pooled[den]["median"], "per_repeat": per_rep,
            "min": min(per_rep), "max": max(per_rep)}


def machine_info() -> dict:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import transformers
    import trl

    info = {
        "nproc": int(subprocess.run(["nproc"], capture_output=True, text=True, check=False).stdout.strip()
                     or os.cpu_count()),
        "cpu": cpu, "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
        "transformers": transformers.__version__, "trl": trl.__version__, "python": platform.python_version(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda"] = torch.version.cuda
    return info


def markdown(results: dict) -> str:
    m = results["machine"]
    a = results["args"]
    device = a.get("device", "cpu")
    gpu = f"GPU {m.get('gpu')} (CUDA {m.get('cuda')}), " if device.startswith("cuda") else ""
    lines = [
        f"# OGER / ASE per-step overhead vs TRL GRPOTrainer ({'CPU' if device == 'cpu' else device.upper()})",
        "",
        (f"Machine: {gpu}{m['nproc']} CPU cores (`nproc`), {m['cpu']}; torch {m['torch']} "
         f"({m['torch_threads']} threads), transformers {m['transformers']}, TRL {m['trl']}, Python {m['python']}."),
        "",
        f"Command: `{results['command']}`; total wall time {results['total_wall_s']:.0f} s.",
        "",
        (f"Config: batch {a['batch_size']} = {a['batch_size'] // a['num_generations']} prompt(s) x "
        f"{a['num_generations']} generations, max_completion_length {a['max_completion_length']} "
        f"(forced full length: {a['force_length']}), 1 warm-up + {a['steps']} measured steps per run, "
        f"{a['repeats']} interleaved repeats, seed {a['seed']}."),
        "",
    ]
    if device != "cpu" or a.get("dtype", "float32") != "float32" or a.get("embedder", "embedded") != "embedded":
        lines += [(f"Device {device}, dtype {a.get('dtype')}, OGER embedder `{a.get('embedder')}`"
                  f"{', tokenizer ' + str(a.get('tokenizer')) if a.get('tokenizer') else ''}."), ""]
    if results.get("stopped_early"):
        lines += [f"Stopped early: {results['stopped_early']}. Only complete repeats are summarised below.", ""]
    for mk, res in results["models"].items():
        lines += [f"## Model: {mk}", ""]
        lines += [("| variant | step_time median (s) | min-max | wall/step median (s) | min-max | "
                  "mean completion length | init (s) |"), "|---|---|---|---|---|---|---|"]
        st, wl = res["step_time"], res["wall"]
        for v in VARIANTS:
            if v not in st:
                continue
            lens = [x for r in res["runs"] if r["variant"] == v for x in r["mean_length"] if x is not None]
            inits = [r["init_s"] for r in res["runs"] if r["variant"] == v]
            lines.append(
                f"| {v} | {st[v]['median']:.3f} | {st[v]['min']:.3f}-{st[v]['max']:.3f} | "
                f"{wl[v]['median']:.3f} | {wl[v]['min']:.3f}-{wl[v]['max']:.3f} | "
                f"{statistics.mean(lens) if lens else float('nan'):.1f} | {statistics.median(inits):.1f} |"
            )
        peaks = {v: [r["peak_memory_gib"] for r in res["runs"] if r["variant"] == v and "peak_memory_gib" in r]
                 for v in VARIANTS}
        if any(peaks.values()):
            lines += ["", "Peak GPU memory allocated (GiB, max over runs): " + ", ".join(
                f"{v} {max(p):.1f}" for v, p in peaks.items() if p) + "."]
        lines += ["", "| ratio (SPEC §7) | step_time | per-repeat min-max | wall | per-repeat min-max | target "
                  "| met (step_time) |", "|---|---|---|---|---|---|---|"]
        for t in res["targets"]:
            s, w = t["step_time"], t["wall"]
            lines.append(
                f"| {t['name']} | {s['value']:.3f} | {s['min']:.3f}-{s['max']:.3f} | {w['value']:.3f} | "
                f"{w['min']:.3f}-{w['max']:.3f} | {t['target_text']} | {'yes' if s['met'] else 'NO'} |"
            )
        for t in res["info_ratios"]:
            s, w = t["step_time"], t["wall"]
            lines.append(
                f"| {t['name']} | {s['value']:.3f} | {s['min']:.3f}-{s['max']:.3f} | {w['value']:.3f} | "
                f"{w['min']:.3f}-{w['max']:.3f} | (info) | |"
            )
        # rollout latency (SPEC §7: ASE <= 1% over GRPO) and OGER generation, from TRL's generate timer
        for name, num, den in [("ASE / GRPO rollout latency (`transformers.generate`)", "ase", "grpo"),
                               ("OGER both-off / GRPO rollout (`transformers.generate`)", "oger_off", "grpo"),
                               ("OGER full / GRPO rollout (`transformers.generate`, H_last hooks inside)", "oger_full",
                                "grpo")]:
            pn = [r["phases"].get("transformers.generate") for r in res["runs"] if r["variant"] == num]
            pd = [r["phases"].get("transformers.generate") for r in res["runs"] if r["variant"] == den]
            pn, pd = [x for x in pn if x], [x for x in pd if x]
            if pn and pd:
                per = [x / y for x, y in zip(pn, pd)]
                target = "<= 1.01" if num == "ase" else "(info)"
                lines.append(f"| {name} | {statistics.median(pn) / statistics.median(pd):.3f} | "
                             f"{min(per):.3f}-{max(per):.3f} | | | {target} | |")
        for variant in ("oger_full", "oger_bf16emb"):
            fractions = oger_phase_fractions(res["runs"], variant)
            if not fractions:
                continue
            lines += ["", (f"OGER's added phases in the `{variant}` run, as a fraction of the GRPO step time of "
                      "the same repeat (median and min-max over repeats; target on SmolLM2: total <= "
                      f"{OGER_PHASE_TARGET:.0%}):"), "", "| OGER phase | / GRPO step | min-max |", "|---|---|---|"]
            for name in [*sorted(k for k in fractions if k != "total"), "total"]:
                f = fractions[name]
                label = f"**{name}**" if name == "total" else name
                lines.append(f"| {label} | {f['median']:.2%} | {f['min']:.2%}-{f['max']:.2%} |")
        lines += ["", ("Per-phase seconds per measured step, median (min-max) over repeats; TRL `profiling_context` "
                  "names, OGER's `oger: ...` timers and ASE method timers; nested phases overlap:"), ""]
        names = sorted({k for r in res["runs"] for k in r["phases"]})
        lines += ["| phase | " + " | ".join(v for v in VARIANTS if v in st) + " |",
                  "|---|" + "---|" * len([v for v in VARIANTS if v in st])]
        for n in names:
            cells = []
            for v in VARIANTS:
                if v not in st:
                    continue
                vals = [r["phases"][n] for r in res["runs"] if r["variant"] == v and n in r["phases"]]
                cells.append(f"{statistics.median(vals):.4f} ({min(vals):.4f}-{max(vals):.4f})" if vals else "")
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def oger_phase_fractions(runs: list[dict], variant: str = "oger_full") -> dict:
    """Each OGER phase of ``variant``'s runs, and their sum (``total``), over the mean GRPO step time of the same
    repeat: ``{phase: {"median", "min", "max", "per_repeat"}}`` (empty without both variants)."""
    names = sorted({k for r in runs if r["variant"] == variant for k in r["phases"] if is_oger_phase(k)})
    per_rep = defaultdict(list)
    for rep in sorted({r["repeat"] for r in runs}):
        num = [r for r in runs if r["repeat"] == rep and r["variant"] == variant]
        den = [x for r in runs if r["repeat"] == rep and r["variant"] == "grpo" for x in r["step_time"]]
        if not num or not den:
            continue
        base = statistics.mean(den)
        for name in names:
            per_rep[name].append(num[0]["phases"].get(name, 0.0) / base)
        per_rep["total"].append(sum(num[0]["phases"].get(name, 0.0) for name in names) / base)
    return {k: {"median": statistics.median(v), "min": min(v), "max": max(v), "per_repeat": v}
            for k, v in per_rep.items()}


def model_results(runs: list[dict], variants: list[str]) -> dict:
    """Pooled statistics, SPEC §7 target ratios and information ratios of one model's runs.

    Only complete repeats (every variant ran) are summarised once there is one; the runs of an unfinished repeat
    (``--time-budget``) are kept under ``dropped_runs``, so that no variant gets an extra sample.
    """
    complete = {rep for rep in {r["repeat"] for r in runs}
                if {r["variant"] for r in runs if r["repeat"] == rep} >= set(variants)}
    dropped = [r for r in runs if complete and r["repeat"] not in complete]
    runs = [r for r in runs if not complete or r["repeat"] in complete]
    res = {"runs": runs, "step_time": summarize(runs, "step_time"), "wall": summarize(runs, "wall"),
           "oger_phase_fractions": oger_phase_fractions(runs),
           "oger_phase_fractions_bf16emb": oger_phase_fractions(runs, "oger_bf16emb")}
    if dropped:
        res["dropped_runs"] = dropped
    res["targets"], res["info_ratios"] = [], []
    for name, num, den, kind, target in TARGETS:
        if num not in variants or den not in variants:
            continue
        entry = {"name": name, "num": num, "den": den, "kind": kind, "target": target}
        for metric in ("step_time", "wall"):
            rr = ratio(runs, num, den, metric)
            if rr is None:
                break
            if kind == "throughput":  # throughput of num relative to den = den time / num time
                val, lo, hi = 1 / rr["ratio"], 1 / rr["max"], 1 / rr["min"]
                met = val >= target
            else:
                val, lo, hi = rr["ratio"], rr["min"], rr["max"]
                met = val <= target
            entry[metric] = {"value": val, "min": lo, "max": hi, "met": met}
        else:
            entry["target_text"] = f">= {target}" if kind == "throughput" else f"<= {target}"
            res["targets"].append(entry)
    for name, num, den in INFO_RATIOS:
        if num not in variants or den not in variants:
            continue
        entry = {"name": name, "num": num, "den": den}
        for metric in ("step_time", "wall"):
            rr = ratio(runs, num, den, metric)
            if rr is None:
                break
            entry[metric] = {"value": rr["ratio"], "min": rr["min"], "max": rr["max"]}
        else:
            res["info_ratios"].append(entry)
    return res


def write_results(results: dict, out: pathlib.Path, quiet: bool = False) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=2, default=str))
    md = markdown(results)
    out.with_suffix(".md").write_text(md)
    if not quiet:
        print(md)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["tiny", "embedded", "both", *bench_models.POLICY_SHAPES], default="tiny",
                   help="tiny: 2-layer Llama with the SmolLM2 tokenizer; embedded: SmolLM2-135M-Instruct; both; "
                        "or a randomly initialised shape from benchmarks/bench_models.py (qwen2.5-1.5b, qwen2-tiny)")
    p.add_argument("--repeats", type=int, default=5, help="interleaved repeats (every variant once per repeat)")
    p.add_argument("--steps", type=int, default=3, help="measured steps per run (after 1 warm-up step)")
    p.add_argument("--batch-size", type=int, default=16, help="per-device train batch (prompts x generations)")
    p.add_argument("--num-generations", type=int, default=8, help="completions per prompt (N)")
    p.add_argument("--max-completion-length", type=int, default=48, help="completion tokens (forced, see below)")
    p.add_argument("--force-length", dest="force_length", action="store_true", default=True,
                   help="force every completion to max_completion_length tokens (default; force_completion_length: "
                        "benchmark-only, past the trainers' sampler guard)")
    p.add_argument("--no-force-length", dest="force_length", action="store_false",
                   help="let generation stop at EOS instead of forcing max_completion_length tokens")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads: pinned for every run (default: 1 on CPU, torch's default on a GPU)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of " + ",".join(VARIANTS))
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="model dtype; bfloat16 also sets bf16=True in the trainer config")
    p.add_argument("--tokenizer", default=None, help="policy tokenizer folder (default: the embedded SmolLM2's)")
    p.add_argument("--embedder", default="embedded",
                   help="OGER embedding model: 'embedded' (all-MiniLM-L6-v2), a sentence-transformers folder, or "
                        "bge-base-random / bge-large-random (random weights of that shape)")
    p.add_argument("--embedder-tokenizer", default=None,
                   help="WordPiece tokenizer folder for the random embedders (default: the embedded MiniLM's)")
    p.add_argument("--time-budget", type=float, default=None,
                   help="seconds: start no further run that could end later than this (estimate: the longest run)")
    p.add_argument("--save-partial", action="store_true", help="rewrite the results after every run")
    p.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results" / "overhead_cpu"),
                   help="output path without suffix (.json and .md are written)")
    p.add_argument("--render", default=None, help="only re-render the markdown from an existing results JSON")
    return p


def main():
    a = build_parser().parse_args()
    if a.render:
        results = json.loads(pathlib.Path(a.render).read_text())
        variants = [v for v in results["args"]["variants"].split(",") if v]
        for mk, res in results["models"].items():  # re-summarise with this version's rules
            results["models"][mk] = model_results(res["runs"] + res.get("dropped_runs", []), variants)
        md = markdown(results)
        pathlib.Path(a.render).with_suffix(".md").write_text(md)
        print(md)
        return
    if a.threads is None and a.device == "cpu":
        a.threads = 1
    if a.threads:
        torch.set_num_threads(a.threads)
    variants = [v for v in a.variants.split(",") if v]
    t_all = time.perf_counter()
    _install_profiling_capture()
    tokenizer = load_tokenizer(a.tokenizer)
    prompts_per_run = (1 + a.steps) * a.batch_size // a.num_generations
    dataset = synthetic_dataset(max(prompts_per_run, 4))
    models = ["tiny", "embedded"] if a.model == "both" else [a.model]
    out = pathlib.Path(a.out)
    with tempfile.TemporaryDirectory(prefix="overhead-embedder-") as embedder_dir:
        a.embedder_path = bench_models.resolve_embedder(a.embedder, embedder_dir, a.embedder_tokenizer)
        results = {"machine": machine_info(), "args": {k: v for k, v in vars(a).items() if k != "embedder_path"},
                   "command": "python " + " ".join(sys.argv), "models": {}}
        longest_run = 0.0
        for mk in models:
            runs = []
            for rep in range(a.repeats):
                for v in variants:
                    elapsed = time.perf_counter() - t_all
                    if a.time_budget and runs and elapsed + longest_run > a.time_budget:
                        results["stopped_early"] = (
                            f"{mk}: stopped before repeat {rep}, variant {v}, after {elapsed:.0f} s: one more run "
                            f"(up to {longest_run:.0f} s) would pass --time-budget {a.time_budget:.0f} s")
                        break
                    t_run = time.perf_counter()
                    r = run_once(v, mk, tokenizer, dataset, a)
                    longest_run = max(longest_run, time.perf_counter() - t_run)
                    r["repeat"] = rep
                    runs.append(r)
                    print(f"[{mk} rep {rep}] {v:14s} step_time {statistics.median(r['step_time']):.3f}s "
                          f"wall {statistics.median(r['wall']):.3f}s init {r['init_s']:.1f}s", flush=True)
                    if a.save_partial:
                        results["models"][mk] = model_results(runs, variants)
                        results["total_wall_s"] = time.perf_counter() - t_all
                        write_results(results, out, quiet=True)
                if results.get("stopped_early"):
                    print(results["stopped_early"], flush=True)
                    break
            results["models"][mk] = model_results(runs, variants)
    results["total_wall_s"] = time.perf_counter() - t_all
    write_results(results, out)


if __name__ == "__main__":
    main()
