"""The TRL contract (trl_explore.trl_guards.contract) holds for the installed TRL, and covers what the driver
overrides."""

import inspect

import pytest
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from trl_explore.driver import ExplorationTrainer
from trl_explore.testing import make_tiny_causal_lm
from trl_explore.trl_guards import contract as trl_contract


def test_installed_trl_matches_the_contract():
    import trl

    assert trl.__version__.startswith(trl_contract.TRL_VERSION)
    assert trl_contract.check() == []


def test_driver_overrides_exactly_the_listed_methods():
    ours = [cls for cls in ExplorationTrainer.__mro__ if cls.__module__.startswith("trl_explore")]  # driver + mixin
    overridden = {name for cls in ours for name, value in vars(cls).items()
                  if callable(value) and hasattr(GRPOTrainer, name) and not name.startswith("__")}
    assert overridden == set(trl_contract.OVERRIDDEN_METHODS)
    # each override takes TRL's leading parameters (the rest through *args / **kwargs where it forwards them)
    for name, expected in trl_contract.OVERRIDDEN_METHODS.items():
        params = inspect.signature(getattr(ExplorationTrainer, name)).parameters.values()
        named = tuple(p.name for p in params if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
        assert named == expected[: len(named)], name


def test_a_changed_signature_or_source_is_reported():
    class Upgraded(GRPOTrainer):
        def _compute_loss(self, model, inputs, extra):  # a new parameter, and the advantages read elsewhere
            return None

    problems = trl_contract.check(Upgraded)
    assert any("_compute_loss takes ('model', 'inputs', 'extra')" in p for p in problems)
    assert any("_compute_loss no longer contains 'advantages = inputs[\"advantages\"]'" in p for p in problems)


def test_a_changed_sampler_or_trainer_source_is_reported(monkeypatch):
    facts = {"trl.trainer.utils:RepeatSampler.__iter__": ("yield index", "self.generator.seed_epoch(")}
    monkeypatch.setattr(trl_contract, "OTHER_SOURCE_FACTS", facts)
    assert trl_contract.check() == ["RepeatSampler.__iter__ no longer contains 'self.generator.seed_epoch('"]


def test_listed_attributes_exist_on_a_grpo_trainer(tmp_path, smollm2_tokenizer):
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2, max_steps=1,
                      use_cpu=True, bf16=False, report_to="none")
    trainer = GRPOTrainer(make_tiny_causal_lm(smollm2_tokenizer),
                          reward_funcs=[lambda completions, **kw: [0.0] * len(completions)], args=args,
                          train_dataset=Dataset.from_list([{"prompt": "1 + 1 ="}] * 2),
                          processing_class=smollm2_tokenizer)
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train(); the contract reads it during training
    missing = [name for name in trl_contract.ATTRIBUTES if not hasattr(trainer, name)]
    assert missing == []


@pytest.mark.parametrize("key", trl_contract.LOSS_FORWARD_KEYS)
def test_loss_forward_keys_are_forward_parameters(key):
    assert key in trl_contract.OVERRIDDEN_METHODS["_get_per_token_logps_and_entropies"]
