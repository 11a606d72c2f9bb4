"""Tests of trl_explore.ase.steering (SPEC §3.2-3.3, §3.5, §4): pure helpers on hand values, then the
HF backend on tiny seeded Llama / Qwen2 models built from a config, a PEFT-wrapped model and a fake model
whose decoder layers return tuples (transformers 4.x style)."""

import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from trl_explore.ase.steering import (
    ActivationSteeringGenerator,
    check_routes,
    completion_log_probs,
    find_decoder_layers,
    readout_positions,
    route_groups,
    steering_offsets,
    unwrap_model,
)
from trl_explore.ase.steering.base import add_to_block_output

VOCAB, HIDDEN = 96, 64


def _tiny_config(config_cls, **extra):
    return config_cls(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        pad_token_id=0,
        bos_token_id=None,
        eos_token_id=None,  # every row generates max_new_tokens: completion masks are all ones
        **extra,
    )


@pytest.fixture(scope="module")
def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(_tiny_config(LlamaConfig)).eval()


@pytest.fixture(scope="module")
def qwen2():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(1)
    return Qwen2ForCausalLM(_tiny_config(Qwen2Config)).eval()


@pytest.fixture(scope="module")
def batch():
    """4 left-padded prompts of width 5 (rows 1 and 3 padded), routes [0, 1, 2, 0], a K=2 bank."""
    gen = torch.Generator().manual_seed(0)
    prompt_ids = torch.randint(3, VOCAB, (4, 5), generator=gen)
    prompt_mask = torch.ones_like(prompt_ids)
    prompt_mask[1, :2] = 0
    prompt_mask[3, :1] = 0
    prompt_ids = prompt_ids.masked_fill(prompt_mask == 0, 0)
    vectors = torch.randn(2, HIDDEN, generator=gen) * 2.0
    return SimpleNamespace(
        prompt_ids=prompt_ids, prompt_mask=prompt_mask, routes=torch.tensor([0, 1, 2, 0]), vectors=vectors
    )


GREEDY = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)


def _no_hooks(model):
    block = find_decoder_layers(model)[0]
    return not block._forward_hooks and not unwrap_model(model)._forward_pre_hooks


def _plain_logps(model, ids, mask, completion_len, temperature):
    logits = model(input_ids=ids, attention_mask=mask).logits[:, -(completion_len + 1) : -1]
    return (logits / temperature).log_softmax(-1).gather(-1, ids[:, -completion_len:, None]).squeeze(-1)


def _manual_steered(model, ids, mask, offset, completion_len, temperature, layer=0):
    """Forward with ``offset`` [d] added to EVERY row's block output; returns (logps, block outputs)."""
    captured = {}

    def hook(module, args, output):
        captured["h"] = output + offset
        return captured["h"]

    handle = find_decoder_layers(model)[layer].register_forward_hook(hook)
    try:
        logps = _plain_logps(model, ids, mask, completion_len, temperature)
    finally:
        handle.remove()
    return logps, captured["h"]


# ----------------------------------------------------------------------------- pure helpers


def test_readout_positions_hand_values():
    lengths = [8, 7, 1, 0, 4, 3]
    mask = torch.tensor([[1] * n + [0] * (8 - n) for n in lengths])
    # floor(0.25 * len): 2, 1.75->1, 0.25->0, len 0 -> 0, 1, 0.75->0
    assert readout_positions(mask, 0.25).tolist() == [2, 1, 0, 0, 1, 0]
    assert readout_positions(mask).tolist() == [2, 1, 0, 0, 1, 0]  # default f = 0.25
    # f = 1 -> clamped to len - 1
    assert readout_positions(mask, 1.0).tolist() == [7, 6, 0, 0, 3, 2]
    assert readout_positions(mask, 0.5).tolist() == [4, 3, 0, 0, 2, 1]
    assert readout_positions(mask.bool(), 0.0).tolist() == [0] * 6
    assert readout_positions(mask, 0.25).dtype == torch.long


@pytest.mark.parametrize(
    "mask, fraction, match",
    [
        (torch.ones(3, dtype=torch.long), 0.25, "completion_mask"),
        (torch.full((2, 3), 2), 0.25, "completion_mask"),
        (torch.ones(2, 3), 1.5, "fraction"),
        (torch.ones(2, 3), -0.1, "fraction"),
        (torch.ones(2, 3), True, "fraction"),
    ],
)
def test_readout_positions_bad_input(mask, fraction, match):
    with pytest.raises(ValueError, match=match):
        readout_positions(mask, fraction)


def test_steering_offsets_hand_values():
    vectors = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    offsets = steering_offsets(torch.tensor([0, 2, 1, 0]), vectors, alpha=0.5)
    assert offsets.tolist() == [[0.0, 0.0], [1.5, 2.0], [0.5, 1.0], [0.0, 0.0]]
    # empty bank: every rollout is clean
    assert steering_offsets(torch.tensor([0, 0]), torch.zeros(0, 3), 0.5).tolist() == [[0.0] * 3] * 2


@pytest.mark.parametrize(
    "routes, vectors, alpha, error, match",
    [
        (torch.tensor([0, 3]), torch.ones(2, 4), 0.5, ValueError, "route_ids"),
        (torch.tensor([-1, 0]), torch.ones(2, 4), 0.5, ValueError, "route_ids"),
        (torch.tensor([1]), torch.zeros(0, 4), 0.5, ValueError, "route_ids"),
        (torch.tensor([0.0, 1.0]), torch.ones(2, 4), 0.5, TypeError, "route_ids"),
        (torch.tensor([[0, 1]]), torch.ones(2, 4), 0.5, ValueError, "route_ids"),
        (torch.tensor([0, 1]), torch.ones(4), 0.5, ValueError, "vectors"),
        (torch.tensor([0, 1]), torch.ones(2, 4, dtype=torch.long), 0.5, TypeError, "vectors"),
        (torch.tensor([0, 1]), torch.tensor([[float("nan")] * 4] * 2), 0.5, ValueError, "vectors"),
        (torch.tensor([0, 1]), torch.ones(2, 4), float("inf"), ValueError, "alpha"),
    ],
)
def test_steering_offsets_bad_input(routes, vectors, alpha, error, match):
    with pytest.raises(error, match=match):
        steering_offsets(routes, vectors, alpha)


def test_check_routes_hidden_size():
    with pytest.raises(ValueError, match="hidden size 8"):
        check_routes(torch.tensor([0]), torch.ones(1, 4), hidden_size=8)


def test_route_groups():
    groups = route_groups(torch.tensor([2, 0, 2, 1]))
    assert list(groups) == [0, 1, 2]
    assert [groups[r].tolist() for r in (0, 1, 2)] == [[1], [3], [0, 2]]


def test_completion_log_probs_hand_values():
    # logits [0, ln 3]: softmax = [1/4, 3/4]; at T = 2: [0, ln(3)/2] -> [1, sqrt 3] / (1 + sqrt 3)
    logits = torch.tensor([[[0.0, math.log(3.0)], [0.0, math.log(3.0)]]])
    tokens = torch.tensor([[1, 0]])
    assert torch.allclose(completion_log_probs(logits, tokens, 1.0), torch.tensor([[math.log(0.75), math.log(0.25)]]))
    s3 = math.sqrt(3.0)
    expected = torch.tensor([[math.log(s3 / (1 + s3)), math.log(1 / (1 + s3))]])
    assert torch.allclose(completion_log_probs(logits, tokens, 2.0), expected)
    with pytest.raises(ValueError, match="temperature"):
        completion_log_probs(logits, tokens, 0.0)
    with pytest.raises(ValueError, match="token_ids"):
        completion_log_probs(logits, tokens[:, :1], 1.0)


def test_add_to_block_output_tensor_and_tuple():
    hidden = torch.zeros(2, 3, 4)
    offset = torch.tensor([[1.0], [2.0]]).expand(2, 4).unsqueeze(1)  # [2, 1, 4]
    out = add_to_block_output(hidden, offset)
    assert out[0].eq(1.0).all() and out[1].eq(2.0).all() and hidden.eq(0).all()  # out of place
    extra = object()
    out_tuple = add_to_block_output((hidden, extra), offset)
    assert isinstance(out_tuple, tuple) and out_tuple[1] is extra and out_tuple[0][1].eq(2.0).all()
    with pytest.raises(TypeError, match="decoder block"):
        add_to_block_output({"h": hidden}, offset)


# ----------------------------------------------------------------------------- locating layers


def test_find_decoder_layers_through_wrappers(llama):
    layers = llama.model.layers
    assert find_decoder_layers(llama) is layers

    class DistributedDataParallel(nn.Module):  # stands in for torch DDP / accelerate's wrapper
        def __init__(self, module):
            super().__init__()
            self.module = module

    assert find_decoder_layers(DistributedDataParallel(llama)) is layers

    class OptimizedModule(nn.Module):  # stands in for torch.compile's wrapper (``_orig_mod``)
        def __init__(self, module):
            super().__init__()
            self._orig_mod = module

    assert find_decoder_layers(OptimizedModule(DistributedDataParallel(llama))) is layers
    with pytest.raises(ValueError, match="decoder layers of Linear"):
        find_decoder_layers(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="steering layer 2 is out of range.*valid: 0 to 1"):
        ActivationSteeringGenerator(llama, layer=2)
    with pytest.raises(ValueError, match="layer"):
        ActivationSteeringGenerator(llama, layer=-1)


# ----------------------------------------------------------------------------- generation


def test_greedy_clean_rows_unchanged_steered_rows_differ(llama, batch):
    steerer = ActivationSteeringGenerator(llama, alpha=1.0)
    plain = llama.generate(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask, **GREEDY)
    with steerer.steering(batch.routes, batch.vectors):
        steered = llama.generate(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask, **GREEDY)
    assert steerer.hook_calls == steerer.forward_calls == GREEDY["max_new_tokens"]  # prefill + 5 decode steps
    clean = batch.routes == 0
    assert torch.equal(steered[clean], plain[clean])
    for row in torch.nonzero(~clean).flatten():
        assert not torch.equal(steered[row], plain[row])
    assert _no_hooks(llama)
    # outside the context, generation is clean again
    again = llama.generate(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask, **GREEDY)
    assert torch.equal(again, plain)


def test_hooks_removed_on_exception(llama, batch):
    steerer = ActivationSteeringGenerator(llama)
    with pytest.raises(KeyError, match="boom"):
        with steerer.steering(batch.routes, batch.vectors):
            llama(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask)
            raise KeyError("boom")
    assert _no_hooks(llama)
    # a batch-size mismatch raises inside generate, and the hooks are gone too
    with pytest.raises(RuntimeError, match="B=3"):
        with steerer.steering(batch.routes[:3], batch.vectors):
            llama.generate(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask, **GREEDY)
    assert _no_hooks(llama)


def test_raises_when_hook_does_not_fire(llama, batch):
    steerer = ActivationSteeringGenerator(llama)
    with pytest.raises(RuntimeError, match="never ran"):
        with steerer.steering(batch.routes, batch.vectors):
            pass  # no generation inside the context
    block = find_decoder_layers(llama)[0]
    with pytest.raises(RuntimeError, match="ran on 1 of 2 forward passes"):
        with steerer.steering(batch.routes, batch.vectors):
            llama(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask)
            saved = dict(block._forward_hooks)
            block._forward_hooks.clear()  # simulate a compiled step that bypasses Python hooks
            llama(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask)
            block._forward_hooks.update(saved)
    assert _no_hooks(llama)
    # an all-clean batch needs no hook call
    with steerer.steering(torch.zeros(4, dtype=torch.long), batch.vectors):
        pass
    with pytest.raises(RuntimeError, match="already active"):
        with steerer.steering(batch.routes, batch.vectors):
            with steerer.steering(batch.routes, batch.vectors):
                pass
    assert _no_hooks(llama)
    with pytest.raises(ValueError, match="hidden size 64"):
        with steerer.steering(batch.routes, torch.ones(2, 8)):
            pass


@pytest.mark.parametrize("steer_prompt", [True, False])
def test_score_matches_sampling_distribution(llama, batch, steer_prompt):
    """The teacher-forced replay reproduces generate's steered sampling distribution (temperature 0.7)."""
    steerer = ActivationSteeringGenerator(llama, alpha=1.0, steer_prompt=steer_prompt)
    torch.manual_seed(3)
    with steerer.steering(batch.routes, batch.vectors):
        out = llama.generate(
            input_ids=batch.prompt_ids,
            attention_mask=batch.prompt_mask,
            max_new_tokens=6,
            do_sample=True,
            temperature=0.7,
            top_k=0,
            top_p=1.0,
            pad_token_id=0,
            output_scores=True,
            return_dict_in_generate=True,
        )
    completion = out.sequences[:, batch.prompt_ids.shape[1] :]
    sampled = torch.stack(out.scores, 1).log_softmax(-1).gather(-1, completion[..., None]).squeeze(-1)
    logps, _ = steerer.score(
        batch.prompt_ids, batch.prompt_mask, completion, torch.ones_like(completion), batch.routes, batch.vectors,
        temperature=0.7,
    )
    assert steerer.hook_calls == 1
    torch.testing.assert_close(logps, sampled, atol=1e-4, rtol=0)
    if not steer_prompt:  # clean prefill: the first completion token comes from the clean policy
        ids = torch.cat([batch.prompt_ids, completion], 1)
        mask = torch.cat([batch.prompt_mask, torch.ones_like(completion)], 1)
        plain = _plain_logps(llama, ids, mask, completion.shape[1], 0.7)
        torch.testing.assert_close(logps[:, 0], plain[:, 0], atol=1e-5, rtol=0)
        assert not torch.allclose(logps[1:3, 1:], plain[1:3, 1:], atol=1e-3)


def test_steer_prompt_false_greedy_first_token_is_clean(llama, batch):
    steerer = ActivationSteeringGenerator(llama, alpha=1.0, steer_prompt=False)
    plain = llama.generate(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask, **GREEDY)
    with steerer.steering(batch.routes, batch.vectors):
        steered = llama.generate(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask, **GREEDY)
    width = batch.prompt_ids.shape[1]
    assert torch.equal(steered[:, : width + 1], plain[:, : width + 1])
    assert not torch.equal(steered[1:3], plain[1:3])
    with pytest.raises(RuntimeError, match="one generate call"):
        with steerer.steering(batch.routes, batch.vectors):
            llama.generate(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask, **GREEDY)
            llama.generate(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask, **GREEDY)
    assert _no_hooks(llama)


# ----------------------------------------------------------------------------- score: log-probs and readouts


def _completions(batch):
    """Hand-made right-padded completions: lengths 6, 4, 5, 1 (token 0 is the pad)."""
    gen = torch.Generator().manual_seed(5)
    completion_ids = torch.randint(3, VOCAB, (4, 6), generator=gen)
    lengths = torch.tensor([6, 4, 5, 1])
    completion_mask = (torch.arange(6)[None, :] < lengths[:, None]).long()
    return completion_ids.masked_fill(completion_mask == 0, 0), completion_mask


@pytest.mark.parametrize("model_name", ["llama", "qwen2"])
def test_score_logps_and_readouts_match_manual(model_name, batch, request):
    model = request.getfixturevalue(model_name)
    completion_ids, completion_mask = _completions(batch)
    alpha, temperature, fraction = 0.5, 0.8, 0.25
    steerer = ActivationSteeringGenerator(model, alpha=alpha)
    logps, readouts = steerer.score(
        batch.prompt_ids, batch.prompt_mask, completion_ids, completion_mask, batch.routes, batch.vectors,
        temperature=temperature, readout_fraction=fraction,
    )
    assert logps.shape == (4, 6) and readouts.shape == (4, HIDDEN)
    assert logps.dtype == readouts.dtype == torch.float32
    assert _no_hooks(model)

    ids = torch.cat([batch.prompt_ids, completion_ids], 1)
    mask = torch.cat([batch.prompt_mask, completion_mask], 1)
    width, positions = batch.prompt_ids.shape[1], [1, 1, 1, 0]  # floor(0.25 * [6, 4, 5, 1])
    with torch.no_grad():
        clean_logps, clean_hidden = _manual_steered(model, ids, mask, torch.zeros(HIDDEN), 6, temperature)
        for row, route in enumerate(batch.routes.tolist()):
            offset = torch.zeros(HIDDEN) if route == 0 else alpha * batch.vectors[route - 1]
            manual_logps, manual_hidden = _manual_steered(model, ids, mask, offset, 6, temperature)
            valid = completion_mask[row] == 1
            torch.testing.assert_close(logps[row][valid], manual_logps[row][valid], atol=1e-5, rtol=0)
            assert logps[row][~valid].eq(0).all()
            expected_readout = manual_hidden[row, width + positions[row]]
            torch.testing.assert_close(readouts[row], expected_readout, atol=1e-6, rtol=0)
            # the readout is the steered activation: clean block output + alpha * v_route
            clean_readout = clean_hidden[row, width + positions[row]]
            torch.testing.assert_close(readouts[row], clean_readout + offset, atol=1e-6, rtol=0)
    # route-0 rows: exactly the plain model's temperature-scaled log-probs
    clean = batch.routes == 0
    torch.testing.assert_close(
        logps[clean], (clean_logps * completion_mask)[clean], atol=1e-5, rtol=0
    )
    steered = ~clean
    assert (logps[steered] - clean_logps[steered] * completion_mask[steered]).abs().max() > 1e-2


def test_score_micro_batches_and_errors(llama, batch):
    completion_ids, completion_mask = _completions(batch)
    steerer = ActivationSteeringGenerator(llama)
    args = (batch.prompt_ids, batch.prompt_mask, completion_ids, completion_mask, batch.routes, batch.vectors)
    full = steerer.score(*args, temperature=1.0)
    chunked = steerer.score(*args, temperature=1.0, batch_size=3)
    assert steerer.hook_calls == 2
    torch.testing.assert_close(chunked, full, atol=1e-5, rtol=0)
    right_padded = batch.prompt_mask.flip(1)
    with pytest.raises(ValueError, match="left-padded"):
        steerer.score(batch.prompt_ids, right_padded, *args[2:], temperature=1.0)
    with pytest.raises(ValueError, match="temperature"):
        steerer.score(*args, temperature=0)
    with pytest.raises(ValueError, match="batch size"):
        steerer.score(*args[:4], batch.routes[:3], batch.vectors, temperature=1.0)
    with pytest.raises(ValueError, match="fused_lm_head"):
        steerer.score(*args, temperature=1.0, fused_lm_head=True)
    with pytest.raises(RuntimeError, match="inside an active steering context"):
        with steerer.steering(batch.routes, batch.vectors):
            steerer.score(*args, temperature=1.0)
    assert _no_hooks(llama)


def test_score_with_trl_fused_lm_head(batch):
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    torch.manual_seed(0)
    model = LlamaForCausalLM(_tiny_config(LlamaConfig)).eval()
    completion_ids, completion_mask = _completions(batch)
    args = (batch.prompt_ids, batch.prompt_mask, completion_ids, completion_mask, batch.routes, batch.vectors)
    steerer = ActivationSteeringGenerator(model)
    reference = steerer.score(*args, temperature=0.7)
    add_fused_lm_head(model, temperature=0.7)
    fused = steerer.score(*args, temperature=0.7, fused_lm_head=True)
    torch.testing.assert_close(fused, reference, atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------- PEFT and tuple-returning layers


def test_peft_lora_model(batch):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    base = LlamaForCausalLM(_tiny_config(LlamaConfig))
    peft_model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    peft_model.eval()
    assert find_decoder_layers(peft_model) is base.model.layers
    steerer = ActivationSteeringGenerator(peft_model, alpha=1.0)
    plain = peft_model.generate(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask, **GREEDY)
    with steerer.steering(batch.routes, batch.vectors):
        steered = peft_model.generate(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask, **GREEDY)
    assert steerer.hook_calls == steerer.forward_calls == GREEDY["max_new_tokens"]
    clean = batch.routes == 0
    assert torch.equal(steered[clean], plain[clean]) and not torch.equal(steered[~clean], plain[~clean])
    assert _no_hooks(peft_model)

    completion_ids, completion_mask = _completions(batch)
    logps, _ = steerer.score(
        batch.prompt_ids, batch.prompt_mask, completion_ids, completion_mask, batch.routes, batch.vectors,
        temperature=1.0,
    )
    ids = torch.cat([batch.prompt_ids, completion_ids], 1)
    mask = torch.cat([batch.prompt_mask, completion_mask], 1)
    with torch.no_grad():
        with peft_model.disable_adapter():  # the adapter matters: scoring must go through it
            base_logps = _plain_logps(peft_model, ids, mask, 6, 1.0)
        adapter_logps = _plain_logps(peft_model, ids, mask, 6, 1.0)
    torch.testing.assert_close(logps[clean], (adapter_logps * completion_mask)[clean], atol=1e-5, rtol=0)
    assert (adapter_logps - base_logps).abs().max() > 1e-3


class _TupleBlock(nn.Module):
    """A transformers-4.x-style decoder layer: returns ``(hidden_states, None)``."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, hidden):
        return (hidden + torch.tanh(self.proj(hidden)), None)


class _TupleLM(nn.Module):
    """Minimal causal LM (no attention: position t sees only token t) with tuple-returning layers."""

    def __init__(self):
        super().__init__()
        self.config = SimpleNamespace(hidden_size=HIDDEN)
        self.model = nn.Module()
        self.model.embed = nn.Embedding(VOCAB, HIDDEN)
        self.model.layers = nn.ModuleList([_TupleBlock(), _TupleBlock()])
        self.lm_head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, input_ids, attention_mask=None, logits_to_keep=0, use_cache=False):
        hidden = self.model.embed(input_ids)
        for layer in self.model.layers:
            hidden = layer(hidden)[0]
        return SimpleNamespace(logits=self.lm_head(hidden[:, -logits_to_keep:]))


def test_tuple_returning_layers():
    torch.manual_seed(0)
    model = _TupleLM()
    steerer = ActivationSteeringGenerator(model, layer=1, alpha=2.0)
    ids = torch.randint(1, VOCAB, (3, 4))
    routes, vectors = torch.tensor([0, 1, 0]), torch.randn(1, HIDDEN)
    with torch.no_grad():
        plain = model(ids).logits
        with steerer.steering(routes, vectors):
            steered = model(ids).logits
    assert steerer.hook_calls == steerer.forward_calls == 1
    assert torch.equal(steered[[0, 2]], plain[[0, 2]])
    with torch.no_grad():
        block1 = model.model.layers[1](model.model.layers[0](model.model.embed(ids[1:2]))[0])[0]
        expected_row1 = model.lm_head(block1 + 2.0 * vectors[0])
    torch.testing.assert_close(steered[1:2], expected_row1)
    assert not model.model.layers[1]._forward_hooks

    logps, readouts = steerer.score(
        ids[:, :2], torch.ones(3, 2), ids[:, 2:], torch.ones(3, 2), routes, vectors, temperature=1.0
    )
    with torch.no_grad():
        h1 = model.model.layers[1](model.model.layers[0](model.model.embed(ids))[0])[0]  # clean block-1 output
        steered_h1 = h1 + 2.0 * torch.stack([torch.zeros(HIDDEN), vectors[0], torch.zeros(HIDDEN)])[:, None, :]
        expected = model.lm_head(steered_h1[:, 1:3]).log_softmax(-1).gather(-1, ids[:, 2:, None]).squeeze(-1)
    torch.testing.assert_close(logps, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(readouts, steered_h1[:, 2], atol=1e-6, rtol=0)  # floor(0.25 * 2) = 0 -> position 2
