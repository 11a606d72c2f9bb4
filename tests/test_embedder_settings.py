"""Issue 30, item 5: TrajectoryEncoder honours the sentence-transformers model's prompts (its default prompt, or a
prompt by name) and pooling settings (prompt tokens left out of the pooling, Matryoshka truncation), or refuses the
model by name; checked against ``SentenceTransformer.encode`` on the bundled MiniLM saved to a temporary folder."""

import pytest
import torch

from trl_explore.defaults import default_embedder_path
from trl_explore.oger.embedding import TrajectoryEncoder

TEXTS = ["We add the numbers: 2 + 2 = 4. The answer is \\boxed{4}.", "Since 3 times 3 is 9, the answer is 9.",
         "x", ""]
LONG = " ".join(f"step {i}: multiply by {i % 7} and carry the remainder" for i in range(40))  # >> 32 tokens


def _saved_minilm(folder, include_prompt=True, truncate_dim=None, default_prompt_name="document"):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(default_embedder_path()), device="cpu",
                                prompts={"document": "passage: ", "query": "query: "},
                                default_prompt_name=default_prompt_name, truncate_dim=truncate_dim)
    if not include_prompt:
        model.set_pooling_include_prompt(False)
    model.save(str(folder))
    return SentenceTransformer(str(folder), device="cpu")


def _reference(model, texts, **kwargs):
    return model.encode(texts, convert_to_tensor=True, normalize_embeddings=True, **kwargs).float()


def test_the_default_prompt_is_applied_as_encode_applies_it(tmp_path):
    model = _saved_minilm(tmp_path / "m")
    ours = TrajectoryEncoder(str(tmp_path / "m")).encode(TEXTS)
    assert torch.allclose(ours, _reference(model, TEXTS), atol=1e-5)  # was: up to 0.148 apart (cosine 0.64-0.70)
    assert not torch.allclose(ours, _reference(model, TEXTS, prompt=""), atol=1e-2)  # the prompt matters here


def test_a_prompt_chosen_by_name(tmp_path):
    model = _saved_minilm(tmp_path / "m")
    ours = TrajectoryEncoder(str(tmp_path / "m"), prompt_name="query").encode(TEXTS)
    assert torch.allclose(ours, _reference(model, TEXTS, prompt_name="query"), atol=1e-5)
    with pytest.raises(ValueError, match="prompt_name='answer'.*'document'.*'query'"):
        TrajectoryEncoder(str(tmp_path / "m"), prompt_name="answer").encode(TEXTS)


def test_prompt_tokens_left_out_of_the_pooling(tmp_path):
    model = _saved_minilm(tmp_path / "m", include_prompt=False)
    ours = TrajectoryEncoder(str(tmp_path / "m")).encode(TEXTS[:3])
    assert torch.allclose(ours, _reference(model, TEXTS[:3]), atol=1e-5)


def test_a_truncated_text_keeps_its_prompt_within_max_seq_length(tmp_path):
    model = _saved_minilm(tmp_path / "m")
    model.max_seq_length = 32
    ours = TrajectoryEncoder(str(tmp_path / "m"), max_seq_length=32)
    emb, cut = ours.encode_with_truncation([LONG, TEXTS[1]])
    assert cut.tolist() == [True, False]
    assert torch.allclose(emb, _reference(model, [LONG, TEXTS[1]]), atol=1e-5)
    chunked = TrajectoryEncoder(str(tmp_path / "m"), max_seq_length=32, long_text_mode="chunk_mean")
    assert torch.allclose(chunked.encode([TEXTS[1]]), _reference(model, [TEXTS[1]]), atol=1e-5)


def test_matryoshka_truncation(tmp_path):
    model = _saved_minilm(tmp_path / "m", truncate_dim=128)
    ours = TrajectoryEncoder(str(tmp_path / "m"))
    assert ours.dim == 128
    assert torch.allclose(ours.encode(TEXTS), _reference(model, TEXTS), atol=1e-5)


def test_without_prompts_nothing_changes():
    encoder = TrajectoryEncoder("embedded")
    assert torch.allclose(encoder.encode(TEXTS), _reference(encoder.model, TEXTS), atol=1e-5)


def test_models_the_encoder_cannot_feed_are_refused_by_name():
    from trl_explore.oger.embedding import check_text_model

    class Transformer:
        modality_config = {"text": {}}

    class ImageTransformer:
        modality_config = {"image": {}}

    class Router:
        pass

    class Stack(list):
        tokenizer = object()

    check_text_model(Stack([Transformer()]), "ok")
    with pytest.raises(ValueError, match="'routed'.*Router"):
        check_text_model(Stack([Transformer(), Router()]), "routed")
    with pytest.raises(ValueError, match=r"'pictures'.*ImageTransformer.*\['image'\]"):
        check_text_model(Stack([ImageTransformer()]), "pictures")
