"""How much of ASE's mean contrast-pair difference is the route offset ``alpha * (v_s - v_s')`` (steered readouts).

Run (CPU, offline): ``python benchmarks/bank_readout_offset.py [--steps 8] [--prompts 4] [--threads 2]``

Trains the ASE CPU demo (``recipes/ase_grpo_smollm2_champ_cpu.yaml``: SmolLM2-135M on CHAMP, N = 4 over 4 routes,
alpha 0.5, 128 tokens) with ``bank_readouts="steered"`` (the bank as it was built before the option existed) and
``min_pairs_per_cluster=1``, and records at every bank update the clean readouts, the offsets ``alpha * v_route`` of
the rollouts, R_m and the problem ids. For every update made after the bank first became active (so rollouts are
steered), over the within-problem pairs the bank forms, with ``c_p = clean_pos - clean_neg`` and
``o_p = offset_pos - offset_neg`` (the steered difference is ``c_p + o_p``):

* ``mean_norm_share``: ``||mean_p o_p|| / ||mean_p (c_p + o_p)||``;
* ``mean_projection_share``: the part of the mean steered difference along itself that ``o`` makes,
  ``<mean o, mean d> / ||mean d||^2``;
* ``pair_norm_share``: mean over pairs of ``||o_p|| / ||c_p + o_p||``;
* ``cross_route_pairs``: the fraction of pairs whose two rollouts ran on different routes (``o_p != 0``).

Writes ``benchmarks/results/bank_readout_offset.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = pathlib.Path(__file__).resolve().parent.parent


def offset_shares(clean, offsets, problem_ids, rewards) -> dict | None:
    """The figures above for one update (``clean``, ``offsets``: ``[B, d]``); ``None`` without a pair."""
    import torch

    from trl_explore.ase.bank import contrast_pairs

    pairs = contrast_pairs(problem_ids, rewards)
    if len(pairs) == 0:
        return None
    c = clean[pairs[:, 0]] - clean[pairs[:, 1]]
    o = offsets[pairs[:, 0]] - offsets[pairs[:, 1]]
    d = c + o
    mean_o, mean_d = o.mean(0).double(), d.mean(0).double()
    return {
        "num_pairs": len(pairs),
        "mean_norm_share": float(mean_o.norm() / mean_d.norm()),
        "mean_projection_share": float(mean_o @ mean_d / mean_d.dot(mean_d)),
        "pair_norm_share": float((o.norm(dim=1) / d.norm(dim=1)).mean()),
        "cross_route_pairs": float((o.abs().sum(1) > 0).double().mean()),
        "mean_clean_norm": float(mean_d.sub(mean_o).norm()),
        "mean_offset_norm": float(mean_o.norm()),
        "median_readout_norm": float(torch.quantile(clean.double().norm(dim=1), 0.5)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step (4 rollouts each)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "bank_readout_offset.json"))
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from trl import ModelConfig, TrlParser

    from trl_explore import ASEConfig
    from trl_explore.ase.component import ASEComponent

    spec = importlib.util.spec_from_file_location("train_ase_grpo", REPO / "examples" / "train_ase_grpo.py")
    example = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = example  # dataclasses look their module up
    spec.loader.exec_module(example)

    records = []
    original = ASEComponent._update_bank

    def recording_update(self):
        step = self.step
        offsets = None if step.offsets is None else step.offsets.clone()
        records.append({"step": self.trainer.state.global_step, "clean": step.readouts.clone(), "offsets": offsets,
                        "valid": step.valid.clone(), "correct": step.correct.clone(),
                        "problem_ids": list(step.problem_ids)})
        return original(self)

    ASEComponent._update_bank = recording_update
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as output_dir:
        argv = ["--config", str(example.DEMO_RECIPE), "--output_dir", output_dir, "--max_steps", str(args.steps),
                "--per_device_train_batch_size", str(4 * args.prompts), "--bank_readouts", "steered",
                "--min_pairs_per_cluster", "1", "--log_completions", "false", "--report_to", "none"]
        parser = TrlParser((example.ScriptArguments, ASEConfig, ModelConfig))
        trainer = example.main(*parser.parse_args_and_config(args=argv))
    elapsed = time.perf_counter() - start

    updates = []
    for record in records:
        keep = (record["valid"] & torch.isfinite(record["correct"])).nonzero().squeeze(1)
        entry = {"step": record["step"], "steered": record["offsets"] is not None}
        if record["offsets"] is not None:
            shares = offset_shares(record["clean"][keep], record["offsets"][keep],
                                   [record["problem_ids"][i] for i in keep.tolist()], record["correct"][keep])
            entry.update(shares or {"num_pairs": 0})
        updates.append(entry)
    measured = [u for u in updates if u.get("num_pairs", 0) > 0 and u["steered"]]
    weights = [u["num_pairs"] for u in measured]
    pooled = {key: sum(u[key] * w for u, w in zip(measured, weights)) / sum(weights)
              for key in ("mean_norm_share", "mean_projection_share", "pair_norm_share", "cross_route_pairs")
              } if measured else {}
    result = {"recipe": "recipes/ase_grpo_smollm2_champ_cpu.yaml", "steps": args.steps, "prompts_per_step": args.prompts,
              "bank_readouts": "steered", "min_pairs_per_cluster": 1, "seconds": round(elapsed, 1),
              "bank_diagnostics": trainer.bank_diagnostics, "updates": updates,
              "pair_weighted_mean_over_steered_updates": pooled}
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps({"updates": updates, "pooled": pooled, "seconds": round(elapsed, 1)}, indent=2))


if __name__ == "__main__":
    sys.exit(main())
