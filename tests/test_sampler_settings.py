"""The effective sampler (trl_explore.trl_guards.sampler_settings): which settings are read, how they are reproduced,
which are refused; and the two recorders (OGER's H_last, ASE's behaviour log-probs) against generate's processed
scores."""

import inspect
import math
import re

import pytest
import torch
from trl import GRPOConfig

from trl_explore.ase.recording import SampledTokenLogProbs
from trl_explore.oger.entropy import LastTokenEntropyRecorder
from trl_explore.testing import make_tiny_causal_lm
from trl_explore.trl_guards.sampler_settings import (
    NOT_REPRODUCED,
    REPRODUCED,
    SamplerSettings,
    check_reproducible,
    effective_sampler,
    entropy_from_logits,
    processed_logits,
    sampler_settings,
    token_logps_and_entropy,
)

PROBS = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
LOGITS = PROBS.log()


def _entropy(p):
    return -sum(x * math.log(x) for x in p)


def _config(tmp_path, **kwargs):
    return GRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False, **kwargs)


# ------------------------------------------------------------------ reading the settings
def test_defaults_are_trls_distribution(tmp_path):
    settings = effective_sampler(_config(tmp_path))
    assert settings == SamplerSettings() and settings.matches_trl(1.0) and not settings.truncates
    assert torch.equal(processed_logits(LOGITS, settings), LOGITS)  # the default costs nothing


def test_generation_kwargs_override_the_config(tmp_path):
    overrides = {"temperature": 0.5, "top_p": 0.8, "seed": 1}
    args = _config(tmp_path, temperature=0.9, top_k=50, generation_kwargs=overrides)
    settings = effective_sampler(args)
    assert (settings.temperature, settings.top_k, settings.top_p, settings.min_p) == (0.5, 50, 0.8, 0.0)
    assert settings.where("temperature") == "generation_kwargs['temperature']"
    assert settings.where("top_k") == "GRPOConfig.top_k" and settings.backend == "transformers"
    assert not settings.matches_trl(0.9) and not settings.matches_trl(0.5)  # truncated: not TRL's distribution
    vllm = effective_sampler(_config(tmp_path, use_vllm=True, vllm_structured_outputs_regex="[0-9]+"))
    assert vllm.backend == "vllm" and vllm.not_reproduced == (("vllm_structured_outputs_regex", "[0-9]+"),)


def test_off_values_and_neutral_keys_are_not_settings():
    settings = sampler_settings({"top_k": None, "top_p": None, "min_p": None, "do_sample": True, "num_beams": 1,
                                 "max_new_tokens": 8, "stop": ["\n"], "vllm_xargs": {"route": 1}, "bad_words": []})
    assert settings == SamplerSettings()
    assert sampler_settings({"top_k": -1}, backend="vllm").top_k == 0  # vLLM's "off"


def test_not_reproduced_covers_every_processor_transformers_adds():
    """Every GenerationConfig field that transformers' `_get_logits_processor` reads is reproduced, refused or known
    to leave the next-token distribution alone: a new processor in a transformers upgrade fails here."""
    from transformers.generation.utils import GenerationMixin

    read = set(re.findall(r"generation_config\.(\w+)", inspect.getsource(GenerationMixin._get_logits_processor)))
    neutral = {"_eos_token_tensor", "max_length", "num_return_sequences", "remove_invalid_values",
               "renormalize_logits", "use_cache"}
    assert read - neutral - set(REPRODUCED) - set(NOT_REPRODUCED) == set()


# ------------------------------------------------------------------ the processed distribution, by hand
def test_temperature_divides_the_logits():
    scores = processed_logits(torch.tensor([[0.0, 1.0, 2.0, 3.0]]), SamplerSettings(temperature=0.5))
    assert scores.tolist() == [[0.0, 2.0, 4.0, 6.0]]


@pytest.mark.parametrize(("settings", "kept"), [
    (SamplerSettings(top_k=2), [2, 3]),
    (SamplerSettings(top_p=0.6), [2, 3]),  # ascending cumulative 0.1, 0.3 <= 1 - 0.6: removed
    (SamplerSettings(min_p=0.6), [2, 3]),  # p >= 0.6 * 0.4 = 0.24
    (SamplerSettings(top_k=3), [1, 2, 3]),
    (SamplerSettings(suppress_tokens=(3,)), [0, 1, 2]),
])
def test_truncation_is_the_renormalised_kept_set(settings, kept):
    """p = (.1, .2, .3, .4): the kept tokens' probabilities divided by their sum, the others 0."""
    scores = processed_logits(LOGITS, settings)
    probs = torch.softmax(scores, -1)[0]
    p = [0.1, 0.2, 0.3, 0.4]
    mass = sum(p[i] for i in kept)
    expected = [p[i] / mass if i in kept else 0.0 for i in range(4)]
    assert probs.tolist() == pytest.approx(expected, abs=1e-6)
    assert entropy_from_logits(scores).item() == pytest.approx(_entropy([p[i] / mass for i in kept]), abs=1e-6)
    logps, entropy = token_logps_and_entropy(scores, torch.tensor([0]))
    assert logps.item() == (float("-inf") if 0 not in kept else pytest.approx(math.log(0.1 / mass), abs=1e-6))
    assert entropy.item() == pytest.approx(entropy_from_logits(scores).item())


def test_min_p_and_top_p_in_each_backends_order():
    """transformers: top-p then min-p; vLLM: min-p then top-p. p = (.1, .2, .3, .4), top_p 0.5, min_p 0.6:
    transformers keeps {.3, .4} (top-p drops .1, .2; min-p then keeps 3/7 >= 0.6 * 4/7); vLLM keeps {.4} (min-p
    keeps {.3, .4}, renormalised 3/7, 4/7; top-p then drops 3/7 <= 1 - 0.5)."""
    hf = torch.softmax(processed_logits(LOGITS, SamplerSettings(top_p=0.5, min_p=0.6)), -1)[0]
    vllm = torch.softmax(processed_logits(LOGITS, SamplerSettings(top_p=0.5, min_p=0.6, backend="vllm")), -1)[0]
    assert hf.tolist() == pytest.approx([0, 0, 3 / 7, 4 / 7], abs=1e-6)
    assert vllm.tolist() == pytest.approx([0, 0, 0, 1], abs=1e-6)


def test_processed_logits_keeps_the_leading_dimensions():
    logits = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(0))
    settings = SamplerSettings(temperature=0.7, top_k=3)
    flat = processed_logits(logits.reshape(6, 7), settings)
    assert torch.equal(processed_logits(logits, settings), flat.reshape(2, 3, 7))
    assert (torch.isfinite(flat).sum(-1) == 3).all()


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"repetition_penalty": 1.2}, "GRPOConfig.repetition_penalty=1.2 changes the distribution"),
    ({"generation_kwargs": {"do_sample": False}}, "generation_kwargs['do_sample']=False changes"),
    ({"generation_kwargs": {"temperature": 0.0}}, "generation_kwargs['temperature']=0.0 changes"),
    ({"generation_kwargs": {"no_repeat_ngram_size": 3}}, "generation_kwargs['no_repeat_ngram_size']=3 changes"),
])
def test_unreproducible_settings_are_refused_naming_them(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)) as error:
        check_reproducible(effective_sampler(_config(tmp_path, **kwargs)), "the reader", "or do X")
    assert "the reader cannot reproduce it" in str(error.value) and str(error.value).endswith("; or do X")


def test_the_components_refuse_at_config_construction(tmp_path):
    from trl_explore import ASEConfig, OGERConfig

    common = {"output_dir": str(tmp_path), "report_to": "none", "use_cpu": True, "bf16": False,
              "num_generations": 4, "per_device_train_batch_size": 4}
    with pytest.raises(ValueError, match=r"^OGERConfig: generation_kwargs\['repetition_penalty'\]=1.3 .* OGER's "
                                         r"last-token entropy H_last .* entropy_refinement=False"):
        OGERConfig(**common, generation_kwargs={"repetition_penalty": 1.3})
    OGERConfig(**common, generation_kwargs={"repetition_penalty": 1.3}, entropy_refinement=False)  # no H_last
    OGERConfig(**common, generation_kwargs={"temperature": 0.5, "top_k": 20, "top_p": 0.9, "min_p": 0.05})
    with pytest.raises(ValueError, match=r"^ASEConfig: GRPOConfig.repetition_penalty=1.1 .* ASE-GRPO's behaviour "
                                         r"log-probs \(HF generation\) .*use_vllm=True"):
        ASEConfig(**common, repetition_penalty=1.1, num_vectors=3)
    ASEConfig(**common, repetition_penalty=1.1, num_vectors=3, use_vllm=True)  # vLLM's processed log-probs


# ------------------------------------------------------------------ the recorders against generate's own scores
SAMPLERS = [SamplerSettings(temperature=0.5), SamplerSettings(temperature=1.3, top_k=40),
            SamplerSettings(temperature=0.7, top_p=0.8), SamplerSettings(top_k=50, top_p=0.9, min_p=0.05)]


def _sharp_lm(tokenizer, seed):
    """A tiny LM whose next-token distributions are far from uniform (entropies of a few nats, not log V), so that
    the temperature and the truncations change them measurably."""
    model = make_tiny_causal_lm(tokenizer, seed=seed).eval()
    with torch.no_grad():
        model.model.norm.weight.mul_(8.0)
    return model


def _generate(model, tokenizer, settings, recorder, eos_ids):
    prompt = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16], [17, 18, 19, 20]])
    torch.manual_seed(3)
    with recorder, torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, do_sample=True,
                             temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p,
                             min_p=settings.min_p or None, eos_token_id=eos_ids, pad_token_id=tokenizer.pad_token_id,
                             output_scores=True, return_dict_in_generate=True)
    completion = out.sequences[:, prompt.size(1):]
    is_eos = torch.isin(completion, torch.tensor(eos_ids))
    lengths = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, completion.size(1))
    return torch.stack(out.scores, 1), out.sequences, completion, lengths  # scores: what generate sampled from


@pytest.mark.parametrize("settings", SAMPLERS, ids=str)
def test_h_last_is_the_entropy_generate_sampled_from(smollm2_tokenizer, settings):
    model = _sharp_lm(smollm2_tokenizer, 1)
    eos_ids = list(range(1000, 3000))  # a wide "EOS" set: some rows stop early
    recorder = LastTokenEntropyRecorder(model, settings, eos_ids)
    scores, sequences, _, lengths = _generate(model, smollm2_tokenizer, settings, recorder, eos_ids)
    rows = torch.arange(len(lengths))
    h_last = recorder.last_token_entropy(lengths)
    assert torch.allclose(h_last, entropy_from_logits(scores)[rows, lengths - 1], atol=1e-5)
    with torch.no_grad():  # teacher-forced, processed the same way
        forced = processed_logits(model(input_ids=sequences).logits[:, 3:-1], settings)
    assert torch.allclose(h_last, entropy_from_logits(forced)[rows, lengths - 1], atol=1e-5)
    raw = entropy_from_logits(model(input_ids=sequences).logits[:, 3:-1].detach())[rows, lengths - 1]
    assert (h_last - raw).abs().max() > 0.1  # the raw policy's entropy (the old H_last) is another number


@pytest.mark.parametrize("settings", SAMPLERS, ids=str)
def test_behaviour_logprobs_are_those_generate_sampled_with(smollm2_tokenizer, settings):
    model = _sharp_lm(smollm2_tokenizer, 2)
    eos_ids = [smollm2_tokenizer.eos_token_id]
    recorder = SampledTokenLogProbs(model, settings)
    scores, _, completion, lengths = _generate(model, smollm2_tokenizer, settings, recorder, eos_ids)
    ids = [completion[i, : lengths[i]].tolist() for i in range(len(lengths))]
    recorded = recorder.per_completion(ids)
    expected = torch.log_softmax(scores, -1).gather(-1, completion.unsqueeze(-1)).squeeze(-1)
    for i, row in enumerate(recorded):
        assert torch.allclose(torch.tensor(row), expected[i, : lengths[i]], atol=1e-5)
        assert all(math.isfinite(x) for x in row)  # a sampled token is always in the kept set


def test_recorders_refuse_what_they_cannot_reproduce(smollm2_tokenizer):
    model = make_tiny_causal_lm(smollm2_tokenizer)
    with pytest.raises(ValueError, match="repetition_penalty"):
        LastTokenEntropyRecorder(model, SamplerSettings(repetition_penalty=1.2))
    with pytest.raises(ValueError, match="repetition_penalty"):
        SampledTokenLogProbs(model, SamplerSettings(repetition_penalty=1.2))
