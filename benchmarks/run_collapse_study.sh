#!/usr/bin/env bash
# The collapse-regime study (issue 28 item 3; docs/reproduction.md): every method's seeds 0-2 first (an interrupted
# study stays balanced), then seeds 3-4 of the five core methods. Resumable: finished runs (result.json) are skipped,
# and with --commit each is committed as it ends. Hours of machine time: run it in the background, e.g.
#   nohup nice -n 5 bash benchmarks/run_collapse_study.sh > collapse.log 2>&1 &
# OUT: the results folder (default benchmarks/results/collapse); echo 1 > $OUT/workers while something else needs
# the machine, echo 2 after (two runs at once at most: memory decides).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/collapse}
mkdir -p "$OUT"
ARGS=(--preset collapse --out "$OUT" --threads 1 --workers 2 --workers-file "$OUT/workers" --commit)
python benchmarks/dynamics.py "${ARGS[@]}" --seeds 0 1 2 \
    --methods grpo oger oger_noreward ase oger_ase oger_norefine ase_random
python benchmarks/dynamics.py "${ARGS[@]}" --seeds 3 4 --methods grpo oger oger_noreward ase oger_ase
