"""Randomly initialised models of real shapes for the benchmarks (no weights need to be downloaded).

Timing barely depends on the weights' values, so a model built from a config with the shape of a real
checkpoint costs what the checkpoint costs. Two kinds are built here:

* policies (causal LMs) from a ``Qwen2Config``: :data:`POLICY_SHAPES` (``qwen2.5-1.5b`` has the shape of
  Qwen2.5-1.5B; ``qwen2-tiny`` is a 2-layer stand-in for CPU dry runs of the same code path). The vocabulary
  is sized to the tokenizer that drives the run (SmolLM2's, 49,152 tokens, for the benchmarks).
* sentence embedders from a ``BertConfig``: :data:`EMBEDDER_SHAPES` (the shapes of BAAI/bge-base-en-v1.5 and
  BAAI/bge-large-en-v1.5: CLS pooling, normalised, 512 tokens), saved as a sentence-transformers folder that
  ``trl_explore.oger.embedding.TrajectoryEncoder`` loads like any local model. They reuse the WordPiece
  tokenizer of the bundled all-MiniLM-L6-v2 (bert-base-uncased's 30,522-token vocabulary, as bge uses).

Used by ``benchmarks/overhead.py`` (``--model``, ``--embedder``), ``benchmarks/scaling.py`` and the GPU
profile in ``benchmarks/gpu/``.
"""

from __future__ import annotations

import pathlib

import torch

POLICY_SHAPES = {
    # Qwen2.5-1.5B: hidden 1536, 28 layers, 12 query heads, 2 key/value heads, MLP 8960, tied embeddings
    "qwen2.5-1.5b": {
        "hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
        "intermediate_size": 8960, "tie_word_embeddings": True, "rms_norm_eps": 1e-6,
    },
    # the same architecture at toy size: checks the code path on a CPU in seconds
    "qwen2-tiny": {
        "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 128, "tie_word_embeddings": True,
    },
}

EMBEDDER_SHAPES = {
    "bge-base": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072},
    "bge-large": {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096},
}

RANDOM_EMBEDDER_SUFFIX = "-random"
"""``--embedder bge-large-random`` builds a random embedder of shape ``bge-large``."""


def random_policy(shape: str, tokenizer, *, seed: int = 0, dtype: torch.dtype = torch.float32, device: str = "cpu"):
    """A randomly initialised ``Qwen2ForCausalLM`` of one of :data:`POLICY_SHAPES`, vocabulary ``len(tokenizer)``.

    The parameters are created directly on ``device`` in ``dtype`` (a 1.5B model initialises in about a second
    on a GPU, instead of tens of seconds on the CPU). ``torch.manual_seed(seed)`` makes it reproducible.
    """
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(
        vocab_size=len(tokenizer), max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        **POLICY_SHAPES[shape],
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def embedder_tokenizer_path() -> pathlib.Path:
    """The folder whose WordPiece tokenizer the random embedders use: the bundled all-MiniLM-L6-v2."""
    from trl_explore.defaults import default_embedder_path

    return default_embedder_path()


def random_sentence_embedder(
    shape: str, out_dir: str | pathlib.Path, *, tokenizer_dir: str | pathlib.Path | None = None,
    max_seq_length: int = 512, seed: int = 0,
) -> pathlib.Path:
    """Save a randomly initialised BERT sentence embedder of one of :data:`EMBEDDER_SHAPES` to ``out_dir``.

    Layout: a sentence-transformers folder (BERT, CLS pooling, L2 normalisation, ``max_seq_length`` tokens),
    the pipeline of bge-base / bge-large. ``tokenizer_dir`` holds a BERT WordPiece tokenizer (default: the
    bundled all-MiniLM-L6-v2's); the vocabulary size follows it.

    Returns:
        ``out_dir`` as a ``pathlib.Path`` (pass it as ``OGERConfig.embedding_model``).
    """
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoTokenizer, BertConfig, BertModel

    out_dir = pathlib.Path(out_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir or embedder_tokenizer_path()))
    config = BertConfig(vocab_size=len(tokenizer), max_position_embeddings=512, **EMBEDDER_SHAPES[shape])
    torch.manual_seed(seed)
    bert_dir = out_dir.parent / f"{out_dir.name}-bert"
    BertModel(config).save_pretrained(bert_dir)
    tokenizer.save_pretrained(bert_dir)
    word = models.Transformer(str(bert_dir), max_seq_length=max_seq_length)
    pooling = models.Pooling(word.get_word_embedding_dimension(), pooling_mode="cls")
    SentenceTransformer(modules=[word, pooling, models.Normalize()], device="cpu").save(str(out_dir))
    return out_dir


def resolve_embedder(name: str, work_dir: str | pathlib.Path, tokenizer_dir: str | None = None) -> str:
    """Map a benchmark ``--embedder`` value to something ``TrajectoryEncoder`` loads.

    ``"<shape>-random"`` (e.g. ``bge-large-random``) builds a random embedder in ``work_dir`` (once per
    folder); anything else (``"embedded"``, a local sentence-transformers folder) is returned as is.
    """
    if not name.endswith(RANDOM_EMBEDDER_SUFFIX):
        return name
    shape = name[: -len(RANDOM_EMBEDDER_SUFFIX)]
    if shape not in EMBEDDER_SHAPES:
        raise ValueError(f"unknown embedder shape {shape!r}; choose one of {sorted(EMBEDDER_SHAPES)}")
    out = pathlib.Path(work_dir) / name
    if not (out / "modules.json").is_file():
        random_sentence_embedder(shape, out, tokenizer_dir=tokenizer_dir)
    return str(out)
