"""Tests for trl_explore/ase/inference.py: inference-time steering (ASE ^S) through the shared sampling stack."""

import pathlib

import torch

from trl_explore.ase import inference
from trl_explore.evaluation.benchmarks import load_benchmark
from trl_explore.evaluation.protocols import get_protocol
from trl_explore.sampling.hf import TransformersGenerator
from trl_explore.sampling.plan import Generations, SamplingPlan

DATA = pathlib.Path(__file__).parent / "data" / "eval"
FIXTURES = {"aime2024": "aime2024.jsonl"}


def test_steering_sweep_on_a_tiny_model(smollm2_tokenizer):
    from trl_explore.ase.bank import SteeringVectorBank
    from trl_explore.testing import make_tiny_causal_lm

    model = make_tiny_causal_lm(smollm2_tokenizer).eval()
    generator = TransformersGenerator(model, smollm2_tokenizer, batch_size=8, show_progress=False)
    datasets = {"aime2024": load_benchmark("aime2024", DATA / FIXTURES["aime2024"], limit=1)}
    protocol = get_protocol("demo")
    bank = SteeringVectorBank(hidden_size=64, num_vectors=3)
    state = bank.state_dict()
    state["active"] = torch.randn(3, 64, generator=torch.Generator().manual_seed(0))
    bank.load_state_dict(state)
    records, rows = inference.steering_sweep(generator, datasets, protocol, {(3, 0.25): bank}, [0.5, 4.0],
                                             num_samples=8, max_new_tokens=3)  # fmt: skip
    assert [(r["K"], r["f"], r["alpha"]) for r in rows] == [(None, None, 0.0), (3, 0.25, 0.5), (3, 0.25, 4.0)]
    assert rows[0]["delta_mean"] == 0.0
    steered = [r["route"] for r in records if r["alpha"] == 0.5]
    assert steered == [0, 0, 1, 1, 2, 2, 3, 3]  # balanced-uniform routes, clean route included
    assert all(r["route"] == 0 for r in records if r["alpha"] == 0.0)
    assert "| clean | - | 0.00 |" in inference.steering_table(rows)


def test_readouts_at_fractions_pick_the_response_relative_position(smollm2_tokenizer):
    from trl_explore.ase.steering import ActivationSteeringGenerator, find_decoder_layers
    from trl_explore.testing import make_tiny_causal_lm

    model = make_tiny_causal_lm(smollm2_tokenizer).eval()
    prompt = smollm2_tokenizer("Compute 1+1.")["input_ids"]
    completion = [100, 200, 300, 400]
    gens = Generations([["x"]], [[completion]], [prompt], [[False]], [[0]])
    steerer = ActivationSteeringGenerator(model, layer=0)
    readouts = inference.readouts_at_fractions(steerer, gens, [0.0, 0.5], smollm2_tokenizer.pad_token_id)
    captured = {}
    handle = find_decoder_layers(model)[0].register_forward_hook(lambda m, a, o: captured.setdefault("h", o))
    with torch.no_grad():
        model(torch.tensor([prompt + completion]))
    handle.remove()
    hidden = captured["h"][0] if isinstance(captured["h"], tuple) else captured["h"]
    assert torch.allclose(readouts[0.0][0], hidden[0, len(prompt) + 0], atol=1e-5)
    assert torch.allclose(readouts[0.5][0], hidden[0, len(prompt) + 2], atol=1e-5)  # floor(0.5 * 4)


def test_steered_samples_match_a_plain_generate_loop_with_the_steering_hook(tiny_model, smollm2_tokenizer):
    """The sampling stack with steering_for gives what the pre-split evaluation gave: balanced-uniform routes, batch
    b seeded seed + b, the steerer's context around each batch's decoding call (the reference below, with the
    package's default decoder, fast_generate)."""
    from trl_explore.ase.routing import balanced_uniform_routes
    from trl_explore.ase.steering import ActivationSteeringGenerator
    from trl_explore.sampling.decode import fast_generate

    model, tok = tiny_model.eval(), smollm2_tokenizer
    steerer = ActivationSteeringGenerator(model, layer=0)
    vectors = 4.0 * torch.randn(3, 64, generator=torch.Generator().manual_seed(0))
    prompts = [[{"role": "user", "content": f"What is {i} + {i}?"}] for i in range(3)]
    plan = SamplingPlan(num_samples=4, temperature=1.0, max_new_tokens=5)
    steering = inference.steering_for(steerer, vectors, 0.5)
    assert steering.key[0] == 0 and steering.key[2] == 0.5 and len(steering.key[1]) == 16
    got = TransformersGenerator(model, tok, batch_size=6, show_progress=False).generate(prompts, plan, seed=5,
                                                                                       steering=steering)
    routes = balanced_uniform_routes(3, 4, 3).tolist()
    assert [r for group in got.routes for r in group] == routes == [0, 1, 2, 3] * 3

    encoded = [tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
               for p in prompts]
    rows = [(p, s) for p in range(3) for s in range(4)]
    reference = []
    for index in range(0, len(rows), 6):
        batch = rows[index : index + 6]
        width = max(len(encoded[p]) for p, _ in batch)
        ids = torch.tensor([[tok.pad_token_id] * (width - len(encoded[p])) + encoded[p] for p, _ in batch])
        mask = torch.tensor([[0] * (width - len(encoded[p])) + [1] * len(encoded[p]) for p, _ in batch])
        torch.manual_seed(5 + index // 6)
        with torch.no_grad(), steerer.steering(torch.tensor([routes[4 * p + s] for p, s in batch]), vectors, 0.5):
            out = fast_generate(model, input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0,
                                 top_k=0, max_new_tokens=5, pad_token_id=tok.pad_token_id,
                                 eos_token_id=[tok.eos_token_id])
        reference += [row[width:].tolist() for row in out]
    cut = [ids[: ids.index(tok.eos_token_id) + 1] if tok.eos_token_id in ids else ids for ids in reference]
    assert [ids for group in got.token_ids for ids in group] == cut
    clean = TransformersGenerator(model, tok, batch_size=6, show_progress=False).generate(prompts, plan, seed=5)
    assert clean.token_ids != got.token_ids  # the steering changed the samples
