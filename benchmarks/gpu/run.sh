#!/usr/bin/env bash
# GPU profile of OGER / ASE-GRPO vs TRL GRPOTrainer (benchmarks/gpu/README.md). Run THERE, on the GPU machine
# (no network; torch, transformers, accelerate, peft, sentence-transformers in its image), from the repository
# root, after `bash benchmarks/gpu/prepare.sh` was run here and with benchmarks/gpu/{wheels,tokenizer} carried:
#
#     bash benchmarks/gpu/run.sh            # the H200 profile, under 8 minutes; results in $OUT/
#     bash benchmarks/gpu/run.sh --tiny     # dry run on a CPU: no install (pip --dry-run), a 2-layer Qwen2,
#                                           # 32-token completions, a random bge-base-shaped embedder
#
# Steps: 1. install the carried wheels and trl_explore (pip, --no-index, --no-deps); 2. record the versions and
# the GPU; 3. benchmarks/overhead.py with the five variants (grpo, oger_off, oger_noreward, oger_full, ase)
# interleaved, on a randomly initialised Qwen2.5-1.5B-shaped policy in bf16 (vocabulary of the carried SmolLM2
# tokenizer) and a randomly initialised bge-large-shaped embedder for OGER: 8 prompts x 8 generations, 256-token
# completions, 1 warm-up + 1 measured step per run, up to 5 repeats while the time budget allows. The results hold
# the step ratios, the rollout ratios and OGER's own phases ("oger: ..." timers: embedding, H_last hooks inside
# generate and the final entropy, divergence and replacement, policy shaping; TRL's oger_reward) as fractions of the
# GRPO step, with min-max over repeats: the same tables as the CPU runs.
# Output: $OUT/overhead_h200.{json,md} (rewritten after every run), $OUT/env.txt, $OUT/run.log.
set -uo pipefail
tiny=0
for arg in "$@"; do
    case "$arg" in
        --tiny) tiny=1 ;;
        *) echo "usage: bash benchmarks/gpu/run.sh [--tiny]" >&2; exit 2 ;;
    esac
done
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
gpu=benchmarks/gpu
out="${OUT:-benchmarks/results/gpu}"
mkdir -p "$out"
python="${PYTHON:-python3}"
exec > >(tee "$out/run.log") 2>&1
start=$SECONDS
log() { echo "[run.sh $((SECONDS - start))s] $*"; }

for need in "$gpu/wheels" "$gpu/tokenizer/policy" "$gpu/tokenizer/embedder"; do
    if [ ! -d "$need" ]; then log "missing $need: run 'bash $gpu/prepare.sh' here and carry it"; exit 1; fi
done

# 1. install ------------------------------------------------------------------------------------------------
if [ "$tiny" = 1 ]; then
    log "dry run: what the GPU machine would install (Python 3.12)"
    "$python" -m pip install --no-index --no-deps --dry-run --ignore-installed --only-binary=:all: \
        --python-version 3.12 --target /tmp/trl-explore-gpu-dry-run "$gpu"/wheels/*.whl 2>&1 | grep -v "is ignored"
else
    log "installing $(ls "$gpu"/wheels/*.whl | wc -l) wheels"
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "$gpu"/wheels/*.whl || exit 1
    if ! "$python" -m pip install -q --no-index --no-deps --no-build-isolation -e .; then
        log "editable install failed; using PYTHONPATH=$PWD instead"
        export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    fi
fi

# 2. environment ----------------------------------------------------------------------------------------------
log "environment"
{
    "$python" - <<'PY'
import importlib.metadata as md, platform, torch
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda", torch.version.cuda,
      "| gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
for name in ("transformers", "trl", "accelerate", "datasets", "sentence-transformers", "math-verify", "pyarrow",
             "fsspec", "huggingface-hub", "pandas", "dill", "multiprocess", "xxhash"):
    try:
        print(f"{name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name} MISSING")
import trl_explore, trl, datasets, math_verify  # noqa: F401  (fail here, not after a model build)
print("imports ok")
PY
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
} 2>&1 | tee "$out/env.txt"
if ! grep -q "imports ok" "$out/env.txt"; then log "an import failed: see $out/env.txt"; exit 1; fi

# 3. the benchmark ---------------------------------------------------------------------------------------------
common=(--tokenizer "$gpu/tokenizer/policy" --embedder-tokenizer "$gpu/tokenizer/embedder"
        --num-generations 8 --save-partial
        # forced full-length completions: overhead.py's benchmark-only switch (force_completion_length), set on each
        # trainer's sampler after it is built (the trainers' sampler guard refuses it as a sampling setting)
        --force-length
        # bf16 training: oger_full's embedder already runs in bfloat16 (embedding_dtype="auto"), so the separate
        # oger_bf16emb variant of the CPU benchmark would measure the same thing twice
        --variants grpo,oger_off,oger_noreward,oger_full,ase)
if [ "$tiny" = 1 ]; then
    args=(--model qwen2-tiny --device cpu --dtype bfloat16 --embedder bge-base-random
          --batch-size 16 --max-completion-length 32 --repeats 1 --steps 1 --time-budget 300
          --out "$out/overhead_tiny")
    limit=400
else
    # budget: install + imports take under a minute; runs start while the longest run so far still fits in
    # 360 s; the hard limit (410 s) only matters if one run is far longer than the ones before it. At 20 s a
    # step (generous for HF generate of 64 x 256 tokens with a 1.5B model) a run takes under a minute, so at
    # least one full repeat of the five variants fits; at 10 s a step, two.
    export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    args=(--model qwen2.5-1.5b --device cuda --dtype bfloat16 --embedder bge-large-random
          --batch-size 64 --max-completion-length 256 --repeats 5 --steps 1 --time-budget 360
          --out "$out/overhead_h200")
    limit=410
fi
log "python benchmarks/overhead.py ${common[*]} ${args[*]}"
PYTHONUNBUFFERED=1 timeout "$limit" "$python" benchmarks/overhead.py "${common[@]}" "${args[@]}"
rc=$?
[ "$rc" = 124 ] && log "stopped by the hard limit of $limit s: the results hold the runs finished before it"
log "done (exit $rc) in $((SECONDS - start)) s; results:"
ls -l "$out"
exit "$rc"
