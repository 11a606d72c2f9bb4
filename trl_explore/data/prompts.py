"""Prompt presets and conversational prompt construction for the offline data sets.

A preset is a system prompt plus a user template. ``"default"`` is a short math instruction;
``"oger"`` is the paper's Table 6 (OGER App. B), used for all OGER experiments. Table 6 ends the
prompt with ``Assistant: <think>``; that prefill is NOT added, because TRL 1.16's ``GRPOTrainer``
always renders prompts with ``add_generation_prompt=True`` (a trailing assistant message would be
closed by the chat template); the system prompt itself asks for the ``<think>`` section.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PromptPreset:
    """A system prompt (``None``: no system message) and a user template with a ``{problem}`` field."""

    system: str | None
    user_template: str = "{problem}"


OGER_SYSTEM_PROMPT = (
    "Your task is to follow a systematic, thorough reasoning process before providing the final solution. "
    "This involves analyzing, summarizing, exploring, reassessing, and refining your thought process through "
    "multiple iterations. Structure your response into two sections: Thought and Solution. In the Thought "
    'section, present your reasoning using the format: "<think>\\n {thoughts} </think>\\n". Each thought '
    "should include detailed analysis, brainstorming, verification, and refinement of ideas. After "
    '"</think>\\n", in the Solution section, provide the final, logical, and accurate answer, clearly derived '
    "from the exploration in the Thought section. If applicable, include the answer in \\boxed{} for "
    "closed-form results like multiple choices or mathematical solutions."
)
"""System prompt of OGER Table 6 (App. B), verbatim."""

DEFAULT_SYSTEM_PROMPT = (
    "You are a careful mathematician. Solve the problem step by step, then write the final answer inside \\boxed{}."
)
"""Short default system prompt of ``trl_explore``."""

PROMPT_PRESETS: dict[str, PromptPreset] = {
    "default": PromptPreset(DEFAULT_SYSTEM_PROMPT),
    "oger": PromptPreset(OGER_SYSTEM_PROMPT, "This is the problem: {problem}"),
    "none": PromptPreset(None),
}
"""Named presets: ``"default"``, ``"oger"`` (Table 6), ``"none"`` (no system message: note that some
chat templates, SmolLM2's among them, then insert their own default system prompt)."""

_ROLES = ("system", "user", "assistant")


def get_prompt_preset(name: str) -> PromptPreset:
    """Return the preset called ``name`` (one of :data:`PROMPT_PRESETS`).

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    try:
        return PROMPT_PRESETS[name]
    except KeyError:
        raise ValueError(f"Unknown system prompt preset {name!r}; choose one of {sorted(PROMPT_PRESETS)}.") from None


def validate_messages(messages: object, where: str) -> list[dict[str, str]]:
    """Check that ``messages`` is a conversational prompt and return it as plain dicts.

    A conversational prompt is a non-empty list of ``{"role", "content"}`` dicts, roles in
    ``system``/``user``/``assistant``, string contents, the last message from the user (TRL adds the
    generation prompt after it).

    Args:
        messages: the value to check.
        where: names the offending row/field in error messages, e.g. ``"row 3, column 'prompt'"``.

    Raises:
        ValueError: any violation, naming ``where`` and the message index.
    """
    if not isinstance(messages, list) or not messages:
        kind = type(messages).__name__
        raise ValueError(f"{where}: a prompt must be a string or a non-empty list of messages, got {kind}.")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not {"role", "content"} <= set(message):
            raise ValueError(f"{where}: message {i} must be a dict with 'role' and 'content', got {message!r:.80}.")
        if message["role"] not in _ROLES:
            raise ValueError(f"{where}: message {i} has role {message['role']!r}; expected one of {_ROLES}.")
        if not isinstance(message["content"], str):
            raise ValueError(f"{where}: message {i} content must be a string, "
                             f"got {type(message['content']).__name__}.")
        out.append({"role": message["role"], "content": message["content"]})
    if out[-1]["role"] != "user":
        raise ValueError(f"{where}: the last message must come from the user, got {out[-1]['role']!r}.")
    return out


def build_prompt(problem: str | list[dict], preset: PromptPreset, where: str = "prompt") -> list[dict[str, str]]:
    """Conversational prompt for one problem.

    Args:
        problem: the problem text, or an already conversational prompt (a message list, e.g. from a
            LUFFY-format data set), which is validated and kept as given (the preset is not applied).
        preset: system prompt and user template used for a text problem.
        where: names the row in error messages.

    Returns:
        ``[{"role": "system", ...}, {"role": "user", ...}]`` (no system message when
        ``preset.system`` is ``None``).

    Raises:
        ValueError: ``problem`` is neither a non-empty string nor a valid message list.
    """
    if isinstance(problem, str):
        if not problem.strip():
            raise ValueError(f"{where}: the problem text is empty.")
        user = {"role": "user", "content": preset.user_template.format(problem=problem)}
        return ([{"role": "system", "content": preset.system}] if preset.system is not None else []) + [user]
    return validate_messages(problem, where)
