"""Issue 45 item 7: the prepared GPU profile (``benchmarks/gpu/run.sh``) cannot go stale again. Its benchmark step,
``benchmarks/overhead.py`` with the five variants and forced full-length completions, runs here at toy size with the
code path ``run.sh --tiny`` takes (a Qwen2-shaped policy, bfloat16, every variant); before the fix it stopped at the
first OGER trainer: ``generation_kwargs['min_new_tokens']=32 changes the distribution the completions are sampled
from`` (the sampler guard)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_gpu_profiles_benchmark_runs_every_variant_with_forced_lengths(tmp_path):
    out = tmp_path / "overhead_tiny"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "overhead.py"), "--model", "qwen2-tiny", "--device", "cpu",
           "--dtype", "bfloat16", "--embedder", "embedded", "--num-generations", "8", "--batch-size", "8",
           "--max-completion-length", "12", "--repeats", "1", "--steps", "1",
           "--variants", "grpo,oger_off,oger_noreward,oger_full,ase", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.with_suffix(".json").read_text())
    runs = results["models"]["qwen2-tiny"]["runs"]
    assert sorted(r["variant"] for r in runs) == ["ase", "grpo", "oger_full", "oger_noreward", "oger_off"]
    for run in runs:  # forced: every online completion is max_completion_length tokens (teacher rows are shorter)
        assert run["mean_length"] and run["mean_length"][0] > 0, run["variant"]
        if run["variant"] in ("grpo", "ase", "oger_off"):
            assert run["mean_length"][0] == 12, run
    assert next(r for r in runs if r["variant"] == "ase")["bank_active"]


def test_run_sh_passes_the_forced_length_switch():
    """run.sh forces lengths with overhead.py's switch (the settings of the slow test above), not generation_kwargs."""
    script = (ROOT / "benchmarks" / "gpu" / "run.sh").read_text()
    assert "--force-length" in script and "generation_kwargs" not in script.split("# 3. the benchmark")[1]
