"""OGERRewardFunction called the TRL way, inside the trainer's kwargs path and standalone."""

import math

import pytest
import torch

from trl_explore.oger.reward import OGERRewardFunction


class FixedEncoder:
    """Maps known texts to hand-chosen 2-d embeddings."""

    table = {
        "on-a \\boxed{4}": [1.0, 0.0],
        "on-b \\boxed{4}": [0.0, 1.0],
        "on-c \\boxed{5}": [1.0, 1.0],
        "teacher-1": [1.0, 0.0],
        "teacher-2": [0.0, 1.0],
    }

    def encode(self, texts):
        return torch.tensor([self.table[t] for t in texts])

    encode_cached = encode


def test_trainer_kwargs_path_hand_values():
    logged, extra = {}, {}
    reward = OGERRewardFunction()
    out = reward(
        prompts=["q"] * 4,
        completions=["\\boxed{4}", "\\boxed{4}", "\\boxed{5}", "\\boxed{4}"],
        answer=["4"] * 4,
        oger_is_offline=[False, False, False, True],
        oger_divergence=[0.5, 0.2, 0.9, None],
        oger_last_token_entropy=[0.0, math.log(2), 0.1, None],
        oger_teacher=[None, None, None, "gpt-4"],
        log_metric=lambda k, v: logged.__setitem__(k, v),
        log_extra=lambda k, v: extra.__setitem__(k, v),
    )
    # R_OGER = D * exp(-H) * R_m ; offline row -> 0 ; wrong answer -> 0
    assert out == pytest.approx([0.5, 0.1, 0.0, 0.0])
    assert logged["oger/reward_mean"] == pytest.approx(0.2)
    assert logged["oger/reward_max"] == pytest.approx(0.5)
    assert logged["oger/failed_ratio"] == pytest.approx(1 / 3)
    assert extra["is_offline"] == [False, False, False, True]
    assert extra["teacher"] == [None, None, None, "gpt-4"]
    assert extra["R_OGER"] == pytest.approx([0.5, 0.1, 0.0, 0.0])


def test_standalone_with_embeddings_from_an_encoder():
    reward = OGERRewardFunction(encoder=FixedEncoder(), entropy_refinement=False)
    out = reward(
        prompts=["q"] * 3,
        completions=["on-a \\boxed{4}", "on-b \\boxed{4}", "on-c \\boxed{5}"],
        answer=["4", "4", "4"],
        offline_completions=[["teacher-1", "teacher-2"], ["teacher-1"], ["teacher-1"]],
    )
    # row 0: sims (1, 0) -> D = 0.5; row 1: sim 0 -> D = 1; row 2: wrong -> 0
    assert out == pytest.approx([0.5, 1.0, 0.0])


def test_standalone_needs_entropy_or_offline_column():
    reward = OGERRewardFunction(encoder=FixedEncoder())
    with pytest.raises(ValueError, match="last_token_entropy"):
        reward(prompts=["q"], completions=["on-a \\boxed{4}"], answer=["4"], offline_completions=[["teacher-1"]])
    with pytest.raises(ValueError, match="offline_completions"):
        OGERRewardFunction(encoder=FixedEncoder(), entropy_refinement=False)(
            prompts=["q"], completions=["on-a \\boxed{4}"], answer=["4"]
        )


def test_prompt_without_teachers_gets_zero():
    reward = OGERRewardFunction(encoder=FixedEncoder(), entropy_refinement=False)
    assert reward(prompts=["q"], completions=["on-a \\boxed{4}"], answer=["4"], offline_completions=[[]]) == [0.0]
