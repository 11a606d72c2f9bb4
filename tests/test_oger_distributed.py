"""OGER with two CPU processes (gloo): each process holds whole groups and replaces within them."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_two_processes_keep_groups_intact(tmp_path):
    script = Path(__file__).parent / "scripts" / "oger_two_process.py"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # `--multi_gpu` selects accelerate's torchrun launcher; without GPUs the processes use gloo on the CPU
    # (`--cpu` would select the single-process launcher, or mpirun).
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
           str(port), str(script), str(tmp_path)]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]

    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for rank in ranks:
        assert len(rank["records"]) == 2  # 2 steps x one group of 4 rows per process
        for record in rank["records"]:
            assert len(set(record["prompts"])) == 1 and len(record["prompts"]) == 4  # one prompt per group
            assert len(record["chosen"]) == 1
            assert record["divergence"][record["chosen"][0]] == min(record["divergence"])
    # the two processes hold the two different prompts of each step
    for step in range(2):
        assert {ranks[0]["records"][step]["prompts"][0], ranks[1]["records"][step]["prompts"][0]} == {
            "What is 2 + 2?", "What is 3 * 3?"}
    history = {k: v for e in ranks[0]["log_history"] for k, v in e.items()}
    assert history["oger/offline_fraction"] == pytest.approx(0.25)
