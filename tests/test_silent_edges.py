"""Each way a component used to fail silently is now an error (or a warning) naming the component and the fix."""

import logging
from dataclasses import dataclass, field

import pytest
import torch

from trl_explore import ComponentOptions, ExplorationConfig, ExplorationTrainer
from trl_explore.driver.components import Component, Needs
from trl_explore.testing import doubling_dataset, parity_reward, tiny_training_args


@dataclass
class ScaleOptions(ComponentOptions):
    scale: float = field(default=2.0, metadata={"help": "advantage factor"})


@dataclass
class ScaleConfig(ScaleOptions, ExplorationConfig):
    pass


class Scale(Component):
    name = "scale"
    options_class = ScaleOptions

    def needs(self, mode):
        return Needs(loss_forward=True)

    def advantages(self, call):
        return call.advantages * self.options.scale


def _build(tmp_path, tokenizer, model, components, config_cls=ExplorationConfig, **overrides):
    args = config_cls(**tiny_training_args(tmp_path, **overrides))
    return ExplorationTrainer(model, reward_funcs=[parity_reward], args=args, processing_class=tokenizer,
                              train_dataset=doubling_dataset(2), components=components)


def test_loss_hooks_without_loss_forward_are_refused(tmp_path, smollm2_tokenizer, make_tiny_lm):
    class Undeclared(Scale):
        def needs(self, mode):
            return Needs()

    with pytest.raises(ValueError, match=r"'scale' overrides advantages but its needs\(\) never declares"):
        _build(tmp_path, smollm2_tokenizer, make_tiny_lm(), [Undeclared(ScaleOptions())])


def test_options_given_twice_with_different_values_are_refused(tmp_path, smollm2_tokenizer, make_tiny_lm):
    with pytest.raises(ValueError, match=r"options given twice.*scale: config 7.0, options 2.0"):
        _build(tmp_path, smollm2_tokenizer, make_tiny_lm(), [Scale(ScaleOptions(scale=2.0))], ScaleConfig, scale=7.0)
    _build(tmp_path, smollm2_tokenizer, make_tiny_lm(), [Scale(ScaleOptions(scale=7.0))], ScaleConfig, scale=7.0)


def test_a_config_without_the_options_class_warns(tmp_path, smollm2_tokenizer, make_tiny_lm, caplog):
    with caplog.at_level(logging.WARNING, logger="trl_explore.driver.config"):
        _build(tmp_path, smollm2_tokenizer, make_tiny_lm(), [Scale()])
    assert "does not have ScaleOptions among its bases" in caplog.text


def test_a_near_miss_of_a_hook_name_warns(tmp_path, smollm2_tokenizer, make_tiny_lm, caplog):
    class Misspelt(Scale):
        def loss_bacth(self, call):
            return call.batch

    with caplog.at_level(logging.WARNING, logger="trl_explore.driver.scoring"):
        _build(tmp_path, smollm2_tokenizer, make_tiny_lm(), [Misspelt(ScaleOptions())])
    assert "Misspelt.loss_bacth is not a hook" in caplog.text and "did you mean 'loss_batch'" in caplog.text


def test_batch_fields_of_the_wrong_length_are_refused(tmp_path, smollm2_tokenizer, make_tiny_lm):
    class Short(Component):
        name = "short"

        def batch_fields(self, batch):
            return {"short_field": torch.zeros(batch.rollout.num_rows - 1)}

    trainer = _build(tmp_path, smollm2_tokenizer, make_tiny_lm(), [Short()], max_steps=1)
    with pytest.raises(ValueError, match=r"batch_fields of component 'short' returns 'short_field' with 3 rows for "
                                         r"this process's 4 rows"):
        trainer.train()


def test_log_metric_and_the_batch_value_carry_what_the_row_value_carries(tmp_path, smollm2_tokenizer, make_tiny_lm):
    seen = []

    class Logs(Component):
        name = "logs"

        def batch_fields(self, batch):
            seen.append((batch.process_slice, batch.reward_weights.tolist(), batch.rewards.shape))
            self.log_metric("rows", batch.rollout.num_rows, "sum")
            return {}

    trainer = _build(tmp_path, smollm2_tokenizer, make_tiny_lm(), [Logs()], max_steps=1)
    trainer.train()
    assert seen[0] == (slice(0, 4), [1.0], torch.Size([4]))
    assert [e["logs/rows"] for e in trainer.state.log_history if "logs/rows" in e] == [4.0]
    with pytest.raises(ValueError, match="reduction"):
        trainer.log_metric("x", 1.0, "median")
