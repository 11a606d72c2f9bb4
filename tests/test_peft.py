"""LoRA (PEFT) training with both trainers, with and without gradient checkpointing, on tiny models."""

import pytest
import torch
from peft import LoraConfig
from transformers import TrainerCallback

from trl_explore import ASEConfig, ASEGRPOTrainer, OGERConfig, OGERTrainer
from trl_explore.testing import (
    doubling_dataset,
    make_tiny_causal_lm,
    parity_reward,
    teacher_math_dataset,
    tiny_ase_args,
    tiny_oger_args,
)


def _lora():
    # PEFT's default init: lora_A random, lora_B zero, so a nonzero lora_B proves a gradient reached it
    return LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, task_type="CAUSAL_LM")


def _lora_b_norms(model):
    return {n: p.detach().norm().item() for n, p in model.named_parameters() if "lora_B" in n}


def _frozen_base(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}


@pytest.mark.slow
@pytest.mark.parametrize("gradient_checkpointing", [False, True])
def test_oger_lora_offline_only_loss_moves_every_lora_b(tmp_path, smollm2_tokenizer, monkeypatch,
                                                        gradient_checkpointing):
    """One step whose loss comes only from the offline (teacher) tokens still trains every adapter.

    `mask_truncated_completions` drops the online completions, which a random model never ends within 24 tokens,
    and `entropy_coef=0` removes the entropy bonus: what is left is the policy-shaping loss of the offline rows.
    """
    args = OGERConfig(**tiny_oger_args(tmp_path / "out", max_steps=1, mask_truncated_completions=True,
                                       entropy_coef=0.0, gradient_checkpointing=gradient_checkpointing))
    trainer = OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=args, train_dataset=teacher_math_dataset(),
                          processing_class=smollm2_tokenizer, peft_config=_lora())
    assert all(v == 0.0 for v in _lora_b_norms(trainer.model).values())
    base_before = _frozen_base(trainer.model)
    masks = []
    compute_loss = trainer._compute_loss

    def spy(model, inputs):
        masks.append((inputs["completion_mask"].sum(1).cpu(), inputs["is_offline"].cpu()))
        return compute_loss(model, inputs)

    monkeypatch.setattr(trainer, "_compute_loss", spy)
    trainer.train()

    tokens, offline = torch.cat([m for m, _ in masks]), torch.cat([o for _, o in masks])
    assert offline.sum() == 1 and tokens[offline].min() > 0  # the teacher row is in the loss
    assert tokens[~offline].sum() == 0  # no online token is
    norms = _lora_b_norms(trainer.model)
    assert len(norms) == 4  # 2 layers x (q_proj, v_proj)
    assert all(v > 0 for v in norms.values()), norms
    for name, value in _frozen_base(trainer.model).items():
        assert torch.equal(value, base_before[name]), name  # LoRA trains the adapters only


@pytest.mark.slow
@pytest.mark.parametrize("gradient_checkpointing", [False, True])
def test_ase_lora_trains_adapters_and_steers_the_peft_model(tmp_path, smollm2_tokenizer, monkeypatch,
                                                            gradient_checkpointing):
    args = ASEConfig(**tiny_ase_args(tmp_path / "out", gradient_checkpointing=gradient_checkpointing))
    trainer = ASEGRPOTrainer(make_tiny_causal_lm(smollm2_tokenizer), reward_funcs=[parity_reward], args=args,
                             train_dataset=doubling_dataset(), processing_class=smollm2_tokenizer, peft_config=_lora())
    steered_tables = []
    steering = trainer.ase.steerer.steering

    def spy(route_ids, vectors, alpha=None):
        steered_tables.append((route_ids.clone(), vectors.clone()))
        return steering(route_ids, vectors, alpha)

    monkeypatch.setattr(trainer.ase.steerer, "steering", spy)
    norms_after = []

    class _Record(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # after the optimizer step
            norms_after.append(_lora_b_norms(trainer.model))

    trainer.add_callback(_Record())
    trainer.train()

    assert type(trainer.model).__name__.startswith("Peft")
    assert norms_after and all(v > 0 for v in norms_after[0].values()), norms_after[0]  # after step 1
    # the bank estimated at step 1 steered step 2's rollouts of the PEFT-wrapped model
    assert any(bool((r != 0).any()) and vectors.abs().sum() > 0 for r, vectors in steered_tables)

    # the hook on the PEFT model's block changes what the model computes: steered vs clean scoring of one batch
    ids = smollm2_tokenizer(["What is 1 + 1?", "What is 2 + 2?"], return_tensors="pt", padding=True)
    completion = torch.randint(0, 1000, (2, 5))
    routes = torch.tensor([0, 1])
    table = torch.ones(1, trainer.ase.bank.hidden_size)  # K = 1 vector: route 1 adds alpha * 1 to every unit
    kwargs = dict(temperature=1.0, readout_fraction=1.0)
    clean_logps, clean_read = trainer.ase.steerer.score(ids["input_ids"], ids["attention_mask"], completion,
                                                    torch.ones_like(completion), routes, torch.zeros_like(table),
                                                    **kwargs)
    logps, read = trainer.ase.steerer.score(ids["input_ids"], ids["attention_mask"], completion,
                                        torch.ones_like(completion), routes, table, **kwargs)
    assert torch.equal(logps[0], clean_logps[0])  # the clean route is untouched
    assert not torch.allclose(logps[1], clean_logps[1])  # the steered route is not


@pytest.mark.slow
@pytest.mark.parametrize("gradient_checkpointing", [False, True])
def test_oger_ase_lora_trains_every_adapter_and_keeps_the_base(tmp_path, smollm2_tokenizer, gradient_checkpointing):
    from trl_explore import OGERASEConfig, OGERASETrainer, OGERRewardFunction
    from trl_explore.testing import DOUBLING_TEACHERS, tiny_oger_ase_args

    args = OGERASEConfig(**tiny_oger_ase_args(tmp_path / "out", gradient_checkpointing=gradient_checkpointing))
    trainer = OGERASETrainer(make_tiny_causal_lm(smollm2_tokenizer), args=args,
                             train_dataset=doubling_dataset(2, DOUBLING_TEACHERS),
                             reward_funcs=[parity_reward, OGERRewardFunction(verifier=parity_reward)],
                             processing_class=smollm2_tokenizer, peft_config=_lora())
    base_before = _frozen_base(trainer.model)
    norms_after = []

    class _Record(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            norms_after.append(_lora_b_norms(trainer.model))

    trainer.add_callback(_Record())
    trainer.train()

    assert type(trainer.model).__name__.startswith("Peft")
    assert len(norms_after[0]) == 4 and all(v > 0 for v in norms_after[0].values()), norms_after[0]  # after step 1
    for name, value in _frozen_base(trainer.model).items():
        assert torch.equal(value, base_before[name]), name
    assert trainer.ase.bank.num_updates >= 1  # the bank was estimated from the PEFT model's readouts
