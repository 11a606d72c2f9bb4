"""Rollout throughput with vLLM: vLLM vs HF ``generate``, and steered vs unsteered vLLM, as ratios in ONE run.

Run in the vLLM environment (``bash scripts/install_vllm.sh``)::

    .venv-vllm/bin/python benchmarks/vllm_rollout.py [--model embedded] [--batch 16] [--tokens 128] [--repeats 5]

What is timed (wall clock, after one warm-up call of each variant; variants interleaved A B C ... per repeat):

* ``hf``: ``transformers`` ``model.generate`` of the same policy as TRL loads it (the checkpoint's dtype), in a
  separate process with torch's default threads (vLLM's CPU backend pins its own process to one thread), sampling
  at temperature 1, every row forced to ``--tokens`` new tokens. The engine runs in vLLM's default dtype.
* ``vllm``: the colocated engine as TRL builds it (``external_launcher``, ``logprobs=0``), unsteered.
* ``vllm_steered``: the same engine and call inside ``VLLMActivationSteeringGenerator.steering`` with the ASE
  default split of ``--batch`` rollouts over the clean route and K=3 steering routes (one ``generate`` call).
* ``vllm_per_route``: the same, forcing one ``generate`` call per route (the fallback for runners that do not
  expose their batch layout).

Every steered call asserts that the route writer and the steered block ran on every forward pass. The prefix
cache is reset before every vLLM call, as TRL does after each weight sync (otherwise the unsteered calls would
reuse the previous call's prompt cache, which steered prompts, salted per context, never do). The variant
order is reversed on every other repeat (A B C, C B A, ...), so no variant always follows the same one.

The engine is built once per ``--mode`` (``eager`` and/or ``compiled``), steerable (``steerable_vllm``); the
unsteered calls run on the same engine with every route 0. Ratios: median time of a variant over the median of
its baseline. Results: ``benchmarks/results/vllm_rollout_cpu.{json,md}``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import multiprocessing
import os
import pathlib
import platform
import socket
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _prompts(tokenizer, batch: int, num_generations: int) -> list[list[int]]:
    from trl_explore.defaults import champ_problems

    problems = champ_problems()[: batch // num_generations]
    ids = []
    for problem in problems:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": problem["problem"]}], tokenize=False, add_generation_prompt=True
        )
        ids += [tokenizer(text, add_special_tokens=False)["input_ids"]] * num_generations
    return ids


def _hf_worker(conn, path: str, prompts: list[list[int]], tokens: int, threads: int) -> None:
    """HF ``generate`` in its own process: vLLM's CPU backend pins the parent's torch to one thread and makes
    ``torch.set_num_threads`` a no-op, which would handicap HF in the same process. Answers each "run" with seconds."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    pad = tokenizer.pad_token_id
    width = max(len(p) for p in prompts)
    input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    attention = (input_ids != pad).long()
    attention[:, -1] = 1
    conn.send(str(model.dtype))
    while conn.recv() == "run":
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(
                input_ids=input_ids, attention_mask=attention, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                max_new_tokens=tokens, min_new_tokens=tokens, pad_token_id=pad,
            )
        conn.send(time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="embedded", help="policy path or 'embedded' (SmolLM2-135M-Instruct)")
    parser.add_argument("--batch", type=int, default=16, help="rollouts per call (prompts x num_generations)")
    parser.add_argument("--num-generations", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per rollout (forced)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--modes", default="eager,compiled", help="vLLM modes to measure")
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--skip-hf", action="store_true", help="only the vLLM variants (steered vs unsteered)")
    parser.add_argument("--skip-per-route", action="store_true", help="leave out the one-call-per-route variant")
    parser.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results" / "vllm_rollout_cpu"))
    args = parser.parse_args()

    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    import torch
    import vllm
    from transformers import AutoConfig, AutoTokenizer
    from vllm import LLM, SamplingParams

    from trl_explore.ase.routing import balanced_uniform_routes
    from trl_explore.ase.steering.vllm import VLLMActivationSteeringGenerator, steerable_vllm
    from trl_explore.defaults import resolve_model_path

    path = resolve_model_path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompts = _prompts(tokenizer, args.batch, args.num_generations)
    hidden_size = AutoConfig.from_pretrained(path).hidden_size
    routes = balanced_uniform_routes(
        args.batch // args.num_generations, args.num_generations, 3, torch.Generator().manual_seed(0)
    )
    vectors = torch.randn(3, hidden_size, generator=torch.Generator().manual_seed(1))
    vectors = torch.nn.functional.normalize(vectors, dim=1)
    vectors = vectors * 4.0  # about the norm of SmolLM2's block-0 contrast vectors

    # HF generate lives in a spawned process started before vLLM pins this one's threads
    dtype, worker = None, None
    if not args.skip_hf:
        parent, child = multiprocessing.get_context("spawn").Pipe()
        worker = multiprocessing.get_context("spawn").Process(
            target=_hf_worker, args=(child, path, prompts, args.tokens, torch.get_num_threads()), daemon=True
        )
        worker.start()
        dtype = parent.recv()

    def run_hf():
        parent.send("run")
        return parent.recv()

    params = SamplingParams(temperature=1.0, max_tokens=args.tokens, min_tokens=args.tokens, ignore_eos=True,
                            logprobs=0, seed=0)
    vllm_prompts = [{"prompt_token_ids": p} for p in prompts]
    results = {"config": vars(args), "timings": {}, "ratios": {}}
    for mode in [m for m in args.modes.split(",") if m]:
        t0 = time.perf_counter()
        with steerable_vllm(layer=0, max_routes=4):
            llm = LLM(
                model=path, max_model_len=1024, enforce_eager=mode == "eager",
                distributed_executor_backend="external_launcher", seed=0, max_num_batched_tokens=4096,
                logprobs_mode="processed_logprobs",
            )
        results.setdefault("engine_init_s", {})[mode] = time.perf_counter() - t0
        steerer = VLLMActivationSteeringGenerator(llm, layer=0, alpha=args.alpha)
        per_route = VLLMActivationSteeringGenerator(llm, layer=0, alpha=args.alpha, per_request_routes=False)

        def run_vllm(llm=llm):  # this mode's engine, bound now
            llm.generate(vllm_prompts, params, use_tqdm=False)

        def run_steered(gen=steerer, llm=llm):
            with gen.steering(routes, vectors):
                llm.generate(vllm_prompts, params, use_tqdm=False)
            # every forward pass was steered (compiled graphs may count a pass more than once: replayed mutation)
            assert gen.forward_calls != 0 and gen.hook_calls >= (gen.forward_calls or 1), (
                gen.hook_calls, gen.forward_calls)

        variants = {"vllm": run_vllm, "vllm_steered": run_steered,
                    "vllm_per_route": functools.partial(run_steered, per_route)}
        if args.skip_per_route:
            del variants["vllm_per_route"]
        if mode == args.modes.split(",")[0] and not args.skip_hf:
            variants = {"hf": run_hf, **variants}
        for name, fn in variants.items():  # warm-up
            start = time.perf_counter()
            fn()
            print(f"[{mode}] warm-up: {name} {time.perf_counter() - start:.2f} s", flush=True)
        times = {name: [] for name in variants}
        for repeat in range(args.repeats):
            order = list(variants.items())
            for name, fn in order if repeat % 2 == 0 else order[::-1]:  # A B C, C B A, ...: no order bias
                if name != "hf":  # as TRL after every weight sync: no call reuses another call's prompt cache
                    llm.reset_prefix_cache()
                start = time.perf_counter()
                inner = fn()  # the HF worker reports its own generate time (no pipe latency)
                times[name].append(inner if isinstance(inner, float) else time.perf_counter() - start)
                print(f"[{mode}] repeat {repeat}: {name} {times[name][-1]:.2f} s", flush=True)
        for name, values in times.items():
            key = name if name == "hf" else f"{name}[{mode}]"
            results["timings"][key] = {
                "median_s": statistics.median(values), "min_s": min(values), "max_s": max(values),
                "tokens_per_s": args.batch * args.tokens / statistics.median(values),
            }
        med = {name: statistics.median(values) for name, values in times.items()}
        results["ratios"][f"vllm_steered / vllm [{mode}]"] = med["vllm_steered"] / med["vllm"]
        if "vllm_per_route" in med:
            results["ratios"][f"vllm_per_route / vllm [{mode}]"] = med["vllm_per_route"] / med["vllm"]
        if "hf" in med:
            results["ratios"][f"hf / vllm [{mode}] (rollout time)"] = med["hf"] / med["vllm"]
        # free the engine (and every closure and loop variable holding it) before the next mode builds one: a late
        # destructor of this engine would tear down the process groups of the next
        steerer = per_route = llm = variants = run_vllm = run_steered = fn = order = None  # noqa: F841
        gc.collect()

    if worker is not None:
        parent.send("stop")
        worker.join(30)
    results["machine"] = {
        "cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(), "torch": torch.__version__,
        "vllm": vllm.__version__, "hf_dtype": dtype, "python": platform.python_version(),
    }
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=2))
    lines = [
        "# vLLM rollout throughput (CPU)",
        "",
        f"Machine: {results['machine']}. Policy `{args.model}`, {args.batch} rollouts x {args.tokens} forced new "
        f"tokens, temperature 1, {args.repeats} interleaved repeats; steering: K=3 routes + clean (balanced), "
        f"alpha {args.alpha}, block 0.",
        "",
        "| variant | median s | min-max s | tokens/s |",
        "|---|---|---|---|",
    ]
    for name, t in results["timings"].items():
        lines.append(f"| {name} | {t['median_s']:.2f} | {t['min_s']:.2f}-{t['max_s']:.2f} | {t['tokens_per_s']:.0f} |")
    lines += ["", "| ratio | value |", "|---|---|"]
    lines += [f"| {k} | {v:.3f} |" for k, v in results["ratios"].items()]
    lines += ["", f"Engine start (s): {results['engine_init_s']}"]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
