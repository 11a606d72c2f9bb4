"""Tests for trl_explore/sampling/: plans, seeds, the resumable cache, the transformers backend, backend choice.

The identity tests compare the sampling stack with a plain ``model.generate`` loop written out here (the procedure
the evaluation used before the stack existed), on a tiny model whose EOS is likely, so finished and truncated
samples both occur.
"""

import functools
import json

import pytest
import torch

from trl_explore.sampling import (
    SEEDINGS,
    BatchCache,
    SamplingPlan,
    Steering,
    TransformersGenerator,
    make_generator,
    request_seeds,
)
from trl_explore.sampling import decode as decode_module
from trl_explore.sampling.decode import fast_generate
from trl_explore.sampling.seeds import batch_seed, forked_devices, isolated_rng

PROMPTS = [[{"role": "user", "content": f"What is {i} + {i}?"}] for i in range(3)]


@pytest.fixture
def eos_likely_model(tiny_model, smollm2_tokenizer):
    """The tiny model with its EOS row of the (tied) output matrix turned towards the mean last hidden state of a
    prompt: EOS then wins often enough that some samples end early and others run to max_new_tokens."""
    model = tiny_model.eval()
    ids = smollm2_tokenizer.apply_chat_template(PROMPTS[0], add_generation_prompt=True, return_tensors="pt",
                                                return_dict=True)["input_ids"]
    with torch.no_grad():
        hidden = model.model(ids).last_hidden_state[0]
        direction = hidden.mean(0) / hidden.mean(0).norm()
        model.lm_head.weight[smollm2_tokenizer.eos_token_id] = 7.5 / (hidden @ direction).mean() * direction
    return model


def plain_per_batch_generate(model, tok, prompts, num_samples, batch_rows, seed, sample=None, **sampling):
    """The reference: rows (prompt, sample) prompt by prompt, ``batch_rows`` per call, left padding, batch b after
    ``torch.manual_seed(seed + b)``, completions cut after the first EOS. Returns ``[prompt][sample]`` token ids.
    ``sample``: the ``generate``-like call (default ``model.generate``)."""
    sample = model.generate if sample is None else sample
    encoded = [tok.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
               for p in prompts]
    rows = [(p, s) for p in range(len(prompts)) for s in range(num_samples)]
    out = [[None] * num_samples for _ in prompts]
    for b, start in enumerate(range(0, len(rows), batch_rows)):
        batch = rows[start : start + batch_rows]
        width = max(len(encoded[p]) for p, _ in batch)
        ids = torch.tensor([[tok.pad_token_id] * (width - len(encoded[p])) + encoded[p] for p, _ in batch])
        mask = torch.tensor([[0] * (width - len(encoded[p])) + [1] * len(encoded[p]) for p, _ in batch])
        torch.manual_seed(seed + b)
        with torch.no_grad():
            generated = sample(input_ids=ids, attention_mask=mask, pad_token_id=tok.pad_token_id,
                               eos_token_id=[tok.eos_token_id], **sampling)
        for (p, s), row in zip(batch, generated[:, width:].tolist()):
            out[p][s] = row[: row.index(tok.eos_token_id) + 1] if tok.eos_token_id in row else row
    return out


def test_plan_validation_and_top_k_default():
    assert SamplingPlan(num_samples=2, temperature=1.0, top_k=None).top_k is None  # the backend's default
    with pytest.raises(ValueError, match="top_k must be >= 0"):
        SamplingPlan(num_samples=1, temperature=1.0, top_k=-1)
    with pytest.raises(ValueError, match="greedy"):
        SamplingPlan(num_samples=2, temperature=0.0)


def test_seedings_registry_and_batch_seeds():
    assert SEEDINGS.names() == ("per_batch", "once")
    assert [batch_seed("per_batch", 7, b) for b in range(3)] == [7, 8, 9]
    assert [batch_seed("once", 7, b) for b in range(3)] == [7, None, None]
    with pytest.raises(ValueError, match="seeding='twice' is not a valid seeding; valid: per_batch, once"):
        batch_seed("twice", 0, 0)


def test_isolated_rng_restores_every_generator_even_after_an_error():
    import random

    import numpy as np

    def seed_all(seed):  # what transformers.set_seed does to the global generators
        torch.manual_seed(seed), random.seed(seed), np.random.seed(seed)  # noqa: NPY002

    def draw():
        return torch.rand(3).tolist(), random.random(), np.random.rand()  # noqa: NPY002

    seed_all(7)
    expected = draw()
    seed_all(7)
    with isolated_rng("cpu"):
        seed_all(123)  # what an evaluation's batch seeding does
        draw()
    assert draw() == expected
    seed_all(7)
    with pytest.raises(RuntimeError), isolated_rng():
        seed_all(0)
        raise RuntimeError("a failed evaluation")
    assert draw() == expected


def test_forked_devices_name_the_accelerator_generator_to_restore():
    assert forked_devices(torch.device("cpu")) == ("cpu", [])  # the CPU generator is always forked
    assert forked_devices(torch.device("meta")) == ("cpu", [])  # fork_rng would fork nothing for "meta"
    assert forked_devices(torch.device("cuda:1")) == ("cuda", [1])  # accelerate's device of local rank 1
    assert forked_devices(torch.device("mps", 0)) == ("mps", [0])


def test_batch_cache_names_its_file_by_the_work_and_skips_a_torn_line(tmp_path):
    cache = BatchCache(tmp_path, "my bench/1", [[1, 2], {"t": 1.0}])
    assert cache.path.parent == tmp_path and cache.path.name.startswith("my_bench_1-") and len(cache.path.stem) == 27
    assert BatchCache(tmp_path, "my bench/1", [[1, 2], {"t": 0.5}]).path != cache.path
    cache.append([(0, 0, [5, 6], False), (0, 1, [7], True)])
    with open(cache.path, "a") as f:
        f.write(json.dumps([1, 0, [8], False])[:-3])  # a kill during the write
    assert cache.read() == {(0, 0): (0, 0, [5, 6], False), (0, 1): (0, 1, [7], True)}


@pytest.mark.parametrize("fast_decode", [False, True], ids=["generate", "fast_decode"])
def test_per_batch_samples_match_a_plain_generate_loop(eos_likely_model, smollm2_tokenizer, fast_decode):
    # fast_decode=False: model.generate's own samples; True: trl_explore's decoder (other samples, the same seeding)
    model, tok = eos_likely_model, smollm2_tokenizer
    generator = TransformersGenerator(model, tok, batch_size=4, show_progress=False, fast_decode=fast_decode)
    sample = functools.partial(fast_generate, model) if fast_decode else None
    flat = []
    for plan, sampling in [
        (SamplingPlan(num_samples=3, temperature=1.0, max_new_tokens=6), dict(do_sample=True, temperature=1.0,
                                                                            top_p=1.0, top_k=0)),
        (SamplingPlan(num_samples=2, temperature=0.7, top_p=0.9, top_k=20, max_new_tokens=6),
         dict(do_sample=True, temperature=0.7, top_p=0.9, top_k=20)),
        (SamplingPlan(num_samples=2, temperature=1.0, top_k=None, max_new_tokens=6),
         dict(do_sample=True, temperature=1.0, top_p=1.0)),  # top_k=None: generation_config.top_k (50)
    ]:
        got = generator.generate(PROMPTS, plan, seed=3)
        reference = plain_per_batch_generate(model, tok, PROMPTS, plan.num_samples, 4, 3, sample=sample,
                                             max_new_tokens=plan.max_new_tokens, **sampling)
        assert got.token_ids == reference
        assert got.truncated == [[ids[-1] != tok.eos_token_id for ids in group] for group in reference]
        assert got.texts == [[tok.decode(ids, skip_special_tokens=True) for ids in group] for group in reference]
        flat += [t for group in got.truncated for t in group]
    assert any(flat) and not all(flat)  # both kinds of samples were compared


def test_evaluation_samples_match_a_plain_generate_loop(eos_likely_model, smollm2_tokenizer):
    """evaluate_dataset samples what the evaluation sampled before the split: the protocol's chat prompts, batch b
    seeded seed + b; per-sample records keep the token counts and truncation flags of those samples."""
    import pathlib

    from trl_explore.evaluation.benchmarks import load_benchmark
    from trl_explore.evaluation.protocols import build_messages, get_protocol
    from trl_explore.evaluation.runner import evaluate_dataset

    model, tok = eos_likely_model, smollm2_tokenizer
    data = load_benchmark("math500", pathlib.Path(__file__).parent / "data" / "eval" / "math500.jsonl")
    plan = get_protocol("demo").plan("math500", num_samples=3, max_new_tokens=6)
    generator = TransformersGenerator(model, tok, batch_size=4, show_progress=False)
    records, _ = evaluate_dataset(generator, data, plan, seed=1)
    reference = plain_per_batch_generate(model, tok, [build_messages(row, plan) for row in data], 3, 4, 1,
                                         sample=functools.partial(fast_generate, model),  # the default decoder
                                         max_new_tokens=6, do_sample=True, temperature=0.8, top_p=1.0, top_k=0)
    flat = [ids for group in reference for ids in group]
    assert [r["completion"] for r in records] == [tok.decode(ids, skip_special_tokens=True) for ids in flat]
    assert [r["num_tokens"] for r in records] == [len(ids) for ids in flat]
    assert [r["truncated"] for r in records] == [ids[-1] != tok.eos_token_id for ids in flat]


@pytest.mark.parametrize("fast_decode", [False, True], ids=["generate", "fast_decode"])
def test_once_seeding_runs_one_generator_over_the_batches(eos_likely_model, smollm2_tokenizer, tmp_path,
                                                          fast_decode):
    model, tok = eos_likely_model, smollm2_tokenizer
    plan = SamplingPlan(num_samples=2, temperature=1.0, max_new_tokens=6)
    got = TransformersGenerator(model, tok, batch_size=2, show_progress=False, fast_decode=fast_decode).generate(
        PROMPTS, plan, seed=3, seeding="once")
    torch.manual_seed(3)
    reference = []
    for p in PROMPTS:  # one prompt (2 rows) per batch, no reseeding in between
        ids = tok.apply_chat_template(p, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        ids = {name: value.repeat(2, 1) for name, value in ids.items()}
        sample = functools.partial(fast_generate, model) if fast_decode else model.generate
        with torch.no_grad():
            out = sample(**ids, do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=6,
                         pad_token_id=tok.pad_token_id, eos_token_id=[tok.eos_token_id])
        rows = out[:, ids["input_ids"].shape[1] :].tolist()
        reference.append([r[: r.index(tok.eos_token_id) + 1] if tok.eos_token_id in r else r for r in rows])
    assert got.token_ids == reference
    assert got.token_ids != TransformersGenerator(model, tok, batch_size=2, show_progress=False).generate(
        PROMPTS, plan, seed=3).token_ids  # per_batch reseeds batches 1 and 2
    with pytest.raises(ValueError, match="seeding='once'.*cannot be resumed"):
        TransformersGenerator(model, tok, partial_dir=tmp_path).generate(PROMPTS, plan, seeding="once")


def test_generate_leaves_the_callers_random_states_as_it_found_them(eos_likely_model, smollm2_tokenizer):
    """Both seedings reseed torch's generator per batch or once; the caller's next draws (training's rollouts) are
    the ones it would have made without the call, and the samples are those of a call on a fresh state."""
    import random

    import numpy as np

    model, tok = eos_likely_model, smollm2_tokenizer
    plan = SamplingPlan(num_samples=2, temperature=1.0, max_new_tokens=6)
    generator = TransformersGenerator(model, tok, batch_size=2, show_progress=False)
    for seeding in ("per_batch", "once"):
        alone = generator.generate(PROMPTS, plan, seed=5, seeding=seeding).token_ids
        torch.manual_seed(123)
        random.seed(4)
        np.random.seed(4)  # noqa: NPY002 (the global state is what is checked)
        torch_state, python_state, numpy_state = torch.get_rng_state(), random.getstate(), np.random.get_state()  # noqa: NPY002
        assert generator.generate(PROMPTS, plan, seed=5, seeding=seeding).token_ids == alone
        assert torch.equal(torch.get_rng_state(), torch_state), seeding
        assert random.getstate() == python_state
        assert np.array_equal(np.random.get_state()[1], numpy_state[1])  # noqa: NPY002


def test_steering_is_given_by_its_owner(tiny_model, smollm2_tokenizer, tmp_path):
    from contextlib import contextmanager

    seen = []

    @contextmanager
    def record(route_ids):
        seen.append(route_ids.tolist())
        yield

    steering = Steering(routes=lambda p, n: [[s % 2 for s in range(n)] for _ in range(p)], context=record, key=["k"])
    plan = SamplingPlan(num_samples=2, temperature=1.0, max_new_tokens=3)
    generator = TransformersGenerator(tiny_model.eval(), smollm2_tokenizer, batch_size=4, show_progress=False,
                                      partial_dir=tmp_path)
    got = generator.generate(PROMPTS, plan, seed=0, steering=steering, desc="s")
    assert got.routes == [[0, 1]] * 3 and seen == [[0, 1, 0, 1], [0, 1]]
    assert got.token_ids == generator.generate(PROMPTS, plan, seed=0, desc="s").token_ids  # a no-op context
    assert len(list(tmp_path.glob("s-*.jsonl"))) == 2  # the steering key is part of the fingerprint
    with pytest.raises(TypeError, match="Steering"):
        generator.generate(PROMPTS, plan, steering=(None, torch.zeros(1, 64), 1.0))
    bad = Steering(routes=lambda p, n: [[0]] * p, context=record, key=None)
    with pytest.raises(ValueError, match="must give 3 lists of 2 routes"):
        generator.generate(PROMPTS, plan, steering=bad)


def test_make_generator_choices(tiny_model, smollm2_tokenizer):
    generator = make_generator(tiny_model, smollm2_tokenizer, backend="auto", batch_size=3)
    assert isinstance(generator, TransformersGenerator) and generator.batch_size == 3
    with pytest.raises(ValueError, match="backend must be"):
        make_generator(tiny_model, smollm2_tokenizer, backend="tgi")
    with pytest.raises(ValueError, match="needs a model name"):
        make_generator(tiny_model, smollm2_tokenizer, backend="vllm")
    with pytest.raises(ValueError, match="needs its `tokenizer`"):
        make_generator(tiny_model)


def test_sampling_imports_no_method_and_no_caller():
    """Shared code: the sampling stack imports neither a method package nor the packages that use it (every import
    statement, function-level ones included)."""
    import ast
    import pathlib

    import trl_explore.sampling

    forbidden = ("trl_explore.ase", "trl_explore.oger", "trl_explore.evaluation", "trl_explore.data")
    for path in pathlib.Path(trl_explore.sampling.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not name.startswith(forbidden), f"{path.name} imports {name}"


def test_killed_generation_resumes_from_its_finished_batches(smollm2_tokenizer, tmp_path, monkeypatch):
    from trl_explore.testing import make_tiny_causal_lm

    model = make_tiny_causal_lm(smollm2_tokenizer).eval()
    prompts = [[{"role": "user", "content": f"What is {i} + {i}?"}] for i in range(3)]
    plan = SamplingPlan(num_samples=2, temperature=1.0, max_new_tokens=5)

    def generator(partial_dir=None):
        return TransformersGenerator(model, smollm2_tokenizer, batch_size=2, show_progress=False,
                                     partial_dir=partial_dir)

    reference = generator().generate(prompts, plan, seed=3, desc="bench")
    calls = []
    generate = functools.partial(decode_module.fast_generate, model)  # the default decoder's call, one per batch

    def killed_after_two_batches(*args, **kwargs):
        if len(calls) == 2:
            raise KeyboardInterrupt  # the run is killed during its third batch
        calls.append(1)
        return generate(*args, **kwargs)

    monkeypatch.setattr(decode_module, "fast_generate", lambda model, *a, **k: killed_after_two_batches(*a, **k))
    with pytest.raises(KeyboardInterrupt):
        generator(tmp_path / "partial").generate(prompts, plan, seed=3, desc="bench")
    (partial,) = (tmp_path / "partial").glob("bench-*.jsonl")
    assert len(partial.read_text().splitlines()) == 4  # 2 finished batches of 2 rows were kept
    resumed_calls = []
    monkeypatch.setattr(decode_module, "fast_generate",
                        lambda model, *a, **k: resumed_calls.append(1) or generate(*a, **k))
    resumed = generator(tmp_path / "partial").generate(prompts, plan, seed=3, desc="bench")
    assert len(resumed_calls) == 1  # only the missing third batch
    assert resumed.token_ids == reference.token_ids and resumed.texts == reference.texts
    assert resumed.truncated == reference.truncated
    # other work (another seed) never reads these batches
    other = generator(tmp_path / "partial").generate(prompts, plan, seed=4, desc="bench")
    assert len(resumed_calls) == 4 and len(list((tmp_path / "partial").glob("bench-*.jsonl"))) == 2
    assert other.token_ids != reference.token_ids


def test_vllm_request_seeds_give_every_prompt_its_own_seeds():
    assert request_seeds(5, 3, 4) == [5, 9, 13]  # sample j of prompt p: 5 + 4 p + j, all distinct
    assert request_seeds(0, 0, 2) == []
    with pytest.raises(ValueError, match="num_samples >= 1"):
        request_seeds(0, 2, 0)
