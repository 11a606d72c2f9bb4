"""Trajectory embeddings ``E = Enc(tau)`` (OGER Eq. 1) with a sentence-embedding model.

Offline (teacher) embeddings never change during training: :class:`TrajectoryEncoder` keeps them in
a cache keyed by a hash of the text, so each offline trajectory is encoded once per run (or never,
when the dataset carries a precomputed ``offline_embeddings`` column, see :func:`add_offline_embeddings`).
Online completions are encoded every step.

Long texts: the paper's encoder (bge-large-en-v1.5) reads at most 512 tokens while trajectories reach
8k tokens. ``long_text_mode="truncate"`` (default, what the paper's pipeline does) embeds the first
``max_seq_length`` tokens; ``"chunk_mean"`` splits the text into consecutive windows of
``max_seq_length`` tokens, embeds each, and averages the unit-normalised window embeddings weighted by
their token counts, so the whole trajectory counts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch

LONG_TEXT_MODES = ("truncate", "chunk_mean")


def _text_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", errors="replace")).hexdigest()


class TrajectoryEncoder:
    """Encodes trajectories into unit-norm embeddings with a sentence-transformers model.

    Args:
        model_name_or_path: a sentence-transformers model (hub id or local folder). ``"embedded"``
            selects the bundled all-MiniLM-L6-v2 (``trl_explore.defaults``).
        device: torch device for the encoder (default: CPU, or the given accelerator device).
        batch_size: encoding batch size.
        long_text_mode: ``"truncate"`` or ``"chunk_mean"`` (see the module docstring).
        max_seq_length: tokens per window; default: the model's own ``max_seq_length``.

    The model is loaded on first use, so constructing an encoder is free.
    """

    def __init__(
        self,
        model_name_or_path: str = "embedded",
        device: str | torch.device | None = None,
        batch_size: int = 32,
        long_text_mode: str = "truncate",
        max_seq_length: int | None = None,
    ):
        if long_text_mode not in LONG_TEXT_MODES:
            raise ValueError(f"long_text_mode must be one of {LONG_TEXT_MODES}, got {long_text_mode!r}")
        if batch_size < 1:
            raise ValueError(f"embedding batch_size must be >= 1, got {batch_size}")
        self.model_name_or_path = model_name_or_path
        self.device = device
        self.batch_size = batch_size
        self.long_text_mode = long_text_mode
        self.max_seq_length = max_seq_length
        self._model = None
        self._cache: dict[str, torch.Tensor] = {}

    @property
    def model(self):
        """The ``SentenceTransformer``, loaded on first access (raises what sentence-transformers raises for a
        missing or unreachable model)."""
        if self._model is None:
            from sentence_transformers import SentenceTransformer  # heavy import, on first use only

            from trl_explore.defaults import resolve_embedder_path

            device = None if self.device is None else str(self.device)
            self._model = SentenceTransformer(resolve_embedder_path(self.model_name_or_path), device=device)
            if self.max_seq_length is not None:
                self._model.max_seq_length = self.max_seq_length
        return self._model

    @property
    def dim(self) -> int:
        """Embedding size ``d``."""
        # sentence-transformers >= 5.x renamed the method (the old name warns); older releases only have the old one
        getter = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        return int(getter())

    def _encode_raw(self, texts: list[str]) -> torch.Tensor:
        emb = self.model.encode(
            texts, batch_size=self.batch_size, convert_to_tensor=True, normalize_embeddings=True, show_progress_bar=False
        )
        return emb.float().cpu()

    def _encode_chunked(self, texts: list[str]) -> torch.Tensor:
        tokenizer = self.model.tokenizer
        window = int(self.model.max_seq_length) - 2  # room for [CLS]/[SEP]-style special tokens
        pieces: list[str] = []
        owners: list[int] = []
        weights: list[float] = []
        for i, text in enumerate(texts):
            ids = tokenizer(text, add_special_tokens=False)["input_ids"] or [tokenizer.unk_token_id or 0]
            for start in range(0, len(ids), window):
                chunk = ids[start : start + window]
                pieces.append(tokenizer.decode(chunk))
                owners.append(i)
                weights.append(float(len(chunk)))
        emb = self._encode_raw(pieces)
        w = torch.tensor(weights).unsqueeze(1)
        pooled = torch.zeros(len(texts), emb.size(1)).index_add_(0, torch.tensor(owners), emb * w)
        return torch.nn.functional.normalize(pooled, dim=1)

    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        """Embed texts without caching (online completions).

        Args:
            texts: ``n`` strings (empty strings are allowed).

        Returns:
            ``[n, d]`` float32 CPU tensor of unit-norm embeddings.

        Raises:
            TypeError: if an element is not a string (its index is named).
        """
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"text {i} to embed is {type(t).__name__}, expected str")
        if not texts:
            return torch.zeros(0, self.dim)
        if self.long_text_mode == "chunk_mean":
            return self._encode_chunked(texts)
        return self._encode_raw(texts)

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
