"""ExGRPO beside the rest of the package (issue 45, item 1): a group whose only correct row is OGER's teacher row, more
than one update per generation, and truncated completions masked out of the loss."""

import pytest
import torch
from trl import GRPOTrainer

from trl_explore.testing import DOUBLING_TEACHERS, doubling_dataset, parity_reward, tiny_training_args


def teacher_only_reward(completions, row_owner, **kwargs) -> list[float]:
    """Correct exactly on the rows OGER wrote (its teacher rows): every group's only correct row is someone else's."""
    return [float(owner == "oger") for owner in row_owner]


@pytest.mark.slow
def test_a_teacher_row_as_the_groups_only_correct_row_neither_enters_nor_breaks_the_buffer(
        tmp_path, smollm2_tokenizer, make_tiny_lm):
    """The class of huggingface/trl#6804: before the fix the buffer got ``{'p0': (bucket 1, 0 trajectories)}`` and
    replay raised ``zero-size array to reduction operation maximum`` at the next step."""
    from trl_explore import (
        ExGRPOComponent,
        ExGRPOOptions,
        ExplorationConfig,
        ExplorationTrainer,
        OGERComponent,
        OGEROptions,
        OGERRewardFunction,
    )

    args = ExplorationConfig(**tiny_training_args(tmp_path, per_device_train_batch_size=8, max_steps=4, seed=1))
    exgrpo = ExGRPOComponent(ExGRPOOptions(replay_start_pass_rate=0.0, replay_ratio=1.0))
    trainer = ExplorationTrainer(
        make_tiny_lm(), reward_funcs=[teacher_only_reward, OGERRewardFunction(verifier=teacher_only_reward)],
        args=args, train_dataset=doubling_dataset(2, teachers=DOUBLING_TEACHERS), processing_class=smollm2_tokenizer,
        components=[OGERComponent(OGEROptions(embedding_model="embedded")), exgrpo])
    trainer.train()
    assert trainer.state.global_step == 4
    assert exgrpo.buffer.started  # the batch pass rate (one teacher row in 4) started replay after step 1
    assert len(exgrpo.buffer) == 0 and exgrpo.buffer.num_trajectories() == 0


def _exgrpo_trainer(tmp_path, model, tokenizer, **overrides):
    from trl_explore import ExGRPOConfig, ExGRPOTrainer

    args = ExGRPOConfig(**tiny_training_args(tmp_path, **{
        "per_device_train_batch_size": 8, "max_steps": 4, "replay_start_pass_rate": 0.0, "replay_ratio": 1.0,
        "seed": 1, **overrides}))
    return ExGRPOTrainer(model, reward_funcs=[parity_reward], args=args, train_dataset=doubling_dataset(2),
                         processing_class=tokenizer)


@pytest.mark.slow
def test_replayed_tokens_are_never_clipped_with_several_updates_per_generation(tmp_path, smollm2_tokenizer,
                                                                               make_tiny_lm, monkeypatch):
    """The class of huggingface/trl#3120: with ``num_iterations = 2`` TRL's ratio on a replayed token drifted from 1
    at the second update (|r - 1| up to 1.93 in the report) and the clip took its gradient. Now the ratio TRL's
    objective sees on replayed rows is 1 at every update (``ExGRPOComponent.loss_batch``), on-policy rows unchanged."""
    trainer = _exgrpo_trainer(tmp_path, make_tiny_lm(), smollm2_tokenizer, num_iterations=2, max_steps=6,
                              learning_rate=3e-2)
    objective = GRPOTrainer._compute_loss
    seen = []

    def spy(self, model, batch):
        if model.training and batch.get("old_per_token_logps") is not None:
            ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
            mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
            with torch.no_grad():
                logits = model(input_ids=ids, attention_mask=mask).logits[:, -batch["completion_ids"].size(1) - 1:-1]
            logps = torch.log_softmax(logits.float() / self.temperature, -1).gather(
                -1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)
            seen.append((batch["exgrpo_replayed"].bool(), batch["completion_mask"].bool(),
                         (logps - batch["old_per_token_logps"]).exp()))
        return objective(self, model, batch)

    monkeypatch.setattr(GRPOTrainer, "_compute_loss", spy)
    trainer.train()
    replayed_tokens = drifted_online = 0
    for replayed, mask, ratio in seen:
        m = mask & replayed[:, None]
        replayed_tokens += int(m.sum())
        assert torch.allclose(ratio[m], torch.ones_like(ratio[m]), atol=1e-4)
        drifted_online += int(((ratio - 1).abs() > 1e-3)[mask & ~replayed[:, None]].sum())
    assert replayed_tokens > 0  # replay happened at an update where TRL had old log-probs
    assert drifted_online > 0  # the policy moved between the two updates: on-policy ratios are TRL's own


@pytest.mark.slow
def test_truncated_completions_masked_out_of_the_loss_are_not_stored(tmp_path, smollm2_tokenizer, make_tiny_lm,
                                                                     monkeypatch):
    """The class of huggingface/trl PR #3229: with ``mask_truncated_completions=True`` a completion without an ending
    is out of the loss; before the fix ExGRPO stored it and could replay it."""
    trainer = _exgrpo_trainer(tmp_path, make_tiny_lm(), smollm2_tokenizer, mask_truncated_completions=True)
    exgrpo = trainer.exgrpo
    offered = []  # every correct row the policy sampled: (completion ids, ended)
    update = exgrpo._update_buffer

    def record(batch):
        ends = {*trainer.eos_token_ids, smollm2_tokenizer.pad_token_id}
        correct = batch.rewards_per_func[:, 0] == 1
        for ids, ok in zip(batch.rollout.completion_ids, correct.tolist()):
            if ok:
                offered.append((tuple(ids), ids[-1] in ends))
        return update(batch)

    exgrpo._update_buffer = record
    trainer.train()
    assert any(not ended for _, ended in offered)  # the run did offer truncated correct completions
    stored = [t.completion_ids for key in exgrpo.buffer.keys() for t in exgrpo.buffer.trajectories(key)]
    ends = {*trainer.eos_token_ids, smollm2_tokenizer.pad_token_id}
    assert all(ids[-1] in ends for ids in stored)
