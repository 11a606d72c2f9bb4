"""Issue 30, item 1: a None verdict ("not scored") stays None through every reward function the package wraps, so
TRL 1.16's unscorable rule (every function None -> left out of the group statistics, advantage 0, counted in
``rewards/unscorable``) holds with OGER, ASE and OGER+ASE; the package's own metrics count scored rows only."""

import math

import pytest
import torch

from trl_explore.oger.reward import OGERRewardFunction
from trl_explore.rewards.math_verify_reward import completion_text
from trl_explore.testing import (
    DOUBLING_TEACHERS,
    doubling_dataset,
    make_tiny_causal_lm,
    teacher_math_dataset,
    tiny_ase_args,
    tiny_oger_args,
    tiny_oger_ase_args,
)

TEACHER_TEXTS = {text for row in teacher_math_dataset()["offline_completions"] for text in row}


def _fields(**overrides):
    base = dict(prompts=["q"] * 4, completions=["a", "b", "c", "d"],
                oger_is_offline=[False, False, False, True], oger_divergence=[0.5, 0.2, 0.9, None],
                oger_last_token_entropy=[0.0, math.log(2), 0.1, None], oger_teacher=[None, None, None, "t"])
    return {**base, **overrides}


def _call(verdicts, **overrides):
    logged = {}
    reward = OGERRewardFunction(verifier=lambda completions, **kw: list(verdicts))
    out = reward(**_fields(**overrides), log_metric=lambda k, v: logged.__setitem__(k, v), log_extra=lambda k, v: None)
    return out, logged


def test_issue_case_none_verdicts_stay_none_and_the_teacher_row_gets_zero():
    # three unscored online rows and a correct teacher row (issue 30's group)
    out, logged = _call([None, None, None, 1.0])
    assert out == [None, None, None, 0.0]
    assert "oger/failed_ratio" not in logged and "oger/reward_mean" not in logged  # no scored online row


def test_metrics_count_scored_rows_only():
    out, logged = _call([None, 0.0, 1.0, None])
    assert out[0] is None and out[3] is None  # an unscored teacher row stays unscored as well
    assert out[1] == 0.0 and out[2] == pytest.approx(0.9 * math.exp(-0.1))
    assert logged["oger/failed_ratio"] == pytest.approx(0.5)  # 1 failed of 2 scored online rows (not 2 of 3)
    assert logged["oger/reward_mean"] == pytest.approx(0.9 * math.exp(-0.1) / 2)
    assert logged["oger/reward_max"] == pytest.approx(0.9 * math.exp(-0.1))


def test_a_missing_input_of_a_correct_online_row_is_not_scored_not_zero():
    # H_last missing on an online correct row: R_OGER cannot be computed, so it is None (was exp(-0) = 1 silently);
    # the divergence missing likewise; a wrong answer needs neither (R_OGER = 0 exactly)
    out, _ = _call([1.0, 1.0, 0.0, 1.0], oger_last_token_entropy=[None, math.log(2), None, None],
                   oger_divergence=[0.5, None, None, None])
    assert out == [None, None, 0.0, 0.0]


def _scored_steps(trainer):
    captured = []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        output = original(inputs)
        captured.append(output["advantages"].detach().clone())
        return output

    trainer._generate_and_score_completions = spy
    return captured


def _teacher_only(completions, **kwargs):
    """A custom verifier that scores teacher trajectories 1 and cannot score anything else (None)."""
    return [1.0 if completion_text(c) in TEACHER_TEXTS else None for c in completions]


def _none_verifier(completions, **kwargs):
    return [None] * len(completions)


@pytest.mark.slow
def test_trl_unscorable_rule_holds_with_oger_and_a_custom_verifier(tmp_path, smollm2_tokenizer):
    from trl_explore import OGERConfig, OGERTrainer

    trainer = OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer),
                          reward_funcs=[_teacher_only, OGERRewardFunction(verifier=_teacher_only)],
                          args=OGERConfig(**tiny_oger_args(tmp_path / "out", max_steps=1)),
                          train_dataset=teacher_math_dataset(), processing_class=smollm2_tokenizer)
    advantages = _scored_steps(trainer)
    trainer.train()
    assert torch.equal(advantages[0], torch.zeros(4))  # was [-0.5, -0.5, 1.5, -0.5]
    logged = trainer.state.log_history[0]
    assert logged["rewards/unscorable"] == 3  # the online rows; the teacher row is scored (R_m = 1, R_OGER = 0)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["ase", "oger_ase"])
def test_trl_unscorable_rule_holds_with_ase_and_oger_ase(tmp_path, smollm2_tokenizer, method):
    from trl_explore import ASEConfig, ASEGRPOTrainer, OGERASEConfig, OGERASETrainer

    if method == "ase":
        trainer_class, args, data = ASEGRPOTrainer, ASEConfig(**tiny_ase_args(tmp_path / "o", max_steps=1)), \
            doubling_dataset()
        reward_funcs = [_none_verifier]
    else:
        trainer_class, data = OGERASETrainer, doubling_dataset(2, DOUBLING_TEACHERS)
        args = OGERASEConfig(**tiny_oger_ase_args(tmp_path / "o", max_steps=1, num_replacements=0))
        reward_funcs = [_none_verifier, OGERRewardFunction(verifier=_none_verifier)]
    trainer = trainer_class(make_tiny_causal_lm(smollm2_tokenizer), reward_funcs=reward_funcs, args=args,
                            train_dataset=data, processing_class=smollm2_tokenizer)
    advantages = _scored_steps(trainer)
    trainer.train()
    assert torch.equal(advantages[0], torch.zeros(6))
    assert trainer.state.log_history[0]["rewards/unscorable"] == 6
