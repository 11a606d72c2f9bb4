"""OGERTrainer: real training steps on a tiny model with the real SmolLM2 tokenizer."""

import logging

import pandas as pd
import pytest
import torch

from trl_explore import OGERConfig, OGERTrainer
from trl_explore.oger import component as oger_trainer_module
from trl_explore.oger.embedding import TrajectoryEncoder
from trl_explore.oger.entropy import LastTokenEntropyRecorder, entropy_from_logits
from trl_explore.testing import make_tiny_causal_lm, teacher_math_dataset, tiny_oger_args

# the teacher trajectories of trl_explore.testing.teacher_math_dataset: two for 2 + 2, one for 3 * 3
TEACHER_A, TEACHER_B, TEACHER_C = (text for row in teacher_math_dataset()["offline_completions"] for text in row)


def _config(tmp_path, **overrides):
    return OGERConfig(**tiny_oger_args(tmp_path / "out", **overrides))


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


@pytest.mark.slow
def test_oger_trainer_end_to_end(tmp_path, smollm2_tokenizer, record_replacements, monkeypatch):
    from trl.extras.profiling import ProfilingContext

    model = make_tiny_causal_lm(smollm2_tokenizer)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = _config(tmp_path, log_completions=True, num_completions_to_print=0)
    trainer = OGERTrainer(model, args=args, train_dataset=teacher_math_dataset(), processing_class=smollm2_tokenizer)
    phases = []  # TRL's phase timers, OGER's own included
    monkeypatch.setattr(ProfilingContext, "_log_metrics", lambda self, duration: phases.append(self.name))
    trainer.train()
    oger_phases = {"oger: H_last (generate hooks)", "oger: H_last", "oger: embed teachers", "oger: embed online",
                   "oger: divergence and replacement", "oger: policy shaping"}
    assert {name.split(".", 1)[1] for name in phases if ".oger: " in name} == oger_phases

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
    for key in ("oger/divergence_mean", "oger/offline_fraction", "oger/last_token_entropy_mean",
                "oger/offline_policy_loss"):
        assert key in history, key
    assert history["oger/offline_fraction"] == pytest.approx(0.25)
    assert history["oger/offline_truncated_fraction"] == 0.0
    assert history["oger/embed_truncated_frac"] == 0.0  # 24-token completions fit MiniLM's 256 tokens
    changed = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert changed, "no parameter changed"


@pytest.mark.slow
def test_embedder_truncation_is_logged_and_warned_once(tmp_path, smollm2_tokenizer, caplog):
    """"truncate" mode with an 8-token embedder window: every completion is cut, so their divergences only see their
    first 6 word pieces; the fraction is a metric at every step and the warning comes once."""
    encoder = TrajectoryEncoder("embedded", max_seq_length=8)
    trainer = OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=_config(tmp_path),
                          train_dataset=teacher_math_dataset(), processing_class=smollm2_tokenizer, encoder=encoder)
    with caplog.at_level(logging.WARNING, logger="trl_explore.oger.component"):
        trainer.train()
    fractions = [e["oger/embed_truncated_frac"] for e in trainer.state.log_history if "oger/embed_truncated_frac" in e]
    assert fractions == [1.0, 1.0]  # 2 steps x 4 completions, all longer than 6 word pieces
    warnings = [r.getMessage() for r in caplog.records if "max_seq_length=8" in r.getMessage()]
    assert len(warnings) == 1 and "4 of 4 completions" in warnings[0] and "chunk_mean" in warnings[0]


def test_ablations_change_what_they_name(tmp_path, smollm2_tokenizer):
    tokenizer = smollm2_tokenizer
    no_reward = OGERTrainer(make_tiny_causal_lm(tokenizer), args=_config(tmp_path, use_exploration_reward=False),
                            train_dataset=teacher_math_dataset(), processing_class=tokenizer)
    assert no_reward.reward_weights.tolist() == [1.0, 0.0]
    assert no_reward.reward_funcs[1].entropy_refinement is True
    no_refine = OGERTrainer(make_tiny_causal_lm(tokenizer), args=_config(tmp_path, entropy_refinement=False),
                            train_dataset=teacher_math_dataset(), processing_class=tokenizer)
    assert no_refine.reward_weights.tolist() == [1.0, 1.0]
    assert no_refine.reward_funcs[1].entropy_refinement is False
    no_clip = OGERTrainer(make_tiny_causal_lm(tokenizer), args=_config(tmp_path, loss_remove_clip=True),
                          train_dataset=teacher_math_dataset(), processing_class=tokenizer)
    assert no_clip.epsilon_low == float("inf") and no_clip.epsilon_high == float("inf")


def test_embedder_precision_reaches_the_encoder(tmp_path, smollm2_tokenizer):
    """`embedding_dtype` reaches the trainer's encoder; "auto" under float32 training keeps the exact embedder."""
    tokenizer = smollm2_tokenizer
    for setting, expected in (("auto", "float32"), ("bfloat16", "bfloat16")):
        trainer = OGERTrainer(make_tiny_causal_lm(tokenizer), args=_config(tmp_path, embedding_dtype=setting),
                              train_dataset=teacher_math_dataset(), processing_class=tokenizer)
        assert trainer.oger.encoder.dtype == expected


def test_config_rejects_bad_values(tmp_path):
    with pytest.raises(ValueError, match="num_replacements"):
        _config(tmp_path, num_replacements=4)
    with pytest.raises(ValueError, match="replacement_rule"):
        _config(tmp_path, replacement_rule="highest")


@pytest.mark.slow
@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo", "bnpo"])
def test_loss_mixes_trl_objective_and_policy_shaping(tmp_path, smollm2_tokenizer, loss_type):
    """One micro-batch, 1 iteration (ratio 1), no entropy bonus: loss = on-policy -A + offline -A f(p)."""
    tokenizer = smollm2_tokenizer
    model = make_tiny_causal_lm(tokenizer, seed=3)
    args = _config(tmp_path, loss_type=loss_type, entropy_coef=0.0, max_completion_length=5)
    trainer = OGERTrainer(model, args=args, train_dataset=teacher_math_dataset(), processing_class=tokenizer)
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
        "num_items_in_batch": (completion_mask * (~is_offline).unsqueeze(1)).sum(),  # as the driver counts them
        "num_items_before_drops": completion_mask.sum(),
        "dropped_from_objective": is_offline,  # OGER's drop_rows: its teacher rows leave TRL's objective
        "is_offline": is_offline,
    }
    loss = trainer._compute_loss(trainer.model, inputs)

    with torch.no_grad():  # independent reference: a plain forward and the formulas
        logits = model(input_ids=torch.cat([prompt_ids, completion_ids], 1)).logits[:, 2:-1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    p = logp.exp()
    per_token = torch.where(is_offline.unsqueeze(1), -advantages.unsqueeze(1) * p / (p + 0.1),
                            -advantages.unsqueeze(1).expand(-1, 4))
    m = completion_mask.float()
    if loss_type == "grpo":
        expected = ((per_token * m).sum(1) / m.sum(1)).mean()
    elif loss_type in ("dapo", "bnpo"):
        expected = (per_token * m).sum() / m.sum()
    else:  # dr_grpo
        expected = (per_token * m).sum() / (4 * 5)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-4, abs=1e-6)


def _sample_with_recorder(model, tokenizer, temperature, eos_ids, keep_previous=False, max_new_tokens=10):
    """HF sampling under the recorder, with HF's own per-step logits as the reference; rows cut as TRL cuts them."""
    prompt = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16], [17, 18, 19, 20], [21, 22, 23, 24]])
    torch.manual_seed(3)
    with LastTokenEntropyRecorder(model, temperature, eos_ids, keep_previous) as rec, torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=max_new_tokens,
                             do_sample=True, temperature=temperature, top_k=0, eos_token_id=eos_ids,
                             pad_token_id=tokenizer.pad_token_id, output_logits=True, return_dict_in_generate=True)
    completion = out.sequences[:, prompt.size(1):]
    is_eos = torch.isin(completion, torch.tensor(eos_ids))
    lengths = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, completion.size(1))
    return rec, torch.stack(out.logits, 1), out.sequences, lengths, is_eos.any(1)


@pytest.mark.parametrize("temperature", [0.6, 1.0, 1.7])
def test_entropy_recorder_one_entropy_per_row_equals_every_step(smollm2_tokenizer, temperature):
    """H_last from the logits kept per live row equals the entropy of HF's own logits at the row's last step (the old
    per-step recording), and a teacher-forced forward, for rows ended by EOS and rows cut at the step limit."""
    model = make_tiny_causal_lm(smollm2_tokenizer, seed=1).eval()
    eos_ids = list(range(1000, 3000))  # a wide "EOS" set: on this random model 2 of the 5 rows stop early
    rec, logits, sequences, lengths, stopped = _sample_with_recorder(model, smollm2_tokenizer, temperature, eos_ids)
    assert stopped.any() and (~stopped).any() and rec.num_steps == logits.size(1)  # both kinds of rows occur
    rows = torch.arange(len(lengths))
    per_step = entropy_from_logits(logits.float() / temperature)  # [B, steps]: what the old recorder kept
    h_last = rec.last_token_entropy(lengths)
    assert torch.equal(h_last, per_step[rows, lengths - 1])
    with torch.no_grad():  # teacher-forced: the logits at position t predict token t + 1
        forced = model(input_ids=sequences).logits[:, 3:-1].float() / temperature
    assert torch.allclose(h_last, entropy_from_logits(forced)[rows, lengths - 1], atol=1e-5)
    assert not model.get_output_embeddings()._forward_hooks and not model.get_input_embeddings()._forward_pre_hooks
    with pytest.raises(RuntimeError, match="were not kept"):  # a row that stopped has no later step
        rec.last_token_entropy(torch.full_like(lengths, logits.size(1)))

    # last_token="before_eos": the step before a final EOS, kept alongside
    rec, logits, _, lengths, stopped = _sample_with_recorder(model, smollm2_tokenizer, temperature, eos_ids, True)
    before = (lengths - (stopped & (lengths > 1)).long())
    expected = entropy_from_logits(logits.float() / temperature)[rows, before - 1]
    assert torch.equal(rec.last_token_entropy(before), expected)
    with pytest.raises(ValueError, match="temperature"):
        LastTokenEntropyRecorder(model, 0.0)


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
    rows = teacher_math_dataset().to_list()
    rows[0].update(row_update)
    bad = rows  # a list of rows: arrow could not even store some of these; the check runs before TRL reads it
    with pytest.raises(ValueError, match=message) as err:
        OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=_config(tmp_path), train_dataset=bad,
                    processing_class=smollm2_tokenizer)
    assert "training row 0" in str(err.value)


def test_missing_offline_column_fails_when_the_trainer_is_built(tmp_path, smollm2_tokenizer):
    bad = teacher_math_dataset().remove_columns(["offline_completions"])
    with pytest.raises(ValueError, match="training row 0 has no column 'offline_completions'"):
        OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=_config(tmp_path), train_dataset=bad,
                    processing_class=smollm2_tokenizer)


def test_ablation_switches_apply_to_user_reward_functions(tmp_path, smollm2_tokenizer):
    from trl_explore import OGERRewardFunction, math_reward

    oger = OGERRewardFunction()
    trainer = OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), reward_funcs=[math_reward, oger],
                          args=_config(tmp_path, use_exploration_reward=False, entropy_refinement=False),
                          train_dataset=teacher_math_dataset(), processing_class=smollm2_tokenizer)
    assert trainer.reward_weights.tolist() == [1.0, 0.0] and oger.entropy_refinement is False
    with pytest.raises(ValueError, match="non-zero weight"):
        OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), reward_funcs=[math_reward, OGERRewardFunction()],
                    args=_config(tmp_path, use_exploration_reward=False, reward_weights=[1.0, 1.0]),
                    train_dataset=teacher_math_dataset(), processing_class=smollm2_tokenizer)


@pytest.mark.parametrize(
    ("preset", "with_oger", "exploration", "warns"),
    [("oger", False, True, True), ("oger", True, True, False), ("oger", False, False, False),
     ("oger_ase", False, True, True)],
)
def test_reward_funcs_without_oger_reward_warn_that_the_exploration_reward_is_off(
        tmp_path, smollm2_tokenizer, caplog, preset, with_oger, exploration, warns):
    """A given ``reward_funcs`` replaces the default [R_m, R_OGER]: without an OGERRewardFunction (and with the
    exploration reward on) the trainer says once, when it is built, that R_OGER is off and how to keep it."""
    from trl_explore import OGERASEConfig, OGERASETrainer, OGERRewardFunction, math_reward
    from trl_explore.testing import DOUBLING_TEACHERS, doubling_dataset, tiny_oger_ase_args

    reward_funcs = [math_reward, OGERRewardFunction(verifier=math_reward)] if with_oger else [math_reward]
    if preset == "oger":
        trainer_cls, args = OGERTrainer, _config(tmp_path, use_exploration_reward=exploration)
        dataset = teacher_math_dataset()
    else:
        trainer_cls = OGERASETrainer
        args = OGERASEConfig(**tiny_oger_ase_args(tmp_path / "out", use_exploration_reward=exploration))
        dataset = doubling_dataset(2, DOUBLING_TEACHERS)
    with caplog.at_level(logging.WARNING, logger="trl_explore.oger.component"):
        trainer_cls(make_tiny_causal_lm(smollm2_tokenizer), reward_funcs=reward_funcs, args=args,
                    train_dataset=dataset, processing_class=smollm2_tokenizer)
    warnings = [r.getMessage() for r in caplog.records if "has no OGERRewardFunction" in r.getMessage()]
    assert len(warnings) == (1 if warns else 0)
    if warns:
        assert "exploration reward R_OGER" in warnings[0] and "is off" in warnings[0]
        assert "reward_funcs=[reward, OGERRewardFunction(verifier=reward)]" in warnings[0]


@pytest.mark.parametrize("gamma", [0.0, -1.0, float("nan"), float("inf")])
def test_config_rejects_non_finite_gamma(tmp_path, gamma):
    with pytest.raises(ValueError, match="policy_shaping_gamma"):
        _config(tmp_path, policy_shaping_gamma=gamma)


@pytest.mark.slow
def test_eval_rows_without_teachers_are_scored_without_replacement(tmp_path, smollm2_tokenizer):
    trainer = OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=_config(tmp_path),
                          train_dataset=teacher_math_dataset(), processing_class=smollm2_tokenizer)
    rows = [{"prompt": [{"role": "user", "content": "1 + 1?"}], "answer": "2"}] * 4
    trainer.model.eval()
    assert trainer.oger.offline_for_group(rows, range(4)) == ([], [], None)
    trainer.model.train()
    with pytest.raises(ValueError, match="no column 'offline_completions'"):
        trainer.oger.offline_for_group(rows, range(4))


@pytest.mark.slow
def test_both_parts_off_computes_no_divergence_or_entropy(tmp_path, smollm2_tokenizer, monkeypatch):
    """num_replacements=0 and no exploration reward: no embedding, no entropy hook (GRPO's cost)."""
    args = _config(tmp_path, num_replacements=0, use_exploration_reward=False, max_steps=1)
    trainer = OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=args, train_dataset=teacher_math_dataset(),
                          processing_class=smollm2_tokenizer)
    monkeypatch.setattr(trainer.oger.encoder, "encode", lambda texts: pytest.fail("encoded online completions"))
    monkeypatch.setattr(trainer.oger.encoder, "encode_cached",
                        lambda texts: pytest.fail("encoded offline trajectories"))
    monkeypatch.setattr(oger_trainer_module, "LastTokenEntropyRecorder", lambda *a, **k: pytest.fail("entropy hook"))
    trainer.train()
    history = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    assert history["oger/offline_fraction"] == 0.0
    assert "oger/divergence_mean" not in history and "oger/last_token_entropy_mean" not in history


def test_grader_mode_reaches_the_default_rewards(tmp_path, smollm2_tokenizer):
    trainer = OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=_config(tmp_path, grader_mode="boxed"),
                          train_dataset=teacher_math_dataset(), processing_class=smollm2_tokenizer)
    math_reward, oger = trainer.reward_funcs
    assert math_reward.mode == "boxed" and oger.verifier is math_reward  # R_m and the gate of R_OGER agree
    with pytest.raises(ValueError, match="grader_mode='lenient' is not a grader mode"):
        _config(tmp_path, grader_mode="lenient")
