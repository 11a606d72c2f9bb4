"""One correctness rule for every reader (issue 45, item 2): a verifier outside {0, 1} (DAPO-style +1 / -1) is read
as the papers mean it by OGER's gate and failed ratio, ASE's contrast pairs and ExGRPO's buckets."""

import logging
import math

import pytest
import torch

from trl_explore.oger.reward import OGERRewardFunction
from trl_explore.rewards.correctness import (
    CORRECT_THRESHOLD,
    correct_mask,
    correctness_note,
    correctness_values,
)


def plus_minus_verifier(completions, **kwargs):
    """DAPO-style verifier: +1 for the answer 4, -1 otherwise."""
    return [1.0 if "4" in c else -1.0 for c in completions]


def test_the_rule_on_hand_values():
    nan = math.nan
    assert CORRECT_THRESHOLD == 0.5
    assert correct_mask([1.0, 0.0, -1.0, None, 0.5, 0.51]).tolist() == [True, False, False, False, False, True]
    assert correct_mask(torch.tensor([10.0, 0.0, nan]), threshold=5).tolist() == [True, False, False]
    got = correctness_values([1.0, -1.0, None, 0.0])
    assert got[:2].tolist() == [1.0, 0.0] and math.isnan(got[2]) and got[3] == 0.0
    assert correctness_note([0.0, 1.0, None], "math", "OGER") is None  # the papers' verifier: nothing to say
    note = correctness_note([-1.0, 1.0, -1.0, nan], "pm", "OGER")
    assert "'pm'" in note and "(-1, 1)" in note and "correct when > correct_threshold=0.5 (here: 1)" in note


def test_oger_reward_gives_a_plus_minus_verifiers_wrong_answers_zero_and_counts_them_failed(caplog):
    """modelscope/ms-swift#3925's class. Before: R_OGER = -0.33 and -0.45 on the two wrong answers (the verdict -1
    multiplied in) and oger/failed_ratio 0.0 with 2 of 4 wrong."""
    logged = {}
    reward = OGERRewardFunction(verifier=plus_minus_verifier)
    with caplog.at_level(logging.WARNING, logger="trl_explore.oger.reward"):
        out = reward(prompts=["q"] * 4, completions=["4", "x 5", "4", "x 6"], answer=["4"] * 4,
                     oger_is_offline=[False] * 4, oger_divergence=[0.5, 0.6, 0.2, 0.9],
                     oger_last_token_entropy=[0.0, math.log(1.8), math.log(2), 0.7],
                     log_metric=lambda k, v: logged.__setitem__(k, v))
    assert out[1] == 0.0 and out[3] == 0.0  # wrong: no exploration reward, as Eq. 7's gate means
    assert out[0] == pytest.approx(0.5) and out[2] == pytest.approx(0.1)  # D exp(-H) on the right ones
    assert logged["oger/failed_ratio"] == 0.5
    notes = [r.getMessage() for r in caplog.records if "outside {0, 1}" in r.getMessage()]
    assert len(notes) == 1 and "'plus_minus_verifier'" in notes[0]
    reward(prompts=["q"], completions=["x"], answer=["4"], oger_is_offline=[False], oger_divergence=[0.5],
           oger_last_token_entropy=[0.0])
    assert len([r for r in caplog.records if "outside {0, 1}" in r.getMessage()]) == 1  # noted once


def test_a_declared_threshold_reads_another_pair():
    def zero_ten(completions, **kwargs):
        return [10.0 if "4" in c else 0.0 for c in completions]

    reward = OGERRewardFunction(verifier=zero_ten, correct_threshold=5.0)
    out = reward(prompts=["q"] * 2, completions=["4", "5"], answer=["4"] * 2, oger_is_offline=[False, False],
                 oger_divergence=[0.5, 0.5], oger_last_token_entropy=[0.0, 0.0])
    assert out == [pytest.approx(0.5), 0.0]  # R_OGER = D exp(-H) * 1, not * 10
    with pytest.raises(ValueError, match="correct_threshold must be a finite number"):
        OGERRewardFunction(verifier=zero_ten, correct_threshold=math.inf)


def test_one_shared_option_read_by_every_method():
    from trl_explore import ExGRPOConfig, ExplorationConfig, OGERConfig
    from trl_explore.oger_ase import OGERASEConfig
    from trl_explore.rewards.correctness import threshold_of
    from trl_explore.testing import tiny_training_args

    for cls in (ExplorationConfig, OGERConfig, OGERASEConfig, ExGRPOConfig):
        assert cls.__dataclass_fields__["correct_threshold"].default == CORRECT_THRESHOLD, cls
    config = ExplorationConfig(**tiny_training_args("out", correct_threshold=0.0))
    assert threshold_of(config) == 0.0
    assert threshold_of(object()) == CORRECT_THRESHOLD  # a plain GRPOConfig: the default
    with pytest.raises(ValueError, match="correct_threshold must be a finite number"):
        ExplorationConfig(**tiny_training_args("out", correct_threshold=math.nan))
