"""Bad input gets a clear error that names the row or function (issue "Hardening", first items)."""

import math

import pytest
import torch

from trl_explore import ASEConfig, OGERConfig, OGERTrainer
from trl_explore.rewards.checks import check_finite_rewards, non_binary_values, not_scored_counts
from trl_explore.testing import make_tiny_causal_lm, teacher_math_dataset, tiny_oger_args


def _oger_config(tmp_path, **overrides):
    return OGERConfig(**tiny_oger_args(tmp_path / "out", **overrides))


@pytest.mark.parametrize("empty", ["", "   \n"])
def test_empty_offline_trajectory_is_refused_naming_the_row(tmp_path, smollm2_tokenizer, empty):
    rows = teacher_math_dataset().to_list()
    rows[1]["offline_completions"] = [empty]
    with pytest.raises(ValueError, match="training row 1: offline trajectory 0 of 'offline_completions' is empty"):
        OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=_oger_config(tmp_path), train_dataset=rows,
                    processing_class=smollm2_tokenizer)


def test_every_row_is_checked_not_only_the_first_64(tmp_path, smollm2_tokenizer):
    rows = teacher_math_dataset().to_list() * 40  # 80 rows
    rows[70] = {**rows[70], "offline_completions": [None]}
    with pytest.raises(ValueError, match="training row 70: offline trajectory 0 .* is NoneType"):
        OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=_oger_config(tmp_path), train_dataset=rows,
                    processing_class=smollm2_tokenizer)


def test_negative_steering_alpha_points_to_the_reversed_control(tmp_path):
    with pytest.raises(ValueError, match="steering_alpha must be >= 0, got -0.5.*bank_control='reversed'"):
        ASEConfig(output_dir=str(tmp_path), steering_alpha=-0.5, bf16=False, use_cpu=True)


def test_check_finite_rewards_on_hand_values():
    nan = math.nan
    check_finite_rewards(torch.tensor([[1.0, nan], [0.0, 0.5]]), ["math", "oger"])  # NaN: "not scored", allowed
    with pytest.raises(ValueError, match=r"reward function 'oger' returned inf for row 1 .*\(2 infinite rewards"):
        check_finite_rewards(torch.tensor([[1.0, 0.0], [0.0, math.inf], [-math.inf, 0.0]]), ["math", "oger"])


@pytest.mark.slow
def test_an_infinite_reward_stops_training_naming_the_function(tmp_path, smollm2_tokenizer):
    def broken_reward(completions, **kwargs):
        return [math.inf] + [0.0] * (len(completions) - 1)

    from trl_explore.rewards.math_verify_reward import math_reward

    trainer = OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), reward_funcs=[math_reward, broken_reward],
                          args=_oger_config(tmp_path, use_exploration_reward=False, max_steps=1),
                          train_dataset=teacher_math_dataset(), processing_class=smollm2_tokenizer)
    with pytest.raises(ValueError, match="reward function 'broken_reward' returned inf for row 0"):
        trainer.train()


@pytest.mark.slow
def test_user_columns_reach_the_reward_functions_unchanged(tmp_path, smollm2_tokenizer):
    # columns named like the fields OGER used to add: they must arrive as the dataset has them
    user_columns = {"teacher": "from-the-dataset", "is_offline": "user-value", "last_token_entropy": -1.0}
    dataset = teacher_math_dataset().map(lambda row: user_columns)
    seen = []

    def recording_reward(completions, **kwargs):
        seen.append(kwargs)
        return [0.0] * len(completions)

    from trl_explore.rewards.math_verify_reward import math_reward

    trainer = OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), reward_funcs=[math_reward, recording_reward],
                          args=_oger_config(tmp_path, use_exploration_reward=False, max_steps=1),
                          train_dataset=dataset, processing_class=smollm2_tokenizer)
    trainer.train()
    kwargs = seen[0]
    for column, value in user_columns.items():
        assert kwargs[column] == [value] * 4
    assert kwargs["oger_is_offline"].count(True) == 1  # one offline row in the group of 4 (replacement on)
    offline = kwargs["oger_is_offline"].index(True)
    assert kwargs["oger_teacher"][offline] in {"teacher-a", "teacher-b", "teacher-c"}
    assert [t is None for t in kwargs["oger_teacher"]] == [not off for off in kwargs["oger_is_offline"]]


def test_a_column_named_like_an_oger_field_is_refused(tmp_path, smollm2_tokenizer):
    dataset = teacher_math_dataset().map(lambda row: {"oger_teacher": "x"})
    with pytest.raises(ValueError, match=r"train_dataset has column\(s\) \['oger_teacher'\], which OGERComponent"):
        OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=_oger_config(tmp_path), train_dataset=dataset,
                    processing_class=smollm2_tokenizer)


def test_not_scored_counts_and_non_binary_values_on_hand_values():
    nan = math.nan
    rewards = torch.tensor([[1.0, nan], [nan, nan], [0.0, 0.5], [nan, 0.25]])
    assert not_scored_counts(rewards, ["math", "length"]) == {
        "rewards/math/not_scored": 2, "rewards/length/not_scored": 2, "rewards/unscorable": 1}
    assert non_binary_values(torch.tensor([1.0, 0.0, nan, 1.0])) == []
    assert non_binary_values(torch.tensor([0.75, 1.0, 0.25, 0.75, nan, 2.0])) == [0.25, 0.75, 2.0]


@pytest.mark.slow
def test_none_rewards_are_counted_in_the_logs(tmp_path, smollm2_tokenizer):
    def half_scored(completions, **kwargs):  # the first two rows of every batch are "not scored"
        return [None, None] + [0.0] * (len(completions) - 2)

    from trl_explore.rewards.math_verify_reward import math_reward

    trainer = OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), reward_funcs=[math_reward, half_scored],
                          args=_oger_config(tmp_path, use_exploration_reward=False, max_steps=1),
                          train_dataset=teacher_math_dataset(), processing_class=smollm2_tokenizer)
    trainer.train()
    logged = trainer.state.log_history[0]
    assert logged["rewards/half_scored/not_scored"] == 2 and logged["rewards/math_reward/not_scored"] == 0


@pytest.mark.slow
def test_a_graded_correctness_reward_warns_once_naming_the_index(tmp_path, smollm2_tokenizer, caplog):
    from trl_explore import ASEGRPOTrainer
    from trl_explore.testing import doubling_dataset, tiny_ase_args

    def length_score(completions, **kwargs):  # not a verifier: always above 0.5, so every rollout looks correct
        return [0.5 + 0.5 * min(len(str(c)), 100) / 100 + 1e-3 for c in completions]

    trainer = ASEGRPOTrainer(make_tiny_causal_lm(smollm2_tokenizer), reward_funcs=[length_score],
                             args=ASEConfig(**tiny_ase_args(tmp_path / "out")), train_dataset=doubling_dataset(),
                             processing_class=smollm2_tokenizer)
    with caplog.at_level("WARNING", logger="trl_explore.ase.component"):
        trainer.train()
    warnings = [r.getMessage() for r in caplog.records if "outside {0, 1}" in r.getMessage()]
    assert len(warnings) == 1 and "'length_score' (correctness_reward_index=0)" in warnings[0]


THINK_TEMPLATE = (  # ChatML whose generation prompt opens a reasoning block, as reasoning models' templates do
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)


def test_strip_prompt_overlap_on_hand_values(smollm2_tokenizer):
    import copy

    from trl_explore.oger.offline import generation_prefix, strip_prompt_overlap

    think = copy.deepcopy(smollm2_tokenizer)
    think.chat_template = THINK_TEMPLATE
    assert generation_prefix(think) == "<|im_start|>assistant\n<think>\n"
    assert generation_prefix(smollm2_tokenizer) == "<|im_start|>assistant\n"
    prefix = "<|im_start|>assistant\n<think>\n"
    assert strip_prompt_overlap("<think>\nSo x = 2.", prefix) == "So x = 2."
    assert strip_prompt_overlap("think>\nSo x = 2.", prefix) == "So x = 2."  # any overlap, not only whole tags
    assert strip_prompt_overlap("So x = 2.", prefix) == "So x = 2."
    assert strip_prompt_overlap("\nSo x = 2.", prefix) == "\nSo x = 2."  # whitespace alone: kept
    assert strip_prompt_overlap("<think>\n", prefix) == "<think>\n"  # never the whole text


@pytest.mark.slow
def test_teacher_rows_do_not_repeat_the_templates_think_prefix(tmp_path, smollm2_tokenizer):
    import copy

    think = copy.deepcopy(smollm2_tokenizer)
    think.chat_template = THINK_TEMPLATE
    rows = teacher_math_dataset().to_list()
    for row in rows:
        row["offline_completions"] = ["<think>\n" + text for text in row["offline_completions"]]
    from datasets import Dataset

    trainer = OGERTrainer(make_tiny_causal_lm(think), args=_oger_config(tmp_path, max_steps=1),
                          train_dataset=Dataset.from_list(rows), processing_class=think)
    component, rollouts = trainer.components[0], []
    transform = component.transform_rollout
    component.transform_rollout = lambda *a: rollouts.append(transform(*a)) or rollouts[-1]
    trainer.train()
    rollout, offline = rollouts[0], component.generation.is_offline
    assert sum(offline) == 1
    for i in [i for i, off in enumerate(offline) if off]:
        text = think.decode(rollout.prompt_ids[i] + rollout.completion_ids[i])
        assert text.count("<think>") == 1 and "<|im_start|>assistant\n<think>\n" in text
        assert rollout.completions[i][0]["content"].startswith(("We add", "Two plus", "Since 3"))
