"""TrajectoryEncoder with the embedded all-MiniLM-L6-v2: cache, long-text modes, dataset column."""

import pytest
import torch
from datasets import Dataset

from trl_explore.oger.config import OGERConfig
from trl_explore.oger.embedding import (
    TrajectoryEncoder,
    add_offline_embeddings,
    length_batches,
    pool_windows,
    token_windows,
)


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
    reference = chunked.model.encode([short], convert_to_tensor=True, normalize_embeddings=True).float()
    assert torch.allclose(chunked.encode([short]), reference, atol=1e-5)
    long = "first we factor the polynomial. " * 4 + "then the answer is a prime number, seven. " * 4
    tail_changed = "first we factor the polynomial. " * 4 + "the cat sat on the mat near the window. " * 4
    trunc = TrajectoryEncoder("embedded", max_seq_length=16)
    # truncation only sees the first 16 tokens: both texts embed the same; chunk_mean sees the ending
    assert torch.allclose(trunc.encode([long]), trunc.encode([tail_changed]), atol=1e-5)
    assert not torch.allclose(chunked.encode([long]), chunked.encode([tail_changed]), atol=1e-3)
    assert trunc.encode_with_truncation([short, long])[1].tolist() == [False, True]
    assert chunked.encode_with_truncation([short, long])[1].tolist() == [False, False]
    with pytest.raises(ValueError, match="long_text_mode"):
        TrajectoryEncoder("embedded", long_text_mode="summarise")


def test_window_and_pooling_functions_hand_values():
    assert token_windows([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    assert token_windows([], 3) == [[]]
    with pytest.raises(ValueError, match="window"):
        token_windows([1], 0)
    emb = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    pooled = pool_windows(emb, torch.tensor([0, 0, 1]), torch.tensor([3.0, 1.0, 2.0]), 2)
    # text 0: (3 * [1, 0] + 1 * [0, 1]) / |.| = [3, 1] / sqrt(10); text 1: its one window
    assert torch.allclose(pooled, torch.tensor([[3 / 10**0.5, 1 / 10**0.5], [0.6, 0.8]]))


def test_truncate_mode_equals_sentence_transformers_and_embeds_each_text_once(encoder, monkeypatch):
    texts = ["a short proof", "", "we divide both sides by two. " * 80, "a short proof", "x = 2"]
    reference = encoder.model.encode(texts, convert_to_tensor=True, normalize_embeddings=True).float()
    seen = []
    original = encoder._embed_windows
    monkeypatch.setattr(encoder, "_embed_windows", lambda windows: seen.append(len(windows)) or original(windows))
    emb, cut = encoder.encode_with_truncation(texts)
    assert torch.allclose(emb, reference, atol=1e-5)  # sentence-transformers' own truncation at 256 tokens
    assert seen == [4] and torch.equal(emb[0], emb[3])  # the duplicate is embedded once
    assert cut.tolist() == [False, False, True, False, False]


def test_chunk_mean_windows_fit_max_seq_length_on_a_long_trace():
    """A 1,680-token trace in the embedder's own tokens: 7 windows of at most 254 tokens + [CLS]/[SEP], nothing cut
    (windows decoded to text and tokenised again used to come out longer than 256 tokens and be cut)."""
    chunked = TrajectoryEncoder("embedded", long_text_mode="chunk_mean", batch_size=3)
    tokenizer = chunked.model.tokenizer
    text = " ".join(f"Step {i}: since x_{i} = {i * i - 3}/(2^{i} + 1), we get \\frac{{{i}}}{{{i + 7}}}."
                    for i in range(80))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = ids[:1680]
    text = tokenizer.decode(ids)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert 1600 <= len(ids) <= 1760
    windows = []
    original = chunked._embed_windows
    chunked._embed_windows = lambda w: windows.extend(w) or original(w)
    emb = chunked.encode([text])
    assert chunked.window == 254 and len(windows) == -(-len(ids) // 254)
    assert all(len(w) + 2 <= chunked.model.max_seq_length for w in windows)
    assert [t for w in windows for t in w] == ids  # the whole trace, in order, nothing cut
    # reference: each window alone through the SentenceTransformer (no padding), unit-normalised, token-weighted
    parts = []
    for w in windows:
        input_ids = torch.tensor([[tokenizer.cls_token_id, *w, tokenizer.sep_token_id]])
        features = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
                    "token_type_ids": torch.zeros_like(input_ids)}
        with torch.no_grad():
            parts.append(torch.nn.functional.normalize(chunked.model(features)["sentence_embedding"], dim=1) * len(w))
    expected = torch.nn.functional.normalize(torch.cat(parts).sum(0, keepdim=True), dim=1)
    assert torch.allclose(emb, expected, atol=1e-5)


def test_add_offline_embeddings_column(encoder):
    ds = Dataset.from_dict({"offline_completions": [["x = 2", "y = 3"], []]})
    out = add_offline_embeddings(ds, encoder)
    rows = out["offline_embeddings"]
    assert len(rows[0]) == 2 and len(rows[0][0]) == 384 and rows[1] == []
    assert torch.allclose(torch.tensor(rows[0]), encoder.encode(["x = 2", "y = 3"]), atol=1e-5)


def test_length_batches_hand_values():
    # sorted: 100 (index 1), 95 (2), 12 (3), 10 (0). With a 32-token forward cost, the cheapest cut is
    # [100, 95] + [12, 10]: 32 + 2 * 100 + 32 + 2 * 12 = 288 (one batch: 32 + 4 * 100 = 432;
    # [100] + [95, 12, 10]: 449; [100, 95, 12] + [10]: 374; [100] + [95] + [12, 10]: 315)
    assert length_batches([10, 100, 95, 12], max_rows=4, overhead_tokens=32) == [[1, 2], [3, 0]]
    assert length_batches([10, 100, 95, 12], max_rows=4, overhead_tokens=1000) == [[1, 2, 3, 0]]
    assert length_batches([10, 100, 95, 12], max_rows=4, overhead_tokens=0) == [[1], [2], [3], [0]]
    assert length_batches([10, 100, 95, 12], max_rows=1, overhead_tokens=1000) == [[1], [2], [3], [0]]
    # the memory bound holds even when one batch would be cheaper: 3 forwards of at most 2 rows; equal lengths keep
    # their order
    batches = length_batches([5] * 5, max_rows=2)
    assert len(batches) == 3 and max(map(len, batches)) == 2 and [i for b in batches for i in b] == [0, 1, 2, 3, 4]
    # None (accelerators): the fewest forwards, cut where they pad least
    assert length_batches([10, 100, 95, 12], max_rows=4, overhead_tokens=None) == [[1, 2, 3, 0]]
    assert length_batches([10, 100, 95, 12], max_rows=2, overhead_tokens=None) == [[1, 2], [3, 0]]
    # two forwards either way: [100, 90, 80] + [10, 9] pads to 300 + 20 tokens, [100, 90] + [80, 10, 9] to 200 + 240
    assert length_batches([100, 90, 80, 10, 9], max_rows=3, overhead_tokens=None) == [[0, 1, 2], [3, 4]]
    assert length_batches([], max_rows=3) == []
    with pytest.raises(ValueError, match="max_rows"):
        length_batches([1], max_rows=0)


def test_length_batched_embeddings_equal_each_text_alone(encoder):
    """Batches of similar lengths (here cut into several forwards) give what each text gives alone, unpadded."""
    texts = ["x", "the sum of the first ten odd numbers is one hundred, so the answer is 100",
             "let n = 7", "we square both sides and collect terms: 4x^2 - 12x + 9 = 0, so x = 3/2, twice", "ok"]
    ids = encoder._tokenize(texts)
    assert len(length_batches([len(x) for x in ids], encoder.batch_size)) > 1
    alone = torch.cat([encoder.model.encode([t], convert_to_tensor=True, normalize_embeddings=True) for t in texts])
    assert torch.allclose(encoder.encode(texts), alone.float(), atol=1e-5)


def test_bfloat16_forward_stays_close_to_float32():
    texts = ["first we factor the polynomial, then the answer is seven",
             "by the pigeonhole principle two of the five points share a half-square, so the distance is at most 1",
             "\\boxed{42}", "x^2 + y^2 = 25 has 12 integer points"]
    exact = TrajectoryEncoder("embedded").encode(texts)
    fast = TrajectoryEncoder("embedded", dtype="bfloat16").encode(texts)
    assert fast.dtype == torch.float32 and torch.allclose(fast.norm(dim=1), torch.ones(4), atol=1e-5)
    cosine = (fast * exact).sum(1)
    assert cosine.min() > 0.999 and not torch.equal(fast, exact)  # autocast changed the products, not the meaning
    with pytest.raises(ValueError, match="embedding dtype"):
        TrajectoryEncoder("embedded", dtype="int8")


def test_embedding_dtype_auto_follows_the_training_precision(tmp_path):
    def config(**kw):
        return OGERConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], **kw)
    assert config(bf16=False).resolved_embedding_dtype == "float32"
    assert config(bf16=True).resolved_embedding_dtype == "bfloat16"
    assert config(bf16=False, embedding_dtype="bfloat16").resolved_embedding_dtype == "bfloat16"
    assert config(bf16=True, embedding_dtype="float32").resolved_embedding_dtype == "float32"
    with pytest.raises(ValueError, match="embedding_dtype"):
        config(bf16=False, embedding_dtype="half")


@pytest.mark.parametrize("name", ["./no/such/embedder", "no-such-org/no-such-embedder", "not/a/valid/hub/id"])
def test_an_embedding_model_that_cannot_load_names_the_option(name, monkeypatch):
    """A folder that does not exist, a Hub id that is not there (offline: not in the Hub cache), a malformed id: one
    ValueError naming ``embedding_model``, the value and what the option accepts, not sentence-transformers' own."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as conftest.py sets it for the whole run
    with pytest.raises(ValueError, match=r"embedding_model=.*cannot be loaded") as err:
        _ = TrajectoryEncoder(name).model
    message = str(err.value)
    assert repr(name) in message and "'embedded'" in message and "local sentence-transformers folder" in message
    assert "HF_HUB_OFFLINE is set" in message
    assert isinstance(err.value.__cause__, (OSError, ValueError))  # the loader's own error, chained


def test_oger_trainer_with_a_bad_embedding_model_fails_at_construction(tmp_path, smollm2_tokenizer, monkeypatch):
    from trl_explore import OGERTrainer
    from trl_explore.testing import make_tiny_causal_lm, teacher_math_dataset, tiny_oger_args

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    args = OGERConfig(**tiny_oger_args(tmp_path / "out", embedding_model=str(tmp_path / "missing-embedder")))
    with pytest.raises(ValueError, match="embedding_model=.*missing-embedder.*cannot be loaded"):
        OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=args, train_dataset=teacher_math_dataset(),
                    processing_class=smollm2_tokenizer)
