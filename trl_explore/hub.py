"""Hugging Face Hub model cards for the trainers: ``base_model`` only when it is a Hub id.

TRL's ``create_model_card`` (``BaseTrainer``) takes ``base_model`` from ``model.config._name_or_path`` unless that
is a folder on this machine, and its template then writes "fine-tuned version of [None]" when there is none. A
path that is not a folder here (a relative path from another working directory, a file) goes through as
``base_model`` and the Hub rejects the card's metadata. :func:`create_model_card` fixes both around TRL's method.
"""

from __future__ import annotations

import os
import pathlib

_NO_BASE = "This model is a fine-tuned version of [None](https://huggingface.co/None)"
_NO_BASE_TEXT = "This model is a fine-tuned version of a local model (not on the Hugging Face Hub)"


def hub_base_model(name: object) -> str | None:
    """``name`` if it can be a Hub model id (``"org/name"`` or ``"name"``), else None.

    None for an empty name, an embedded-model alias (``"embedded"``), anything that exists on this machine, an
    absolute or explicitly relative path (``/``, ``.``, ``~``), a Windows path, and any string that
    ``huggingface_hub.utils.validate_repo_id`` rejects (e.g. more than one ``/``).
    """
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    from trl_explore.defaults import POLICY_ALIASES

    if not isinstance(name, str) or not name or name in POLICY_ALIASES:
        return None
    if name.startswith((".", "/", "~")) or "\\" in name or os.path.exists(name):
        return None
    try:
        validate_repo_id(name)
    except HFValidationError:
        return None
    return name


def create_model_card(self, model_name=None, dataset_name=None, tags=None):
    """TRL's ``create_model_card`` with ``base_model`` set only for a Hub id and no "[None]" link.

    Without a Hub repository (``hub_model_id`` None) the card's quick start loads ``output_dir`` instead of "None".
    Assign it as ``create_model_card = create_model_card`` in a ``BaseTrainer`` subclass. The dataset link is
    kept only when ``dataset_name`` is a Hub id too (``"champ"`` names the embedded CHAMP set, from PyPI).
    """
    from trl import GRPOTrainer

    config = self.accelerator.unwrap_model(self.model).config
    original = getattr(config, "_name_or_path", "")
    config._name_or_path = hub_base_model(original) or ""  # TRL reads base_model from here
    try:
        dataset = None if dataset_name == "champ" else hub_base_model(dataset_name)
        GRPOTrainer.create_model_card(self, model_name=model_name, dataset_name=dataset, tags=tags)
    finally:
        config._name_or_path = original
    card = pathlib.Path(self.args.output_dir) / "README.md"
    if self.is_world_process_zero() and card.is_file():
        text = card.read_text()
        fixed = text.replace(_NO_BASE, _NO_BASE_TEXT)
        if self.hub_model_id is None:  # not pushed (yet): the quick start loads the saved folder, not "None"
            fixed = fixed.replace('model="None"', f'model="{self.args.output_dir}"')
        if fixed != text:
            card.write_text(fixed)
