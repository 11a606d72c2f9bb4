"""How OGER's added per-step cost and the ASE bank update scale with the problem size (CPU).

Run (package installed, e.g. ``pip install -e .``; CPU only, offline):
``python benchmarks/scaling.py [--quick] [--parts components,steps,bank]``
(default: under 10 minutes on 2 CPU cores, 572 s measured with ``--threads 1`` on a busy shared host;
``--quick``: about a minute). Writes
``benchmarks/results/scaling_cpu.{json,md}`` and ``scaling_*.png`` next to them; ``--replot JSON`` redraws the
markdown and plots from a results file.

What is measured (medians over ``--repeats``, min-max shown; one prompt per step, so a step has ``B = N`` rows):

1. OGER components, timed directly on the functions the trainer calls (``trl_explore/oger/trainer.py``):

   * ``embed``: ``TrajectoryEncoder.encode`` of the N online completions of L policy tokens, for three embedders:
     the bundled all-MiniLM-L6-v2 (6 layers, 384-d, reads 256 word pieces) and randomly initialised BERTs of
     bge-base's shape (12 layers, 768-d) and bge-large's shape (24 layers, 1024-d, the paper's encoder), both
     reading 512 word pieces (``benchmarks/bench_models.py``). Texts are real teacher solutions from CHAMP, cut
     to L tokens of the SmolLM2 tokenizer.
   * ``H_last``: the work of the last-token-entropy recorder, ``entropy_from_logits`` on one ``[N, V]`` logits
     table (V = 49,152) once per generation, plus its per-step keep of the live rows' logits (one ``[N, V]``
     select per decoding step once a row has ended), L times. (Results files from before issue 13 hold the old
     hook: one entropy per decoding step.)
   * per prompt group, for M offline trajectories: ``offline lookup`` (``encode_cached`` on a warm cache: hashing
     the M teacher texts), ``divergence`` (Eq. 3-5 on ``[N, d] x [M, d]``), ``reward`` (``OGERRewardFunction``
     with the divergence and entropy given and a stub verifier: math-verify runs for GRPO anyway and is
     memoised) and ``replacement`` (``select_replacements`` + ``sample_offline_indices`` + tokenising, cutting
     and decoding the chosen teacher text, as ``OGERTrainer._generate`` does).

   Their sum is OGER's added work per step; it is shown as a fraction of a plain GRPO step of the tiny model
   (2-layer Llama, SmolLM2 tokenizer, as in ``overhead.py``) at the same N and L.
2. Full training steps (``overhead.run_once``): TRL ``GRPOTrainer`` and ``OGERTrainer`` with its defaults
   (replacement + exploration reward, MiniLM embedder) interleaved at each point of the N axis and the L axis,
   1 warm-up step dropped, generation forced to L tokens. The ratio OGER / GRPO per point is the measured
   overhead, replacement included (a replaced completion is a short teacher text, so it also changes the
   training work slightly).
3. ASE bank estimation: ``SteeringVectorBank.update`` (contrast pairs, PCA to 64, K-means with 16 restarts,
   matching, EMA) on random activations, versus the number of contrast pairs, the hidden size d (576: SmolLM2,
   1536: Qwen2.5-1.5B, 4096: 7-8B models) and K, with one BLAS thread as in ``ASEGRPOTrainer``. The first update
   of each bank is a warm-up; the timed ones include matching and EMA. Random activations are a pessimistic case
   for K-means (no cluster structure, more iterations).

Timings on a shared host are noisy: the ratios in part 2 come from interleaved runs; absolute times in parts 1
and 3 are medians over repeats and are best read as orders of magnitude.
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
import bench_models
import overhead

RESULTS = pathlib.Path(__file__).resolve().parent / "results"

# axes and reference points of the default run and of --quick
PRESETS = {
    "default": {
        "generations": [4, 8, 16], "lengths": [32, 64, 128, 256], "teachers": [1, 2, 4, 8],
        "ref_generations": 8, "ref_length": 128, "ref_teachers": 4,
        "embedders": ["minilm", "bge-base", "bge-large"],
        "step_points": "axes", "step_repeats": 2, "steps": 2, "repeats": 3,
        "bank_dims": [576, 1536, 4096], "bank_pairs": [128, 512, 2048, 8192], "bank_ks": [2, 3, 4, 8],
        "ref_pairs": 2048, "ref_k": 3,
    },
    "quick": {
        "generations": [4, 8], "lengths": [32, 128], "teachers": [1, 4],
        "ref_generations": 8, "ref_length": 128, "ref_teachers": 4,
        "embedders": ["minilm", "bge-base", "bge-large"],
        "step_points": "lengths", "step_repeats": 1, "steps": 1, "repeats": 2,
        "bank_dims": [576, 4096], "bank_pairs": [128, 2048], "bank_ks": [2, 8],
        "ref_pairs": 2048, "ref_k": 3,
    },
}
COMPONENTS = ["H_last", "offline lookup", "divergence", "reward", "replacement"]


# ----------------------------------------------------------------------------------------------- helpers
def timed(fn, repeats: int, warmup: int = 1, inner: int = 1) -> list[float]:
    """Seconds per call of ``fn``: ``repeats`` samples, each the mean of ``inner`` calls, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - start) / inner)
    return samples


def stats(xs: list[float]) -> dict:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def teacher_token_windows(tokenizer, count: int, length: int) -> list[list[int]]:
    """``count`` token sequences of exactly ``length`` policy tokens, each the start of a different CHAMP solution.

    Falls back to varied synthetic arithmetic text when ``champ-dataset`` is not installed.
    """
    try:
        from trl_explore.defaults import champ_problems

        texts = (m["text"] for p in champ_problems() for c in p["conversations"].values() for m in c
                 if m["role"].startswith("Model.") and m["text"])
    except ImportError:
        texts = (" ".join(f"Step {k}: {i} * {k} = {i * k}, so we carry the {k % 7}." for k in range(60))
                 for i in range(10_000))
    windows = []
    for text in texts:
        ids = tokenizer(text[: 8 * length], add_special_tokens=False)["input_ids"]
        if len(ids) >= length:
            windows.append(ids[:length])
            if len(windows) == count:
                return windows
    raise RuntimeError(f"found only {len(windows)} texts of {length} tokens")


class TextBank:
    """Online completions and offline teacher texts of a given token length, cut once per length."""

    def __init__(self, tokenizer, max_online: int, max_offline: int):
        self.tokenizer, self.max_online, self.max_offline = tokenizer, max_online, max_offline
        self._cache: dict[int, tuple[list[str], list[str]]] = {}

    def get(self, length: int) -> tuple[list[str], list[str]]:
        if length not in self._cache:
            ids = teacher_token_windows(self.tokenizer, self.max_online + self.max_offline, length)
            texts = [self.tokenizer.decode(x) for x in ids]
            self._cache[length] = (texts[: self.max_online], texts[self.max_online:])
        return self._cache[length]


def make_encoder(name: str, work_dir: str):
    from trl_explore.oger.embedding import TrajectoryEncoder

    path = "embedded" if name == "minilm" else bench_models.resolve_embedder(f"{name}-random", work_dir)
    encoder = TrajectoryEncoder(path, device="cpu", batch_size=32)
    _ = encoder.dim  # load now, outside the timings
    return encoder


# ----------------------------------------------------------------------------------------------- part 1
def measure_embedding(encoder, name: str, texts: TextBank, points, repeats: int, log) -> list[dict]:
    rows = []
    for n, length in points:
        online = texts.get(length)[0][:n]
        word_pieces = [min(len(x), encoder.model.max_seq_length)
                       for x in encoder.model.tokenizer(online, add_special_tokens=True)["input_ids"]]
        encoder.encode(online[:2])  # warm-up on a small batch (the big models are slow on 2 cores)
        seconds = timed(lambda online=online: encoder.encode(online), repeats, warmup=0)
        rows.append({"embedder": name, "N": n, "L": length, "dim": encoder.dim, "seconds": seconds,
                     "embedder_tokens_mean": statistics.mean(word_pieces),
                     "max_seq_length": int(encoder.model.max_seq_length)})
        log(f"embed {name:9s} N={n:3d} L={length:4d}: {statistics.median(seconds) * 1e3:8.1f} ms "
            f"({statistics.mean(word_pieces):.0f} word pieces)")
    return rows


def measure_entropy(vocab_size: int, points, repeats: int, log) -> list[dict]:
    from trl_explore.oger.entropy import entropy_from_logits

    rows = []
    for n, length in points:
        logits = torch.randn(n, vocab_size)

        live = torch.arange(n) % 2 == 0

        def hook_work(logits=logits, length=length, live=live):
            held = logits
            for _ in range(length):
                held = torch.where(live.unsqueeze(1), logits, held)
            entropy_from_logits(held)

        seconds = timed(hook_work, repeats)
        rows.append({"N": n, "L": length, "V": vocab_size, "seconds": seconds})
        log(f"H_last     N={n:3d} L={length:4d}: {statistics.median(seconds) * 1e3:8.1f} ms")
    return rows


def measure_group(encoder, tokenizer, texts: TextBank, n: int, m: int, length: int, dim: int, repeats: int) -> dict:
    """The per-prompt-group work of OGERTrainer._generate besides embedding (seconds per group)."""
    from trl_explore.oger.exploration import divergence
    from trl_explore.oger.replacement import (
        offline_completion_ids,
        sample_offline_indices,
        select_replacements,
    )
    from trl_explore.oger.reward import OGERRewardFunction

    online_texts, offline_texts = texts.get(length)
    online_texts, offline_texts = online_texts[:n], offline_texts[:m]
    if dim == encoder.dim:
        online = encoder.encode(online_texts)
        offline = encoder.encode_cached(offline_texts)
    else:  # another embedder's width: random unit vectors do the same arithmetic
        online = torch.nn.functional.normalize(torch.randn(n, dim), dim=1)
        offline = torch.nn.functional.normalize(torch.randn(m, dim), dim=1)
    div = divergence(online, offline)
    entropy = torch.rand(n).tolist()
    reward_fn = OGERRewardFunction(verifier=lambda completions, **_: [1.0] * len(completions))
    reward_kwargs = {"is_offline": [False] * n, "oger_divergence": div.tolist(), "last_token_entropy": entropy}
    prompts = ["What is 2 + 2?"] * n
    generator = torch.Generator().manual_seed(0)
    eos = tokenizer.eos_token_id

    def replacement():
        chosen = select_replacements(div, 1)
        pick = sample_offline_indices(m, len(chosen), generator)[0]
        tokens = tokenizer(offline_texts[pick], add_special_tokens=False)["input_ids"]
        tokenizer.decode(offline_completion_ids(tokens, length, eos), skip_special_tokens=True)

    inner = 20
    return {
        "N": n, "M": m, "L": length, "dim": dim,
        "offline lookup": timed(lambda: encoder.encode_cached(offline_texts), repeats, inner=inner),
        "divergence": timed(lambda: divergence(online, offline), repeats, inner=inner),
        "reward": timed(lambda: reward_fn(prompts=prompts, completions=online_texts, completion_ids=None,
                                          **reward_kwargs), repeats, inner=inner),
        "replacement": timed(replacement, repeats, inner=inner),
    }


def run_components(cfg: dict, tokenizer, log) -> dict:
    gens, lengths, teachers = cfg["generations"], cfg["lengths"], cfg["teachers"]
    n_ref, l_ref, m_ref = cfg["ref_generations"], cfg["ref_length"], cfg["ref_teachers"]
    texts = TextBank(tokenizer, max(gens), max(teachers))
    grid = [(n, length) for n in gens for length in lengths]
    axes = sorted({(n_ref, length) for length in lengths} | {(n, l_ref) for n in gens})
    out = {"embed": [], "entropy": [], "group": []}
    with tempfile.TemporaryDirectory(prefix="scaling-embedders-") as work_dir:
        encoders = {}
        for name in cfg["embedders"]:
            t0 = time.perf_counter()
            encoders[name] = make_encoder(name, work_dir)
            log(f"embedder {name}: d={encoders[name].dim}, built/loaded in {time.perf_counter() - t0:.1f} s")
            points = grid if name == "minilm" else axes  # the large ones only along the two axes
            out["embed"] += measure_embedding(encoders[name], name, texts, points, cfg["repeats"], log)
            if name != "minilm":
                del encoders[name]  # free the memory of the big random models
        out["entropy"] = measure_entropy(len(tokenizer), grid, cfg["repeats"], log)
        minilm = encoders.get("minilm") or make_encoder("minilm", work_dir)
        dims = sorted({384} | {bench_models.EMBEDDER_SHAPES[e]["hidden_size"] for e in cfg["embedders"]
                               if e != "minilm"})
        group_points = sorted({(n, m, l_ref, 384) for n in gens for m in teachers}
                              | {(n_ref, m, l_ref, d) for m in teachers for d in dims}
                              | {(n_ref, m_ref, length, 384) for length in lengths})
        for n, m, length, d in group_points:
            out["group"].append(measure_group(minilm, tokenizer, texts, n, m, length, d, cfg["repeats"]))
        log(f"per-group costs measured at {len(group_points)} points")
    return out


# ----------------------------------------------------------------------------------------------- part 2
def run_steps(cfg: dict, tokenizer, log) -> list[dict]:
    n_ref, lengths, gens = cfg["ref_generations"], cfg["lengths"], cfg["generations"]
    l_step = cfg["ref_length"]
    points = [(n_ref, length) for length in lengths]
    if cfg["step_points"] == "axes":
        points += [(n, l_step) for n in gens if n != n_ref]
    overhead._install_profiling_capture()
    rows = []
    for n, length in points:
        a = overhead.build_parser().parse_args([
            "--batch-size", str(n), "--num-generations", str(n), "--max-completion-length", str(length),
            "--steps", str(cfg["steps"]),
        ])
        a.embedder_path = "embedded"
        dataset = overhead.synthetic_dataset(max(1 + a.steps, 4))
        runs = []
        for rep in range(cfg["step_repeats"]):
            for variant in ("grpo", "oger_full"):
                r = overhead.run_once(variant, "tiny", tokenizer, dataset, a)
                r["repeat"] = rep
                runs.append(r)
                log(f"step N={n:3d} L={length:4d} rep {rep} {variant:9s}: step_time "
                    f"{statistics.median(r['step_time']):.2f} s")
        rows.append({"N": n, "L": length, "runs": runs})
    return rows


def step_summary(row: dict) -> dict:
    """Median step times of the two variants and the OGER / GRPO ratio with its per-repeat min-max."""
    def times(variant, rep=None):
        return [x for r in row["runs"] if r["variant"] == variant and (rep is None or r["repeat"] == rep)
                for x in r["step_time"]]

    grpo, oger = statistics.median(times("grpo")), statistics.median(times("oger_full"))
    reps = sorted({r["repeat"] for r in row["runs"]})
    per_rep = [statistics.mean(times("oger_full", k)) / statistics.mean(times("grpo", k)) for k in reps]
    encode = [r["phases"].get("oger: encoder.encode (online)", 0.0) for r in row["runs"]
              if r["variant"] == "oger_full"]
    return {"N": row["N"], "L": row["L"], "grpo": grpo, "oger_full": oger, "ratio": oger / grpo,
            "ratio_min": min(per_rep), "ratio_max": max(per_rep), "encode_in_step": statistics.median(encode)}


# ----------------------------------------------------------------------------------------------- part 3
def run_bank(cfg: dict, repeats: int, log) -> list[dict]:
    from bank_update import synthetic_step

    from trl_explore.ase.bank import SteeringVectorBank

    points = sorted({(d, p, cfg["ref_k"]) for d in cfg["bank_dims"] for p in cfg["bank_pairs"]}
                    | {(d, cfg["ref_pairs"], k) for d in cfg["bank_dims"] for k in cfg["bank_ks"]})
    rows = []
    for d, pairs, k in points:
        activations, problem_ids, rewards = synthetic_step(pairs // 16, d)  # N = 8, 4 correct: 16 pairs a prompt
        bank = SteeringVectorBank(d, k, kmeans_n_init=16, num_threads=1)
        start = time.perf_counter()
        bank.update(activations, problem_ids, rewards)
        first = time.perf_counter() - start
        seconds = timed(lambda bank=bank, x=activations, ids=problem_ids, y=rewards: bank.update(x, ids, y),
                        repeats, warmup=0)
        rows.append({"d": d, "pairs": pairs, "K": k, "first": first, "seconds": seconds})
        log(f"bank d={d:5d} pairs={pairs:5d} K={k}: {statistics.median(seconds) * 1e3:8.1f} ms "
            f"(first {first * 1e3:.0f} ms)")
    return rows


# ----------------------------------------------------------------------------------------------- report
def _find(rows, **keys):
    for r in rows:
        if all(r.get(k) == v for k, v in keys.items()):
            return r
    return None


def _med(row, key="seconds"):
    return statistics.median(row[key]) if row else None


def oger_added(results: dict, embedder: str, n: int, length: int) -> dict | None:
    """Estimated OGER work per step (seconds) at (N, L): embedding + H_last + one group at the reference M."""
    comp = results.get("components")
    if not comp:
        return None
    cfg = results["config"]
    embed = _find(comp["embed"], embedder=embedder, N=n, L=length)
    entropy = _find(comp["entropy"], N=n, L=length)
    group = (_find(comp["group"], N=n, M=cfg["ref_teachers"], L=length, dim=384)
             or _find(comp["group"], N=n, M=cfg["ref_teachers"], L=cfg["ref_length"], dim=384)
             or _find(comp["group"], N=n, L=cfg["ref_length"], dim=384))
    if embed is None or entropy is None or group is None:
        return None
    per_group = sum(_med(group, c) for c in COMPONENTS[1:])
    return {"embed": _med(embed), "H_last": _med(entropy), "group": per_group,
            "total": _med(embed) + _med(entropy) + per_group}


def _ms(x):
    return "" if x is None else (f"{x * 1e3:.1f}" if x >= 0.01 else f"{x * 1e3:.2f}")


def _grpo_step(results, n, length):
    for s in results.get("steps_summary", []):
        if s["N"] == n and s["L"] == length:
            return s
    return None


def markdown(results: dict) -> str:
    m, cfg = results["machine"], results["config"]
    lines = [
        "# Scaling of OGER's added cost and of the ASE bank update (CPU)", "",
        (f"Machine: {m['nproc']} CPU cores (`nproc`), {m['cpu']}; torch {m['torch']} ({m['torch_threads']} threads), "
        f"transformers {m['transformers']}, TRL {m['trl']}, Python {m['python']}; load average at start "
        f"{results['load_start']}, at end {results.get('load_end')}."), "",
        (f"Command: `{results['command']}`; total wall time {results.get('total_wall_s', 0):.0f} s. Medians over "
        f"{cfg['repeats']} repeats (components, bank) and {cfg['step_repeats']} interleaved repeats x {cfg['steps']} "
        "measured steps (full steps); one prompt per step (B = N). See the docstring of `benchmarks/scaling.py`."), "",
    ]
    embedders = sorted({r["embedder"] for r in results.get("components", {}).get("embed", [])},
                       key=lambda e: ["minilm", "bge-base", "bge-large"].index(e))
    for axis, fixed_name, fixed, values in (("L", "N", cfg["ref_generations"], cfg["lengths"]),
                                            ("N", "L", cfg["ref_length"], cfg["generations"])):
        lines += [f"## OGER per step vs {axis} ({fixed_name} = {fixed}, M = {cfg['ref_teachers']} teachers)", "",
                  ("Milliseconds per step. *GRPO step*: TRL `GRPOTrainer` step time of the tiny model (full steps); "
                  "*OGER/GRPO*: measured full-step ratio (min-max over repeats); *embed*: online embeddings; "
                  "*H_last*: entropy hook work; *group*: offline lookup + divergence + reward + replacement; "
                  "*added*: embed + H_last + group as a share of the GRPO step."), ""]
        head = f"| {axis} | GRPO step | OGER/GRPO (full steps) | " + " | ".join(f"embed {e}" for e in embedders)
        head += " | H_last | group | " + " | ".join(f"added ({e})" for e in embedders) + " |"
        lines += [head, "|" + "---|" * (5 + 2 * len(embedders))]
        for v in values:
            n, length = (fixed, v) if axis == "L" else (v, fixed)
            step = _grpo_step(results, n, length)
            est = {e: oger_added(results, e, n, length) for e in embedders}
            anyest = next((x for x in est.values() if x), None)
            cells = [str(v), _ms(step["grpo"]) if step else "",
                     f"{step['ratio']:.3f} ({step['ratio_min']:.3f}-{step['ratio_max']:.3f})" if step else ""]
            cells += [_ms(est[e]["embed"]) if est[e] else "" for e in embedders]
            cells += [_ms(anyest["H_last"]) if anyest else "", _ms(anyest["group"]) if anyest else ""]
            cells += [(f"{est[e]['total'] * 1e3:.0f} ms"
                       + (f" = {100 * est[e]['total'] / step['grpo']:.1f}%" if step else ""))
                      if est[e] else "" for e in embedders]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    comp = results.get("components")
    if comp:
        lines += ["## Embedding time of N online completions (ms; word pieces read per text in brackets)", ""]
        pts = sorted({(r["N"], r["L"]) for r in comp["embed"]})
        lines += ["| N | L | " + " | ".join(embedders) + " |", "|" + "---|" * (2 + len(embedders))]
        for n, length in pts:
            cells = []
            for e in embedders:
                r = _find(comp["embed"], embedder=e, N=n, L=length)
                cells.append(f"{_ms(_med(r))} ({r['embedder_tokens_mean']:.0f}) "
                             f"[{_ms(min(r['seconds']))}-{_ms(max(r['seconds']))}]" if r else "")
            lines.append(f"| {n} | {length} | " + " | ".join(cells) + " |")
        lines += ["", "## Per-group costs vs M (microseconds per prompt group)", "",
                  "| N | M | L | d | " + " | ".join(COMPONENTS[1:]) + " |", "|" + "---|" * (4 + len(COMPONENTS) - 1)]
        for r in comp["group"]:
            lines.append(f"| {r['N']} | {r['M']} | {r['L']} | {r['dim']} | "
                         + " | ".join(f"{_med(r, c) * 1e6:.0f}" for c in COMPONENTS[1:]) + " |")
        lines += ["", "## Last-token entropy hook (ms per step: L log-softmax tables of [N, 49152])", "",
                  "| N \\ L | " + " | ".join(str(x) for x in cfg["lengths"]) + " |",
                  "|" + "---|" * (1 + len(cfg["lengths"]))]
        for n in cfg["generations"]:
            lines.append(f"| {n} | " + " | ".join(_ms(_med(_find(comp["entropy"], N=n, L=x))) for x in cfg["lengths"])
                         + " |")
        lines.append("")
    if results.get("steps_summary"):
        lines += ["## Full training steps (tiny model, GRPO vs OGER full, interleaved)", "",
                  "| N | L | GRPO step (s) | OGER step (s) | OGER/GRPO | per-repeat min-max | encoder in step (ms) |",
                  "|---|---|---|---|---|---|---|"]
        for s in results["steps_summary"]:
            lines.append(f"| {s['N']} | {s['L']} | {s['grpo']:.3f} | {s['oger_full']:.3f} | {s['ratio']:.3f} | "
                         f"{s['ratio_min']:.3f}-{s['ratio_max']:.3f} | {s['encode_in_step'] * 1e3:.0f} |")
        lines.append("")
    if results.get("bank"):
        bank = results["bank"]
        lines += [f"## ASE bank update (ms, median [min-max]; K = {cfg['ref_k']}; 1 BLAS thread)", "",
                  "| pairs \\ d | " + " | ".join(str(d) for d in cfg["bank_dims"]) + " |",
                  "|" + "---|" * (1 + len(cfg["bank_dims"]))]
        for p in cfg["bank_pairs"]:
            cells = []
            for d in cfg["bank_dims"]:
                r = _find(bank, d=d, pairs=p, K=cfg["ref_k"])
                cells.append(f"{_ms(_med(r))} [{_ms(min(r['seconds']))}-{_ms(max(r['seconds']))}]" if r else "")
            lines.append(f"| {p} | " + " | ".join(cells) + " |")
        lines += ["", f"K axis ({cfg['ref_pairs']} pairs):", "",
                  "| K \\ d | " + " | ".join(str(d) for d in cfg["bank_dims"]) + " |",
                  "|" + "---|" * (1 + len(cfg["bank_dims"]))]
        for k in sorted({r["K"] for r in bank}):
            cells = []
            for d in cfg["bank_dims"]:
                r = _find(bank, d=d, pairs=cfg["ref_pairs"], K=k)
                cells.append(f"{_ms(_med(r))} [{_ms(min(r['seconds']))}-{_ms(max(r['seconds']))}]" if r else "")
            lines.append(f"| {k} | " + " | ".join(cells) + " |")
        lines.append("")
    if results.get("plots"):
        lines += ["Plots: " + ", ".join(f"[{p}]({p})" for p in results["plots"]), ""]
    return "\n".join(lines)


def plots(results: dict, out_dir: pathlib.Path, stem: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cfg, written = results["config"], []
    comp = results.get("components")
    colors = {"minilm": "tab:blue", "bge-base": "tab:orange", "bge-large": "tab:red"}
    if comp:
        embedders = [e for e in ("minilm", "bge-base", "bge-large") if any(r["embedder"] == e for r in comp["embed"])]
        fig, axes = plt.subplots(2, 2, figsize=(12, 9))
        for row, (axis, fixed_key, fixed, values) in enumerate((("L", "N", cfg["ref_generations"], cfg["lengths"]),
                                                                ("N", "L", cfg["ref_length"], cfg["generations"]))):
            ax, share = axes[row][0], axes[row][1]

            def point(v, axis=axis, fixed=fixed):
                return (fixed, v) if axis == "L" else (v, fixed)

            for e in embedders:
                ys = [_med(_find(comp["embed"], embedder=e, N=point(v)[0], L=point(v)[1])) for v in values]
                ax.plot(values, ys, "o-", color=colors[e], label=f"embed ({e})")
                est = [oger_added(results, e, *point(v)) for v in values]
                steps = [_grpo_step(results, *point(v)) for v in values]
                xs = [v for v, x, s in zip(values, est, steps) if x and s]
                share.plot(xs, [100 * x["total"] / s["grpo"] for x, s in zip(est, steps) if x and s], "o-",
                           color=colors[e], label=f"components, {e}")
            ax.plot(values, [_med(_find(comp["entropy"], N=point(v)[0], L=point(v)[1])) for v in values],
                    "s--", color="tab:green", label="H_last hook")
            ax.plot(values, [oger_added(results, embedders[0], *point(v))["group"] for v in values],
                    "^--", color="tab:purple", label=f"group (M = {cfg['ref_teachers']})")
            steps = [_grpo_step(results, *point(v)) for v in values]
            xs = [v for v, s in zip(values, steps) if s]
            if xs:
                ax.plot(xs, [s["grpo"] for s in steps if s], "k-", lw=2, label="GRPO step (tiny model)")
                sv = [s for s in steps if s]
                share.errorbar(xs, [100 * (s["ratio"] - 1) for s in sv],
                               yerr=[[100 * (s["ratio"] - s["ratio_min"]) for s in sv],
                                     [100 * (s["ratio_max"] - s["ratio"]) for s in sv]],
                               fmt="k-o", capsize=3, label="full steps, OGER/GRPO - 1 (MiniLM)")
            ax.set(xscale="log", yscale="log", xlabel=axis, ylabel="seconds per step",
                   title=f"OGER components vs {axis} ({fixed_key} = {fixed})")
            ax.minorticks_off()
            ax.set_xticks(values, [str(v) for v in values])
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8, loc="center right")
            share.axhline(0, color="gray", lw=0.8)
            share.set(xscale="log", xlabel=axis, ylabel="% of a GRPO step (tiny model)",
                      title=f"OGER added cost vs {axis} ({fixed_key} = {fixed})")
            share.minorticks_off()
            share.set_xticks(values, [str(v) for v in values])
            share.grid(alpha=0.3)
            share.legend(fontsize=8)
        fig.tight_layout()
        name = f"{stem}_oger.png"
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        written.append(name)

        fig, ax = plt.subplots(figsize=(6.5, 4.5))
        dims = sorted({r["dim"] for r in comp["group"]})
        for d, linestyle in zip(dims, ("-", "--", ":")):
            rows = sorted((r for r in comp["group"] if r["dim"] == d and r["N"] == cfg["ref_generations"]
                           and r["L"] == cfg["ref_length"]), key=lambda r: r["M"])
            for c, color, marker in zip(COMPONENTS[1:], ("tab:blue", "tab:orange", "tab:green", "tab:red"), "os^v"):
                ax.plot([r["M"] for r in rows], [_med(r, c) * 1e6 for r in rows], color=color, marker=marker,
                        linestyle=linestyle, label=f"{c} (d = {d})")
        ax.set(xscale="log", yscale="log", xlabel="M (offline trajectories per prompt)",
               ylabel="microseconds per group",
               title=f"OGER per-group costs vs M (N = {cfg['ref_generations']}, L = {cfg['ref_length']})")
        ax.minorticks_off()
        ax.set_xticks(cfg["teachers"], [str(v) for v in cfg["teachers"]])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        name = f"{stem}_oger_teachers.png"
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        written.append(name)
    if results.get("bank"):
        bank = results["bank"]
        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
        for d in cfg["bank_dims"]:
            rows = sorted((r for r in bank if r["d"] == d and r["K"] == cfg["ref_k"]), key=lambda r: r["pairs"])
            meds = [_med(r) for r in rows]
            left.errorbar([r["pairs"] for r in rows], meds, yerr=[[x - min(r["seconds"]) for x, r in zip(meds, rows)],
                                                                  [max(r["seconds"]) - x for x, r in zip(meds, rows)]],
                          fmt="o-", capsize=3, label=f"d = {d}")
            rows = sorted((r for r in bank if r["d"] == d and r["pairs"] == cfg["ref_pairs"]), key=lambda r: r["K"])
            meds = [_med(r) for r in rows]
            right.errorbar([r["K"] for r in rows], meds, yerr=[[x - min(r["seconds"]) for x, r in zip(meds, rows)],
                                                               [max(r["seconds"]) - x for x, r in zip(meds, rows)]],
                           fmt="o-", capsize=3, label=f"d = {d}")
        left.set(xscale="log", yscale="log", xlabel="contrast pairs", ylabel="seconds per update",
                 title=f"SteeringVectorBank.update vs pairs (K = {cfg['ref_k']})")
        right.set(yscale="log", xlabel="K (steering vectors)", ylabel="seconds per update",
                  title=f"SteeringVectorBank.update vs K ({cfg['ref_pairs']} pairs)")
        left.minorticks_off()
        pairs, ks = sorted({r["pairs"] for r in bank}), sorted({r["K"] for r in bank})
        left.set_xticks(pairs, [str(v) for v in pairs])
        right.set_xticks(ks, [str(v) for v in ks])
        for ax in (left, right):
            ax.grid(alpha=0.3)
            ax.legend()
        fig.tight_layout()
        name = f"{stem}_bank.png"
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        written.append(name)
    return written


def write(results: dict, out: pathlib.Path) -> str:
    out.parent.mkdir(parents=True, exist_ok=True)
    results["plots"] = plots(results, out.parent, out.name)
    out.with_suffix(".json").write_text(json.dumps(results, indent=2, default=str))
    md = markdown(results)
    out.with_suffix(".md").write_text(md)
    return md


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer points and repeats (about a minute on 2 cores)")
    p.add_argument("--parts", default="components,steps,bank",
                   help="comma-separated subset of components (part 1), steps (part 2), bank (part 3)")
    p.add_argument("--repeats", type=int, default=None, help="repeats of each component / bank timing")
    p.add_argument("--step-repeats", type=int, default=None, help="interleaved repeats of the full-step runs")
    p.add_argument("--steps", type=int, default=None, help="measured steps per full-step run (after 1 warm-up)")
    p.add_argument("--embedders", default=None, help="comma-separated subset of minilm,bge-base,bge-large")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--out", default=str(RESULTS / "scaling_cpu"), help="output path without suffix")
    p.add_argument("--replot", default=None, help="only redraw the markdown and plots from an existing results JSON")
    a = p.parse_args()
    if a.replot:
        path = pathlib.Path(a.replot)
        print(write(json.loads(path.read_text()), path.with_suffix("")))
        return
    if a.threads:
        torch.set_num_threads(a.threads)
    cfg = dict(PRESETS["quick" if a.quick else "default"])
    for key in ("repeats", "step_repeats", "steps"):
        if getattr(a, key) is not None:
            cfg[key] = getattr(a, key)
    if a.embedders:
        cfg["embedders"] = a.embedders.split(",")
    parts = set(a.parts.split(","))
    t_all = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - t_all:6.0f}s] {msg}", flush=True)

    tokenizer = overhead.load_tokenizer()
    results = {"machine": overhead.machine_info(), "config": cfg, "command": "python " + " ".join(sys.argv),
               "load_start": " ".join(f"{x:.2f}" for x in os.getloadavg())}
    if "components" in parts:
        results["components"] = run_components(cfg, tokenizer, log)
    if "steps" in parts:
        results["steps"] = run_steps(cfg, tokenizer, log)
        results["steps_summary"] = [step_summary(row) for row in results["steps"]]
    if "bank" in parts:
        results["bank"] = run_bank(cfg, cfg["repeats"], log)
    results["total_wall_s"] = time.perf_counter() - t_all
    results["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(write(results, pathlib.Path(a.out)))


if __name__ == "__main__":
    main()
