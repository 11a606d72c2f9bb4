"""ExGRPO in a training run (tiny policy, parity verifier): replayed rows reach TRL's objective with their corrected
advantages, the buffer follows the paper's rules, and a run with a non-empty buffer resumes exactly."""

import json

import pytest
import torch
from trl import GRPOTrainer

from trl_explore.exgrpo.experience import replay_advantage_scale
from trl_explore.testing import doubling_dataset, parity_reward, tiny_training_args


def _trainer(tmp_path, model, tokenizer, **overrides):
    from trl_explore import ExGRPOConfig, ExGRPOTrainer

    # 2 prompts, both in every step (2 groups of 4): revisits from the second step; replay starts after the first
    # step with any correct rollout and goes to every group whose prompt the buffer holds
    args = ExGRPOConfig(**tiny_training_args(tmp_path, **{
        "per_device_train_batch_size": 8, "max_steps": 4, "replay_start_pass_rate": 0.0, "replay_ratio": 1.0,
        "seed": 1, **overrides}))  # seed 1: a replayed row with a non-zero advantage, a non-empty buffer at step 3
    return ExGRPOTrainer(model, reward_funcs=[parity_reward], args=args, train_dataset=doubling_dataset(2),
                         processing_class=tokenizer)


def _token_logps(model, batch, temperature):
    """An independent no-grad forward: log-probs of the completion tokens (TRL's softmax(logits / T))."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[:, -batch["completion_ids"].size(1) - 1: -1]
    logps = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logps.gather(-1, batch["completion_ids"].unsqueeze(-1)).squeeze(-1)


@pytest.mark.slow
def test_trl_objective_receives_the_replayed_rows_corrected_advantages(tmp_path, smollm2_tokenizer, make_tiny_lm,
                                                                       monkeypatch):
    trainer = _trainer(tmp_path, make_tiny_lm(), smollm2_tokenizer)
    stored = []  # (prompt id -> stored completion ids) at each generation, before the buffer update
    checked = []
    objective = GRPOTrainer._compute_loss

    def spy(self, model, batch):  # TRL's objective, called by the driver with its batch copy
        if model.training:
            checked.append((batch["advantages"].clone(), _token_logps(model, batch, self.temperature)))
        return objective(self, model, batch)

    monkeypatch.setattr(GRPOTrainer, "_compute_loss", spy)
    arrived = []
    driver_loss = trainer._compute_loss
    trainer._compute_loss = lambda model, inputs: arrived.append(dict(inputs)) or driver_loss(model, inputs)
    component = trainer.exgrpo
    edit = component.edit_scored

    def remember(scored):
        buffer = component.buffer
        stored.append({k: {t.completion_ids for t in buffer.trajectories(k)} for k in buffer.keys()})
        return edit(scored)

    component.edit_scored = remember
    trainer.train()

    assert trainer.state.global_step == 4 and len(checked) == 4
    replayed_batches = corrected_rows = 0
    for step, ((advantages, logps), batch) in enumerate(zip(checked, arrived)):
        replayed = batch["exgrpo_replayed"]
        mask = batch["completion_mask"].bool()
        base = batch["advantages"].unsqueeze(1).expand_as(mask)
        got = (advantages.unsqueeze(1) if advantages.dim() == 1 else advantages).expand_as(mask)
        assert torch.equal(got[~replayed][mask[~replayed]], base[~replayed][mask[~replayed]])  # on-policy: as TRL's
        if not replayed.any():
            continue
        replayed_batches += 1
        assert replayed.sum() <= 2  # at most one replayed row per group (TRL shuffled the rows)
        old = batch.get("old_per_token_logps")
        old = logps if old is None else old
        scale = replay_advantage_scale(logps, batch["exgrpo_behaviour_logps"], old, 0.1)
        expected = base * scale
        m = mask & replayed[:, None]
        assert torch.allclose(got[m], expected[m], rtol=1e-4, atol=1e-7)
        corrected_rows += int((base[m] != 0).any())
        for row in torch.nonzero(replayed).flatten().tolist():  # a stored trajectory of that row's prompt
            ids = tuple(batch["completion_ids"][row][mask[row]].tolist())
            assert any(ids == s for prompt in stored[step].values() for s in prompt)
    assert replayed_batches >= 1 and corrected_rows >= 1  # replay happened, with a non-zero advantage to correct
    history = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    assert history["exgrpo/started"] == 1.0 and history["exgrpo/buffer_prompts"] >= 1


@pytest.mark.slow
def test_resume_with_a_non_empty_buffer_is_exact(tmp_path, smollm2_tokenizer, make_tiny_lm):
    full = _trainer(tmp_path / "full", make_tiny_lm(), smollm2_tokenizer, save_strategy="steps", save_steps=1)
    full.train()
    checkpoint = tmp_path / "full" / "checkpoint-3"
    saved = json.loads((checkpoint / "exgrpo" / "buffer.json").read_text())
    assert saved["started"] and saved["entries"], "the buffer at the checkpoint must be non-empty"
    resumed = _trainer(tmp_path / "resumed", make_tiny_lm(seed=1), smollm2_tokenizer)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    for (name, a), b in zip(full.model.named_parameters(), resumed.model.parameters()):
        assert torch.equal(a, b), name
    losses = [{e["step"]: e["loss"] for e in t.state.log_history if "loss" in e} for t in (full, resumed)]
    assert losses[0][4] == losses[1][4]
    assert full.exgrpo.buffer.state_dict() == resumed.exgrpo.buffer.state_dict()


@pytest.mark.slow
@pytest.mark.parametrize("method", ["oger", "ase"])
def test_composed_with_oger_and_with_ase(method, tmp_path, smollm2_tokenizer, make_tiny_lm):
    """[OGER or ASE-GRPO, ExGRPO] in one ExplorationTrainer: ExGRPO replays into rows the policy sampled (never a
    teacher row), the replayed rows take ASE's offline route, and no teacher text enters the buffer."""
    from trl_explore import (
        ASEComponent,
        ASEOptions,
        ExGRPOComponent,
        ExGRPOOptions,
        ExplorationConfig,
        ExplorationTrainer,
        OGERComponent,
        OGEROptions,
        OGERRewardFunction,
    )
    from trl_explore.ase.controls import OFFLINE_ROUTE
    from trl_explore.testing import DOUBLING_TEACHERS

    args = ExplorationConfig(**tiny_training_args(tmp_path, per_device_train_batch_size=8, max_steps=4, seed=1,
                                                  max_completion_length=16))
    if method == "oger":
        first = OGERComponent(OGEROptions(embedding_model="embedded"))
        rewards, data = [parity_reward, OGERRewardFunction(verifier=parity_reward)], doubling_dataset(
            2, teachers=DOUBLING_TEACHERS)
    else:
        first = ASEComponent(ASEOptions(num_vectors=1, pca_dim=4, kmeans_n_init=2, steering_alpha=4.0,
                                        min_pairs_per_cluster=1))
        rewards, data = [parity_reward], doubling_dataset(2)
    exgrpo = ExGRPOComponent(ExGRPOOptions(replay_start_pass_rate=0.0, replay_ratio=1.0))
    trainer = ExplorationTrainer(make_tiny_lm(), reward_funcs=rewards, args=args, train_dataset=data,
                                 processing_class=smollm2_tokenizer, components=[first, exgrpo])
    arrived = []
    driver_loss = trainer._compute_loss
    trainer._compute_loss = lambda model, inputs: arrived.append(dict(inputs)) or driver_loss(model, inputs)
    trainer.train()

    assert trainer.state.global_step == 4
    replayed_rows = 0
    for batch in arrived:
        replayed = batch["exgrpo_replayed"]
        replayed_rows += int(replayed.sum())
        if method == "oger":
            assert not (replayed & batch["is_offline"].bool()).any()  # never a teacher row (OGER's batch field)
        else:
            assert (batch["ase_route"][replayed] == OFFLINE_ROUTE).all()  # no route, no steering for replayed rows
    assert replayed_rows >= 1
    teacher_ids = {tuple(smollm2_tokenizer(t, add_special_tokens=False)["input_ids"])
                   for row in DOUBLING_TEACHERS for t in row}
    stored = {t.completion_ids for key in exgrpo.buffer.keys() for t in exgrpo.buffer.trajectories(key)}
    assert not any(s[:len(ids)] == ids for s in stored for ids in teacher_ids)  # the policy's own rows only


@pytest.mark.slow
def test_two_processes_share_one_buffer_and_resume_exactly(tmp_path):
    """2 CPU processes: every process holds the same buffer (groups gathered before the update; the main process
    saves it, every process loads it), replay happens, and a run resumed with a non-empty buffer is exact."""
    from pathlib import Path

    from trl_explore.testing import run_two_cpu_processes

    script = Path(__file__).parent / "scripts" / "exgrpo_resume_two_process.py"
    result = run_two_cpu_processes(script, tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert ranks[0]["buffer"] == ranks[1]["buffer"]  # one buffer on every process
    for r in ranks:
        assert r["saved_entries"] >= 1 and any(f > 0 for f in r["replayed"])
        assert r["resumed_losses"][str(4)] == r["losses"][str(4)] and r["max_weight_diff"] == 0.0
        assert r["resumed_buffer"] == r["buffer"]
