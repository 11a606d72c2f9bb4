"""What the CPU bfloat16 tier (``cpu_precision``, ``trl_explore.precision``) does to the numbers that must be exact.

Run: ``python benchmarks/precision_numerics.py [--prompts 8] [--group 4] [--tokens 64] [--threads 1]`` (about 3
minutes on one core with the embedded SmolLM2 policy; ``--model tiny`` for a quick check of the script itself).

The embedded policy samples ``--group`` completions for each of ``--prompts`` ladder problems (validation split,
one- and two-digit levels, the training prompt) in float32. Those same completions are then scored in each precision,
on the two paths a GRPO step scores them on:

* the rollout path: HF ``generate`` forced to emit exactly those tokens, with the package's own recorders (ASE's
  behaviour log-probs, ``SampledTokenLogProbs``; OGER's ``H_last``, ``LastTokenEntropyRecorder``), under one autocast
  around the call as the driver runs it;
* the training path: one teacher-forced forward of prompt + completion (left/right padded, position ids from the
  mask, as TRL's loss forward), log-probs and entropies from float32 logits, and ASE's block-L readout.

Precisions: ``float32``; ``bfloat16`` (the tier: autocast, logits upcast to float32 before any log-softmax); and
``bfloat16, fp32 LM head`` (the LM head's product kept in float32), to see what the last rounding costs. Figures:

* per-token ``|log p_train - log p_rollout|`` in one precision (the noise an importance weight sees: ASE's
  ``pi_unsteered / pi_behaviour`` on an unsteered token should be 1), and the spread of ``exp`` of it;
* each path against float32: per-token log-prob and entropy differences, ``H_last``, the block-0 readouts;
* OGER's divergence ``D`` with the MiniLM embedder in bfloat16 against float32 (``embedding_dtype="auto"`` follows the
  tier), against the problems' four teacher solutions, and whether the lowest-``D`` completion of a group is the same.

Results: ``benchmarks/results/precision_numerics_cpu.{json,md}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import pathlib
import platform
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessor, LogitsProcessorList

from trl_explore.ase.recording import SampledTokenLogProbs
from trl_explore.ase.steering import readout_positions
from trl_explore.data.ladder import ladder_dataset
from trl_explore.defaults import resolve_model_path, tiny_policy_path
from trl_explore.oger.embedding import TrajectoryEncoder
from trl_explore.oger.entropy import LastTokenEntropyRecorder
from trl_explore.oger.exploration import divergence
from trl_explore.precision import bf16_flags, cpu_flags
from trl_explore.trl_guards.sampler_settings import entropy_from_logits

VARIANTS = ("float32", "bfloat16", "bfloat16, fp32 LM head")


class ForceTokens(LogitsProcessor):
    """Makes ``generate`` emit ``targets[b, t]`` at new-token step ``t`` (the rollout path on given completions)."""

    def __init__(self, targets: torch.Tensor, prompt_length: int):
        self.targets, self.prompt_length = targets, prompt_length

    def __call__(self, input_ids, scores):
        step = input_ids.shape[1] - self.prompt_length
        forced = torch.full_like(scores, float("-inf"))
        forced.scatter_(1, self.targets[:, step : step + 1], 0.0)
        return forced


@contextlib.contextmanager
def precision(model, variant: str):
    """The variant's compute: float32, bfloat16 autocast, or bfloat16 autocast with a float32 LM head."""
    if variant == "float32":
        yield
        return
    head = model.get_output_embeddings()
    if variant == "bfloat16, fp32 LM head":
        original = head.forward

        def fp32_head(hidden):
            with torch.autocast("cpu", enabled=False):
                return original(hidden.float())

        head.forward = fp32_head
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            yield
    finally:
        if variant == "bfloat16, fp32 LM head":
            del head.forward


def cut_at_eos(ids: torch.Tensor, eos: int) -> list[list[int]]:
    """TRL's completion cut: each row up to and including its first EOS."""
    rows = []
    for row in ids.tolist():
        rows.append(row[: row.index(eos) + 1] if eos in row else row)
    return rows


def rollout_path(model, prompt, completions, eos, pad):
    """Forced ``generate`` on ``completions``: behaviour log-probs per token and H_last per row."""
    width = max(map(len, completions))
    targets = torch.full((len(completions), width + 1), eos, dtype=torch.long)
    for i, c in enumerate(completions):
        targets[i, : len(c)] = torch.tensor(c)
    logps_rec = SampledTokenLogProbs(model, 1.0)
    entropy_rec = LastTokenEntropyRecorder(model, 1.0, eos_token_ids=[eos])
    force = LogitsProcessorList([ForceTokens(targets, prompt["input_ids"].shape[1])])
    with logps_rec, entropy_rec, torch.no_grad():
        out = model.generate(**prompt, do_sample=False, max_new_tokens=width, pad_token_id=pad, eos_token_id=eos,
                             logits_processor=force, temperature=None, top_p=None, top_k=None)
    got = cut_at_eos(out[:, prompt["input_ids"].shape[1]:], eos)
    assert got == completions, "forced generation did not reproduce the completions"
    logps = logps_rec.per_completion(completions)
    h_last = entropy_rec.last_token_entropy(torch.tensor([len(c) for c in completions]))
    return [torch.tensor(r, dtype=torch.float32) for r in logps], h_last


def training_path(model, prompt, completions, pad, fraction=0.25):
    """One teacher-forced forward: per-token log-probs and entropies (float32 logits) and block-0 readouts."""
    width = max(map(len, completions))
    comp = torch.full((len(completions), width), pad, dtype=torch.long)
    comp_mask = torch.zeros_like(comp)
    for i, c in enumerate(completions):
        comp[i, : len(c)], comp_mask[i, : len(c)] = torch.tensor(c), 1
    ids = torch.cat([prompt["input_ids"], comp], 1)
    mask = torch.cat([prompt["attention_mask"], comp_mask], 1)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=width + 1,
                    output_hidden_states=True)
    logits = out.logits[:, :-1].float()  # Accelerate's output conversion: float32 before any log-softmax
    logp_all = torch.log_softmax(logits, -1)
    logps = logp_all.gather(-1, comp.unsqueeze(-1)).squeeze(-1)
    entropies = entropy_from_logits(logits)
    where = readout_positions(comp_mask, fraction) + prompt["input_ids"].shape[1]
    readouts = out.hidden_states[1][torch.arange(len(completions)), where].float()
    per_row = [(logps[i, : len(c)], entropies[i, : len(c)]) for i, c in enumerate(completions)]
    return per_row, readouts


def stats(values: torch.Tensor) -> dict:
    v = values.double().flatten()
    return {"mean": v.mean().item(), "p99": v.quantile(0.99).item(), "max": v.max().item()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="embedded", help="'embedded' (SmolLM2-135M) or 'tiny' (script check)")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results" / "precision_numerics_cpu"))
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    start = time.perf_counter()
    path = tiny_policy_path() if a.model == "tiny" else resolve_model_path(a.model)
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    eos, pad = tok.eos_token_id, tok.pad_token_id
    rows = ladder_dataset(levels=["one_digit", "two_digit"])["validation"].select(range(a.prompts))
    texts = [tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in rows]
    texts = [t for t in texts for _ in range(a.group)]
    prompt = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(a.seed)
    with torch.no_grad():
        sampled = model.generate(**prompt, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                 max_new_tokens=a.tokens, pad_token_id=pad)
    completions = cut_at_eos(sampled[:, prompt["input_ids"].shape[1]:], eos)
    results = {}
    for variant in VARIANTS:
        with precision(model, variant):
            roll_logps, h_last = rollout_path(model, prompt, completions, eos, pad)
            train, readouts = training_path(model, prompt, completions, pad)
        results[variant] = dict(roll=torch.cat(roll_logps), train=torch.cat([r[0] for r in train]),
                                entropy=torch.cat([r[1] for r in train]), h_last=h_last, readouts=readouts)
    ref = results["float32"]
    table = {}
    for variant, r in results.items():
        delta = r["train"] - r["roll"]
        ratio = delta.exp()
        table[variant] = {
            "train_vs_rollout_abs_dlogp": stats(delta.abs()),
            "importance_ratio": {"std": ratio.double().std().item(), "min": ratio.min().item(),
                                 "max": ratio.max().item(),
                                 "share_off_by_more_than_1pct": (ratio - 1).abs().gt(0.01).double().mean().item()},
            "train_vs_float32_abs_dlogp": stats((r["train"] - ref["train"]).abs()),
            "rollout_vs_float32_abs_dlogp": stats((r["roll"] - ref["roll"]).abs()),
            "token_entropy_vs_float32_abs": stats((r["entropy"] - ref["entropy"]).abs()),
            "h_last_vs_float32_abs": stats((r["h_last"] - ref["h_last"]).abs()),
            "readout_relative_error": stats((r["readouts"] - ref["readouts"]).norm(dim=1)
                                            / ref["readouts"].norm(dim=1)),
            "readout_min_cosine": torch.nn.functional.cosine_similarity(r["readouts"], ref["readouts"]).min().item(),
        }
    # OGER's divergence: the completions against their problem's teacher solutions, MiniLM in float32 vs bfloat16
    words = tok.batch_decode(completions, skip_special_tokens=True)
    encoders = {"float32": TrajectoryEncoder("embedded"), "bfloat16": TrajectoryEncoder("embedded", dtype="bfloat16")}
    d = {name: [] for name in encoders}
    for name, enc in encoders.items():
        for i, row in enumerate(rows):
            online = enc.encode(words[i * a.group : (i + 1) * a.group])
            d[name].append(divergence(online, enc.encode(list(row["offline_completions"]))))
    d_delta = torch.cat([x - y for x, y in zip(d["bfloat16"], d["float32"], strict=True)]).abs()
    same_min = sum(int(x.argmin() == y.argmin()) for x, y in zip(d["bfloat16"], d["float32"], strict=True))
    report = {
        "model": a.model, "prompts": a.prompts, "group": a.group, "max_new_tokens": a.tokens, "threads": a.threads,
        "tokens_scored": int(ref["train"].numel()), "completion_lengths": [len(c) for c in completions],
        "cpu_bf16_flags": list(bf16_flags(cpu_flags())), "torch": torch.__version__,
        "platform": platform.platform(), "seconds": round(time.perf_counter() - start, 1),
        "variants": table,
        "divergence": {"abs_delta": stats(d_delta), "same_lowest_d_groups": same_min, "groups": len(rows)},
    }
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=2))
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))


def markdown(r: dict) -> str:
    def cell(s):
        return f"{s['mean']:.2g} / {s['p99']:.2g} / {s['max']:.2g}"

    lines = [f"# CPU bfloat16 tier: numerics ({r['model']} policy, {r['tokens_scored']} completion tokens of "
             f"{r['prompts']} x {r['group']} completions, {r['seconds']} s)", "",
             "Per-token figures: mean / p99 / max over the completion tokens (nats).", "",
             "| figure | " + " | ".join(r["variants"]) + " |", "|---|" + "---|" * len(r["variants"])]
    rows = [("\\|log p train - log p rollout\\| (same precision)", "train_vs_rollout_abs_dlogp"),
            ("\\|log p train - float32\\|", "train_vs_float32_abs_dlogp"),
            ("\\|log p rollout - float32\\|", "rollout_vs_float32_abs_dlogp"),
            ("\\|token entropy - float32\\|", "token_entropy_vs_float32_abs"),
            ("\\|H_last - float32\\| (per row)", "h_last_vs_float32_abs"),
            ("ASE readout, relative error (per row)", "readout_relative_error")]
    for name, key in rows:
        lines.append(f"| {name} | " + " | ".join(cell(v[key]) for v in r["variants"].values()) + " |")
    lines.append("| importance ratio exp(train - rollout): std; min-max | " + " | ".join(
        f"{v['importance_ratio']['std']:.2g}; {v['importance_ratio']['min']:.3f}-{v['importance_ratio']['max']:.3f}"
        for v in r["variants"].values()) + " |")
    lines.append("| tokens with \\|ratio - 1\\| > 1% | " + " | ".join(
        f"{100 * v['importance_ratio']['share_off_by_more_than_1pct']:.1f}%" for v in r["variants"].values()) + " |")
    lines.append("| ASE readout, smallest cosine to float32 | " + " | ".join(
        f"{v['readout_min_cosine']:.5f}" for v in r["variants"].values()) + " |")
    d = r["divergence"]
    lines += ["", f"OGER divergence D, MiniLM bfloat16 vs float32: |delta D| {cell(d['abs_delta'])}; the lowest-D "
              f"completion is the same in {d['same_lowest_d_groups']} of {d['groups']} groups.", "",
              f"CPU bfloat16 flags: {', '.join(r['cpu_bf16_flags']) or 'none'}; torch {r['torch']}; {r['threads']} "
              "thread(s)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
