"""Exact resumption (trl_explore.driver.resume): inside a generation and across an epoch boundary, a resumed run is the
uninterrupted run, bit for bit, for OGER, ASE-GRPO and (with ``TRL_EXPLORE_FULL_RESUME=1``, 90 s) the two composed.

The reference is the uninterrupted run itself: its per-step losses, final weights and ASE bank. The setup makes
both cases real: ``steps_per_generation=2`` with one prompt per step (checkpoints 1 and 3 lie inside a generation),
2 prompts (one generation per epoch, 2 steps per epoch) and 4 steps (epoch 1 draws its own prompt order).
"""

import json
import logging
import os
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig
from trl.trainer.utils import RepeatSampler

from trl_explore import (
    ASEConfig,
    ASEGRPOTrainer,
    OGERASEConfig,
    OGERASETrainer,
    OGERConfig,
    OGERRewardFunction,
    OGERTrainer,
)
from trl_explore.driver import ExplorationTrainer
from trl_explore.driver.resume import (
    STATE_DIR,
    EpochSampler,
    UnstorableBatch,
    load_generation_state,
    save_generation_state,
)
from trl_explore.testing import make_tiny_causal_lm, parity_reward, run_two_cpu_processes

NUM_GENERATIONS = 6
TEACHERS = [["Zero plus zero is 0, so the answer is \\boxed{0}."], ["One plus one is 2, so the answer is \\boxed{2}."]]


def _dataset():
    return Dataset.from_list([
        {"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "answer": str(2 * i), "problem_id": f"p{i}",
         "offline_completions": TEACHERS[i], "offline_teachers": ["teacher"]}
        for i in range(2)
    ])


KINDS = {  # trainer, config, its own options (a bank from every generation's few pairs: min_pairs_per_cluster=1)
    "oger": (OGERTrainer, OGERConfig, dict(embedding_model="embedded")),
    "ase": (ASEGRPOTrainer, ASEConfig, dict(num_vectors=2, pca_dim=4, kmeans_n_init=2, steering_alpha=4.0,
                                            min_pairs_per_cluster=1)),
    "oger_ase": (OGERASETrainer, OGERASEConfig, dict(embedding_model="embedded", num_vectors=2, pca_dim=4,
                                                     kmeans_n_init=2, steering_alpha=4.0, min_pairs_per_cluster=1)),
}


def _trainer(kind, output_dir, tokenizer, **overrides):
    trainer_cls, config_cls, options = KINDS[kind]
    kwargs = dict(
        output_dir=str(output_dir), per_device_train_batch_size=NUM_GENERATIONS, num_generations=NUM_GENERATIONS,
        steps_per_generation=2, max_completion_length=8, max_steps=4, learning_rate=1e-3, logging_steps=1,
        report_to="none", save_strategy="no", use_cpu=True, bf16=False, seed=0, log_completions=False, **options,
    )
    args = config_cls(**{**kwargs, **overrides})
    reward_funcs = [parity_reward] + ([OGERRewardFunction(verifier=parity_reward)] if "oger" in kind else [])
    trainer = trainer_cls(make_tiny_causal_lm(tokenizer), reward_funcs=reward_funcs, args=args,
                          train_dataset=_dataset(), processing_class=tokenizer)
    trainer.generated_prompts = []  # the prompt order of every generation
    generate_and_score = trainer._generate_and_score_completions

    def spy(inputs):
        trainer.generated_prompts.append([row["problem_id"] for row in inputs])
        return generate_and_score(inputs)

    trainer._generate_and_score_completions = spy
    return trainer


def _losses(trainer) -> dict[int, float]:
    return {entry["step"]: entry["loss"] for entry in trainer.state.log_history if "loss" in entry}


def _bank(trainer):
    return trainer.ase.bank.state_dict() if hasattr(trainer, "ase") else None


def _assert_same_bank(a, b):
    if a is None:
        assert b is None
        return
    assert a.keys() == b.keys()
    for key, value in a.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, b[key]), key
        else:
            assert value == b[key], key


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["oger", "ase", pytest.param("oger_ase", marks=pytest.mark.skipif(
    not os.environ.get("TRL_EXPLORE_FULL_RESUME"),
    reason="90 s; its two parts are tested; set TRL_EXPLORE_FULL_RESUME=1"))])
def test_resume_inside_a_generation_and_across_an_epoch_is_exact(kind, tmp_path, smollm2_tokenizer):
    full = _trainer(kind, tmp_path / "full", smollm2_tokenizer, save_strategy="steps", save_steps=1)
    full.train()
    # the setup is the one the cases need: a generation per epoch, and epoch 1's order differs from epoch 0's
    order = [[p for i, p in enumerate(prompts) if i % NUM_GENERATIONS == 0] for prompts in full.generated_prompts]
    assert order == [["p0", "p1"], ["p1", "p0"]]
    losses = _losses(full)
    assert sorted(losses) == [1, 2, 3, 4]
    weights = {name: p.detach().clone() for name, p in full.model.named_parameters()}

    # 1: inside epoch 0's generation (crosses the epoch boundary); 2: at the epoch boundary; 3: inside epoch 1's
    for checkpoint, generations in ((1, 1), (2, 1), (3, 0)):
        path = tmp_path / "full" / f"checkpoint-{checkpoint}"
        with open(path / STATE_DIR / "process_0.json") as f:
            saved = json.load(f)
        assert saved["step"] == checkpoint and (saved["buffered"] is None) == (checkpoint == 2)
        resumed = _trainer(kind, tmp_path / f"resumed_{checkpoint}", smollm2_tokenizer)
        resumed.train(resume_from_checkpoint=str(path))
        assert len(resumed.generated_prompts) == generations  # no generation again inside the checkpoint's one
        if generations:
            assert resumed.generated_prompts[-1] == full.generated_prompts[1]  # epoch 1's order
        resumed_losses = _losses(resumed)  # steps up to the checkpoint come from its trainer_state.json
        assert resumed_losses == losses
        diff = max((p.detach() - weights[name]).abs().max().item() for name, p in resumed.model.named_parameters())
        assert diff == 0.0, (checkpoint, diff)
        _assert_same_bank(_bank(full), _bank(resumed))
    if kind != "oger":
        assert full.ase.bank.num_updates == 2  # one update per generation, none again on resume


def test_generation_state_round_trip(tmp_path):
    buffered = [
        {"prompt_ids": torch.arange(6).reshape(2, 3), "mask": torch.tensor([[True], [False]]),
         "num_items_in_batch": torch.tensor(7.0), "logps": torch.tensor([[0.5, float("nan")]] * 2)[:, :1],
         "old_per_token_logps": None, "teacher": ["a", None], "values": [[0.25, float("nan")], [1e-30]]},
    ]
    buffered.append({**buffered[0], "teacher": ["b", "c"]})
    save_generation_state(str(tmp_path), 1, 5, buffered)
    step, loaded = load_generation_state(str(tmp_path), 1, "cpu")
    assert step == 5 and len(loaded) == 2 and list(loaded[0]) == list(buffered[0])
    for a, b in zip(buffered, loaded):
        for key, value in a.items():
            if isinstance(value, torch.Tensor):
                assert b[key].dtype == value.dtype and torch.equal(b[key], value), key
            elif key == "values":
                assert b[key][0][0] == 0.25 and b[key][0][1] != b[key][0][1] and b[key][1] == [1e-30]
            else:
                assert b[key] == value, key
    assert load_generation_state(str(tmp_path), 0, "cpu") is None  # no state for another process
    save_generation_state(str(tmp_path), 0, 4, None)
    assert load_generation_state(str(tmp_path), 0, "cpu") == (4, None)


@pytest.mark.parametrize("value", [object(), ("a", "b"), [torch.zeros(1)], {1: 2}])
def test_a_value_json_cannot_store_exactly_is_refused(tmp_path, value):
    with pytest.raises(UnstorableBatch, match="'images'"):
        save_generation_state(str(tmp_path), 0, 1, [{"ids": torch.zeros(2), "images": value}])
    assert not (tmp_path / STATE_DIR / "process_0.json").exists()


def test_epoch_sampler_gives_each_epoch_trls_order(tmp_path):
    data = list(range(7))
    trl_sampler = RepeatSampler(data, mini_repeat_count=2, batch_size=3, repeat_count=2, seed=3)
    trl_orders = [list(trl_sampler) for _ in range(4)]  # TRL's uninterrupted run: one permutation per epoch
    assert len({tuple(o) for o in trl_orders}) > 1
    sampler = EpochSampler(RepeatSampler(data, mini_repeat_count=2, batch_size=3, repeat_count=2, seed=3))
    assert [list(sampler) for _ in range(4)] == trl_orders  # counting epochs without set_epoch
    resumed = EpochSampler(RepeatSampler(data, mini_repeat_count=2, batch_size=3, repeat_count=2, seed=3))
    resumed.set_epoch(2)  # a run resumed in epoch 2
    assert [list(resumed), list(resumed)] == trl_orders[2:]
    assert len(resumed) == len(trl_sampler) and resumed.data_source is data
    unshuffled = EpochSampler(RepeatSampler(data, mini_repeat_count=1, shuffle=False))
    unshuffled.set_epoch(5)
    assert list(unshuffled) == data


def test_checkpoint_inside_a_generation_with_unstorable_batch_warns(tmp_path, smollm2_tokenizer, caplog):
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2, max_steps=1,
                      steps_per_generation=2, use_cpu=True, bf16=False, report_to="none")
    trainer = ExplorationTrainer(make_tiny_causal_lm(smollm2_tokenizer), reward_funcs=[parity_reward], args=args,
                                 train_dataset=Dataset.from_list([{"prompt": "1 + 1 ="}] * 2),
                                 processing_class=smollm2_tokenizer)
    trainer._step, trainer._buffered_inputs = 1, [{"ids": torch.zeros(2), "images": [object(), object()]}] * 2
    with caplog.at_level(logging.WARNING, logger="trl_explore.driver.resume"):
        trainer._save_rng_state(str(tmp_path / "checkpoint-1"))
    assert "'images'" in caplog.text and "generates this generation's remaining batches again" in caplog.text
    assert load_generation_state(str(tmp_path / "checkpoint-1"), 0, "cpu") == (1, None)
    trainer._step = 2  # at a generation boundary nothing is buffered for the next step
    trainer._save_rng_state(str(tmp_path / "checkpoint-2"))
    assert load_generation_state(str(tmp_path / "checkpoint-2"), 0, "cpu") == (2, None)
    trainer.use_vllm, trainer.args.vllm_mode = True, "server"  # the server's sampler state is not in a checkpoint
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trl_explore.driver.resume"):
        for step in (3, 4):
            trainer._save_rng_state(str(tmp_path / f"checkpoint-{step}"))
    assert caplog.text.count("vLLM server's sampler state") == 1  # once per run


@pytest.mark.slow
def test_two_processes_resume_exactly_inside_a_later_epoch(tmp_path):
    # With 2 processes Accelerate's wrappers do not pass Trainer's set_epoch on to the sampler of a resumed epoch: the
    # driver sets it (without it, this resumed run draws epoch 0's order: weights off by 4e-4)
    result = run_two_cpu_processes(Path(__file__).parent / "scripts" / "resume_two_process.py", tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    for rank in (0, 1):
        r = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert len(r["generated"]) == 4 and r["generated"][1] != r["generated"][3]  # epoch 1 has another order
        assert r["resumed_generated"] == r["generated"][3:]  # nothing generated again; epoch 1's second batch
        assert r["resumed_losses"] == r["losses"] and r["max_weight_diff"] == 0.0
        assert r["updates"] == [4, 4] and r["bank_equal"]
