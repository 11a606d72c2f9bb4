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


def make_tiny_causal_lm(tokenizer, arch: str = "llama", seed: int = 0, hidden_size: int = 64, num_layers: int = 2):
    """A randomly initialised causal LM over ``tokenizer``'s vocabulary (float32, CPU).

    Its completions almost never end by themselves: end-of-sequence is one token of ~49k, so a rollout runs to
    ``max_completion_length``. A method that depends on lengths should raise the end-of-sequence logit in its tests
    (a bias of about 8 nats on it gave lengths of 1 to 16 tokens of 16 in a training step).

    Args:
        tokenizer: its ``len`` is the vocabulary size; its BOS / EOS / pad ids are the model's.
        arch: ``"llama"`` or ``"qwen2"`` (rotary positions, grouped-query attention: 4 heads, 2 key-value heads).
        seed: ``torch.manual_seed`` before the weights are drawn.
        hidden_size, num_layers: model width and depth (defaults 64 and 2).

    Raises:
        KeyError: another ``arch``.
    """
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    config_cls = {"llama": LlamaConfig, "qwen2": Qwen2Config}[arch]
    config = config_cls(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model
