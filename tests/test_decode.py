"""Tests for trl_explore/sampling/decode.py: the decoder samples what ``generate`` samples from.

Checked against transformers' own ``generate`` on tiny models over the SmolLM2 vocabulary: greedy completions equal
token for token (shared prefills, a common prompt prefix, rows ending at different steps and dropped); every sampled
token drawn from the distribution a teacher-forced forward of its row gives (temperature, top-k, top-p); steering
routes followed row by row after rows are shared and dropped; settings it does not reproduce handed to ``generate``.
"""

import functools

import pytest
import torch

from trl_explore.ase.steering import ActivationSteeringGenerator
from trl_explore.sampling import decode as decode_module
from trl_explore.sampling.decode import (
    current_rows,
    decode,
    fast_generate,
    generate_replaced,
    row_keys,
    unsupported_reason,
)
from trl_explore.trl_guards.sampler_settings import SamplerSettings, processed_logits

QUESTIONS = ["What is 2 + 2?", "What is 13 + 29?", "Name a prime.", "What is 2 + 2?", "Add 7 and 8, then halve it."]


@pytest.fixture(scope="module")
def eos_model(smollm2_tokenizer):
    """A tiny Llama over the SmolLM2 vocabulary with spread-out logits (initializer range 0.5, untied) and its EOS
    row scaled by 3: greedy and sampled completions end at different steps, some run to the cap."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    tok = smollm2_tokenizer
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                         initializer_range=0.5, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        model.lm_head.weight[tok.eos_token_id] *= 3.0
    return model


def _prompts(tok, questions=QUESTIONS, repeat=2):
    """Chat prompts (shared system prompt, so a common prefix), each repeated ``repeat`` times in a row."""
    encoded = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                       return_dict=True)["input_ids"] for q in questions]
    return [list(p) for p in encoded for _ in range(repeat)]


def _left_pad(prompts, pad):
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


def _cut(rows, eos):
    return [row[: row.index(eos) + 1] if eos in row else row for row in rows]


def test_greedy_equals_generate_with_shared_prefills_and_dropped_rows(eos_model, smollm2_tokenizer):
    tok = smollm2_tokenizer
    prompts = _prompts(tok)
    ids, mask = _left_pad(prompts, tok.pad_token_id)
    with torch.no_grad():
        reference = eos_model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False,
                                       pad_token_id=tok.pad_token_id, eos_token_id=[tok.eos_token_id])
    expected = _cut(reference[:, ids.shape[1] :].tolist(), tok.eos_token_id)
    got = decode(eos_model, prompts, max_new_tokens=12, eos_token_ids=[tok.eos_token_id], sampler=None)
    assert got == expected
    lengths = {len(c) for c in got}
    assert len(lengths) > 2 and max(lengths) == 12  # rows ended at several steps, some ran to the cap
    assert any(c[-1] == tok.eos_token_id for c in got)
    # generate's layout: prompts as given, completions right-padded with the pad token
    out = fast_generate(eos_model, ids, mask, max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id,
                        eos_token_id=[tok.eos_token_id])
    assert torch.equal(out[:, : ids.shape[1]], ids) and out.shape[1] == ids.shape[1] + 12
    assert _cut(out[:, ids.shape[1] :].tolist(), tok.eos_token_id) == expected


def test_prefills_are_shared_by_identical_rows_and_split_by_row_keys(eos_model, smollm2_tokenizer):
    tok = smollm2_tokenizer
    prompts = _prompts(tok, QUESTIONS[:2], repeat=3)  # 2 distinct prompts x 3 rows
    seen = []
    handle = eos_model.model.layers[0].register_forward_hook(
        lambda module, args, output: seen.append((tuple(output.shape[:2]), current_rows())))
    try:
        decode(eos_model, prompts, max_new_tokens=2, eos_token_ids=[tok.eos_token_id], sampler=None)
        first = seen[:]
        seen.clear()
        with row_keys(torch.tensor([0, 1, 0, 0, 1, 0])):
            decode(eos_model, prompts, max_new_tokens=2, eos_token_ids=[tok.eos_token_id], sampler=None)
    finally:
        handle.remove()
    prefills = [(shape, rows) for shape, rows in first if rows.prefill]
    # the common prefix once (1 row), then the two prompts' own tokens (2 rows), then 6 rows decode
    assert [shape[0] for shape, _ in prefills] == [1, 2]
    assert prefills[1][1].index.tolist() == [0, 3]  # each prompt's first row stands for its copies
    assert [shape for shape, rows in first if not rows.prefill] == [(6, 1)]
    # with keys, rows of different keys never share a forward's prompt tokens: 4 distinct (prompt, key), no prefix
    keyed = [(shape, rows) for shape, rows in seen if rows.prefill]
    assert len(keyed) == 1 and keyed[0][0][0] == 4 and keyed[0][1].index.tolist() == [0, 1, 3, 4]
    assert current_rows() is None


@pytest.mark.parametrize("sampler", [SamplerSettings(), SamplerSettings(temperature=0.7, top_k=40, top_p=0.9)],
                         ids=["plain", "truncated"])
def test_every_draw_comes_from_the_teacher_forced_distribution(eos_model, smollm2_tokenizer, monkeypatch, sampler):
    tok = smollm2_tokenizer
    prompts = _prompts(tok, QUESTIONS[:3], repeat=2)
    draws = []
    real_draw = decode_module.draw

    def recording(probs):
        draws.append((probs.clone(), current_rows_index()))
        return real_draw(probs)

    rows_at = {"index": torch.arange(len(prompts))}

    def current_rows_index():
        return rows_at["index"].clone()

    real_rows = decode_module._rows

    def tracking(index, prefill):  # the rows of the forward that produced the next draw's logits
        rows_at["index"] = index if not prefill else torch.arange(len(prompts))
        return real_rows(index, prefill)

    monkeypatch.setattr(decode_module, "draw", recording)
    monkeypatch.setattr(decode_module, "_rows", tracking)
    torch.manual_seed(0)
    completions = decode(eos_model, prompts, max_new_tokens=8, eos_token_ids=[tok.eos_token_id], sampler=sampler)
    monkeypatch.undo()
    assert len(draws) == max(map(len, completions))
    for row, (prompt, completion) in enumerate(zip(prompts, completions)):
        with torch.no_grad():
            logits = eos_model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
        expected = torch.softmax(processed_logits(logits, sampler), dim=-1)
        for step, token in enumerate(completion):
            probs, rows = draws[step]
            drawn = probs[rows.tolist().index(row)]
            torch.testing.assert_close(drawn, expected[step], atol=2e-5, rtol=1e-4)
            assert drawn[token] > 0


def test_top_k_one_samples_the_greedy_completion(eos_model, smollm2_tokenizer):
    tok = smollm2_tokenizer
    prompts = _prompts(tok, QUESTIONS[:3], repeat=2)
    greedy = decode(eos_model, prompts, max_new_tokens=10, eos_token_ids=[tok.eos_token_id], sampler=None)
    torch.manual_seed(1)
    sampled = decode(eos_model, prompts, max_new_tokens=10, eos_token_ids=[tok.eos_token_id],
                     sampler=SamplerSettings(top_k=1))
    assert sampled == greedy


def test_same_random_state_same_samples(eos_model, smollm2_tokenizer):
    tok = smollm2_tokenizer
    prompts = _prompts(tok, QUESTIONS[:3], repeat=3)
    runs = []
    for _ in range(2):
        torch.manual_seed(5)
        runs.append(decode(eos_model, prompts, max_new_tokens=10, eos_token_ids=[tok.eos_token_id],
                           sampler=SamplerSettings()))
    assert runs[0] == runs[1]
    assert len({tuple(c) for c in runs[0][:3]}) > 1  # the copies of one prompt are sampled independently


@pytest.mark.parametrize("steer_prompt", [True, False])
def test_steering_routes_follow_their_rows(eos_model, smollm2_tokenizer, steer_prompt):
    tok = smollm2_tokenizer
    prompts = _prompts(tok, QUESTIONS[:3], repeat=3)
    ids, mask = _left_pad(prompts, tok.pad_token_id)
    routes = torch.tensor([0, 1, 2, 2, 0, 1, 1, 2, 0])
    vectors = torch.randn(2, eos_model.config.hidden_size, generator=torch.Generator().manual_seed(0)) * 3
    steerer = ActivationSteeringGenerator(eos_model, alpha=1.0, steer_prompt=steer_prompt)
    settings = dict(max_new_tokens=10, do_sample=False, pad_token_id=tok.pad_token_id,
                    eos_token_id=[tok.eos_token_id])
    with torch.no_grad():
        with steerer.steering(routes, vectors):
            reference = eos_model.generate(input_ids=ids, attention_mask=mask, **settings)
        with steerer.steering(routes, vectors):
            got = fast_generate(eos_model, ids, mask, **settings)
        plain = fast_generate(eos_model, ids, mask, **settings)
    width = ids.shape[1]
    expected = _cut(reference[:, width:].tolist(), tok.eos_token_id)
    assert _cut(got[:, width:].tolist(), tok.eos_token_id) == expected
    assert _cut(plain[:, width:].tolist(), tok.eos_token_id) != expected  # the steering changed some rows
    assert steerer.hook_calls == steerer.forward_calls > 0


def test_unsupported_settings_fall_back_to_generate(eos_model, smollm2_tokenizer):
    tok = smollm2_tokenizer
    prompts = _prompts(tok, QUESTIONS[:2], repeat=2)
    ids, mask = _left_pad(prompts, tok.pad_token_id)
    settings = dict(max_new_tokens=6, do_sample=True, repetition_penalty=1.3, pad_token_id=tok.pad_token_id,
                    eos_token_id=[tok.eos_token_id])
    outs = []
    for sample in (eos_model.generate, lambda **kw: fast_generate(eos_model, **kw)):
        torch.manual_seed(2)
        with torch.no_grad():
            outs.append(sample(input_ids=ids, attention_mask=mask, **settings))
    assert torch.equal(outs[0], outs[1])
    assert "repetition_penalty" in unsupported_reason(eos_model, SamplerSettings(repetition_penalty=1.3))
    assert "inputs other than token ids" in unsupported_reason(eos_model, None, ["pixel_values"])
    assert unsupported_reason(eos_model, SamplerSettings(top_p=0.9)) is None


def test_generate_replaced_keeps_patches_but_takes_over_fsdps_registration(eos_model):
    # a plain model: the decoder inside, the class's generate after
    with generate_replaced(eos_model):
        assert eos_model.generate.func is fast_generate
    assert "generate" not in vars(eos_model)
    # a user's own generate is left alone
    eos_model.generate = users = lambda **kw: "users"
    with generate_replaced(eos_model):
        assert eos_model.generate is users
    # FSDP2's registration (transformers' Trainer calls torch's register_fsdp_forward_method(model, "generate")): a
    # functools.wraps wrapper of the bound class method, as torch builds it. The decoder replaces it inside (torch
    # wraps the decoder the same way on an FSDPModule, a no-op here) and the registration comes back on exit.
    bound = type(eos_model).generate.__get__(eos_model)

    @functools.wraps(bound)
    def registered(self, *args, **kwargs):
        return bound(*args, **kwargs)

    eos_model.generate = registered.__get__(eos_model)
    before = eos_model.generate
    try:
        with generate_replaced(eos_model):
            assert eos_model.generate.func is fast_generate
            with generate_replaced(eos_model):  # nested: left alone
                assert eos_model.generate.func is fast_generate
        assert eos_model.generate == before
    finally:
        del eos_model.generate


def test_bad_input_is_refused(eos_model):
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        decode(eos_model, [[1, 2]], max_new_tokens=0, eos_token_ids=[2], sampler=None)
    with pytest.raises(ValueError, match="at least one end-of-sequence"):
        decode(eos_model, [[1, 2]], max_new_tokens=3, eos_token_ids=[], sampler=None)
    with pytest.raises(ValueError, match="every prompt needs at least one token"):
        decode(eos_model, [[1, 2], []], max_new_tokens=3, eos_token_ids=[2], sampler=None)
    with pytest.raises(ValueError, match="row_keys gave 1 keys for a batch of 2 rows"):
        with row_keys(torch.tensor([0])):
            decode(eos_model, [[1, 2], [3, 4]], max_new_tokens=3, eos_token_ids=[2], sampler=None)


@pytest.mark.parametrize("sampler", [SamplerSettings(), SamplerSettings(temperature=0.7, top_k=40, top_p=0.9)],
                         ids=["plain", "truncated"])
@pytest.mark.parametrize("keep_previous", [False, True])
def test_oger_h_last_follows_the_decoders_rows(eos_model, smollm2_tokenizer, sampler, keep_previous):
    """OGER's recorder under the decoder: H_last (and the step before a final EOS) equals the entropy of the
    teacher-forced, processed distribution at each row's last token, for rows that shared a prefill and were
    dropped."""
    from trl_explore.oger.entropy import LastTokenEntropyRecorder
    from trl_explore.trl_guards.sampler_settings import entropy_from_logits

    tok = smollm2_tokenizer
    prompts = _prompts(tok, QUESTIONS[:3], repeat=3)
    ids, mask = _left_pad(prompts, tok.pad_token_id)
    eos = [tok.eos_token_id]
    torch.manual_seed(4)
    with LastTokenEntropyRecorder(eos_model, sampler, eos, keep_previous) as recorder, torch.no_grad():
        out = fast_generate(eos_model, ids, mask, max_new_tokens=10, do_sample=True, temperature=sampler.temperature,
                            top_k=sampler.top_k, top_p=sampler.top_p, pad_token_id=tok.pad_token_id, eos_token_id=eos)
    completions = _cut(out[:, ids.shape[1] :].tolist(), tok.eos_token_id)
    stopped = torch.tensor([c[-1] == tok.eos_token_id for c in completions])
    assert stopped.any() and (~stopped).any()
    lengths = torch.tensor([len(c) for c in completions])
    wanted = lengths - (stopped & (lengths > 1)).long() if keep_previous else lengths
    expected = []
    for prompt, completion, position in zip(prompts, completions, wanted.tolist()):
        with torch.no_grad():
            logits = eos_model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
        expected.append(entropy_from_logits(processed_logits(logits, sampler))[position - 1])
    torch.testing.assert_close(recorder.last_token_entropy(wanted), torch.stack(expected), atol=1e-4, rtol=1e-4)
    assert not eos_model.get_output_embeddings()._forward_hooks


def test_ase_behaviour_logprobs_follow_the_decoders_rows(eos_model, smollm2_tokenizer):
    from trl_explore.ase.recording import SampledTokenLogProbs

    tok = smollm2_tokenizer
    sampler = SamplerSettings(temperature=0.8, top_k=50)
    prompts = _prompts(tok, QUESTIONS[:3], repeat=3)
    ids, mask = _left_pad(prompts, tok.pad_token_id)
    torch.manual_seed(6)
    with SampledTokenLogProbs(eos_model, sampler) as recorder, torch.no_grad():
        out = fast_generate(eos_model, ids, mask, max_new_tokens=10, do_sample=True, temperature=0.8, top_k=50,
                            pad_token_id=tok.pad_token_id, eos_token_id=[tok.eos_token_id])
    completions = _cut(out[:, ids.shape[1] :].tolist(), tok.eos_token_id)
    recorded = recorder.per_completion(completions, skip=[i == 4 for i in range(len(completions))])
    assert recorded[4] == [None] * len(completions[4])  # a row put in another's place: not sampled here
    for i, (prompt, completion) in enumerate(zip(prompts, completions)):
        if i == 4:
            continue
        with torch.no_grad():
            logits = eos_model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
        expected = torch.log_softmax(processed_logits(logits, sampler), -1).gather(
            -1, torch.tensor(completion)[:, None]).squeeze(-1)
        # teacher-forced against cached decoding: float rounding only
        torch.testing.assert_close(torch.tensor(recorded[i]), expected, atol=1e-4, rtol=1e-4)
    with pytest.raises(RuntimeError, match="differ from its completion"):
        recorder.per_completion([c[:-1] + [c[-1] + 1] for c in completions])


def test_draw_samples_each_token_with_its_probability():
    """The inverse-CDF draw against its distribution: 40,000 rows of one hand-made distribution (zeros at both ends
    and inside), frequencies within 4 standard errors; zeros never drawn, also when u reaches the total."""
    probs = torch.tensor([0.0, 0.1, 0.0, 0.25, 0.6, 0.05, 0.0])
    torch.manual_seed(0)
    tokens = decode_module.draw(probs.expand(40_000, -1).contiguous())
    counts = torch.bincount(tokens, minlength=7).float() / 40_000
    stderr = (probs * (1 - probs) / 40_000).sqrt()
    assert ((counts - probs).abs() <= 4 * stderr + 1e-12).all(), counts
    assert counts[probs == 0].sum() == 0
    torch.manual_seed(0)
    with torch.no_grad():
        import unittest.mock

        with unittest.mock.patch.object(torch, "rand", lambda *a, **k: torch.ones(a[0], **{"dtype": k.get("dtype")})):
            assert decode_module.draw(probs[None]).tolist() == [5]  # u = the total: the last positive token
