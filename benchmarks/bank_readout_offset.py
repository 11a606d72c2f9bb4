"""How much of ASE's mean contrast-pair difference the route offset ``alpha * (v_s - v_s')`` makes (steered readouts).

Run (CPU, offline): ``python benchmarks/bank_readout_offset.py [--lengths 128 256] [--draws 1000] [--threads 2]``

A replay of the ASE CPU demo's first steered update, on the demo's own rollouts. A training run of the demo
(``recipes/ase_grpo_smollm2_champ_cpu.yaml``) rarely gets there on a CPU: SmolLM2-135M scores 4 of 120 CHAMP samples
at the demo's 128 tokens, so most steps have no contrast pair, and one step took over 20 minutes on the shared 2-core
host. The replay takes the 120 rollouts of ``benchmarks/results/demo_solve_rate/`` (30 CHAMP training problems x 4
samples of the embedded policy at the demo's sampling settings, saved by ``benchmarks/demo_solve_rate.py``) and:

1. grades them with the trainers' ``math_reward`` at ``--lengths`` tokens (the demo: 128);
2. reads their clean block-0 outputs at ``f = 0.25`` of each response with the policy (``ActivationSteeringGenerator
   .score`` on the clean route: the readout TRL's training forward gives the bank);
3. builds the bank the demo would build from them (K = 3, PCA 64, 16 K-means restarts, seed 42,
   ``min_pairs_per_cluster=1``: the bank as it was before the option);
4. routes each problem's 4 rollouts as the demo does (one per route 0..3; which sample gets which route drawn at
   random, ``--draws`` times) and, over the bank's within-problem pairs, with ``c_p = clean_pos - clean_neg`` and
   ``o_p = alpha * (v_route(pos) - v_route(neg))`` (the steered difference is ``d_p = c_p + o_p``), reports the mean
   over draws of:

   * ``mean_norm_share``: ``||mean_p o_p|| / ||mean_p d_p||``;
   * ``mean_projection_share``: the part of the mean steered difference, along itself, that the offset makes,
     ``<mean o, mean d> / ||mean d||^2``;
   * ``pair_norm_share``: mean over pairs of ``||o_p|| / ||d_p||``;

   plus the applied strength ``alpha ||v_k|| / median ||clean readout||`` of each vector.

Caveat: the rollouts were sampled unsteered; in a run the steered rollouts would also differ in their tokens. The
offset term does not depend on the tokens (it is the bank's own vectors), the clean term does.

Writes ``benchmarks/results/bank_readout_offset.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = pathlib.Path(__file__).resolve().parent.parent
ROLLOUTS = REPO / "benchmarks" / "results" / "demo_solve_rate" / "completions.jsonl"
ALPHA, NUM_VECTORS, FRACTION, SEED = 0.5, 3, 0.25, 42  # the demo recipe's values


def offset_shares(clean, offsets, pairs) -> dict:
    """The three shares above for one route draw (``clean``, ``offsets``: ``[B, d]``; ``pairs``: ``[P, 2]``)."""
    c = clean[pairs[:, 0]] - clean[pairs[:, 1]]
    o = offsets[pairs[:, 0]] - offsets[pairs[:, 1]]
    d = (c + o).double()
    mean_o, mean_d = o.double().mean(0), d.mean(0)
    return {"mean_norm_share": float(mean_o.norm() / mean_d.norm()),
            "mean_projection_share": float(mean_o @ mean_d / mean_d.dot(mean_d)),
            "pair_norm_share": float((o.double().norm(dim=1) / d.norm(dim=1)).mean())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "bank_readout_offset.json"))
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_explore.ase.bank import SteeringVectorBank, applied_strength, contrast_pairs
    from trl_explore.ase.steering import ActivationSteeringGenerator
    from trl_explore.data.loading import load_split
    from trl_explore.defaults import default_policy_path
    from trl_explore.rewards.math_verify_reward import math_reward

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    rows = [json.loads(line) for line in ROLLOUTS.read_text().splitlines()]
    prompts = {r["problem_id"]: r["prompt"] for r in load_split("champ", "train")}
    tokenizer = AutoTokenizer.from_pretrained(default_policy_path())
    model = AutoModelForCausalLM.from_pretrained(default_policy_path(), dtype=torch.float32).eval()
    steerer = ActivationSteeringGenerator(model, layer=0, alpha=ALPHA)
    prompt_ids = {pid: tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True)
                  for pid, p in prompts.items() if pid in {r["problem_id"] for r in rows}}
    prompt_ids = {pid: list(ids["input_ids"] if hasattr(ids, "keys") else ids) for pid, ids in prompt_ids.items()}
    problem_ids = [r["problem_id"] for r in rows]
    results = {}
    for length in args.lengths:
        completions = [r["completion_ids"][:length] or [tokenizer.eos_token_id] for r in rows]
        texts = [[{"role": "assistant", "content": tokenizer.decode(ids, skip_special_tokens=True)}]
                 for ids in completions]
        graded = math_reward(completions=texts, answer=[r["answer"] for r in rows])
        rewards = torch.tensor([float(x or 0.0) for x in graded])
        readouts = []
        for first in range(0, len(rows), 8):  # clean readouts, 8 rows per forward
            batch = range(first, min(first + 8, len(rows)))
            p_len = max(len(prompt_ids[problem_ids[i]]) for i in batch)
            c_len = max(len(completions[i]) for i in batch)
            p = torch.full((len(batch), p_len), tokenizer.pad_token_id)
            pm = torch.zeros_like(p)
            c = torch.full((len(batch), c_len), tokenizer.pad_token_id)
            cm = torch.zeros_like(c)
            for j, i in enumerate(batch):
                ids = prompt_ids[problem_ids[i]]
                p[j, p_len - len(ids):], pm[j, p_len - len(ids):] = torch.tensor(ids), 1
                c[j, : len(completions[i])], cm[j, : len(completions[i])] = torch.tensor(completions[i]), 1
            _, read = steerer.score(p, pm, c, cm, torch.zeros(len(batch), dtype=torch.long),
                                    torch.zeros(0, model.config.hidden_size), temperature=1.0,
                                    readout_fraction=FRACTION)
            readouts.append(read)
        clean = torch.cat(readouts)
        bank = SteeringVectorBank(clean.shape[1], NUM_VECTORS, pca_dim=64, kmeans_n_init=16, seed=SEED, num_threads=1)
        diagnostics = bank.update(clean, problem_ids, rewards)
        entry = {"correct_samples": int((rewards > 0.5).sum()), "diagnostics": diagnostics}
        if bank.activate():
            vectors = bank.vectors
            pairs = contrast_pairs(problem_ids, rewards)
            table = torch.cat([torch.zeros(1, vectors.shape[1]), vectors])  # route 0 = clean
            groups = {}
            for i, pid in enumerate(problem_ids):
                groups.setdefault(pid, []).append(i)
            generator = torch.Generator().manual_seed(SEED)
            draws = []
            for _ in range(args.draws):
                routes = torch.zeros(len(rows), dtype=torch.long)
                for members in groups.values():  # one rollout per route, which one drawn at random
                    draw = torch.randperm(len(members), generator=generator) % (NUM_VECTORS + 1)
                    routes[torch.tensor(members)] = draw
                draws.append(offset_shares(clean, ALPHA * table[routes], pairs))
            entry.update({key: sum(d[key] for d in draws) / len(draws) for key in draws[0]})
            entry["num_pairs"] = len(pairs)
            entry["vector_norms"] = vectors.norm(dim=1).tolist()
            entry["median_readout_norm"] = float(torch.quantile(clean.double().norm(dim=1), 0.5))
            entry["applied_strength"] = applied_strength(vectors, ALPHA, clean).tolist()
            entry["mean_clean_pair_difference_norm"] = float((clean[pairs[:, 0]] - clean[pairs[:, 1]]).mean(0).norm())
        results[str(length)] = entry
    result = {"rollouts": str(ROLLOUTS.relative_to(REPO)), "alpha": ALPHA, "K": NUM_VECTORS, "f": FRACTION,
              "draws": args.draws, "seconds": round(time.perf_counter() - start, 1), "by_completion_tokens": results}
    pathlib.Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
