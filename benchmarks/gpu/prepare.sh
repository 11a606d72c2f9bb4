#!/usr/bin/env bash
# Prepare the GPU profile (benchmarks/gpu/README.md). Run HERE, on a machine with PyPI access and trl_explore
# installed (`bash scripts/install.sh`), from any folder:
#
#     bash benchmarks/gpu/prepare.sh
#
# It fills two git-ignored folders that travel to the GPU machine next to the repository:
#   benchmarks/gpu/wheels/     pure-Python wheels (cp312-compatible) of what that machine's image lacks: trl,
#                              datasets and its dill / multiprocess, math-verify and its latex2sympy2_extended /
#                              antlr4-python3-runtime. Same versions as installed here.
#   benchmarks/gpu/tokenizer/  policy/: SmolLM2-135M-Instruct's tokenizer (the random Qwen2-shaped policy's vocabulary
#                              is sized to it); embedder/: all-MiniLM-L6-v2's WordPiece tokenizer (bert-base-uncased
#                              vocabulary, as bge uses) for the random bge-large-shaped embedder. No weights.
# and prints the total size that travels (the limit is 64 MiB, repository included).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
python="${PYTHON:-python}"

# The packages to carry. Everything else trl / datasets / math-verify import is in the GPU image already
# (torch, transformers, accelerate, peft, sentence-transformers, pyarrow, pandas, xxhash, fsspec, huggingface-hub,
# psutil, pyyaml, jinja2, sympy, scikit-learn, scipy, matplotlib): see README.md.
packages=(trl datasets dill multiprocess math-verify latex2sympy2_extended antlr4-python3-runtime)

pins=()
for name in "${packages[@]}"; do
    version="$("$python" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")"
    pins+=("$name==$version")
done
echo "carrying: ${pins[*]}"

rm -rf "$here/wheels" && mkdir -p "$here/wheels"
"$python" -m pip download --quiet --no-deps --only-binary=:all: --dest "$here/wheels" \
    --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    "${pins[@]}"
count=$(find "$here/wheels" -name '*.whl' | wc -l)
if [ "$count" -ne "${#packages[@]}" ]; then
    echo "expected ${#packages[@]} wheels, got $count:" >&2; ls "$here/wheels" >&2; exit 1
fi

rm -rf "$here/tokenizer" && mkdir -p "$here/tokenizer/policy" "$here/tokenizer/embedder"
policy="$("$python" -c "from trl_explore.defaults import default_policy_path; print(default_policy_path())")"
embedder="$("$python" -c "from trl_explore.defaults import default_embedder_path; print(default_embedder_path())")"
for f in tokenizer.json tokenizer_config.json chat_template.jinja special_tokens_map.json; do
    [ -f "$policy/$f" ] && cp "$policy/$f" "$here/tokenizer/policy/"
done
for f in tokenizer.json tokenizer_config.json vocab.txt special_tokens_map.json; do
    [ -f "$embedder/$f" ] && cp "$embedder/$f" "$here/tokenizer/embedder/"
done
"$python" - "$here/tokenizer" <<'PY'
import sys
from transformers import AutoTokenizer
for sub in ("policy", "embedder"):
    tok = AutoTokenizer.from_pretrained(f"{sys.argv[1]}/{sub}")
    print(f"tokenizer/{sub}: {type(tok).__name__}, {len(tok)} tokens")
PY

echo
ls -l "$here/wheels"
cd "$root"
# what travels: tracked and untracked-not-ignored files, plus the two carried folders
git ls-files -z --cached --others --exclude-standard | "$python" -c '
import os, sys
files = [f for f in sys.stdin.read().split("\0") if f and os.path.isfile(f)]
tree = sum(os.path.getsize(f) for f in files)
carried = {d: sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)
           for d in ("benchmarks/gpu/wheels", "benchmarks/gpu/tokenizer")}
total = tree + sum(carried.values())
mib = lambda b: f"{b / 2**20:.1f} MiB"
print(f"repository files: {mib(tree)} ({len(files)} files); " + "; ".join(f"{d}: {mib(b)}" for d, b in carried.items()))
print(f"total that travels: {mib(total)} (limit 64 MiB)")
sys.exit(0 if total < 64 * 2**20 else 1)
'
