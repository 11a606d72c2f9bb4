"""Every trainer under every distributed engine on 2 CPU processes, compared with the DDP run.

Each trainer in ``engine_parity.TRAINERS`` runs 2 steps of the same tiny model and data under DDP, DeepSpeed
ZeRO-2, ZeRO-3 and FSDP2 (the shipped ``accelerate_configs/``, with 2 processes, no mixed precision, gloo). Against
the DDP run: the completions of both steps are token-identical on both processes, ``grad_norm`` agrees within
rtol 1e-3, and what the trainer keeps beside the policy is whole and the same on both processes (OGER's embedder,
ASE's steering bank). One launch per engine trains every trainer in turn (start-up dominates a launch; the records
are bit-identical to one launch per trainer): 4 launches, about 35 s each on this shared 2-core machine.

DeepSpeed comes from the ``deepspeed`` extra (``pip install -e ".[deepspeed]"``, done by scripts/install.sh); its
first run compiles a small shared-memory op (about 20 s, needs g++ and ninja). Without it the ZeRO cases skip.

FSDP2 on CPU needs accelerate's private state (see ``engine_parity._fsdp_on_cpu_state``): accelerate 1.15 turns FSDP
on only for GPU-type processes, and no documented switch changes that.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "scripts"))
from engine_parity import ENGINES, TRAINERS, launch_command  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EXPECTED_TYPE = {"ddp": "MULTI_CPU", "zero2": "DEEPSPEED", "zero3": "DEEPSPEED", "fsdp2": "FSDP"}
_runs: dict[str, Path] = {}


def _run(trainer_name: str, engine: str, tmp_path_factory) -> list[dict]:
    """The two processes' records of ``trainer_name`` under ``engine`` (one launch per engine runs every trainer)."""
    if engine not in _runs:
        if engine.startswith("zero"):
            try:
                import deepspeed  # noqa: F401
            except ImportError:
                pytest.skip('DeepSpeed is not installed: pip install -e ".[deepspeed]" (scripts/install.sh does)')
        out = tmp_path_factory.mktemp(engine)
        with socket.socket() as sock:  # a free port for the rendezvous
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        cmd, extra_env = launch_command(engine, out, port)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **extra_env}
        result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, f"{engine}:\n{result.stderr[-5000:]}"
        assert "SIGABRT" not in result.stderr and "Aborted" not in result.stderr  # the process group ended cleanly
        _runs[engine] = out
    return [json.loads((_runs[engine] / f"{trainer_name}-rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.slow
@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("trainer_name", list(TRAINERS))
def test_engine_matches_ddp(trainer_name, engine, tmp_path_factory):
    runs = _run(trainer_name, engine, tmp_path_factory)
    reference = _run(trainer_name, "ddp", tmp_path_factory)
    for rank, (run, ref) in enumerate(zip(runs, reference)):
        assert run["distributed_type"] == f"DistributedType.{EXPECTED_TYPE[engine]}"  # not a silent DDP fallback
        assert len(run["completions"]) == 2  # 2 steps, one generation each
        assert run["completions"] == ref["completions"], f"rank {rank}: completions differ from DDP"
        assert len(run["grad_norm"]) == 2 and all(g > 0 for g in run["grad_norm"])
        assert run["grad_norm"] == pytest.approx(ref["grad_norm"], rel=1e-3, abs=0)
    assert runs[0]["completions"] != runs[1]["completions"]  # the processes trained on different rows
    if "embedder" in reference[0]:  # OGER: the embedder is whole and identical on both processes
        for run in runs:
            assert run["embedder"] == reference[0]["embedder"]
        assert reference[0]["embedder"]["numel"] > 20_000_000  # all-MiniLM-L6-v2: 22.7 M parameters
    if "bank" in reference[0]:  # ASE: one bank, bit for bit on both processes, as in the DDP run
        assert runs[0]["bank"] is not None and runs[0]["bank"] == runs[1]["bank"]
        assert runs[0]["bank_updates"] == reference[0]["bank_updates"] == 2
        flat = [x for v in runs[0]["bank"] for x in v]
        ref_flat = [x for v in reference[0]["bank"] for x in v]
        assert flat == pytest.approx(ref_flat, rel=1e-3, abs=1e-6)
