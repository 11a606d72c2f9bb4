"""One prompt renderer: a chat prompt as token ids exactly as TRL renders it for training.

TRL 1.16 renders a conversational prompt in ``GRPOTrainer._tokenize_prompts``:
``processing_class.apply_chat_template(conversation=prompts, tools=..., chat_template=trainer.chat_template,
add_generation_prompt=True, tokenize=True, return_dict=True, **trainer.chat_template_kwargs)``. The rendering settings
(``GRPOConfig.chat_template_kwargs``, e.g. Qwen3's ``{"enable_thinking": False}``, and the chat template TRL may
substitute) change the prompt: without them a thinking model's evaluation asks another prompt than the one it was
trained on (measured: a 26-token training prompt ending in an empty think block, a 17-token evaluation prompt ending at
the assistant tag). Training (TRL), the readiness check (TRL's own ``_tokenize_prompts``), the held-out evaluation and
the sampling stack (:class:`~trl_explore.sampling.hf.TransformersGenerator`, and ``VLLMGenerator``'s ``LLM.chat``) all
render with these settings: :func:`render_prompt` and :func:`rendering_of`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def rendering_of(trainer) -> dict:
    """The rendering settings a trainer trains with: ``{"chat_template_kwargs": dict, "chat_template": str | None}``
    (TRL's ``GRPOTrainer.chat_template_kwargs`` and ``chat_template``; a trainer without them, e.g. the SFT baseline's:
    its ``args.chat_template_kwargs`` when it has one, else none)."""
    kwargs = getattr(trainer, "chat_template_kwargs", None)
    if kwargs is None:
        kwargs = getattr(getattr(trainer, "args", None), "chat_template_kwargs", None)
    return {"chat_template_kwargs": dict(kwargs or {}), "chat_template": getattr(trainer, "chat_template", None)}


def render_prompt(tokenizer, messages: Sequence[Mapping], *, chat_template_kwargs: Mapping | None = None,
                  chat_template: str | None = None) -> list[int]:
    """The token ids of the chat prompt ``messages`` with the generation prompt appended, rendered as TRL renders a
    training prompt (module docstring), one conversation at a time.

    Args:
        tokenizer: the policy's tokenizer (or processor), with a chat template.
        messages: the prompt's messages (``[{"role": ..., "content": ...}, ...]``).
        chat_template_kwargs: extra variables of the chat template (``GRPOConfig.chat_template_kwargs``).
        chat_template: a template to use instead of the tokenizer's (TRL's ``chat_template``), or None.
    """
    encoded = tokenizer.apply_chat_template(
        conversation=[list(messages)], chat_template=chat_template, add_generation_prompt=True, tokenize=True,
        return_dict=True, **dict(chat_template_kwargs or {}))
    ids = encoded["input_ids"][0]
    return [int(i) for i in (ids.tolist() if hasattr(ids, "tolist") else ids)]
