"""TrajectoryEncoder with the embedded all-MiniLM-L6-v2: cache, long-text modes, dataset column."""

import pytest
import torch
from datasets import Dataset

from trl_explore.oger.embedding import TrajectoryEncoder, add_offline_embeddings


@pytest.fixture(scope="module")
def encoder():
    return TrajectoryEncoder("embedded", batch_size=4)


def test_unit_norm_and_cache(encoder):
    emb = encoder.encode_cached(["a short proof", "another one", "a short proof"])
    assert emb.shape == (3, 384)
    assert torch.allclose(emb.norm(dim=1), torch.ones(3), atol=1e-5)
    assert torch.equal(emb[0], emb[2]) and encoder.cache_size == 2
    with pytest.raises(TypeError, match="text 1"):
        encoder.encode(["ok", 3])


def test_chunk_mean_covers_the_whole_text(encoder):
    chunked = TrajectoryEncoder("embedded", long_text_mode="chunk_mean", max_seq_length=16)
    short = "two plus two is four"
    # a text within one window: chunk_mean equals plain encoding
    assert torch.allclose(chunked.encode([short]), chunked._encode_raw([short]), atol=1e-5)
    long = "first we factor the polynomial. " * 4 + "then the answer is a prime number, seven. " * 4
    tail_changed = "first we factor the polynomial. " * 4 + "the cat sat on the mat near the window. " * 4
    trunc = TrajectoryEncoder("embedded", max_seq_length=16)
    # truncation only sees the first 16 tokens: both texts embed the same; chunk_mean sees the ending
    assert torch.allclose(trunc.encode([long]), trunc.encode([tail_changed]), atol=1e-5)
    assert not torch.allclose(chunked.encode([long]), chunked.encode([tail_changed]), atol=1e-3)
    with pytest.raises(ValueError, match="long_text_mode"):
        TrajectoryEncoder("embedded", long_text_mode="summarise")


def test_add_offline_embeddings_column(encoder):
    ds = Dataset.from_dict({"offline_completions": [["x = 2", "y = 3"], []]})
    out = add_offline_embeddings(ds, encoder)
    rows = out["offline_embeddings"]
    assert len(rows[0]) == 2 and len(rows[0][0]) == 384 and rows[1] == []
    assert torch.allclose(torch.tensor(rows[0]), encoder.encode(["x = 2", "y = 3"]), atol=1e-5)
