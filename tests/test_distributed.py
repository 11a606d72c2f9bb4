"""trl_explore.trl_guards.distributed: auxiliary models load whole under any engine; launch mistakes fail at
construction.

The engines themselves run in tests/test_distributed_engines.py (2 CPU processes each).
"""

from types import SimpleNamespace

import pytest
import torch
from accelerate.utils import DistributedType
from transformers.integrations.deepspeed import (
    is_deepspeed_zero3_enabled,
    set_hf_deepspeed_config,
    unset_hf_deepspeed_config,
)

from trl_explore.trl_guards.distributed import check_launch, load_auxiliary_model


class _Zero3Config:
    """Stands in for the HfDeepSpeedConfig a ZeRO-3 training config registers with transformers."""

    def is_zero3(self):
        return True


@pytest.fixture
def zero3_and_fsdp_loading(monkeypatch):
    config = _Zero3Config()
    set_hf_deepspeed_config(config)
    monkeypatch.setenv("FSDP_CPU_RAM_EFFICIENT_LOADING", "true")
    yield config
    unset_hf_deepspeed_config()


def test_load_switches_partitioning_off_and_restores_it(zero3_and_fsdp_loading):
    import os

    seen = {}

    def load():
        seen["zero3"] = is_deepspeed_zero3_enabled()
        seen["fsdp_env"] = os.environ.get("FSDP_CPU_RAM_EFFICIENT_LOADING")
        return torch.nn.Linear(3, 2)

    model = load_auxiliary_model(load)
    assert seen == {"zero3": False, "fsdp_env": None}
    assert model.weight.shape == (2, 3)
    assert is_deepspeed_zero3_enabled() and os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] == "true"

    def failing():
        raise OSError("no such model")

    with pytest.raises(OSError, match="no such model"):
        load_auxiliary_model(failing)
    assert is_deepspeed_zero3_enabled() and os.environ["FSDP_CPU_RAM_EFFICIENT_LOADING"] == "true"


def test_load_without_any_engine_returns_what_load_returns():
    unset_hf_deepspeed_config()
    assert load_auxiliary_model(lambda: "not a module") == "not a module"
    assert not is_deepspeed_zero3_enabled()


def test_partitioned_or_meta_parameters_are_refused():
    partitioned = torch.nn.Linear(3, 2)
    partitioned.weight.ds_id = 7  # what deepspeed.zero.Init leaves on a parameter (local tensor of shape (0,))
    with pytest.raises(RuntimeError, match=r"the embedder: parameter 'weight' is partitioned by DeepSpeed ZeRO-3"):
        load_auxiliary_model(lambda: partitioned, "the embedder")
    with torch.device("meta"):
        empty = torch.nn.Linear(3, 2)
    with pytest.raises(RuntimeError, match=r"parameter 'weight' is on the meta device"):
        load_auxiliary_model(lambda: empty)


def _accelerator(num_processes, distributed_type):
    return SimpleNamespace(num_processes=num_processes, distributed_type=distributed_type)


def test_check_launch():
    check_launch(_accelerator(1, DistributedType.NO), {})  # one process: nothing to check
    check_launch(_accelerator(2, DistributedType.DEEPSPEED), {"WORLD_SIZE": "2"})
    check_launch(_accelerator(2, DistributedType.FSDP), {"WORLD_SIZE": "2", "ACCELERATE_USE_FSDP": "true"})
    # DeepSpeed on CPU without ddp_backend: accelerate counts one of the two processes
    with pytest.raises(RuntimeError, match=r"2 processes were launched .* counts 1 .*--ddp_backend gloo"):
        check_launch(_accelerator(1, DistributedType.DEEPSPEED), {"WORLD_SIZE": "2"})
    # an FSDP config on CPU processes runs DDP
    with pytest.raises(RuntimeError, match=r"FSDP was requested .* runs .*MULTI_CPU.* GPU-type devices"):
        check_launch(_accelerator(2, DistributedType.MULTI_CPU), {"WORLD_SIZE": "2", "ACCELERATE_USE_FSDP": "true"})
