"""Per-decoding-step work of the two recorders that run inside HF ``generate`` (CPU), each option timed alone.

Run: ``python benchmarks/decode_step_ops.py [--threads 1] [--rows 16 64] [--steps 48] [--repeats 7]`` (under a
minute). On random ``[B, V]`` float32 logits (V = 49,152, SmolLM2's vocabulary), ``--steps`` decoding steps:

ASE's behaviour log-prob of the sampled token (``trl_explore.ase.recording.SampledTokenLogProbs``):

* ``log_softmax + gather`` (what the recorder does): ``log_softmax(x)[token]``.
* ``gather - logsumexp``: ``x[token] - logsumexp(x)``, the same value without writing a ``[B, V]`` output.

HF's sampler computes ``softmax(scores)`` inside ``GenerationMixin._sample`` and keeps neither it nor its log; no
hook or logits processor receives it (``output_scores`` keeps every step's unnormalised ``[B, V]`` scores, which
still need the same normalisation), so there is nothing computed by the sampler to read the log-prob from.

OGER's H_last (``trl_explore.oger.entropy.LastTokenEntropyRecorder``):

* ``entropy every step`` (before issue 13): ``entropy_from_logits(x)`` at every step.
* ``keep live rows``: one ``torch.where`` per step (only once a row has ended; nothing before) and one entropy
  at the end.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

import torch

from trl_explore.oger.entropy import entropy_from_logits


def timed(fn, repeats: int) -> list[float]:
    fn()
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rows", type=int, nargs="+", default=[16, 64])
    p.add_argument("--vocab", type=int, default=49152)
    p.add_argument("--steps", type=int, default=48)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results" / "decode_step_ops_cpu"))
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    results = {"command": "python " + " ".join(sys.argv), "torch": torch.__version__, "rows": {}}
    lines = ["# Per-decoding-step work of ASE's log-prob recorder and OGER's H_last recorder (CPU)", "",
             f"Command: `{results['command']}`; torch {torch.__version__}, {a.threads} thread(s); milliseconds for "
             f"{a.steps} decoding steps, median (min-max) of {a.repeats}.", "",
             "| rows B | ASE: log_softmax + gather | ASE: gather - logsumexp | max abs difference | "
             "OGER: entropy every step | OGER: keep live rows + one entropy |", "|---|---|---|---|---|---|"]
    for rows in a.rows:
        g = torch.Generator().manual_seed(rows)
        x = torch.randn(rows, a.vocab, generator=g) * 3
        token = torch.randint(0, a.vocab, (rows, 1), generator=g)
        live = torch.arange(rows) % 2 == 0

        def log_softmax_gather(x=x, token=token):  # this row's tensors, bound now
            for _ in range(a.steps):
                torch.log_softmax(x, dim=-1).gather(1, token)

        def gather_logsumexp(x=x, token=token):
            for _ in range(a.steps):
                x.gather(1, token).squeeze(1) - torch.logsumexp(x, dim=-1)

        def entropy_every_step(x=x):
            for _ in range(a.steps):
                entropy_from_logits(x)

        def keep_live_rows(x=x, live=live):
            held = x
            for _ in range(a.steps):
                held = torch.where(live.unsqueeze(1), x, held)
            entropy_from_logits(held)

        diff = (torch.log_softmax(x, -1).gather(1, token).squeeze(1) - (x.gather(1, token).squeeze(1)
                - torch.logsumexp(x, -1))).abs().max().item()
        entry = {name: timed(fn, a.repeats) for name, fn in [
            ("log_softmax_gather", log_softmax_gather), ("gather_logsumexp", gather_logsumexp),
            ("entropy_every_step", entropy_every_step), ("keep_live_rows", keep_live_rows)]}
        entry["max_abs_difference"] = diff
        results["rows"][rows] = entry

        def cell(name, entry=entry):
            s = entry[name]
            return f"{statistics.median(s) * 1e3:.1f} ({min(s) * 1e3:.1f}-{max(s) * 1e3:.1f})"

        lines.append(f"| {rows} | {cell('log_softmax_gather')} | {cell('gather_logsumexp')} | {diff:.1e} | "
                     f"{cell('entropy_every_step')} | {cell('keep_live_rows')} |")
    lines.append("")
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=2))
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
