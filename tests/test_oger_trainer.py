"""OGERTrainer: real training steps on a tiny model with the real SmolLM2 tokenizer."""

import pandas as pd
import pytest
import torch
from datasets import Dataset

from conftest import make_tiny_causal_lm
from trl_explore import OGERConfig, OGERTrainer
from trl_explore.oger import component as oger_trainer_module
from trl_explore.oger.entropy import LastTokenEntropyRecorder, entropy_from_logits

TEACHER_A = "We add the numbers: 2 + 2 = 4. The answer is \\boxed{4}."
TEACHER_B = "Two plus two equals four, so the result is \\boxed{4}."
TEACHER_C = "Since 3 times 3 is 9, the answer is \\boxed{9}."


def _dataset():
    return Dataset.from_list(
        [
            {
                "prompt": [{"role": "user", "content": "What is 2 + 2?"}],
                "answer": "4",
                "offline_completions": [TEACHER_A, TEACHER_B],
                "offline_teachers": ["teacher-a", "teacher-b"],
            },
            {
                "prompt": [{"role": "user", "content": "What is 3 * 3?"}],
                "answer": "9",
                "offline_completions": [TEACHER_C],
                "offline_teachers": ["teacher-c"],
            },
        ]
    )


def _config(tmp_path, **overrides):
    kwargs = dict(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=24,
        max_steps=2,
        learning_rate=1e-3,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        embedding_model="embedded",
        seed=0,
        log_completions=False,
    )
    kwargs.update(overrides)
    return OGERConfig(**kwargs)


@pytest.fixture
def record_replacements(monkeypatch):
    calls = []
    original = oger_trainer_module.select_replacements

    def spy(divergence, k, rule="lowest_divergence", generator=None):
        chosen = original(divergence, k, rule, generator)
        calls.append((divergence.clone(), chosen.clone()))
        return chosen

    monkeypatch.setattr(oger_trainer_module, "select_replacements", spy)
    return calls


def test_oger_trainer_end_to_end(tmp_path, smollm2_tokenizer, record_replacements):
    model = make_tiny_causal_lm(smollm2_tokenizer)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = _config(tmp_path, log_completions=True, num_completions_to_print=0)
    trainer = OGERTrainer(model, args=args, train_dataset=_dataset(), processing_class=smollm2_tokenizer)
    trainer.train()

    # 2 steps x 1 group per step (4 rows = one prompt's group)
    assert len(record_replacements) == 2
    for div, chosen in record_replacements:
        assert chosen.numel() == 1
        assert div[chosen[0]] == div.min()  # the replaced completion was the least divergent

    # per-completion rows that TRL's log_completions wrote, one parquet file per step
    table = pd.concat(pd.read_parquet(f) for f in sorted((tmp_path / "out" / "completions").glob("*.parquet")))
    assert len(table) == 8 and table["is_offline"].sum() == 2  # one offline row per group, per step
    for row in table.itertuples():
        if row.is_offline:
            # teachers are correct; offline rows get R_m only, and their text is the teacher's
            assert row.oger_reward == 0.0 and row.math_reward == 1.0
            assert row.teacher in ("teacher-a", "teacher-b", "teacher-c")
            assert row.completion[0]["content"] in (TEACHER_A, TEACHER_B, TEACHER_C)
        else:
            assert row.oger_reward == 0.0 or row.math_reward == 1.0  # R_OGER is gated by R_m
            assert row.divergence is not None and row.last_token_entropy is not None

    history = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    for key in ("oger/divergence_mean", "oger/offline_fraction", "oger/last_token_entropy_mean", "oger/offline_policy_loss"):
        assert key in history, key
    assert history["oger/offline_fraction"] == pytest.approx(0.25)
    assert history["oger/offline_truncated_fraction"] == 0.0
    changed = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert changed, "no parameter changed"


def test_ablations_change_what_they_name(tmp_path, smollm2_tokenizer):
    tokenizer = smollm2_tokenizer
    no_reward = OGERTrainer(make_tiny_causal_lm(tokenizer), args=_config(tmp_path, use_exploration_reward=False),
                            train_dataset=_dataset(), processing_class=tokenizer)
    assert no_reward.reward_weights.tolist() == [1.0, 0.0]
    assert no_reward.reward_funcs[1].entropy_refinement is True
    no_refine = OGERTrainer(make_tiny_causal_lm(tokenizer), args=_config(tmp_path, entropy_refinement=False),
                            train_dataset=_dataset(), processing_class=tokenizer)
    assert no_refine.reward_weights.tolist() == [1.0, 1.0]
    assert no_refine.reward_funcs[1].entropy_refinement is False
    no_clip = OGERTrainer(make_tiny_causal_lm(tokenizer), args=_config(tmp_path, loss_remove_clip=True),
                          train_dataset=_dataset(), processing_class=tokenizer)
    assert no_clip.epsilon_low == float("inf") and no_clip.epsilon_high == float("inf")


def test_config_rejects_bad_values(tmp_path):
    with pytest.raises(ValueError, match="num_replacements"):
        _config(tmp_path, num_replacements=4)
    with pytest.raises(ValueError, match="replacement_rule"):
        _config(tmp_path, replacement_rule="highest")


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo", "bnpo"])
def test_loss_mixes_trl_objective_and_policy_shaping(tmp_path, smollm2_tokenizer, loss_type):
    """One micro-batch, 1 iteration (ratio 1), no entropy bonus: loss = on-policy -A + offline -A f(p)."""
    tokenizer = smollm2_tokenizer
    model = make_tiny_causal_lm(tokenizer, seed=3)
    args = _config(tmp_path, loss_type=loss_type, entropy_coef=0.0, max_completion_length=5)
    trainer = OGERTrainer(model, args=args, train_dataset=_dataset(), processing_class=tokenizer)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train() in a real run
    g = torch.Generator().manual_seed(0)
    prompt_ids = torch.randint(100, 1000, (4, 3), generator=g)
    completion_ids = torch.randint(100, 1000, (4, 4), generator=g)
    completion_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]])
    advantages = torch.tensor([1.0, -0.5, 2.0, -1.5])
    is_offline = torch.tensor([False, True, False, True])
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": advantages,
        "num_items_in_batch": completion_mask.sum(),
        "is_offline": is_offline,
    }
    loss = trainer._compute_loss(trainer.model, inputs)

    with torch.no_grad():  # independent reference: a plain forward and the formulas
        logits = model(input_ids=torch.cat([prompt_ids, completion_ids], 1)).logits[:, 2:-1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    p = logp.exp()
    per_token = torch.where(is_offline.unsqueeze(1), -advantages.unsqueeze(1) * p / (p + 0.1), -advantages.unsqueeze(1).expand(-1, 4))
    m = completion_mask.float()
    if loss_type == "grpo":
        expected = ((per_token * m).sum(1) / m.sum(1)).mean()
    elif loss_type in ("dapo", "bnpo"):
        expected = (per_token * m).sum() / m.sum()
    else:  # dr_grpo
        expected = (per_token * m).sum() / (4 * 5)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-4, abs=1e-6)


def test_entropy_recorder_matches_teacher_forced_entropy(smollm2_tokenizer):
    tokenizer = smollm2_tokenizer
    model = make_tiny_causal_lm(tokenizer, seed=1).eval()
    prompt = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    with LastTokenEntropyRecorder(model) as rec, torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=5, min_new_tokens=5,
                             do_sample=False, pad_token_id=tokenizer.pad_token_id)
    steps = rec.per_step_entropy
    assert steps.shape == (2, 5)
    with torch.no_grad():
        logits = model(input_ids=out).logits[:, 3:-1]  # distributions that produced the 5 new tokens
    assert torch.allclose(steps, entropy_from_logits(logits), atol=1e-4)
    assert torch.allclose(rec.last_token_entropy(torch.tensor([5, 2])), torch.stack([steps[0, 4], steps[1, 1]]))
    assert not model.get_output_embeddings()._forward_hooks  # hook removed

    # at the sampling temperature T: the entropy of softmax(logits / T), as TRL's own entropies (the vLLM path)
    with LastTokenEntropyRecorder(model, temperature=0.7) as hot, torch.no_grad():
        model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=5, min_new_tokens=5,
                       do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert torch.allclose(hot.per_step_entropy, entropy_from_logits(logits / 0.7), atol=1e-4)
    assert not torch.allclose(hot.per_step_entropy, steps, atol=1e-3)
    with pytest.raises(ValueError, match="temperature"):
        LastTokenEntropyRecorder(model, temperature=0.0)


@pytest.mark.parametrize(
    ("row_update", "message"),
    [
        ({"offline_completions": TEACHER_A}, "must be a list of strings"),
        ({"offline_completions": [TEACHER_A, 3]}, "offline trajectory 1 of 'offline_completions' is int"),
        ({"offline_teachers": ["only-one"]}, "expected a list of 2 teacher names"),
        ({"prompt": 7}, "'prompt' must be a non-empty string"),
    ],
)
def test_bad_rows_fail_when_the_trainer_is_built(tmp_path, smollm2_tokenizer, row_update, message):
    rows = _dataset().to_list()
    rows[0].update(row_update)
    bad = rows  # a list of rows: arrow could not even store some of these; the check runs before TRL reads it
    with pytest.raises(ValueError, match=message) as err:
        OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=_config(tmp_path), train_dataset=bad,
                    processing_class=smollm2_tokenizer)
    assert "training row 0" in str(err.value)


def test_missing_offline_column_fails_when_the_trainer_is_built(tmp_path, smollm2_tokenizer):
    bad = _dataset().remove_columns(["offline_completions"])
    with pytest.raises(ValueError, match="training row 0 has no column 'offline_completions'"):
        OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=_config(tmp_path), train_dataset=bad,
                    processing_class=smollm2_tokenizer)


def test_ablation_switches_apply_to_user_reward_functions(tmp_path, smollm2_tokenizer):
    from trl_explore import OGERRewardFunction, math_reward

    oger = OGERRewardFunction()
    trainer = OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), reward_funcs=[math_reward, oger],
                          args=_config(tmp_path, use_exploration_reward=False, entropy_refinement=False),
                          train_dataset=_dataset(), processing_class=smollm2_tokenizer)
    assert trainer.reward_weights.tolist() == [1.0, 0.0] and oger.entropy_refinement is False
    with pytest.raises(ValueError, match="non-zero weight"):
        OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), reward_funcs=[math_reward, OGERRewardFunction()],
                    args=_config(tmp_path, use_exploration_reward=False, reward_weights=[1.0, 1.0]),
                    train_dataset=_dataset(), processing_class=smollm2_tokenizer)


@pytest.mark.parametrize("gamma", [0.0, -1.0, float("nan"), float("inf")])
def test_config_rejects_non_finite_gamma(tmp_path, gamma):
    with pytest.raises(ValueError, match="policy_shaping_gamma"):
        _config(tmp_path, policy_shaping_gamma=gamma)


def test_eval_rows_without_teachers_are_scored_without_replacement(tmp_path, smollm2_tokenizer):
    trainer = OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=_config(tmp_path), train_dataset=_dataset(),
                          processing_class=smollm2_tokenizer)
    rows = [{"prompt": [{"role": "user", "content": "1 + 1?"}], "answer": "2"}] * 4
    trainer.model.eval()
    assert trainer._offline_for_group(rows, range(4)) == ([], [], None)
    trainer.model.train()
    with pytest.raises(ValueError, match="no column 'offline_completions'"):
        trainer._offline_for_group(rows, range(4))


def test_both_parts_off_computes_no_divergence_or_entropy(tmp_path, smollm2_tokenizer, monkeypatch):
    """num_replacements=0 and no exploration reward: no embedding, no entropy hook (GRPO's cost)."""
    args = _config(tmp_path, num_replacements=0, use_exploration_reward=False, max_steps=1)
    trainer = OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=args, train_dataset=_dataset(),
                          processing_class=smollm2_tokenizer)
    monkeypatch.setattr(trainer.encoder, "encode", lambda texts: pytest.fail("encoded online completions"))
    monkeypatch.setattr(trainer.encoder, "encode_cached", lambda texts: pytest.fail("encoded offline trajectories"))
    monkeypatch.setattr(oger_trainer_module, "LastTokenEntropyRecorder", lambda model: pytest.fail("entropy hook"))
    trainer.train()
    history = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    assert history["oger/offline_fraction"] == 0.0
    assert "oger/divergence_mean" not in history and "oger/last_token_entropy_mean" not in history


def test_grader_mode_reaches_the_default_rewards(tmp_path, smollm2_tokenizer):
    trainer = OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=_config(tmp_path, grader_mode="boxed"),
                          train_dataset=_dataset(), processing_class=smollm2_tokenizer)
    math_reward, oger = trainer.reward_funcs
    assert math_reward.mode == "boxed" and oger.verifier is math_reward  # R_m and the gate of R_OGER agree
    with pytest.raises(ValueError, match="grader_mode='lenient' is not a grader mode"):
        _config(tmp_path, grader_mode="lenient")
