"""The shared-prompt forward against TRL's, on the embedded SmolLM2 and the collapse study's batch (CPU).

One loss forward and backward of a GRPO batch: 4 one-digit ladder prompts (SmolLM2's chat template, as the study
samples them) x 4 completions of 15-64 random tokens, float32, one thread. TRL's fused forward
(``GRPOTrainer._get_per_token_logps_and_entropies``' call) and
:func:`trl_explore.trl_guards.prefix_forward.shared_prompt_forward` alternate ``--repeats`` times in one process, so
both see the same host load; wall and CPU seconds per call, their medians and ratio, and the largest log-prob
difference on the completion tokens.

    python benchmarks/prefix_forward.py          # writes benchmarks/results/prefix_forward_cpu.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import time

import torch

REPO = pathlib.Path(__file__).resolve().parent.parent


def build_batch(tokenizer, prompts: int, group: int, seed: int):
    """``(input_ids, attention_mask, completion columns)`` in TRL's layout from the ladder's one-digit prompts."""
    from trl.trainer.utils import pad

    from trl_explore.data.ladder import ladder_dataset

    rows = ladder_dataset(levels=["one_digit"])["train"].select(range(prompts))
    g = torch.Generator().manual_seed(seed)
    prompt_ids, completion_ids = [], []
    for row in rows:
        ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        for _ in range(group):
            n = int(torch.randint(15, 65, (1,), generator=g))
            prompt_ids.append(torch.tensor(ids))
            completion_ids.append(torch.randint(100, 40000, (n,), generator=g))
    p = pad(prompt_ids, padding_value=tokenizer.pad_token_id, padding_side="left")
    c = pad(completion_ids, padding_value=tokenizer.pad_token_id, padding_side="right")
    pm = pad([torch.ones(len(x), dtype=torch.long) for x in prompt_ids], padding_value=0, padding_side="left")
    cm = pad([torch.ones(len(x), dtype=torch.long) for x in completion_ids], padding_value=0, padding_side="right")
    return torch.cat([p, c], 1), torch.cat([pm, cm], 1), c.size(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "prefix_forward_cpu"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.trainer.utils import add_fused_lm_head

    from trl_explore.defaults import resolve_model_path
    from trl_explore.trl_guards.prefix_forward import shared_prompt_forward, shared_prompt_groups

    path = resolve_model_path("embedded")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))
    model.train()
    ids, mask, keep = build_batch(tokenizer, prompts=4, group=4, seed=0)
    scored = mask[:, -keep:].bool()
    groups = shared_prompt_groups(ids, mask, keep)

    def trl():
        labels = ids.masked_fill(mask == 0, -100)
        labels[:, :-keep] = -100
        out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
        return out.log_probs[:, -keep:]

    def shared():
        return shared_prompt_forward(model, ids, mask, keep, groups, compute_entropy=True)[0]

    times = {"trl": [], "shared": []}
    logps = {}
    for _ in range(args.repeats + 1):  # the first round warms up
        for name, forward in (("trl", trl), ("shared", shared)):
            model.zero_grad(set_to_none=True)
            wall, cpu = time.perf_counter(), time.process_time()
            lp = forward()
            (lp * scored).sum().backward()
            times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
            logps[name] = lp.detach()
    result = {
        "batch": {"rows": ids.size(0), "groups": len(groups), "prompt_columns": ids.size(1) - keep,
                  "completion_columns": keep, "completion_tokens": int(scored.sum())},
        "threads": args.threads, "load_average": os.getloadavg(),
        "seconds": {name: values[1:] for name, values in times.items()},
        "max_abs_logp_difference": float((logps["trl"] - logps["shared"])[scored].abs().max()),
    }
    med = {name: [statistics.median(v[i] for v in values[1:]) for i in (0, 1)] for name, values in times.items()}
    result["median_wall_cpu"] = med
    ratio = {"wall": med["shared"][0] / med["trl"][0], "cpu": med["shared"][1] / med["trl"][1]}
    result["ratio_shared_over_trl"] = ratio
    out = pathlib.Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    b, when, load = result["batch"], time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), result["load_average"][0]
    lines = [
        f"# Shared-prompt forward vs TRL's, loss forward + backward ({when})",
        "",
        f"Embedded SmolLM2-135M, float32, {args.threads} thread(s), host load average {load:.1f}; "
        f"{b['rows']} rows in {b['groups']} groups, {b['prompt_columns']} prompt + {b['completion_columns']} "
        f"completion columns ({b['completion_tokens']} completion tokens); medians of {args.repeats} alternating "
        f"calls after one warm-up round.",
        "",
        "| forward | wall s | CPU s |",
        "|---|---|---|",
        *(f"| {name} | {m[0]:.2f} | {m[1]:.2f} |" for name, m in med.items()),
        f"| shared / TRL | {ratio['wall']:.2f} | {ratio['cpu']:.2f} |",
        "",
        f"Largest |log-prob difference| on completion tokens: {result['max_abs_logp_difference']:.2e} nats.",
    ]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
