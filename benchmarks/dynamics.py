"""The papers' training dynamics side by side on the task ladder (issue 23 item 3): GRPO, OGER, OGER without the
exploration reward (the LUFFY-style baseline), ASE-GRPO, OGER + ASE, and controls, over several seeds.

Run (CPU, offline; long: run it in the background under nice, it resumes):
``nice -n 10 python benchmarks/dynamics.py [--methods grpo oger ...] [--seeds 0 1 2] [--report-only]``

Every method trains the embedded SmolLM2-135M-Instruct from the same weights with the same data, steps, prompts per
step, samples per prompt, learning rate, temperature and entropy coefficient (:data:`SETTINGS`); only the method's
own part differs (:data:`METHODS`). Every trainer carries :class:`~trl_explore.evaluation.probes.DynamicsProbe`, so
the online-token entropy, failed ratio, answer disagreement and teacher-token probability are measured the same way
for all; the methods' own metrics (``oger/reward_mean``, ``ase/cluster_share_k``, ...) are logged as well. Held-out
accuracy (mean@k, pass@k, greedy) and answer diversity are measured at the start (once: every run starts from the
same policy), after the middle step and at the end, on the ladder's ``--eval-split`` (``test``: held out; settings
were chosen on ``validation``).

Resumable: each (method, seed) run is a subprocess that writes ``<out>/runs/<method>/seed<k>/result.json`` when it
ends; a run with that file is skipped. ``--report-only`` (also run after the last run) aggregates every finished run
into ``<out>/summary.json``, ``<out>/dynamics.md`` (method x metric, mean and spread over seeds, intervals) and the
plots ``<out>/*.png`` (:mod:`dynamics_report`); with ``--preset collapse`` into ``<out>/summary.json``,
``<out>/collapse.md`` and ``<out>/collapse_*.png`` (:mod:`collapse_report`: the collapse check of GRPO, both prompt
formats, differences paired by seed).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = pathlib.Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "results" / "dynamics"

SETTINGS = {
    "levels": ["one_digit", "two_digit"],
    "prompts_per_step": 2,
    "num_generations": 8,
    "max_steps": 8,
    "mid_step": 4,
    "learning_rate": 1e-5,
    "entropy_coef": 0.01,
    "temperature": 1.0,
    "max_completion_length": 96,
    "eval_split": "test",
    "eval_problems": 32,
    "eval_samples": 4,
    "eval_temperature": 1.0,
    "eval_max_new_tokens": 64,
    "eval_seed": 0,
    "eval_batch_size": 32,
    "eval_neutral_format": False,
    "end_eval_samples": None,
}
"""The shared settings of the 8-step study (command-line overrides are recorded in every result). Chosen on the
validation split and for time: see ``docs/reproduction.md``. ``end_eval_samples``: samples per problem of the start
and end evaluations (None: ``eval_samples``; the middle one keeps ``eval_samples``)."""

COLLAPSE = {
    **SETTINGS,
    "levels": ["one_digit"],
    "prompts_per_step": 4,
    "num_generations": 4,
    "max_steps": 30,
    "mid_step": 15,
    "learning_rate": 3e-5,
    "entropy_coef": 0.01,  # chosen on validation: at 0.0 pass@16 did not fall (docs/reproduction.md)
    "max_completion_length": 64,
    "eval_split": "test",
    "eval_problems": 32,
    "eval_samples": 4,
    "end_eval_samples": 16,  # the training format's start and end; the neutral format keeps eval_samples
    "eval_batch_size": 64,
    "eval_neutral_format": True,
    "share_prompt_forward": True,  # each group's prompt run once in the loss and scoring forwards: 0.50x the time
}
"""The collapse-regime study (issue 28 item 3): one-digit problems, 4 prompts x 4 samples, 30 steps at lr 3e-5, where
plain GRPO's online-token entropy collapses; held-out in both prompt formats, pass@k up to 16 at the start and end.
Chosen on the validation split (``--set eval_split '"validation"'``; ``docs/reproduction.md``)."""

GUIDANCE = {
    **COLLAPSE,
    "levels": ["two_digit", "two_plus_one"],
    "max_steps": 20,
    "mid_step": 10,
    "eval_problems": 128,  # every test (or validation) problem of the two levels: an interval of about +-0.05
}
"""The guidance study (issue 47): levels where the policy starts with mostly all-wrong groups of 4 (0.60 and 0.80 of
them on validation, ``benchmarks/results/guidance/setting.md``) and every teacher style fits the 64-token budget; the
collapse study's step settings otherwise (4 prompts x 4 samples, lr 3e-5, entropy coefficient 0.01), 20 steps. The
pilots ran with ``--set eval_split '"validation"'``; docs/reproduction.md writes the criterion down."""

PRESETS = {"ladder": (SETTINGS, OUT),
           "collapse": (COLLAPSE, REPO / "benchmarks" / "results" / "collapse"),
           "guidance": (GUIDANCE, REPO / "benchmarks" / "results" / "guidance")}
"""``--preset``: the shared settings and the default output folder of each study."""

METHODS = {
    "grpo": ("GRPO", "grpo", {}),
    "oger": ("OGER", "oger", {}),
    "oger_noreward": ("OGER w/o reward (LUFFY-style)", "oger", {"use_exploration_reward": False}),
    "ase": ("ASE-GRPO", "ase", {}),
    "oger_ase": ("OGER + ASE", "oger_ase", {}),
    "oger_batchscale": ("OGER, scale_rewards=batch", "oger", {"scale_rewards": "batch"}),
    "oger_norefine": ("OGER w/o refinement", "oger", {"entropy_refinement": False}),
    "ase_random": ("ASE, random directions", "ase", {"bank_control": "random_directions"}),
    "sft": ("SFT on the teacher solutions", "sft", {}),
    "exgrpo": ("ExGRPO", "exgrpo", {}),
    "dynamic": ("GRPO + dynamic sampling (DAPO)", "dynamic", {}),
}
"""``name: (label, kind, option overrides)``; kinds: ``grpo`` (the driver with the probe only), ``oger``, ``ase``,
``oger_ase``, ``exgrpo`` (its replay buffer, the authors' defaults), ``dynamic`` (DAPO's dynamic sampling: flat groups
refused and refilled, at most 3 generation rounds a step, so up to 3x the samples of the others) and ``sft``
(TRL's ``SFTTrainer`` on the same prompts' teacher solutions: ``prompts_per_step x num_generations`` (prompt,
solution) rows a step, as many sequences as an RL step trains on; no probe, no rollouts)."""
CORE = ("grpo", "oger", "oger_noreward", "ase", "oger_ase")
CONTROLS = ("oger_batchscale", "oger_norefine", "ase_random")


STEERED = ("ase", "oger_ase")
"""Kinds whose runs steer rollouts: they peak above 11 GB on the embedded policy, so two of them at once do not fit a
24 GB machine; :func:`next_run` never starts one beside another."""


def next_run(todo: list[tuple[str, int]], running: list[str]) -> tuple[str, int] | None:
    """The first ``(method, seed)`` of ``todo`` that may start beside the ``running`` methods, removed from ``todo``.

    A steered run (kind in :data:`STEERED`) is skipped while another steered run is going; ``None`` when every
    remaining run must wait. With nothing running the first run always starts.
    """
    busy = any(METHODS[m][1] in STEERED for m in running)
    for i, (method, _) in enumerate(todo):
        if not (busy and METHODS[method][1] in STEERED):
            return todo.pop(i)
    return None


def run_dir(out: pathlib.Path, method: str, seed: int) -> pathlib.Path:
    return out / "runs" / method / f"seed{seed}"


def commit_result(path: pathlib.Path, message: str, tries: int = 30) -> bool:
    """``git commit`` of one finished run's ``result.json`` alone (``--commit``: hours of runs must not wait for a
    person to land); retried while another git command holds the index. False (with the reason) when it fails."""
    where = str(path.parent)  # the repository holding --out (the study may run from a frozen clone of the code)
    cmd = ["git", "-C", where, "add", "--", path.name]
    commit = ["git", "-C", where, "commit", "-q", "--no-verify", "-m", message, "--", path.name]
    for _ in range(tries):
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode == 0:
            done = subprocess.run(commit, capture_output=True, text=True)
        if done.returncode == 0:
            return True
        if "index.lock" not in done.stderr:
            break
        time.sleep(2)
    print(f"[dynamics] could not commit {path}: {done.stderr.strip()}", flush=True)
    return False


def end_samples(settings: dict, prompt_format: str = "training") -> int:
    """Samples per problem of the start and end evaluations in ``prompt_format`` (the neutral format keeps
    ``eval_samples``: a second format at k = 16 would double the study's evaluation time)."""
    if prompt_format != "training":
        return settings["eval_samples"]
    return settings.get("end_eval_samples") or settings["eval_samples"]


def formats(settings: dict) -> tuple[str, ...]:
    return ("training", "neutral") if settings.get("eval_neutral_format") else ("training",)


def eval_options(settings: dict, num_samples: int | None = None):
    from trl_explore.evaluation.heldout import HeldoutEvalArguments

    return HeldoutEvalArguments(eval_heldout=True, eval_split=settings["eval_split"], eval_levels=settings["levels"],
                                eval_problems=settings["eval_problems"],
                                eval_samples=num_samples or settings["eval_samples"],
                                eval_temperature=settings["eval_temperature"], eval_seed=settings["eval_seed"],
                                eval_max_new_tokens=settings["eval_max_new_tokens"],
                                eval_batch_size=settings["eval_batch_size"],
                                eval_neutral_format=bool(settings.get("eval_neutral_format")))


def start_eval(out: pathlib.Path, settings: dict) -> dict:
    """The initial policy's held-out evaluation (one for every run: the same weights, the same sampling seed), in
    each prompt format: ``summary``/``result`` are the training format's, ``by_format`` holds every format's."""
    from trl_explore.evaluation.heldout import evaluate_heldout
    from trl_explore.sampling.backends import load_policy

    path = out / "start_eval.json"
    key = {k: settings[k] for k in settings if k.startswith("eval_") or k in ("levels", "max_completion_length")}
    key["end_eval_samples"] = settings.get("end_eval_samples")
    key = {k: v for k, v in key.items() if v is not None and not (k == "eval_neutral_format" and not v)}
    if path.is_file():
        saved = json.loads(path.read_text())
        if saved["key"] == key:
            return saved
    model, tokenizer = load_policy("embedded")
    by_format = {}
    for prompt_format in formats(settings):
        o = eval_options(settings, end_samples(settings, prompt_format))
        result = evaluate_heldout(model, tokenizer, split=o.eval_split, levels=o.eval_levels,
                                  num_problems=o.eval_problems, num_samples=o.eval_samples,
                                  temperature=o.eval_temperature, max_new_tokens=o.eval_max_new_tokens,
                                  seed=o.eval_seed, batch_size=o.eval_batch_size, prompt_format=prompt_format)
        by_format[prompt_format] = {"summary": result.summary(), "result": result.to_dict()}
    saved = {"key": key, **by_format["training"], "by_format": by_format}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(saved, indent=1))
    return saved


def build_trainer(method: str, seed: int, settings: dict, folder: pathlib.Path):
    """The trainer of one run: the method's components and the probe, on the ladder's training split."""
    from trl_explore.data.ladder import ladder_dataset
    from trl_explore.driver import ExplorationTrainer
    from trl_explore.driver.config import ExplorationConfig
    from trl_explore.evaluation.probes import DynamicsProbe

    _, kind, overrides = METHODS[method]
    common = dict(
        output_dir=str(folder / "trainer"), per_device_train_batch_size=settings["prompts_per_step"] *
        settings["num_generations"], num_generations=settings["num_generations"], max_steps=settings["max_steps"],
        learning_rate=settings["learning_rate"], entropy_coef=settings["entropy_coef"], beta=0.0,
        temperature=settings["temperature"], max_completion_length=settings["max_completion_length"], logging_steps=1,
        save_strategy="no", report_to="none", bf16=False, use_cpu=True, seed=seed, gradient_checkpointing=False,
        log_completions=False, disable_tqdm=True, share_prompt_forward=settings.get("share_prompt_forward", False),
    )  # fmt: skip
    components = []
    train = ladder_dataset(levels=settings["levels"], max_length=settings["max_completion_length"] - 1)["train"]
    if kind == "sft":
        return build_sft(common, overrides, train)
    if kind == "grpo":
        args = ExplorationConfig(**common, **overrides)
    elif kind == "exgrpo":
        from trl_explore.exgrpo.component import ExGRPOComponent
        from trl_explore.exgrpo.config import ExGRPOConfig
        from trl_explore.exgrpo.options import ExGRPOOptions

        args = ExGRPOConfig(**common, **overrides)
        components = [ExGRPOComponent(ExGRPOOptions.from_config(args))]
    elif kind == "dynamic":
        from trl_explore.dynamic_sampling.component import DynamicSamplingComponent
        from trl_explore.dynamic_sampling.config import DynamicSamplingConfig
        from trl_explore.dynamic_sampling.options import DynamicSamplingOptions

        args = DynamicSamplingConfig(**common, **overrides)
        components = [DynamicSamplingComponent(DynamicSamplingOptions.from_config(args))]
    elif kind == "oger":
        from trl_explore import OGERConfig
        from trl_explore.oger.component import OGERComponent
        from trl_explore.oger.options import OGEROptions

        args = OGERConfig(**common, embedding_model="embedded", **overrides)
        components = [OGERComponent(OGEROptions.from_config(args))]
    else:
        from trl_explore.ase.component import ASEComponent
        from trl_explore.ase.options import ASEOptions

        ase = dict(min_pairs_per_cluster=2)  # 2 prompts x up to 16 pairs a step (the CPU recipes' value)
        if kind == "ase":
            from trl_explore import ASEConfig

            args = ASEConfig(**common, **ase, **overrides)
            components = [ASEComponent(ASEOptions.from_config(args))]
        else:
            from trl_explore.oger.component import OGERComponent
            from trl_explore.oger.options import OGEROptions
            from trl_explore.oger_ase import OGERASEConfig

            args = OGERASEConfig(**common, **ase, embedding_model="embedded", **overrides)
            components = [OGERComponent(OGEROptions.from_config(args)), ASEComponent(ASEOptions.from_config(args))]
    return ExplorationTrainer("embedded", args=args, train_dataset=train, components=[*components, DynamicsProbe()])


def build_sft(common: dict, overrides: dict, train):
    """The SFT baseline's trainer (:func:`trl_explore.sft.build_sft_trainer`, as ``examples/train_sft.py`` builds it):
    TRL's ``SFTTrainer`` on the teacher solutions of the RL runs' training prompts, with the RL runs' steps, learning
    rate, seed and sequences a step; the loss covers the solution tokens only."""
    from trl import ModelConfig

    from trl_explore.sft import SFTBaselineConfig, build_sft_trainer

    rl_only = ("num_generations", "entropy_coef", "beta", "temperature", "log_completions",
               "share_prompt_forward")
    sft = {k: v for k, v in common.items() if k not in rl_only}
    args = SFTBaselineConfig(**sft, max_length=512, **overrides)
    trainer, _ = build_sft_trainer("embedded", args, ModelConfig(), train, None)
    return trainer


def code_version() -> str | None:
    """The commit of the code that ran (and whether it had uncommitted changes), for the record."""
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "trl_explore", "benchmarks"],
                           capture_output=True, text=True)
    if head.returncode:
        return None
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def run_one(method: str, seed: int, settings: dict, out: pathlib.Path) -> None:
    """Train one (method, seed), with held-out evaluations after the middle step and at the end; write result.json."""
    from trl_explore.evaluation.heldout_evaluator import HeldoutEvaluator, heldout_callback

    folder = run_dir(out, method, seed)
    start, code = time.perf_counter(), code_version()  # the code as the run starts (a long study commits results)
    trainer = build_trainer(method, seed, settings, folder)
    evaluator = HeldoutEvaluator(trainer, eval_options(settings))
    trainer.add_callback(heldout_callback(evaluator, [settings["mid_step"]]))
    build_seconds = time.perf_counter() - start
    trainer.train()
    by_format = {f: {label: {"summary": r.summary(), "result": r.to_dict()} for label, r in results.items()}
                 for f, results in evaluator.by_format.items()}
    for prompt_format in evaluator.formats:  # the end: as many samples as the start (pass@k up to the same k)
        end = HeldoutEvaluator(trainer, eval_options(settings, end_samples(settings, prompt_format)))
        end.formats = (prompt_format,)
        end("end")
        result = end.by_format[prompt_format]["end"]
        by_format[prompt_format]["end"] = {"summary": result.summary(), "result": result.to_dict()}
    heldout = by_format["training"]
    ase = [c for c in getattr(trainer, "components", ()) if c.name == "ase"]
    banks = ase[0].bank_diagnostics if ase else None
    result = {"method": method, "label": METHODS[method][0], "seed": seed, "settings": settings,
              "log_history": trainer.state.log_history, "heldout": heldout, "heldout_by_format": by_format,
              "bank_diagnostics": banks,
              "build_seconds": build_seconds, "seconds": time.perf_counter() - start,
              "load": os.getloadavg(), "code": code}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "result.json").write_text(json.dumps(result, indent=1, default=float))


def workers(args) -> int:
    """Runs at once: ``--workers-file``'s number when that file holds one, else ``--workers``."""
    try:
        return max(1, int(args.workers_file.read_text().strip()))
    except (AttributeError, OSError, ValueError):
        return args.workers


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=list(CORE) + list(CONTROLS), choices=list(METHODS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--preset", choices=list(PRESETS), default="ladder",
                        help="the study: 'ladder' (8 steps, issue 23), 'collapse' (30 steps where GRPO collapses) or "
                             "'guidance' (20 steps where most groups start all wrong, issue 47)")
    parser.add_argument("--out", type=pathlib.Path, default=None, help="default: the preset's folder")
    parser.add_argument("--threads", type=int, default=None, help="torch threads of each run (default: torch's)")
    parser.add_argument("--workers", type=int, default=1,
                        help="runs at once (on a 2-core machine: 2 workers with --threads 1)")
    parser.add_argument("--workers-file", type=pathlib.Path, default=None,
                        help="a file holding a number of workers, read before each start: change it while the study "
                             "runs (e.g. 1 while something else shares the machine, 2 after)")
    parser.add_argument("--report-only", action="store_true", help="aggregate and plot the finished runs only")
    parser.add_argument("--commit", action="store_true",
                        help="git-commit each run's result.json as soon as it ends (long studies)")
    parser.add_argument("--run-one", nargs=2, metavar=("METHOD", "SEED"), help=argparse.SUPPRESS)
    parser.add_argument("--set", nargs=2, action="append", default=[], metavar=("KEY", "JSON"),
                        help="override a shared setting, e.g. --set max_steps 12 (recorded in every result)")
    args = parser.parse_args(argv)
    preset, default_out = PRESETS[args.preset]
    settings = dict(preset)
    args.out = args.out or default_out
    for key, value in args.set:
        if key not in preset:
            parser.error(f"unknown setting {key!r}; settings: {sorted(preset)}")
        settings[key] = json.loads(value)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.run_one:
        run_one(args.run_one[0], int(args.run_one[1]), settings, args.out)
        return
    if not args.report_only:
        start_eval(args.out, settings)
        # seed-major: every method gets its first seed before any gets its second (an interrupted study stays balanced)
        todo = [(m, seed) for seed in args.seeds for m in args.methods
                if not (run_dir(args.out, m, seed) / "result.json").is_file()]
        running: list[tuple[str, int, subprocess.Popen, float, object]] = []
        while todo or running:
            while todo and len(running) < workers(args):
                job = next_run(todo, [entry[0] for entry in running])
                if job is None:  # only steered runs are left and one is going
                    break
                method, seed = job
                print(f"[dynamics] {method} seed {seed} ...", flush=True)
                cmd = [sys.executable, __file__, "--run-one", method, str(seed), "--out", str(args.out),
                       "--preset", args.preset]
                cmd += [x for k, v in args.set for x in ("--set", k, v)]
                cmd += ["--threads", str(args.threads)] if args.threads else []
                log = run_dir(args.out, method, seed) / "log.txt"
                log.parent.mkdir(parents=True, exist_ok=True)
                f = open(log, "w")  # closed when the run ends
                running.append((method, seed, subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT),
                                time.perf_counter(), f))
            time.sleep(2)
            for entry in [e for e in running if e[2].poll() is not None]:
                method, seed, proc, began, f = entry
                f.close()
                running.remove(entry)
                print(f"[dynamics] {method} seed {seed}: exit {proc.returncode} after "
                      f"{time.perf_counter() - began:.0f} s (load {os.getloadavg()[0]:.1f})", flush=True)
                result = run_dir(args.out, method, seed) / "result.json"
                if args.commit and proc.returncode == 0 and result.is_file():
                    commit_result(result, f"{args.preset} study: {method} seed {seed} ({args.out.name})")
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    if args.preset == "guidance":
        from guidance_report import report
    elif args.preset == "collapse":
        from collapse_report import report
    else:
        from dynamics_report import report

    report(args.out, METHODS)


if __name__ == "__main__":
    main()
