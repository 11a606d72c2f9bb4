"""Trajectory embeddings ``E = Enc(tau)`` (OGER Eq. 1) with a sentence-embedding model.

Offline (teacher) embeddings never change during training: :class:`TrajectoryEncoder` keeps them in
a cache keyed by a hash of the text, so each offline trajectory is encoded once per run (or never,
when the dataset carries a precomputed ``offline_embeddings`` column, see :func:`add_offline_embeddings`).
Online completions are encoded every step, each distinct text once.

Long texts: the paper's encoder (bge-large-en-v1.5) reads at most 512 tokens while trajectories reach
8k tokens. ``long_text_mode="truncate"`` (default, what the paper's pipeline does) embeds the first
``max_seq_length`` tokens (special tokens included); ``"chunk_mean"`` splits the text into consecutive windows that
fill ``max_seq_length`` with the special tokens, embeds each, and averages the unit-normalised window embeddings
weighted by their token counts, so the whole trajectory counts.

Each text is tokenised once, by the embedder's own tokenizer, and the windows are built from those token ids and
fed to the model as they are: a window is never decoded and tokenised again, so it is never cut. The forward is the
``SentenceTransformer``'s own module stack (transformer, pooling, normalisation), with the model's settings as
``encode`` applies them: its prompt (``prompt_name``, else its ``default_prompt_name``) before every text and every
window, ``prompt_length`` for a pooling that leaves the prompt out, a Matryoshka ``truncate_dim``; a model whose
inputs cannot be built so (a chat-template or image model, a ``Router``) is refused by name. For texts within
``max_seq_length`` the embeddings are ``SentenceTransformer.encode``'s (tested to 1e-5, with and without a prompt).

Cost (issue 13). The forward dominates: tokenisation is about 1% of it. Windows are batched by length
(:func:`length_batches`): padding a batch to its longest window costs the padded tokens, and every forward has a
fixed cost, so the batches minimise the sum of both; the embeddings are the same as one padded batch's up to float
rounding (1e-7). ``dtype="bfloat16"`` (or ``"float16"``) runs the forward under ``torch.autocast``: matrix products
in that precision, normalisations and softmax in float32, weights kept in float32. Measured on 60 CHAMP problems
(10,966 model answers; per problem four play the online completions and the rest the offline ones; all-MiniLM-L6-v2,
one CPU core with bf16 instructions; ``benchmarks/embedder_precision.py``): bfloat16 is 1.76x faster, the embeddings
keep a cosine >= 0.99995 with float32's, the divergences ``D`` differ by at most 1.8e-3 (median over problems
5.5e-4), and the lowest-divergence completion is the same in 60 of 60 problems.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
from collections.abc import Sequence

import torch

from trl_explore.utils.registry import Registry

LONG_TEXT_MODES = Registry("embedding_long_text_mode", kind="long-text mode")
"""How a trajectory longer than the embedder's ``max_seq_length`` is embedded (module docstring)."""
LONG_TEXT_MODES.register("truncate", help="its first max_seq_length tokens, as the paper's pipeline; default")
LONG_TEXT_MODES.register("chunk_mean", help="the token-weighted mean of consecutive windows")

EMBEDDING_DTYPES = Registry("embedding_dtype", kind="embedder precision")
"""Precisions of the embedder's matrix products (autocast; embeddings are float32 either way)."""
EMBEDDING_DTYPES.register("float32", torch.float32)
EMBEDDING_DTYPES.register("bfloat16", torch.bfloat16)
EMBEDDING_DTYPES.register("float16", torch.float16)
FORWARD_OVERHEAD_TOKENS = 32
"""A forward's fixed cost in padded tokens on a CPU, for the batching only: all-MiniLM-L6-v2 on one CPU core (issue 13)
takes about 10 ms for a forward of 8 tokens and 0.3-0.45 ms per token in forwards of 64-2,048 tokens. On an accelerator
a forward's launch cost is worth far more tokens (not measured here), so there the batching keeps the fewest forwards
and only chooses where to cut them."""


def _text_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", errors="replace")).hexdigest()


def token_windows(ids: Sequence[int], window: int) -> list[list[int]]:
    """Consecutive windows of at most ``window`` token ids that together hold all of ``ids``, in order.

    Args:
        ids: a text's token ids (special tokens excluded); may be empty.
        window: ids per window, ``>= 1``.

    Returns:
        ``ceil(len(ids) / window)`` lists (one empty list when ``ids`` is empty).

    Raises:
        ValueError: if ``window < 1``.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1 token, got {window}")
    ids = list(ids)
    return [ids[start : start + window] for start in range(0, len(ids), window)] or [[]]


def length_batches(lengths: Sequence[int], max_rows: int,
                   overhead_tokens: int | None = FORWARD_OVERHEAD_TOKENS) -> list[list[int]]:
    """Split windows into batches of similar lengths that minimise the padded work of the embedder.

    A batch costs ``overhead_tokens + rows * longest`` (each row is padded to the batch's longest window; every
    forward has a fixed cost). The windows are sorted longest first (as ``SentenceTransformer.encode`` sorts
    them) and cut into consecutive batches of at most ``max_rows`` rows by dynamic programming, which minimises the
    summed cost exactly for that order. ``O(n * max_rows)`` steps.

    Args:
        lengths: ``n`` window lengths in tokens.
        max_rows: most rows per batch (the memory bound, e.g. ``embedding_batch_size``), ``>= 1``.
        overhead_tokens: a forward's fixed cost in tokens (default :data:`FORWARD_OVERHEAD_TOKENS`); ``None``: the
            fewest forwards, ``ceil(n / max_rows)``, cut where they pad least (a cost above any padding saved).

    Returns:
        Batches of indices into ``lengths``: each index once, batches longest first, rows longest first.

    Raises:
        ValueError: if ``max_rows < 1``.
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])  # stable: ties keep their order
    n = len(order)
    if overhead_tokens is None:  # one more forward must cost more than all the padding it could save
        overhead_tokens = max_rows * max(lengths, default=0) + 1
    best, cut = [0.0] + [float("inf")] * n, [0] * (n + 1)  # best[k]: least cost of the first k sorted windows
    for end in range(1, n + 1):
        for start in range(max(0, end - max_rows), end):
            cost = best[start] + overhead_tokens + (end - start) * lengths[order[start]]
            if cost < best[end]:
                best[end], cut[end] = cost, start
    batches, end = [], n
    while end > 0:
        batches.append(order[cut[end] : end])
        end = cut[end]
    return batches[::-1]


def pool_windows(embeddings: torch.Tensor, owners: torch.Tensor, weights: torch.Tensor,
                 num_texts: int) -> torch.Tensor:
    """Unit-norm weighted mean of window embeddings per text (the ``chunk_mean`` pooling).

    Args:
        embeddings: ``[W, d]`` window embeddings (unit norm); owners: ``[W]`` text index of each window, in
            ``[0, num_texts)``; weights: ``[W]`` token count of each window (``> 0``).

    Returns:
        ``[num_texts, d]`` unit-norm embeddings ``normalize(sum_w weight_w * e_w)``.
    """
    pooled = torch.zeros(num_texts, embeddings.size(1)).index_add_(0, owners, embeddings * weights.unsqueeze(1))
    return torch.nn.functional.normalize(pooled, dim=1)


POSITION_OFFSET_TYPES = ("roberta", "xlm-roberta", "camembert", "mpnet", "longformer", "data2vec-text")
"""Model types whose position ids start after the padding index: ``pad_token_id + 1`` rows of their position table
are never read for text (RoBERTa's 514 rows hold 512 positions)."""


def check_max_seq_length(model, max_seq_length: int, name: str) -> None:
    """Refuse a ``max_seq_length`` beyond the embedder's position table (a shape error at the first long text
    otherwise), warn once for a model without a table (RoPE) read past ``max_position_embeddings``.

    Args:
        model: the loaded ``SentenceTransformer``; max_seq_length: tokens per window, special tokens included;
        name: the model's name, for the message.

    Raises:
        ValueError: ``max_seq_length < 1``, or above the table (the message gives the largest that fits).
    """
    import logging

    from trl_explore.trl_guards.positions import absolute_position_owner

    if max_seq_length < 1:
        raise ValueError(f"TrajectoryEncoder(max_seq_length={max_seq_length}): must be >= 1 token")
    auto_model = getattr(model[0], "auto_model", None)
    config = getattr(auto_model, "config", None)
    size = getattr(config, "max_position_embeddings", None)
    if not size:
        return
    if getattr(config, "model_type", None) in POSITION_OFFSET_TYPES:
        size -= (getattr(config, "pad_token_id", None) or 0) + 1
    if max_seq_length <= size:
        return
    if absolute_position_owner(auto_model) is not None:
        raise ValueError(f"TrajectoryEncoder(max_seq_length={max_seq_length}) is above the {size} positions of the "
                         f"embedding model {name!r} (its position table): use at most {size}, and "
                         "long_text_mode='chunk_mean' to embed longer trajectories in windows")
    logging.getLogger(__name__).warning(
        "TrajectoryEncoder(max_seq_length=%d) is above the %d positions embedding model %r was trained on: windows "
        "are read at positions it never saw", max_seq_length, size, name)


@dataclasses.dataclass(frozen=True)
class TextPrompt:
    """The prompt an embedding model puts before every text (``SentenceTransformer.prompts``).

    Attributes:
        text: the prompt (``""``: none). ids: its token ids, no special tokens.
        length: the ``prompt_length`` feature ``encode`` gives the pooling (special tokens before the prompt
            included), or None without a prompt.
    """

    text: str = ""
    ids: list = dataclasses.field(default_factory=list)
    length: int | None = None


def resolve_prompt(model, prompt_name: str | None, name: str) -> TextPrompt:
    """The prompt ``model.encode(texts, prompt_name=prompt_name)`` puts before each text: ``prompt_name``'s, else the
    model's ``default_prompt_name``'s, else none; with its ``prompt_length`` as sentence-transformers counts it (the
    prompt tokenised with special tokens, less a trailing special token).

    Raises:
        ValueError: ``prompt_name`` is not one of the model's prompts (the message names them and the model).
    """
    prompts = dict(getattr(model, "prompts", None) or {})
    if prompt_name is not None and prompt_name not in prompts:
        raise ValueError(f"TrajectoryEncoder(prompt_name={prompt_name!r}): embedding model {name!r} has the prompts "
                         f"{sorted(prompts)}")
    chosen = prompt_name if prompt_name is not None else getattr(model, "default_prompt_name", None)
    text = (prompts.get(chosen) or "") if chosen is not None else ""
    if not text:
        return TextPrompt()
    text_for_ids = text.lower() if getattr(model[0], "do_lower_case", False) else text
    tokenizer = model.tokenizer
    ids = tokenizer(text_for_ids, add_special_tokens=False)["input_ids"]
    with_specials = tokenizer(text_for_ids, add_special_tokens=True)["input_ids"]
    length = len(with_specials) - (1 if with_specials and with_specials[-1] in tokenizer.all_special_ids else 0)
    return TextPrompt(text, list(ids), length)


def check_text_model(model, name: str) -> None:
    """Refuse an embedding model whose inputs :class:`TrajectoryEncoder` cannot build as ``encode`` builds them.

    It tokenises text itself and runs the model's module stack, so the first module must be a text model with a
    tokenizer (not a chat-template or image model), and no module may route inputs by task (``Router``: separate
    query and document encoders, chosen by ``encode_query`` / ``encode_document``).

    Raises:
        ValueError: naming the model and the module or setting.
    """
    first = model[0]
    modalities = getattr(first, "modality_config", None)
    if getattr(model, "tokenizer", None) is None or (modalities is not None and "text" not in modalities):
        raise ValueError(f"embedding model {name!r}: its first module ({type(first).__name__}) takes no plain text "
                         f"with a tokenizer (modalities: {sorted(modalities or [])}); OGER's TrajectoryEncoder needs "
                         "a text embedding model")
    for module in model:
        if type(module).__name__ == "Router":
            raise ValueError(f"embedding model {name!r} routes its inputs by task (a Router module: separate query "
                             "and document encoders), which TrajectoryEncoder does not choose; use a model without a "
                             "Router")


def embedder_load_error(name: str, err: Exception) -> ValueError:
    """The error for an embedding model that sentence-transformers could not load: it names the ``embedding_model``
    option, the value, the cause (``err``'s first line) and the values the option accepts."""
    from trl_explore.defaults import EMBEDDER_ALIASES

    cause = (str(err).strip().splitlines() or [type(err).__name__])[0]
    offline = " (HF_HUB_OFFLINE is set: only a model already in the Hub cache)" if _hub_offline() else ""
    aliases = ", ".join(repr(a) for a in sorted(EMBEDDER_ALIASES))
    return ValueError(
        f"embedding_model={name!r} cannot be loaded ({type(err).__name__}: {cause}). The embedding_model option "
        f"(OGERConfig, OGERASEConfig; TrajectoryEncoder's model_name_or_path) takes {aliases} for the bundled "
        f"all-MiniLM-L6-v2, a local sentence-transformers folder that exists, or a Hub model id{offline}")


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


class TrajectoryEncoder:
    """Encodes trajectories into unit-norm embeddings with a sentence-transformers text model.

    Args:
        model_name_or_path: a sentence-transformers model (hub id or local folder). ``"embedded"``
            selects the bundled all-MiniLM-L6-v2 (``trl_explore.defaults``).
        device: torch device for the encoder (default: CPU, or the given accelerator device).
        batch_size: encoding batch size (windows per forward pass).
        long_text_mode: ``"truncate"`` or ``"chunk_mean"`` (see the module docstring).
        max_seq_length: tokens per window, special tokens included; default: the model's own ``max_seq_length``.
        dtype: precision of the forward's matrix products: ``"float32"`` (default, exact) or ``"bfloat16"`` /
            ``"float16"`` (``torch.autocast``; see the module docstring). Embeddings are returned in float32.
        prompt_name: the model's prompt put before every text, by name (a key of the model's ``prompts``); default
            None: the model's ``default_prompt_name`` if it sets one, else no prompt, as ``SentenceTransformer.encode``
            chooses it. The model's pooling settings hold as in ``encode``: its pooling mode, prompt tokens left out
            of the pooling (``include_prompt=False``), a Matryoshka ``truncate_dim``.

    The model is loaded on first use, so constructing an encoder is free.

    Raises:
        ValueError: for an unknown ``long_text_mode`` or ``dtype``, or ``batch_size < 1``; when the model loads, a
            model that cannot be loaded (no such local folder, a Hub id that is not there or not reachable: the
            message names the ``embedding_model`` option and what it accepts), a ``max_seq_length`` above its
            position table (:func:`check_max_seq_length`), a ``prompt_name`` the model does not have, or a model
            whose inputs this encoder cannot build as ``encode`` does (:func:`check_text_model`).
    """

    def __init__(
        self,
        model_name_or_path: str = "embedded",
        device: str | torch.device | None = None,
        batch_size: int = 32,
        long_text_mode: str = "truncate",
        max_seq_length: int | None = None,
        dtype: str = "float32",
        prompt_name: str | None = None,
    ):
        EMBEDDING_DTYPES.check(dtype, "embedding dtype")
        LONG_TEXT_MODES.check(long_text_mode, "long_text_mode")
        if batch_size < 1:
            raise ValueError(f"embedding batch_size must be >= 1, got {batch_size}")
        self.model_name_or_path = model_name_or_path
        self.device = device
        self.batch_size = batch_size
        self.long_text_mode = long_text_mode
        self.max_seq_length = max_seq_length
        self.dtype = dtype
        self.prompt_name = prompt_name
        self._model = None
        self._specials: tuple[list[int], list[int]] | None = None
        self._prompt: TextPrompt | None = None
        self._cache: dict[str, torch.Tensor] = {}

    @property
    def model(self):
        """The ``SentenceTransformer``, loaded on first access (ValueError for a model that cannot be loaded,
        see :func:`embedder_load_error`)."""
        if self._model is None:
            from huggingface_hub.errors import HFValidationError
            from sentence_transformers import SentenceTransformer  # heavy import, on first use only

            from trl_explore.defaults import resolve_embedder_path

            device = None if self.device is None else str(self.device)
            try:
                model = SentenceTransformer(resolve_embedder_path(self.model_name_or_path), device=device)
            except (OSError, HFValidationError) as err:  # no such folder, Hub id not there / unreachable, bad id
                raise embedder_load_error(self.model_name_or_path, err) from err
            check_text_model(model, self.model_name_or_path)
            if self.max_seq_length is not None:
                check_max_seq_length(model, self.max_seq_length, self.model_name_or_path)
                model.max_seq_length = self.max_seq_length
            self._model = model.eval()
        return self._model

    @property
    def dim(self) -> int:
        """Embedding size ``d``."""
        # sentence-transformers >= 5.x renamed the method (the old name warns); older releases only have the old one
        getter = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        return int(getter())

    @property
    def prompt(self) -> TextPrompt:
        """The prompt put before every text and how the pooling sees it (:func:`resolve_prompt`)."""
        if self._prompt is None:
            self._prompt = resolve_prompt(self.model, self.prompt_name, self.model_name_or_path)
        return self._prompt

    @property
    def window(self) -> int:
        """Text tokens per window: ``max_seq_length`` less the special tokens the tokenizer adds around a text and
        the prompt's tokens."""
        prefix, suffix = self._special_tokens()
        window = int(self.model.max_seq_length) - len(prefix) - len(suffix) - len(self.prompt.ids)
        if window < 1:
            raise ValueError(f"max_seq_length {self.model.max_seq_length} leaves no room for text tokens")
        return window

    def _special_tokens(self) -> tuple[list[int], list[int]]:
        """The ids the embedder's tokenizer puts before and after a text (e.g. ``[CLS]`` / ``[SEP]``)."""
        if self._specials is None:
            enc = self.model.tokenizer("a", add_special_tokens=True, return_special_tokens_mask=True)
            ids, special = enc["input_ids"], enc["special_tokens_mask"]
            first = special.index(0)
            last = len(special) - special[::-1].index(0)
            self._specials = (ids[:first], ids[last:])
        return self._specials

    def _tokenize(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each whole text, without special tokens (one call of the embedder's tokenizer). With a prompt,
        ``prompt + text`` is tokenised as ``encode`` tokenises it and the prompt's ids are taken off the front."""
        prompt = self.prompt
        texts = [prompt.text + t for t in texts]
        if getattr(self.model[0], "do_lower_case", False):  # sentence-transformers' own lower-casing option
            texts = [t.lower() for t in texts]
        ids = self.model.tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]  # no length warning
        n = len(prompt.ids)
        for i, row in enumerate(ids):
            if row[:n] != prompt.ids:
                raise ValueError(
                    f"embedding model {self.model_name_or_path!r}: its tokenizer merges the prompt {prompt.text!r} "
                    f"with the start of text {i}, so the prompt cannot be put before each window; choose another "
                    "prompt (TrajectoryEncoder(prompt_name=...)) or an embedding model without one")
        return [row[n:] for row in ids]

    def _embed_windows(self, windows: list[list[int]]) -> torch.Tensor:
        """``[W, d]`` float32 CPU unit-norm embeddings of token-id windows (each within ``window`` ids): special tokens
        added, in batches of similar lengths (:func:`length_batches`; on an accelerator the fewest batches), under
        autocast when ``dtype`` is not float32."""
        model, tokenizer, prompt = self.model, self.model.tokenizer, self.prompt
        prefix, suffix = self._special_tokens()
        out = torch.empty(len(windows), self.dim)
        with_types = "token_type_ids" in tokenizer.model_input_names
        autocast = contextlib.nullcontext() if self.dtype == "float32" else torch.autocast(
            model.device.type, dtype=getattr(torch, self.dtype))
        overhead = FORWARD_OVERHEAD_TOKENS if model.device.type == "cpu" else None
        for rows in length_batches([len(w) for w in windows], self.batch_size, overhead):
            features = tokenizer.pad([{"input_ids": prefix + prompt.ids + windows[i] + suffix} for i in rows],
                                     return_tensors="pt")
            if with_types:
                features["token_type_ids"] = torch.zeros_like(features["input_ids"])
            features = {k: v.to(model.device) for k, v in features.items()}
            if prompt.length is not None:  # as encode: the pooling leaves these tokens out when include_prompt=False
                features["prompt_length"] = prompt.length
            with torch.inference_mode(), autocast:
                emb = model(features)["sentence_embedding"]
            emb = emb[:, : self.dim]  # a Matryoshka model's truncate_dim, as encode applies it
            out[rows] = torch.nn.functional.normalize(emb.float(), dim=1).cpu()
        return out

    def encode_with_truncation(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Embed texts without caching (online completions), and say which ones the embedder cut.

        Identical texts are embedded once. Args: ``texts``, ``n`` strings (empty strings are allowed).

        Returns:
            ``([n, d] float32 CPU unit-norm embeddings, [n] bool)``: True where the text is longer than
            :attr:`window` tokens and ``long_text_mode="truncate"`` embedded only its beginning.

        Raises:
            TypeError: if an element is not a string (its index is named).
        """
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"text {i} to embed is {type(t).__name__}, expected str")
        if not texts:
            return torch.zeros(0, self.dim), torch.zeros(0, dtype=torch.bool)
        unique = list(dict.fromkeys(texts))
        ids = self._tokenize(unique)
        window = self.window
        cut = torch.tensor([len(x) > window for x in ids])
        if self.long_text_mode == "truncate":
            emb = self._embed_windows([x[:window] for x in ids])
        else:
            pieces = [token_windows(x, window) for x in ids]
            flat = [w for p in pieces for w in p]
            owners = torch.tensor([i for i, p in enumerate(pieces) for _ in p])
            weights = torch.tensor([float(max(len(w), 1)) for w in flat])
            emb = pool_windows(self._embed_windows(flat), owners, weights, len(unique))
            cut = torch.zeros_like(cut)
        index = {t: i for i, t in enumerate(unique)}
        rows = torch.tensor([index[t] for t in texts])
        return emb[rows], cut[rows]

    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        """Embed texts without caching (online completions): ``[n, d]`` float32 CPU unit-norm embeddings.

        Raises:
            TypeError: if an element is not a string (its index is named).
        """
        return self.encode_with_truncation(texts)[0]

    def encode_cached(self, texts: Sequence[str]) -> torch.Tensor:
        """Embed texts through the text-hash cache (offline trajectories: each encoded once).

        Returns:
            ``[n, d]`` float32 CPU tensor, same as :meth:`encode`.
        """
        texts = list(texts)
        missing = list(dict.fromkeys(t for t in texts if _text_key(t) not in self._cache))
        if missing:
            for text, emb in zip(missing, self.encode(missing)):
                self._cache[_text_key(text)] = emb
        if not texts:
            return torch.zeros(0, self.dim)
        return torch.stack([self._cache[_text_key(t)] for t in texts])

    def add_to_cache(self, texts: Sequence[str], embeddings: torch.Tensor) -> None:
        """Seed the cache with precomputed ``[n, d]`` embeddings of ``texts`` (e.g. a dataset column)."""
        if len(texts) != embeddings.size(0):
            raise ValueError(f"{len(texts)} texts but {embeddings.size(0)} embeddings")
        for text, emb in zip(texts, embeddings):
            self._cache[_text_key(text)] = torch.nn.functional.normalize(emb.float().cpu(), dim=0)

    @property
    def cache_size(self) -> int:
        """Number of distinct texts in the cache."""
        return len(self._cache)


def add_offline_embeddings(dataset, encoder: TrajectoryEncoder, column: str = "offline_completions"):
    """Add an ``offline_embeddings`` column (one ``[M, d]`` list of lists per row) to a ``datasets.Dataset``.

    Computing the embeddings once at dataset preparation makes every training run skip the offline
    encoding. The trainer checks that the stored size ``d`` matches its encoder.

    Raises:
        ValueError: if ``column`` is missing.
    """
    if column not in dataset.column_names:
        raise ValueError(f"dataset has no column {column!r}; columns: {dataset.column_names}")

    def embed(batch):
        flat = [t for row in batch[column] for t in row]
        emb = encoder.encode(flat).tolist()
        out, start = [], 0
        for row in batch[column]:
            out.append(emb[start : start + len(row)])
            start += len(row)
        return {"offline_embeddings": out}

    return dataset.map(embed, batched=True, batch_size=64, desc="Embedding offline trajectories")
