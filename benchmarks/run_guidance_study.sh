#!/usr/bin/env bash
# The guidance study (issue 47; docs/reproduction.md): levels where most groups start all wrong. Seed-major: seeds 0-2
# of every method first (an interrupted study stays balanced), then seeds 3-4 of the six core methods (the OGER paper's
# table: SFT, GRPO, the LUFFY-style baseline, ExGRPO, OGER, OGER + ASE). Resumable: finished runs (result.json) are
# skipped, and with --commit each is committed as it ends. Many hours of machine time: run it in the background, e.g.
#   nohup nice -n 5 bash benchmarks/run_guidance_study.sh > guidance.log 2>&1 &
# OUT: the results folder (default benchmarks/results/guidance); echo 1 > $OUT/workers while something else needs
# the machine, echo 2 after (two runs at once at most: memory decides).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/guidance}
mkdir -p "$OUT"
ARGS=(--preset guidance --out "$OUT" --threads 1 --workers 2 --workers-file "$OUT/workers" --commit)
python benchmarks/dynamics.py "${ARGS[@]}" --seeds 0 1 2 \
    --methods grpo oger_noreward oger oger_ase sft exgrpo ase oger_norefine dynamic
python benchmarks/dynamics.py "${ARGS[@]}" --seeds 3 4 --methods grpo oger_noreward oger oger_ase sft exgrpo
