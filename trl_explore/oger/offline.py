"""Validation of the offline (teacher) fields of OGER's training rows, and their embeddings."""

from __future__ import annotations

import torch

from trl_explore.oger.options import OGEROptions
from trl_explore.oger.replacement import offline_completion_ids


def special_token_texts(tokenizer) -> tuple[str, ...]:
    """The strings of ``tokenizer``'s special tokens (EOS, pad, chat markers, ...), longest first; ``()`` without a
    tokenizer. ``tokenizer`` may be a processor holding one."""
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
    if tokenizer is None:
        return ()
    texts = set(getattr(tokenizer, "all_special_tokens", ()) or ())
    texts |= {t.content for t in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).values() if t.special}
    return tuple(sorted((t for t in texts if t), key=len, reverse=True))


def only_special_tokens(text: str, specials: tuple[str, ...]) -> bool:
    """True when ``text`` holds nothing but special-token strings and whitespace (e.g. ``"<|im_end|>"``)."""
    for special in specials:
        text = text.replace(special, "")
    return bool(specials) and not text.strip()


def offline_trajectories(row: dict, args: OGEROptions, row_name: str = "a dataset row", tokenizer=None):
    """Validate one dataset row's offline fields; return ``(texts, teachers, stored_embeddings)``.

    Args:
        row: a dataset row with ``args.offline_completions_column`` (list of str, possibly empty), and
            optionally ``args.offline_teachers_column`` (list of str, same length) and
            ``args.offline_embeddings_column`` (``[M][d]`` floats).
        args: the :class:`OGEROptions` (column names).
        row_name: how errors name the row (e.g. ``"training row 3"``).
        tokenizer: the policy's tokenizer (or processor), to refuse a trajectory of special tokens only; None: not
            checked here (:func:`teacher_completion` checks the ids).

    Returns:
        ``texts`` (list of str), ``teachers`` (list of str; ``"offline"`` when the column is absent or a name is
        None, e.g. a Dataset column of strings with a missing value) and the stored embeddings or None.

    Raises:
        ValueError: a column is missing, is not a list, holds a non-string or an empty (or whitespace) trajectory, or
            one of special tokens only (with ``tokenizer``), or the lengths differ.
    """
    col, teachers_col = args.offline_completions_column, args.offline_teachers_column
    if col not in row:
        raise ValueError(
            f"{row_name} has no column {col!r} (the prompt's offline trajectories); columns: {sorted(row)}. "
            f"Set OGERConfig.offline_completions_column or build the dataset with trl_explore.data"
        )
    texts = row[col] if row[col] is not None else []
    specials = special_token_texts(tokenizer)
    if not isinstance(texts, (list, tuple)):
        raise ValueError(f"{row_name}: {col!r} must be a list of strings, got {type(texts).__name__}")
    for j, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"{row_name}: offline trajectory {j} of {col!r} is {type(text).__name__}, expected str")
        if not text.strip():
            raise ValueError(f"{row_name}: offline trajectory {j} of {col!r} is empty; remove it (a replaced row "
                             "would be a bare EOS that policy shaping pushes down)")
        if only_special_tokens(text, specials):
            raise ValueError(f"{row_name}: offline trajectory {j} of {col!r} is {text!r:.60}, special tokens only: as "
                             "a completion it is a bare EOS that policy shaping pushes down; remove it")
    teachers = row.get(teachers_col)
    teachers = ["offline"] * len(texts) if teachers is None else teachers
    if not isinstance(teachers, (list, tuple)) or len(teachers) != len(texts):
        raise ValueError(
            f"{row_name} has {len(texts)} offline trajectories but {teachers_col!r} is {teachers!r:.80}: "
            f"expected a list of {len(texts)} teacher names"
        )
    return list(texts), ["offline" if t is None else str(t) for t in teachers], row.get(args.offline_embeddings_column)


def check_prompt(row: dict, row_name: str) -> None:
    prompt = row.get("prompt")
    is_messages = isinstance(prompt, list) and prompt and all(isinstance(m, dict) and "content" in m for m in prompt)
    if not ((isinstance(prompt, str) and prompt) or is_messages):
        raise ValueError(
            f"{row_name}: 'prompt' must be a non-empty string or a list of {{'role', 'content'}} messages, "
            f"got {prompt!r:.80}"
        )


def offline_embeddings(texts: list[str], stored, encoder, args: OGEROptions) -> torch.Tensor:
    """``[M, d]`` embeddings of one prompt's teacher trajectories: the stored ones (checked) or the encoder's (cached).

    Raises:
        ValueError: the stored embeddings have the wrong shape for ``texts`` and ``encoder``, or are not finite.
    """
    if stored is None:
        return encoder.encode_cached(texts)
    emb = torch.as_tensor(stored, dtype=torch.float32)
    if emb.dim() != 2 or emb.size(0) != len(texts) or emb.size(1) != encoder.dim:
        raise ValueError(
            f"column {args.offline_embeddings_column!r} holds embeddings of shape {tuple(emb.shape)} "
            f"for {len(texts)} trajectories; the embedding model {encoder.model_name_or_path!r} gives "
            f"{encoder.dim}-d ones: expected ({len(texts)}, {encoder.dim})"
        )
    if not torch.isfinite(emb).all():
        raise ValueError(f"column {args.offline_embeddings_column!r} holds NaN or infinite values")
    return emb


def group_offline(rows, group, args: OGEROptions, encoder=None, training: bool = True):
    """One group's teacher trajectories, teacher names and ``[M, d]`` embeddings (None when ``encoder`` is None).

    Args:
        rows: the process's batch rows; group: the indices of one group (``num_generations`` consecutive rows).
        encoder: a ``TrajectoryEncoder``, or None when no embedding is needed.
        training: in evaluation a set without the offline column gives no teachers (divergence 0, no replacement).

    Raises:
        ValueError: the group's rows hold different prompts, or a training row lacks the offline column.
    """
    first = rows[group[0]]
    for i in group:
        if rows[i].get("prompt") != first.get("prompt"):
            raise ValueError(
                f"rows {group[0]} and {i} of this process's batch belong to different prompts: OGER needs each "
                f"group of num_generations consecutive rows to hold one prompt"
            )
    if args.offline_completions_column not in first and not training:
        return [], [], None
    texts, teachers, stored = offline_trajectories(first, args)
    if not texts or encoder is None:
        return texts, teachers, None
    return texts, teachers, offline_embeddings(texts, stored, encoder, args)


def generation_prefix(processing_class, chat_template_kwargs: dict | None = None) -> str:
    """The text the chat template appends to a conversation for ``add_generation_prompt=True``.

    For ChatML templates this is ``"<|im_start|>assistant\n"``; reasoning templates often end it with ``"<think>\n"``.
    It is read as the difference between the rendering of a one-message conversation with and without the
    generation prompt; ``""`` when there is no chat template or the two renderings do not nest.
    """
    messages = [{"role": "user", "content": "1 + 1?"}]
    kwargs = dict(chat_template_kwargs or {}, tokenize=False)
    try:
        bare = processing_class.apply_chat_template(messages, add_generation_prompt=False, **kwargs)
        with_prompt = processing_class.apply_chat_template(messages, add_generation_prompt=True, **kwargs)
    except (ValueError, AttributeError, TypeError):  # no chat template: prompts are plain text
        return ""
    return with_prompt[len(bare):] if isinstance(bare, str) and with_prompt.startswith(bare) else ""


def strip_prompt_overlap(text: str, prefix: str) -> str:
    """``text`` without the longest start that repeats the end of ``prefix`` (the generation prompt).

    A teacher trajectory written as ``"<think>\nLet us..."`` after a prompt that already ends with ``"<think>\n"``
    would otherwise hold ``<think>`` twice. Only an overlap with visible characters is removed (a lone newline is
    ambiguous), and never the whole text.

    >>> strip_prompt_overlap("<think>\nx = 2", "<|im_start|>assistant\n<think>\n")
    'x = 2'
    """
    for k in range(min(len(text), len(prefix)), 0, -1):
        head = text[:k]
        if prefix.endswith(head):
            return text[k:] if head.strip() and text[k:].strip() else text
    return text


def teacher_completion(
    text: str, tokenizer, processing_class, max_completion_length: int, conversational: bool, prefix: str = ""
):
    """A teacher trajectory as a completion: ``(token ids, completion, truncated)``.

    The ids are the policy ``tokenizer``'s (no special tokens), cut to ``max_completion_length`` and ended with EOS
    (``replacement.offline_completion_ids``); the completion is their decoded text, as an assistant message when
    ``conversational``; ``truncated`` is 1 when the teacher text lost tokens (and usually its answer), else 0.
    When ``conversational``, a start of ``text`` that repeats the end of ``prefix`` (the chat template's generation
    prompt, :func:`generation_prefix`) is removed first (:func:`strip_prompt_overlap`).

    Raises:
        ValueError: ``text`` tokenises to special tokens only (e.g. the EOS string).
    """
    if conversational:
        text = strip_prompt_overlap(text, prefix)
    eos_id = tokenizer.eos_token_id
    tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
    special_ids = set(getattr(tokenizer, "all_special_ids", ()) or ())
    text_ids = [t for t in tokens if t not in special_ids]  # rows not checked at construction (IterableDataset)
    if special_ids and not tokenizer.decode(text_ids).strip():
        raise ValueError(f"the offline trajectory {text!r:.60} tokenises to special tokens only ({tokens[:4]}): as a "
                         "completion it is a bare EOS that policy shaping pushes down; remove it from the dataset")
    ids = offline_completion_ids(tokens, max_completion_length, eos_id)
    truncated = int(len(tokens) - (tokens[-1:] == [eos_id]) > max_completion_length - 1)
    decoded = processing_class.decode(ids, skip_special_tokens=True)
    return ids, ([{"role": "assistant", "content": decoded}] if conversational else decoded), truncated
