"""Bad input gets a clear error that names the row or function (issue "Hardening", first items)."""

import math

import pytest
import torch

from conftest import make_tiny_causal_lm
from test_oger_trainer import _config as oger_config
from test_oger_trainer import _dataset as oger_dataset
from trl_explore import ASEConfig, OGERTrainer
from trl_explore.rewards.checks import check_finite_rewards


@pytest.mark.parametrize("empty", ["", "   \n"])
def test_empty_offline_trajectory_is_refused_naming_the_row(tmp_path, smollm2_tokenizer, empty):
    rows = oger_dataset().to_list()
    rows[1]["offline_completions"] = [empty]
    with pytest.raises(ValueError, match="training row 1: offline trajectory 0 of 'offline_completions' is empty"):
        OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=oger_config(tmp_path), train_dataset=rows,
                    processing_class=smollm2_tokenizer)


def test_every_row_is_checked_not_only_the_first_64(tmp_path, smollm2_tokenizer):
    rows = oger_dataset().to_list() * 40  # 80 rows
    rows[70] = {**rows[70], "offline_completions": [None]}
    with pytest.raises(ValueError, match="training row 70: offline trajectory 0 .* is NoneType"):
        OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=oger_config(tmp_path), train_dataset=rows,
                    processing_class=smollm2_tokenizer)


def test_negative_steering_alpha_points_to_the_reversed_control(tmp_path):
    with pytest.raises(ValueError, match="steering_alpha must be >= 0, got -0.5.*bank_control='reversed'"):
        ASEConfig(output_dir=str(tmp_path), steering_alpha=-0.5, bf16=False, use_cpu=True)


def test_check_finite_rewards_on_hand_values():
    nan = math.nan
    check_finite_rewards(torch.tensor([[1.0, nan], [0.0, 0.5]]), ["math", "oger"])  # NaN: "not scored", allowed
    with pytest.raises(ValueError, match=r"reward function 'oger' returned inf for row 1 .*\(2 infinite rewards"):
        check_finite_rewards(torch.tensor([[1.0, 0.0], [0.0, math.inf], [-math.inf, 0.0]]), ["math", "oger"])


def test_an_infinite_reward_stops_training_naming_the_function(tmp_path, smollm2_tokenizer):
    def broken_reward(completions, **kwargs):
        return [math.inf] + [0.0] * (len(completions) - 1)

    from trl_explore.rewards.math_verify_reward import math_reward

    trainer = OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), reward_funcs=[math_reward, broken_reward],
                          args=oger_config(tmp_path, use_exploration_reward=False, max_steps=1),
                          train_dataset=oger_dataset(), processing_class=smollm2_tokenizer)
    with pytest.raises(ValueError, match="reward function 'broken_reward' returned inf for row 0"):
        trainer.train()
