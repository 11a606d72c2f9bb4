"""Model helpers every part of the package shares (no method-specific code)."""

from __future__ import annotations

from torch import nn

# Distributed wrappers that hold the model in ``.module`` (DeepSpeed's engine forwards attribute lookups
# to its module, so it cannot be recognised by a missing ``config`` alone).
_WRAPPER_NAMES = ("DistributedDataParallel", "DataParallel", "DeepSpeedEngine", "FullyShardedDataParallel")


def unwrap_model(model: nn.Module) -> nn.Module:
    """Strip the wrappers that hide a transformers model.

    Removes, in any order and nesting: ``torch.compile`` (``._orig_mod``), DDP / DeepSpeed engine /
    FSDP1 (``.module`` on a wrapper without a ``config``) and PEFT (``PeftModel.get_base_model()``).
    The decoder blocks are the same module objects in the wrapped and unwrapped model, so a hook
    installed on the unwrapped model also fires when the wrapper is called.

    Args:
        model: an ``nn.Module``.

    Returns:
        The innermost module (normally a ``PreTrainedModel``).

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"`model` must be a torch.nn.Module, got {type(model).__name__}")
    for _ in range(16):  # wrappers nest a few levels at most
        if isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = model._orig_mod
        elif callable(getattr(model, "get_base_model", None)) and type(model).__module__.startswith("peft"):
            inner = model.get_base_model()
            if inner is model:
                break
            model = inner
        elif isinstance(getattr(model, "module", None), nn.Module) and (
            type(model).__name__ in _WRAPPER_NAMES or not hasattr(model, "config")
        ):
            model = model.module
        else:
            break
    return model
