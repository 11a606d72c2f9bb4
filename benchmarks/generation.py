"""Generation throughput on a CPU: TRL's HF path, trl_explore's decoder, and vLLM's CPU build, on the same prompts,
in ONE run, as tokens/s and ratios.

    python benchmarks/generation.py [--repeats 3] [--workloads rollout,eval] [--vllm-python .venv-vllm/bin/python]

The two workloads are the main job's (``recipes/oger_smollm2_ladder_cpu.yaml``, the embedded SmolLM2-135M-Instruct):

* ``rollout``: one training batch as TRL samples it: 4 training prompts (ladder ``one_digit`` + ``two_digit``) x 4
  rollouts = 16 rows, temperature 1, at most 96 new tokens, one ``generate`` call;
* ``eval``: the held-out evaluation's sampled part in the training format: the first 64 test problems x 4 samples,
  temperature 1, at most 64 new tokens: the decoder in one call of 256 rows (``eval_batch_size`` now), ``generate`` in
  calls of 64 rows (``eval_batch_size`` before the decoder).

Variants (every one samples at temperature 1 from the same prompts; completions end at the first EOS):

* ``generate_float32``: ``model.generate`` in float32, TRL's default HF path on a CPU (the baseline of the ratios);
* ``generate_bfloat16``: ``model.generate`` under one bfloat16 autocast, the package's rollout path before the decoder
  (its bfloat16 tier);
* ``decode_float32``, ``decode_bfloat16``: :func:`trl_explore.sampling.decode.fast_generate`, the package's path
  now, in either precision;
* ``vllm``: vLLM's CPU build (where ``--vllm-python`` points at an environment that has it, e.g. the vLLM tier's
  ``.venv-vllm``), a separate process: ``LLM.generate`` of the same prompt ids, ``n`` samples per prompt, bfloat16
  (vLLM's CPU default), eager and compiled (``--vllm-modes``); one warm-up call, then the same repeats. vLLM's CPU
  backend pins its process to its own threads.

What is timed: wall seconds of each call (after one untimed warm-up call per variant: the first batch only for the HF
variants, the whole call for vLLM, whose engine compiles), variants interleaved and their order reversed every other
repeat; tokens/s = completion tokens (EOS included) / seconds, medians over repeats. The
package's path is the decoder in the precision ``cpu_precision='auto'`` picks on this CPU (its probe is printed).
Results: ``benchmarks/results/generation_cpu.{json,md}`` (``--out``). Never run beside another benchmark.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import pathlib
import platform
import socket
import statistics
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

WORKLOADS = {
    "rollout": dict(split="train", prompts=4, samples=4, max_new_tokens=96, batch_rows=16, generate_rows=16),
    "eval": dict(split="test", prompts=64, samples=4, max_new_tokens=64, batch_rows=256, generate_rows=64),
}
LEVELS = ["one_digit", "two_digit"]
RESULTS = pathlib.Path(__file__).parent / "results"


def workload_prompts(tokenizer, name: str) -> list[list[int]]:
    """The workload's distinct prompts as token ids (chat template, generation prompt)."""
    from trl_explore.evaluation.heldout import heldout_problems

    spec = WORKLOADS[name]
    rows = heldout_problems("ladder", spec["split"], LEVELS, spec["prompts"])
    prompts = []
    for messages in rows["prompt"]:
        ids = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
        prompts.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
    return prompts


def _left_padded(rows: list[list[int]], pad: int):
    import torch

    width = max(map(len, rows))
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def hf_variant(model, tokenizer, prompts, spec, fast: bool, dtype):
    """A call sampling the workload once with ``generate`` or the decoder; returns the completion tokens made."""
    import torch

    from trl_explore.sampling.decode import fast_generate

    rows = [p for p in prompts for _ in range(spec["samples"])]
    size = spec["batch_rows"] if fast else spec["generate_rows"]
    batches = [_left_padded(rows[i : i + size], tokenizer.pad_token_id) for i in range(0, len(rows), size)]
    eos = tokenizer.eos_token_id
    sample = (lambda **kw: fast_generate(model, **kw)) if fast else model.generate
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bfloat16" else contextlib.nullcontext()

    def run(max_batches: int | None = None) -> int:
        made = 0
        with torch.no_grad(), autocast:
            for ids, mask in batches[:max_batches]:
                out = sample(input_ids=ids, attention_mask=mask, max_new_tokens=spec["max_new_tokens"],
                             do_sample=True, temperature=1.0, top_p=1.0, top_k=0, pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=[eos])
                for row in out[:, ids.shape[1] :].tolist():
                    made += row.index(eos) + 1 if eos in row else len(row)
        return made

    return run


def time_variants(variants: dict, repeats: int, warmup: dict | None = None) -> dict:
    """``{name: {"seconds": [...], "tokens": [...]}}``: one warm-up call each (``warmup[name]``, default the call
    itself), then ``repeats`` interleaved rounds."""
    import torch

    for name, run in variants.items():
        torch.manual_seed(0)
        (warmup or {}).get(name, run)()
    timings = {name: {"seconds": [], "tokens": []} for name in variants}
    names = list(variants)
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else names[::-1]:
            torch.manual_seed(repeat)
            start = time.perf_counter()
            tokens = variants[name]()
            timings[name]["seconds"].append(time.perf_counter() - start)
            timings[name]["tokens"].append(tokens)
    return timings


def vllm_main(args) -> None:
    """In the vLLM environment: time ``LLM.generate`` on each workload and print one JSON line."""
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams

    from trl_explore.defaults import resolve_model_path

    path = resolve_model_path("embedded")
    tokenizer = AutoTokenizer.from_pretrained(path)
    out = {}
    # one in-process engine, as TRL's colocate mode builds it (external_launcher), with 2 GiB of KV cache
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    for mode in args.vllm_modes.split(","):
        llm = LLM(model=path, max_model_len=1024, enforce_eager=mode == "eager", seed=0, max_num_batched_tokens=4096,
                  distributed_executor_backend="external_launcher")
        for workload in args.workloads.split(","):
            spec = WORKLOADS[workload]
            prompts = [{"prompt_token_ids": p} for p in workload_prompts(tokenizer, workload)]

            def run(prompts=prompts, spec=spec, llm=llm) -> int:
                llm.reset_prefix_cache()  # as TRL after each weight sync: every call prefills afresh
                # no per-request seed: vllm-cpu 0.32 rewinds a seeded request's generator on a partial prefill,
                # which its CPU generator refuses ("CPU Generator does not use offset"); the engine's seed=0 holds
                params = SamplingParams(n=spec["samples"], temperature=1.0, max_tokens=spec["max_new_tokens"])
                results = llm.generate(prompts, params, use_tqdm=False)
                return sum(len(c.token_ids) for r in results for c in r.outputs)

            out[f"vllm_{mode}/{workload}"] = time_variants({"vllm": run}, args.repeats)["vllm"]
        del llm
    print("VLLM_RESULT " + json.dumps(out), flush=True)


def summarise(timings: dict) -> dict:
    return {name: {"median_s": statistics.median(t["seconds"]), "tokens": statistics.median(t["tokens"]),
                   "tokens_per_s": statistics.median(k / s for k, s in zip(t["tokens"], t["seconds"]))}
            for name, t in timings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workloads", default="rollout,eval")
    parser.add_argument("--variants", default="generate_float32,generate_bfloat16,decode_float32,decode_bfloat16")
    parser.add_argument("--vllm-python", default=".venv-vllm/bin/python",
                        help="a Python with vLLM's CPU build ('' to skip vLLM)")
    parser.add_argument("--vllm-modes", default="eager,compiled")
    parser.add_argument("--out", default=str(RESULTS / "generation_cpu"))
    parser.add_argument("--only-vllm", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only_vllm:
        return vllm_main(args)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_explore.defaults import resolve_model_path
    from trl_explore.precision import probe_precision

    path = resolve_model_path("embedded")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    probe = probe_precision()
    package_dtype = "bfloat16" if probe.prefers_bfloat16() else "float32"
    print(f"precision probe: {probe.summary()} -> the package's path decodes in {package_dtype}", flush=True)
    results = {"machine": {"cpu": probe.cpu, "threads": torch.get_num_threads(), "torch": torch.__version__,
                           "python": platform.python_version()},
               "probe": {"float32_ms": probe.float32_ms, "bfloat16_ms": probe.bfloat16_ms,
                         "speedup": probe.speedup, "package_dtype": package_dtype},
               "workloads": {}, "config": vars(args)}
    for workload in args.workloads.split(","):
        spec = WORKLOADS[workload]
        prompts = workload_prompts(tokenizer, workload)
        variants = {}
        for name in args.variants.split(","):
            kind, dtype = name.split("_")
            variants[name] = hf_variant(model, tokenizer, prompts, spec, kind == "decode", dtype)
        print(f"{workload}: {len(prompts)} prompts x {spec['samples']} samples, <= {spec['max_new_tokens']} tokens, "
              f"timing {list(variants)} x {args.repeats}", flush=True)
        warmup = {name: functools.partial(run, max_batches=1) for name, run in variants.items()}  # one batch: enough
        results["workloads"][workload] = {"spec": spec, "timings": time_variants(variants, args.repeats, warmup)}
    if args.vllm_python and pathlib.Path(args.vllm_python).exists():
        for mode in args.vllm_modes.split(","):  # one process per engine (a second in-process engine fails)
            print(f"vLLM ({args.vllm_python}, {mode}) ...", flush=True)
            done = subprocess.run([args.vllm_python, __file__, "--only-vllm", "--repeats", str(args.repeats),
                                   "--workloads", args.workloads, "--vllm-modes", mode],
                                  capture_output=True, text=True)
            line = next((ln for ln in done.stdout.splitlines() if ln.startswith("VLLM_RESULT ")), None)
            if line is None:
                print(f"vLLM failed (exit {done.returncode}):\n{done.stderr[-12000:]}", file=sys.stderr)
                continue
            for key, timing in json.loads(line[len("VLLM_RESULT "):]).items():
                name, workload = key.split("/")
                results["workloads"][workload]["timings"][name] = timing
    else:
        print("vLLM: no environment at --vllm-python; skipped", flush=True)

    lines = ["| workload | variant | tokens/s | median s | tokens | x generate_float32 | x package / vLLM |",
             "|---|---|---|---|---|---|---|"]
    for workload, entry in results["workloads"].items():
        summary = entry["summary"] = summarise(entry["timings"])
        base = summary["generate_float32"]["tokens_per_s"] if "generate_float32" in summary else None
        package = summary.get(f"decode_{package_dtype}", {}).get("tokens_per_s")
        for name, s in summary.items():
            ratio = f"{s['tokens_per_s'] / base:.2f}" if base else "-"
            vs = f"{package / s['tokens_per_s']:.2f}" if name.startswith("vllm") and package else ""
            mark = " (package)" if name == f"decode_{package_dtype}" else ""
            lines.append(f"| {workload} | {name}{mark} | {s['tokens_per_s']:.0f} | {s['median_s']:.2f} | "
                         f"{s['tokens']:.0f} | {ratio} | {vs} |")
    print("\n".join(lines))
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    header = (f"# Generation throughput ({time.strftime('%Y-%m-%d')}, {probe.cpu}, {torch.get_num_threads()} threads, "
              f"torch {torch.__version__})\n\n`python benchmarks/generation.py --repeats {args.repeats}`; precision "
              f"probe: {probe.summary()}; the package's path: `decode_{package_dtype}`.\n\n")
    out.with_suffix(".md").write_text(header + "\n".join(lines) + "\n")
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
