"""ASEGRPOTrainer: real training steps on a tiny model with the real SmolLM2 tokenizer.

References are independent of the trainer's own wiring: ``ActivationSteeringGenerator.score`` (a teacher-forced
replay with the steering hook on) for the behaviour log-probs and the readouts, and a plain forward plus the
formulas for the IS-weighted loss.
"""

import math

import pandas as pd
import pytest
import torch
from transformers import TrainerCallback

from trl_explore import ASEConfig, ASEGRPOTrainer
from trl_explore.ase.bank import SteeringVectorBank
from trl_explore.testing import (
    doubling_dataset,
    make_tiny_causal_lm,
    parity_reward,
    run_two_cpu_processes,
    tiny_ase_args,
)

NUM_GENERATIONS, NUM_VECTORS = 6, 2  # 3 routes x 2 rollouts per prompt (trl_explore.testing.tiny_ase_args)


def _config(tmp_path, **overrides):
    return ASEConfig(**tiny_ase_args(tmp_path / "out", **overrides))


def _trainer(tmp_path, tokenizer, model_seed=0, callbacks=None, num_prompts=2, **overrides):
    return ASEGRPOTrainer(
        make_tiny_causal_lm(tokenizer, seed=model_seed),
        reward_funcs=[parity_reward],
        args=_config(tmp_path, **overrides),
        train_dataset=doubling_dataset(num_prompts),
        processing_class=tokenizer,
        callbacks=callbacks,
    )


class _Events(TrainerCallback):
    def __init__(self, events):
        self.events = events

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.events.append(("optimizer_step", state.global_step))


def _instrument(trainer, monkeypatch):
    """Record the bank's life cycle, the steering calls and, right after each generation, the reference numbers."""
    rec = {"events": [], "steering": [], "generations": [], "updates": [], "weights": []}
    bank = trainer.ase.bank
    update, activate, steering = bank.update, bank.activate, trainer.ase.steerer.steering
    generate_and_score = trainer._generate_and_score_completions
    weigh = trainer.ase.advantages

    def spy_update(activations, problem_ids, rewards):
        rec["events"].append(("update", trainer.state.global_step))
        rec["updates"].append(
            {"activations": activations.clone(), "problem_ids": list(problem_ids), "active_before": bank.vectors}
        )
        out = update(activations, problem_ids, rewards)
        rec["updates"][-1]["pending"] = None if bank.pending_vectors is None else bank.pending_vectors.clone()
        return out

    def spy_activate():
        promoted = activate()
        rec["events"].append(("activate", trainer.state.global_step, promoted))
        return promoted

    def spy_steering(route_ids, vectors, alpha=None):
        rec["steering"].append({"routes": route_ids.clone(), "vectors": vectors.clone()})
        return steering(route_ids, vectors, alpha)

    def spy_generate_and_score(inputs):
        calls_before = len(rec["steering"])
        output = generate_and_score(inputs)
        entry = {k: v.clone() for k, v in output.items() if isinstance(v, torch.Tensor)}
        entry["steered"] = len(rec["steering"]) > calls_before
        if trainer.model.training:  # the policy is still the one that generated: score() is the reference
            if entry["steered"]:
                routes, table = rec["steering"][-1]["routes"], rec["steering"][-1]["vectors"]
            else:
                routes, table = torch.zeros_like(output["ase_route"].cpu()), torch.zeros(1, bank.hidden_size)
            logps, readouts = trainer.ase.steerer.score(
                output["prompt_ids"], output["prompt_mask"], output["completion_ids"], output["completion_mask"],
                routes, table, temperature=trainer.temperature, readout_fraction=trainer.args.readout_fraction,
            )
            _, clean = trainer.ase.steerer.score(
                output["prompt_ids"], output["prompt_mask"], output["completion_ids"], output["completion_mask"],
                torch.zeros_like(routes), table, temperature=trainer.temperature,
                readout_fraction=trainer.args.readout_fraction,
            )
            entry.update(reference_logps=logps, reference_readouts=readouts, reference_clean_readouts=clean)
        rec["generations"].append(entry)
        return output

    def spy_weigh(call):
        advantages = weigh(call)
        if advantages is not call.advantages:  # the advantages TRL's objective gets: A * w (the driver's batch copy)
            before = call.inputs["advantages"].clone()
            rec["weights"].append({"before": before, "after": advantages.clone(),
                                   "routes": call.inputs["ase_route"].clone()})
        return advantages

    monkeypatch.setattr(bank, "update", spy_update)
    monkeypatch.setattr(bank, "activate", spy_activate)
    monkeypatch.setattr(trainer.ase.steerer, "steering", spy_steering)
    monkeypatch.setattr(trainer, "_generate_and_score_completions", spy_generate_and_score)
    monkeypatch.setattr(trainer.ase, "advantages", spy_weigh)
    trainer.add_callback(_Events(rec["events"]))
    return rec


@pytest.mark.slow
@pytest.mark.parametrize("schedule, bank_readouts", [("aligned", "steered"), ("scoring_forward", "clean")])
def test_ase_trainer_end_to_end(tmp_path, smollm2_tokenizer, monkeypatch, schedule, bank_readouts):
    # aligned: one generation per optimizer step, readouts from the loss forward (no old log-probs);
    # scoring_forward: one generation for two optimizer steps, TRL computes old log-probs right after generation
    # and the readouts come from that forward; this run also steers completion positions only (steer_prompt=False).
    overrides = {"log_completions": True, "num_completions_to_print": 0, "bank_readouts": bank_readouts}
    if schedule == "scoring_forward":
        overrides.update(per_device_train_batch_size=NUM_GENERATIONS // 2, steps_per_generation=2, max_steps=4,
                         steer_prompt=False)
    trainer = _trainer(tmp_path, smollm2_tokenizer, **overrides)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    rec = _instrument(trainer, monkeypatch)
    trainer.train()

    steps = trainer.args.max_steps
    generations = rec["generations"]
    assert len(generations) == (steps if schedule == "aligned" else steps // 2)
    # the first generation is unsteered (empty bank), every later one is steered
    assert not generations[0]["steered"] and "sampling_per_token_logps" not in generations[0]
    assert all(g["steered"] for g in generations[1:]) and len(rec["steering"]) == len(generations) - 1

    # bank life cycle: estimated after each generation, active only after the following optimizer step
    kinds = [e[0] for e in rec["events"]]
    if schedule == "aligned":
        assert kinds == ["update", "optimizer_step", "activate"] * steps
    else:  # update right after generation, activations after each optimizer step (the second one has nothing new)
        assert kinds == ["update", "optimizer_step", "activate", "optimizer_step", "activate"] * (steps // 2)
        assert [e[2] for e in rec["events"] if e[0] == "activate"] == [True, False] * (steps // 2)
    for i, update in enumerate(rec["updates"]):
        assert update["pending"] is not None, "synthetic rewards give contrast pairs at every step"
        if i > 0:  # the previous estimate was active while this generation ran, and is replaced only later
            assert torch.equal(update["active_before"], rec["updates"][i - 1]["pending"])
    for call, update in zip(rec["steering"], rec["updates"]):  # generation t + 1 steers with the bank of t
        assert torch.equal(call["vectors"], update["pending"])

    assert len(trainer.ase.bank_diagnostics) == len(rec["updates"])
    for gen, update, diagnostics in zip(generations, rec["updates"], trainer.ase.bank_diagnostics):
        routes = gen["ase_route"].cpu()
        if gen["steered"]:  # balanced: every prompt has 2 rollouts on each of the 3 routes
            for group in routes.view(-1, NUM_GENERATIONS):
                assert torch.bincount(group, minlength=NUM_VECTORS + 1).tolist() == [2] * (NUM_VECTORS + 1)
            # behaviour log-probs recorded during generation == teacher-forced steered replay
            mask = gen["completion_mask"].bool()
            assert torch.allclose(gen["sampling_per_token_logps"][mask], gen["reference_logps"][mask], atol=1e-4)
        else:
            assert torch.all(routes == 0)
        # readouts taken from TRL's own forward (+ alpha v when steered) == the replay's block-0 outputs
        reference = gen["reference_readouts"] if bank_readouts == "steered" else gen["reference_clean_readouts"]
        assert torch.allclose(update["activations"], reference, atol=1e-4)
        if gen["steered"]:  # the two readouts differ by alpha * v_route on steered rows, and agree on clean ones
            offsets = gen["reference_readouts"] - gen["reference_clean_readouts"]
            assert torch.equal(offsets.abs().sum(1) > 1e-3, routes > 0)
        # applied strength: alpha ||v_s|| / median ||clean readout|| of the bank that steers next
        strength = trainer.args.steering_alpha * update["pending"].norm(dim=1) / torch.quantile(
            gen["reference_clean_readouts"].double().norm(dim=1), 0.5)
        assert [diagnostics[f"applied_strength/{s + 1}"] for s in range(NUM_VECTORS)] == pytest.approx(
            strength.tolist(), rel=1e-4)
        groups = [update["problem_ids"][i : i + NUM_GENERATIONS] for i in range(0, len(routes), NUM_GENERATIONS)]
        assert all(len(set(group)) == 1 for group in groups) and {g[0] for g in groups} <= {"p0", "p1"}

    # truncated IS: clean rows keep A exactly, steered rows get A * w with 0 < w <= cap, not all 1
    assert rec["weights"]
    steered_weights = []
    for w in rec["weights"]:
        clean = w["routes"] == 0
        assert torch.equal(w["after"][clean], w["before"][clean].unsqueeze(1).expand_as(w["after"][clean]))
        nonzero = w["before"] != 0
        ratio = w["after"][~clean & nonzero] / w["before"][~clean & nonzero].unsqueeze(1)
        steered_weights.append(ratio.flatten())
    steered_weights = torch.cat(steered_weights)
    assert steered_weights.numel() > 0 and steered_weights.max() <= trainer.args.is_cap + 1e-6
    assert not torch.allclose(steered_weights, torch.ones_like(steered_weights))

    history = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    for key in ("ase/rollout_time", "ase/num_pairs", "ase/skipped_updates", "ase/cluster_share_0",
                "ase/cluster_share_1", "ase/inter_cluster_alignment", "ase/temporal_alignment", "ase/is_weight_mean",
                "ase/is_weight_clipped_frac", "ase/route_0_accuracy", "ase/route_1_accuracy", "ase/route_2_accuracy",
                "ase/smallest_cluster", "ase/route_1_applied_strength", "ase/route_2_applied_strength"):
        assert key in history, key
    table = pd.concat(pd.read_parquet(f) for f in sorted((tmp_path / "out" / "completions").glob("*.parquet")))
    assert "route" in table.columns and set(table["route"]) == {0, 1, 2}
    assert any(not torch.equal(p.detach(), before[n]) for n, p in trainer.model.named_parameters())


@pytest.mark.slow
@pytest.mark.parametrize(
    "loss_type, level", [("grpo", "token"), ("dapo", "token"), ("dr_grpo", "token"), ("grpo", "sequence")]
)
def test_is_weighted_loss_matches_reference(tmp_path, smollm2_tokenizer, loss_type, level):
    """TRL's clipped objective with advantages A * w == -w * min(r A, clip(r) A), aggregated as TRL does."""
    trainer = _trainer(tmp_path, smollm2_tokenizer, model_seed=3, loss_type=loss_type, importance_sampling_level=level,
                       max_completion_length=5, is_cap=1.5)
    model = trainer.model
    model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train() in a real run
    g = torch.Generator().manual_seed(0)
    prompt_ids = torch.randint(100, 1000, (6, 3), generator=g)
    completion_ids = torch.randint(100, 1000, (6, 4), generator=g)
    completion_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0],
                                    [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]])
    advantages = torch.tensor([1.0, -0.5, 2.0, -1.5, 0.7, -0.9])
    routes = torch.tensor([0, 0, 1, 1, 2, 2])
    with torch.no_grad():  # independent reference: a plain forward and the formulas
        logits = model(input_ids=torch.cat([prompt_ids, completion_ids], 1)).logits[:, 2:-1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    old = logp + 0.3 * torch.randn(logp.shape, generator=g)  # policy moved since the rollout: ratios get clipped
    behaviour = old + 0.8 * torch.randn(logp.shape, generator=g)  # steered sampler: some weights truncated at 1.5
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones_like(prompt_ids),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": advantages,
        "num_items_in_batch": completion_mask.sum(),
        "old_per_token_logps": old,
        "sampling_per_token_logps": behaviour,
        "ase_route": routes,
    }
    loss = trainer._compute_loss(model, inputs)
    assert inputs["advantages"] is advantages and inputs["advantages"].dim() == 1  # the caller's batch is untouched

    m = completion_mask.float()
    if level == "token":
        ratio = torch.exp(logp - old)
    else:  # GSPO: one ratio per sequence, the exp of the mean token log-ratio
        ratio = torch.exp(((logp - old) * m).sum(1, keepdim=True) / m.sum(1, keepdim=True))
    w = torch.where(routes[:, None] != 0, torch.exp(old - behaviour).clamp(max=1.5), torch.ones_like(old))
    assert ((w < 1.5) & (w > 0)).any() and (w == 1.5).any()
    a = advantages[:, None]
    per_token = -w * torch.min(ratio * a, ratio.clamp(0.8, 1.2) * a)
    if loss_type == "grpo":
        expected = ((per_token * m).sum(1) / m.sum(1)).mean()
    elif loss_type == "dapo":
        expected = (per_token * m).sum() / m.sum()
    else:  # dr_grpo
        expected = (per_token * m).sum() / (6 * 5)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-4, abs=1e-6)
    unweighted = -torch.min(ratio * a, ratio.clamp(0.8, 1.2) * a)
    assert abs(((unweighted - per_token) * m).sum().item()) > 1e-2  # the weights matter in this example
    history = trainer._metrics["train"]
    steered = (routes[:, None] != 0) & completion_mask.bool()
    assert history["ase/is_weight_mean"][-1] == pytest.approx(w[steered].mean().item(), rel=1e-5)
    assert history["ase/is_weight_clipped_frac"][-1] == pytest.approx((w[steered] == 1.5).float().mean().item())


@pytest.mark.slow
def test_eval_never_steers(tmp_path, smollm2_tokenizer, monkeypatch):
    trainer = _trainer(tmp_path, smollm2_tokenizer, num_generations_eval=3, per_device_eval_batch_size=6)
    state = trainer.ase.bank.state_dict()
    state["active"] = 3.0 * torch.randn(NUM_VECTORS, trainer.ase.bank.hidden_size)  # a strong active bank
    trainer.ase.bank.load_state_dict(state)
    rec = _instrument(trainer, monkeypatch)
    metrics = trainer.evaluate(eval_dataset=doubling_dataset())
    assert rec["steering"] == [] and all(torch.all(g["ase_route"] == 0) for g in rec["generations"])
    assert "sampling_per_token_logps" not in rec["generations"][0]
    assert "eval_ase/route_0_accuracy" in metrics and "eval_ase/route_1_accuracy" not in metrics
    assert rec["updates"] == []  # evaluation never touches the bank
    trainer.model.train()  # the same trainer would steer a training generation with that bank
    routes, table, _ = trainer.ase.plan_routes(NUM_GENERATIONS, NUM_GENERATIONS)
    assert torch.equal(table, state["active"]) and routes.tolist() == [0, 0, 1, 1, 2, 2]


@pytest.mark.slow
def test_small_clusters_skip_the_update_with_a_warning(tmp_path, smollm2_tokenizer, caplog):
    # 2 prompts x 6 rollouts give at most 18 pairs: 2 clusters of 10 can never be filled
    trainer = _trainer(tmp_path, smollm2_tokenizer, max_steps=1, min_pairs_per_cluster=10)
    with caplog.at_level("WARNING", logger="trl_explore.ase.component"):
        trainer.train()
    (diagnostics,) = trainer.ase.bank_diagnostics
    assert diagnostics["skipped"] == 1.0 and diagnostics["num_pairs"] > 0
    assert trainer.ase.bank.vectors is None and trainer.ase.bank.pending_vectors is None
    assert (f"{int(diagnostics['num_pairs'])} contrast pairs, fewer than K x min_pairs_per_cluster = 20 "
            "(min_pairs_per_cluster=10)") in caplog.text
    assert caplog.text.count("every rollout takes the clean route") == 1  # said once, with the threshold
    assert "K x min_pairs_per_cluster = 20 contrast pairs" in caplog.text and "steering starts" not in caplog.text
    history = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    assert history["ase/skipped_updates"] == 1.0 and "ase/route_1_applied_strength" not in history  # no bank yet


@pytest.mark.slow
def test_resume_restores_bank_and_matches_uninterrupted_run(tmp_path, smollm2_tokenizer):
    saved = {}

    class SnapshotOnSave(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            saved[state.global_step] = trainer.ase.bank.state_dict()

    # 2 prompts, one per step: both steps lie in the first epoch (later epochs and checkpoints inside a generation:
    # tests/test_resume.py)
    trainer = _trainer(tmp_path / "a", smollm2_tokenizer, save_strategy="steps", save_steps=1,
                       callbacks=[SnapshotOnSave()])
    trainer.train()
    assert trainer.ase.bank.vectors is not None
    final_a = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    bank_a = trainer.ase.bank.state_dict()
    loss_a = [e["loss"] for e in trainer.state.log_history if "loss" in e]

    checkpoint = tmp_path / "a" / "out" / "checkpoint-1"
    assert (checkpoint / "steering_bank" / "steering_bank.safetensors").is_file()
    resumed = _trainer(tmp_path / "b", smollm2_tokenizer)
    loaded = {}
    original_load = resumed._load_optimizer_and_scheduler

    def spy_load(path):
        original_load(path)
        loaded.update(resumed.ase.bank.state_dict())

    resumed._load_optimizer_and_scheduler = spy_load
    resumed.train(resume_from_checkpoint=str(checkpoint))

    expected = saved[1]  # the bank of the uninterrupted run when checkpoint-1 was written
    assert expected["active"] is not None and expected["pending"] is None
    assert torch.equal(loaded["active"], expected["active"])
    assert torch.equal(loaded["generator_state"], expected["generator_state"])
    assert loaded["num_updates"] == expected["num_updates"] == 1
    loss_b = [e["loss"] for e in resumed.state.log_history if "loss" in e]  # step 1 comes from the checkpoint
    assert len(loss_a) == len(loss_b) == 2 and loss_b[1] == pytest.approx(loss_a[1], rel=1e-6, abs=1e-12)
    for name, param in resumed.model.named_parameters():
        assert torch.equal(param.detach(), final_a[name]), name
    assert torch.equal(resumed.ase.bank.vectors, bank_a["active"])
    bank_dir = tmp_path / "b" / "out" / "steering_bank"
    resumed.save_model()
    assert torch.equal(SteeringVectorBank.load(bank_dir).vectors, bank_a["active"])


@pytest.mark.slow
def test_unstructured_random_control_steers_every_rollout(tmp_path, smollm2_tokenizer, monkeypatch):
    trainer = _trainer(tmp_path, smollm2_tokenizer, bank_control="unstructured_random", max_steps=1,
                       steering_alpha=4.0)
    rec = _instrument(trainer, monkeypatch)
    trainer.train()
    assert rec["updates"] == [] and trainer.ase.bank.vectors is None
    (call,) = rec["steering"]
    rows = NUM_GENERATIONS
    assert call["routes"].tolist() == list(range(1, rows + 1))  # one vector per rollout, no clean route
    assert torch.allclose(call["vectors"].norm(dim=1), torch.ones(rows))
    assert torch.all(rec["generations"][0]["ase_route"] == 1)
    history = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    assert "ase/is_weight_mean" in history and "ase/num_pairs" not in history


def test_config_rejects_bad_values(tmp_path):
    with pytest.raises(ValueError, match="num_vectors \\+ 1"):
        _config(tmp_path, num_vectors=6)
    _config(tmp_path, num_vectors=6, bank_control="unstructured_random")  # no routes: allowed
    with pytest.raises(ValueError, match="bank_control"):
        _config(tmp_path, bank_control="random")
    for field, value in [("bank_ema_beta", 1.5), ("readout_fraction", -0.1), ("is_cap", 0.0),
                         ("steering_alpha", math.inf), ("num_vectors", 0), ("pca_dim", 0),
                         ("max_pairs_per_problem", 0), ("steering_layer", -1), ("min_pairs_per_cluster", 0),
                         ("bank_readouts", "raw")]:
        with pytest.raises(ValueError, match=field):
            _config(tmp_path, **{field: value})
    config = _config(tmp_path)
    assert config.beta == 0.0 and config.entropy_coef == 0.0  # paper: no KL, no entropy bonus
    defaults = ASEConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False)
    assert (defaults.bank_readouts, defaults.min_pairs_per_cluster) == ("clean", 4)


def test_vllm_config_uses_trl_token_truncate_importance_sampling(tmp_path):
    config = _config(tmp_path, use_vllm=True)  # TRL's defaults (sequence_mask, 3.0) become ASE's TIS
    assert (config.vllm_importance_sampling_mode, config.vllm_importance_sampling_clip_max) == ("token_truncate", 2.0)
    config = _config(tmp_path, use_vllm=True, is_cap=1.5)
    assert config.vllm_importance_sampling_clip_max == 1.5
    consistent = dict(vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_max=2.0)
    assert _config(tmp_path, use_vllm=True, **consistent).vllm_importance_sampling_clip_max == 2.0
    for bad in (
        dict(vllm_importance_sampling_mode="sequence_truncate"),
        dict(vllm_importance_sampling_mode="token_truncate", vllm_importance_sampling_clip_max=3.0),
        dict(vllm_importance_sampling_correction=False),
        dict(vllm_importance_sampling_clip_min=0.5),
    ):
        with pytest.raises(ValueError, match="vllm_importance_sampling"):
            _config(tmp_path, use_vllm=True, **bad)
    untouched = _config(tmp_path)  # without vLLM, TRL's settings are left alone (and unused)
    assert untouched.vllm_importance_sampling_mode == "sequence_mask"


def test_unsupported_setups_raise(tmp_path, smollm2_tokenizer):
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="vLLM"):  # TRL's own message: install vLLM
            _trainer(tmp_path, smollm2_tokenizer, use_vllm=True)
    with pytest.raises(ValueError, match="steering_layer|out of range"):
        _trainer(tmp_path, smollm2_tokenizer, steering_layer=5)  # the tiny model has 2 blocks
    with pytest.raises(ValueError, match="correctness_reward_index"):
        _trainer(tmp_path, smollm2_tokenizer, correctness_reward_index=1)
    # 2 prompts cannot fill a generation batch of 3 prompts x 6 rollouts: TRL would "train" 0 steps
    with pytest.raises(ValueError, match="has 2 prompt\\(s\\) but one generation batch needs 3"):
        _trainer(tmp_path, smollm2_tokenizer, per_device_train_batch_size=3 * NUM_GENERATIONS)


_TWO_PROCESS_SCRIPT = '''
import json, sys
from pathlib import Path

from transformers import AutoTokenizer

from trl_explore import ASEConfig, ASEGRPOTrainer
from trl_explore.defaults import default_policy_path
from trl_explore.testing import doubling_dataset, make_tiny_causal_lm, parity_reward, tiny_ase_args

out = Path(sys.argv[1])
tokenizer = AutoTokenizer.from_pretrained(default_policy_path())
# each group of 6 is split over the 2 processes
args = ASEConfig(**tiny_ase_args(out / "out", per_device_train_batch_size=3, max_steps=3))
trainer = ASEGRPOTrainer(make_tiny_causal_lm(tokenizer), reward_funcs=[parity_reward], args=args,
                         train_dataset=doubling_dataset(), processing_class=tokenizer)
routes = []
original = trainer._generate_and_score_completions


def spy(inputs):
    output = original(inputs)
    routes.append(output["ase_route"].tolist())
    return output


trainer._generate_and_score_completions = spy
trainer.train()
rank = trainer.accelerator.process_index
bank = trainer.ase.bank
(out / f"rank{rank}.json").write_text(json.dumps({
    "routes": routes, "vectors": None if bank.vectors is None else bank.vectors.tolist(),
    "num_updates": bank.num_updates, "diagnostics": trainer.ase.bank_diagnostics,
}))
'''


@pytest.mark.slow
def test_two_processes_share_one_bank_and_balanced_routes(tmp_path):
    import json

    script = tmp_path / "ase_two_process.py"
    script.write_text(_TWO_PROCESS_SCRIPT)
    result = run_two_cpu_processes(script, tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["vectors"] is not None and ranks[0]["vectors"] == ranks[1]["vectors"]  # one bank, bit for bit
    assert ranks[0]["num_updates"] == ranks[1]["num_updates"] == 3
    assert ranks[0]["diagnostics"] == ranks[1]["diagnostics"]
    for step, (local0, local1) in enumerate(zip(ranks[0]["routes"], ranks[1]["routes"])):
        group = local0 + local1  # the group's 6 rollouts, split 3 + 3 over the processes
        expected = [0] * 6 if step == 0 else [0, 0, 1, 1, 2, 2]
        assert sorted(group) == expected, (step, group)


def test_the_start_of_steering_is_announced_once(caplog):
    """The clean-route reason once, then the start once; later generations say nothing."""
    from types import SimpleNamespace

    from trl_explore.ase.component import ASEComponent
    from trl_explore.ase.options import ASEOptions

    ase = ASEComponent(ASEOptions(num_vectors=3, min_pairs_per_cluster=2))
    ase.trainer = SimpleNamespace(accelerator=SimpleNamespace(is_main_process=True),
                                  state=SimpleNamespace(global_step=0))
    ase.bank = SimpleNamespace(num_vectors=3, min_pairs_per_cluster=2)
    with caplog.at_level("WARNING", logger="trl_explore.ase.component"):
        for steered, step in [(False, 0), (False, 1), (True, 2), (True, 3), (False, 4)]:
            ase.trainer.state.global_step = step
            ase._announce_steering(steered)
    assert caplog.text.count("every rollout takes the clean route") == 1
    assert "K x min_pairs_per_cluster = 6 contrast pairs" in caplog.text
    assert caplog.text.count("steering starts") == 1 and "steering starts at step 2:" in caplog.text
