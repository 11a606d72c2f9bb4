"""Checks on the dataset rows a generation receives, before TRL renders or tokenises them.

TRL reads ``row["prompt"]`` of every row, decides from the FIRST row of a batch whether the batch is conversational,
and hands messages to the chat template unchecked: a row without a prompt is a bare ``KeyError``, a message without
``role`` or a batch mixing plain and conversational prompts fails 14-19 frames deep in the tokenizer (issue 22).
These checks name the row and the fix instead. A map-style ``Dataset`` is checked for its ``prompt`` column when the
trainer is built; rows are checked at each generation (an ``IterableDataset`` has no rows before).
"""

from __future__ import annotations

PLAIN, CONVERSATIONAL = "plain text", "conversational"


def check_prompt_column(dataset, where: str) -> None:
    """Refuse a dataset whose columns are known and hold no ``prompt``.

    Raises:
        ValueError: naming ``where`` (``"train_dataset"``), the columns, and the fix.
    """
    parts = dataset.items() if isinstance(dataset, dict) else [(None, dataset)]
    for key, part in parts:
        columns = getattr(part, "column_names", None)
        if columns is not None and "prompt" not in columns:
            name = where if key is None else f"{where}[{key!r}]"
            raise ValueError(f"{name} has no 'prompt' column (its columns: {sorted(columns)}); rename the column that "
                             "holds the prompts, e.g. dataset.rename_column('question', 'prompt')")


def _preview(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def prompt_kind(row, index: int, where: str) -> str:
    """``"plain text"`` or ``"conversational"``: the kind of ``row["prompt"]``, checked.

    A prompt is a string, or a non-empty list of messages, each a dict with a string ``role`` and a ``content`` (a
    string or a list of content parts; ``None`` where the message carries ``tool_calls``).

    Raises:
        ValueError: naming the row (``index`` in ``where``), the message and the field, and the fix.
    """
    name = f"row {index} of {where}"
    if not isinstance(row, dict) or "prompt" not in row:
        fields = sorted(row) if isinstance(row, dict) else type(row).__name__
        raise ValueError(f"{name} has no 'prompt' field (its fields: {fields}); every row needs one: a string, or a "
                         "list of {'role', 'content'} messages (rename the column, e.g. with dataset.rename_column)")
    prompt = row["prompt"]
    if isinstance(prompt, str):
        return PLAIN
    if not isinstance(prompt, (list, tuple)) or not prompt:
        raise ValueError(f"{name}: 'prompt' must be a string or a non-empty list of {{'role', 'content'}} messages, "
                         f"got {_preview(prompt)}")
    for j, message in enumerate(prompt):
        if not isinstance(message, dict):
            raise ValueError(f"{name}: message {j} of 'prompt' is a {type(message).__name__}, expected a dict with "
                             f"'role' and 'content': {_preview(message)}")
        if not isinstance(message.get("role"), str):
            raise ValueError(f"{name}: message {j} of 'prompt' has no 'role' (a string such as 'system', 'user' or "
                             f"'assistant'): {_preview(message)}; add it, e.g. {{'role': 'user', 'content': ...}}")
        content = message.get("content")
        if not (isinstance(content, (str, list)) or (content is None and message.get("tool_calls"))):
            raise ValueError(f"{name}: message {j} of 'prompt' has no text 'content' (a string, or a list of content "
                             f"parts): {_preview(message)}")
    return CONVERSATIONAL


def check_prompt_rows(rows, where: str, expected: str | None = None) -> str:
    """Check every row's prompt (:func:`prompt_kind`) and that all are of one kind, also the kind of earlier batches
    (``expected``); return that kind.

    TRL renders a whole batch as the first row's kind (chat template or plain text), so a mix would apply the chat
    template to strings, or pass messages as text.

    Raises:
        ValueError: a bad row, or a row of the other kind (naming both rows, or the kind of the earlier batches).
    """
    kinds = [prompt_kind(row, i, where) for i, row in enumerate(rows)]
    if not kinds:
        return expected
    first = expected or kinds[0]
    for i, kind in enumerate(kinds):
        if kind != first:
            earlier = f"row 0 of {where} is {kinds[0]}" if expected is None else f"the earlier batches were {expected}"
            raise ValueError(f"row {i} of {where} has a {kind} prompt but {earlier}: one dataset must hold one kind "
                             f"of prompt (TRL renders a batch as its first row's kind); make them one kind, e.g. turn "
                             "each string s into [{'role': 'user', 'content': s}]")
    return first


def check_datasets(plan, components) -> None:
    """The construction-time checks of the datasets in a :class:`~trl_explore.driver.components.TrainerPlan`: no
    column a component writes, a ``prompt`` column (unless an environment supplies the prompts), the gold-answer column
    the reward reads, with no empty gold (``rewards.checks.check_gold_columns``), enough prompts for one generation
    batch.

    Raises:
        ValueError: naming the dataset, the column or the sizes, and the fix.
    """
    from trl_explore.defaults import check_train_dataset_size
    from trl_explore.rewards.checks import check_column_clash, check_gold_columns

    datasets = {"train_dataset": plan.train_dataset, "eval_dataset": plan.eval_dataset}
    check_column_clash(datasets, components)
    if not plan.trainer_kwargs.get("environment_factory"):  # an environment may supply the prompts (TRL)
        for where, dataset in datasets.items():
            if dataset is not None:
                check_prompt_column(dataset, where)
    check_gold_columns(datasets, plan.reward_funcs)
    check_train_dataset_size(plan.train_dataset, plan.args)
