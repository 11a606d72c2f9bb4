"""Load one split of a data set by name: the embedded CHAMP set, the task ladder, a saved folder, or a Hub dataset."""

from __future__ import annotations

import os


def load_split(dataset_name: str, split: str = "train", **options):
    """One split of a dataset named the way the example scripts accept it.

    Args:
        dataset_name: ``"champ"`` (the embedded CHAMP multi-teacher set, built and cached on first use by
            :func:`trl_explore.data.load_default_offline_dataset`; splits ``train``, ``test``), ``"ladder"`` (the
            generated arithmetic ladder, :func:`trl_explore.data.ladder_dataset`; splits ``train``, ``validation``,
            ``test``), a ``.jsonl`` / ``.json`` / ``.parquet`` / ``.csv`` file (one split: ``split`` is ignored), a
            folder written by ``save_to_disk`` (a ``Dataset`` or a ``DatasetDict``), or a Hugging Face
            Hub dataset id (needs network).
        split: the split to return (ignored for a folder holding a single ``Dataset``).
        options: keyword arguments of ``load_default_offline_dataset`` (``"champ"``) or of ``ladder_dataset``
            (``"ladder"``); none for other names.

    Returns:
        ``datasets.Dataset``.

    Raises:
        KeyError: the split does not exist (the message lists the splits there are).
        FileNotFoundError: a name that can only be a local path (:func:`looks_like_a_path`) and is no folder, or a
            name that is no folder and that the Hub could not be asked for (offline, ``HF_HUB_OFFLINE``): the message
            names the path looked for.
    """
    if dataset_name == "champ":
        from trl_explore.data.builder import load_default_offline_dataset

        splits = load_default_offline_dataset(**options)
    elif dataset_name == "ladder":
        from trl_explore.data.ladder import ladder_dataset

        splits = ladder_dataset(**options)
    elif os.path.isfile(os.path.expanduser(dataset_name)) and dataset_name.rsplit(".", 1)[-1] in DATA_FILE_TYPES:
        from datasets import load_dataset

        builder = DATA_FILE_TYPES[dataset_name.rsplit(".", 1)[-1]]  # one file: one split, whatever `split` says
        return load_dataset(builder, data_files=os.path.expanduser(dataset_name), split="train")
    elif os.path.isdir(os.path.expanduser(dataset_name)):
        from datasets import load_from_disk

        splits = load_from_disk(os.path.expanduser(dataset_name))
        if not hasattr(splits, "keys"):
            return splits
    elif looks_like_a_path(dataset_name):
        raise FileNotFoundError(f"dataset {dataset_name!r}: there is no folder {_absolute(dataset_name)} ({_KINDS})")
    else:
        from datasets import load_dataset

        try:
            return load_dataset(dataset_name, split=split)
        except ConnectionError as err:  # datasets' error when the Hub cannot be reached (HF_HUB_OFFLINE: always)
            offline = ", and HF_HUB_OFFLINE is set" if _hub_offline() else ""
            raise FileNotFoundError(
                f"dataset {dataset_name!r}: there is no folder {_absolute(dataset_name)}, and the Hub could not be "
                f"reached for it{offline} (only a Hub data set already in the datasets cache loads offline; {_KINDS})"
            ) from err
    if split not in splits:
        raise KeyError(f"dataset {dataset_name!r} has no split {split!r}; splits: {sorted(splits)}")
    return splits[split]


_KINDS = ("a data set is 'champ', 'ladder', a .jsonl/.json/.parquet/.csv file, a folder written by save_to_disk or a "
          "Hub dataset id")
DATA_FILE_TYPES = {"jsonl": "json", "json": "json", "parquet": "parquet", "csv": "csv"}
"""File suffixes :func:`load_split` reads as one data set (``datasets``' builder of each)."""


def looks_like_a_path(name: str) -> bool:
    """Whether a data set name can only be a local path, never a Hub id: it starts with ``./``, ``../``, ``/`` or
    ``~``, holds the platform's own separator (where that is not ``/``), or has more than one ``/`` (a Hub id is
    ``name`` or ``owner/name``)."""
    return (name.startswith(("./", "../", "/", "~")) or (os.sep != "/" and os.sep in name)
            or name.count("/") > 1)


def _absolute(name: str) -> str:
    return os.path.abspath(os.path.expanduser(name))


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
