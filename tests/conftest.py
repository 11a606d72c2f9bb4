"""Shared fixtures: the real SmolLM2 tokenizer and tiny causal LMs built from a config (no hub)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """The embedded SmolLM2-135M-Instruct tokenizer (ChatML template, pad = eos = <|im_end|>)."""
    from transformers import AutoTokenizer

    from trl_explore.defaults import default_policy_path

    return AutoTokenizer.from_pretrained(default_policy_path())


def make_tiny_causal_lm(tokenizer, arch: str = "llama", seed: int = 0, hidden_size: int = 64, num_layers: int = 2):
    """A randomly initialised 2-layer causal LM over ``tokenizer``'s vocabulary (float32, CPU)."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    config_cls = {"llama": LlamaConfig, "qwen2": Qwen2Config}[arch]
    config = config_cls(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


@pytest.fixture
def tiny_model(smollm2_tokenizer):
    return make_tiny_causal_lm(smollm2_tokenizer)


def run_two_cpu_processes(script, *script_args, timeout: int = 900):
    """Run ``script`` in 2 CPU processes (gloo) with torchrun; return the finished ``CompletedProcess``.

    ``accelerate launch --cpu --num_processes 2`` starts ONE process unless MPI is set up; torchrun starts two, and
    ``ACCELERATE_USE_CPU=true`` keeps them on the CPU.
    """
    import socket
    import subprocess
    import sys

    with socket.socket() as sock:  # a free port for the rendezvous
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port),
           str(script), *map(str, script_args)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
