"""Load one split of a data set by name: the embedded CHAMP set, the task ladder, a saved folder, or a Hub dataset."""

from __future__ import annotations

import os


def load_split(dataset_name: str, split: str = "train", **options):
    """One split of a dataset named the way the example scripts accept it.

    Args:
        dataset_name: ``"champ"`` (the embedded CHAMP multi-teacher set, built and cached on first use by
            :func:`trl_explore.data.load_default_offline_dataset`; splits ``train``, ``test``), ``"ladder"`` (the
            generated arithmetic ladder, :func:`trl_explore.data.ladder_dataset`; splits ``train``, ``validation``,
            ``test``), a folder written by ``save_to_disk`` (a ``Dataset`` or a ``DatasetDict``), or a Hugging Face
            Hub dataset id (needs network).
        split: the split to return (ignored for a folder holding a single ``Dataset``).
        options: keyword arguments of ``load_default_offline_dataset`` (``"champ"``) or of ``ladder_dataset``
            (``"ladder"``); none for other names.

    Returns:
        ``datasets.Dataset``.

    Raises:
        KeyError: the split does not exist (the message lists the splits there are).
    """
    if dataset_name == "champ":
        from trl_explore.data.builder import load_default_offline_dataset

        splits = load_default_offline_dataset(**options)
    elif dataset_name == "ladder":
        from trl_explore.data.ladder import ladder_dataset

        splits = ladder_dataset(**options)
    elif os.path.isdir(dataset_name):
        from datasets import load_from_disk

        splits = load_from_disk(dataset_name)
        if not hasattr(splits, "keys"):
            return splits
    else:
        from datasets import load_dataset

        return load_dataset(dataset_name, split=split)
    if split not in splits:
        raise KeyError(f"dataset {dataset_name!r} has no split {split!r}; splits: {sorted(splits)}")
    return splits[split]
