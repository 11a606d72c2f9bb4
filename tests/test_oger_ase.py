"""OGER + ASE-GRPO composed (OGERASETrainer): the semantics of the composition, on a tiny model, CPU, few steps.

References are independent of the trainer's wiring: a plain teacher-forced forward under the steering hook (the
route's distribution), the formulas of the two losses, and the recorded inputs of the pure functions.
"""

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from transformers import TrainerCallback

from trl_explore import OGERASEConfig, OGERASETrainer
from trl_explore.ase import component as ase_component
from trl_explore.oger import component as oger_component
from trl_explore.oger.entropy import entropy_from_logits
from trl_explore.testing import (
    DOUBLING_TEACHERS,
    doubling_dataset,
    make_tiny_causal_lm,
    parity_reward,
    run_two_cpu_processes,
    tiny_oger_ase_args,
)

NUM_GENERATIONS, NUM_VECTORS = 6, 2  # 3 routes x 2 rollouts per prompt, one of the 6 replaced by a teacher


def _dataset(num_prompts=2):
    return doubling_dataset(num_prompts, DOUBLING_TEACHERS)  # 2 teachers for the first prompt, 1 for the second


def _config(tmp_path, **overrides):
    return OGERASEConfig(**tiny_oger_ase_args(tmp_path / "out", **overrides))


def _peaked_model(tokenizer):
    """The tiny model with logits scaled up 5x (final norm), so its next-token distributions are far from uniform and
    the steering moves them measurably."""
    model = make_tiny_causal_lm(tokenizer)
    with torch.no_grad():
        model.model.norm.weight.mul_(5.0)
    return model


def _trainer(tmp_path, tokenizer, reward_funcs=None, callbacks=None, **overrides):
    from trl_explore import OGERRewardFunction

    reward_funcs = reward_funcs or [parity_reward, OGERRewardFunction(verifier=parity_reward)]
    return OGERASETrainer(_peaked_model(tokenizer), reward_funcs=reward_funcs, args=_config(tmp_path, **overrides),
                          train_dataset=_dataset(), processing_class=tokenizer, callbacks=callbacks)


def _instrument(trainer, monkeypatch):
    """Record replacements, steering calls, bank updates, IS weights and, per generation, the batch and references."""
    rec = {"replacements": [], "steering": [], "updates": [], "weights": [], "generations": []}
    select = oger_component.select_replacements
    steering, update = trainer.ase.steerer.steering, trainer.ase.bank.update
    weigh, generate_and_score = ase_component.routed_importance_weights, trainer._generate_and_score_completions

    def spy_select(divergence, k, rule="lowest_divergence", generator=None):
        chosen = select(divergence, k, rule, generator)
        rec["replacements"].append({"step": trainer.state.global_step, "divergence": divergence.clone(),
                                    "chosen": chosen.clone()})
        return chosen

    def spy_steering(route_ids, vectors, alpha=None):
        rec["steering"].append({"routes": route_ids.clone(), "vectors": vectors.clone()})
        return steering(route_ids, vectors, alpha)

    def spy_update(activations, problem_ids, rewards):
        rec["updates"].append({"problem_ids": list(problem_ids), "num_rows": activations.shape[0]})
        return update(activations, problem_ids, rewards)

    def spy_weigh(current, behaviour, mask, steered, cap):  # the truncated IS weights ASE multiplies in
        weights, clipped = weigh(current, behaviour, mask, steered, cap)
        rec["weights"].append({"weights": weights.clone(), "routes": rec["routes"]})
        return weights, clipped

    advantages = trainer.ase.advantages

    def spy_advantages(call):  # the routes of the micro-batch whose weights spy_weigh records
        rec["routes"] = call.inputs["ase_route"].clone()
        return advantages(call)

    def spy_generate_and_score(inputs):
        calls = len(rec["steering"])
        output = generate_and_score(inputs)
        entry = {k: v.clone() for k, v in output.items() if isinstance(v, torch.Tensor)}
        entry["steered"] = len(rec["steering"]) > calls
        entry["entropy"] = trainer.oger.generation.entropy
        entry["divergence"] = trainer.oger.generation.divergence
        if entry["steered"]:  # the policy has not moved since generation: reference H_last under the route's steering
            planned = rec["steering"][-1]
            entry["planned_routes"] = planned["routes"]
            entry["reference_entropy"] = _reference_last_entropy(trainer, output, planned["routes"],
                                                                 planned["vectors"])
            entry["clean_entropy"] = _reference_last_entropy(trainer, output, None, None)
        rec["generations"].append(entry)
        return output

    monkeypatch.setattr(oger_component, "select_replacements", spy_select)
    monkeypatch.setattr(trainer.ase.steerer, "steering", spy_steering)
    monkeypatch.setattr(trainer.ase.bank, "update", spy_update)
    monkeypatch.setattr(ase_component, "routed_importance_weights", spy_weigh)
    monkeypatch.setattr(trainer.ase, "advantages", spy_advantages)
    monkeypatch.setattr(trainer, "_generate_and_score_completions", spy_generate_and_score)
    return rec


def _reference_last_entropy(trainer, output, routes, vectors):
    """Entropy (nats, at the sampling temperature) of the distribution that produced each row's last token: one
    teacher-forced forward over prompt + completion, under the steering hook when ``routes`` is given."""
    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], 1)
    mask = torch.cat([output["prompt_mask"], output["completion_mask"]], 1)
    context = trainer.ase.steerer.steering(routes.clamp(min=0), vectors) if routes is not None else torch.no_grad()
    with torch.no_grad(), context:
        logits = trainer.model(input_ids=ids, attention_mask=mask).logits.float() / trainer.temperature
    prompt_len = output["prompt_ids"].shape[1]
    last = prompt_len + output["completion_mask"].sum(1) - 1  # position of the last completion token
    rows = torch.arange(ids.shape[0])
    return entropy_from_logits(logits[rows, last - 1])  # the logits at position t predict token t + 1


@pytest.mark.slow
def test_composed_run_semantics(tmp_path, smollm2_tokenizer, monkeypatch):
    trainer = _trainer(tmp_path, smollm2_tokenizer, log_completions=True, num_completions_to_print=0)
    rec = _instrument(trainer, monkeypatch)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()

    gens = rec["generations"]
    assert len(gens) == 2 and not gens[0]["steered"] and gens[1]["steered"]  # empty bank at step 0, then steered
    for gen in gens:
        offline = gen["is_offline"].cpu()
        assert offline.sum() == 1  # one replacement per group
        # divergence and H_last for every online row (on every route), none for the offline row
        assert all((d is None) == bool(o) for d, o in zip(gen["divergence"], offline))
        assert all((h is None) == bool(o) for h, o in zip(gen["entropy"], offline))
        assert torch.all(gen["ase_route"].cpu()[offline] == -1)  # a replaced row has no route
    steered = gens[1]
    planned, routes, offline = steered["planned_routes"], steered["ase_route"].cpu(), steered["is_offline"].cpu()
    assert torch.bincount(planned, minlength=NUM_VECTORS + 1).tolist() == [2] * (NUM_VECTORS + 1)  # balanced
    assert torch.equal(routes[~offline], planned[~offline])
    online_routes = set(planned[~offline].tolist())
    assert online_routes == {0, 1, 2} or len(online_routes) == NUM_VECTORS  # divergence was computed on every route
    # H_last comes from the route's (steered) distribution, not the clean one
    online = (~offline).nonzero().squeeze(1)
    recorded = torch.tensor([steered["entropy"][i] for i in online.tolist()])
    assert torch.allclose(recorded, steered["reference_entropy"][online], atol=1e-4)
    moved = (planned[online] != 0)
    assert not torch.allclose(recorded[moved], steered["clean_entropy"][online][moved], atol=1e-3)

    # replacement took the lowest divergence of the whole group, across routes
    assert len(rec["replacements"]) == 2
    for r, gen in zip(rec["replacements"], gens):
        assert r["divergence"].numel() == NUM_GENERATIONS and r["divergence"][r["chosen"][0]] == r["divergence"].min()
        assert gen["is_offline"].cpu().nonzero().squeeze(1).tolist() == r["chosen"].tolist()

    # the replaced row: no behaviour log-probs (NaN), IS weight exactly 1; steered online rows get weights != 1
    mask = steered["completion_mask"].cpu().bool()
    logps = steered["sampling_per_token_logps"].cpu()
    assert torch.isnan(logps[offline][mask[offline]]).all() and torch.isfinite(logps[~offline][mask[~offline]]).all()
    (w,) = [w for w in rec["weights"] if (w["routes"] == -1).any() and (w["routes"] > 0).any()]
    assert torch.all(w["weights"][w["routes"] <= 0] == 1.0)
    assert not torch.allclose(w["weights"][w["routes"] > 0], torch.ones(1))

    # ASE's contrast pairs leave the offline row out (default): 5 of 6 rows reach the bank
    assert [u["num_rows"] for u in rec["updates"]] == [NUM_GENERATIONS - 1] * 2

    history = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    for key in ("oger/divergence_mean", "oger/last_token_entropy_mean", "oger/offline_fraction",
                "oger/offline_policy_loss", "oger/offline_token_prob_mean", "ase/route_0_accuracy",
                "ase/route_1_accuracy", "ase/num_pairs", "ase/is_weight_mean", "ase/rollout_time"):
        assert key in history, key
    assert history["oger/offline_fraction"] == pytest.approx(1 / NUM_GENERATIONS)
    table = pd.concat(pd.read_parquet(f) for f in sorted((tmp_path / "out" / "completions").glob("*.parquet")))
    for column in ("is_offline", "teacher", "divergence", "last_token_entropy", "route", "oger_reward"):
        assert column in table.columns, column
    offline_rows = table.loc[table["is_offline"]]
    assert set(offline_rows["route"]) == {-1} and offline_rows["teacher"].notna().all()
    assert any(not torch.equal(p.detach(), before[n]) for n, p in trainer.model.named_parameters())


@pytest.mark.slow
def test_offline_rows_in_bank_when_asked(tmp_path, smollm2_tokenizer, monkeypatch):
    trainer = _trainer(tmp_path, smollm2_tokenizer, include_offline_in_bank=True, max_steps=1)
    rec = _instrument(trainer, monkeypatch)
    trainer.train()
    assert [u["num_rows"] for u in rec["updates"]] == [NUM_GENERATIONS]


@pytest.mark.slow
def test_loss_mixes_is_weighted_objective_and_policy_shaping(tmp_path, smollm2_tokenizer):
    """One micro-batch (ratio 1): clean rows -A, steered rows -w A with w = min(p / p_behaviour, cap), offline rows
    -A f(p) with f(p) = p / (p + gamma); grpo aggregation over all rows."""
    trainer = _trainer(tmp_path, smollm2_tokenizer, entropy_coef=0.0, max_completion_length=5, is_cap=1.5,
                       loss_type="grpo")
    model = trainer.model
    model.train()
    trainer.current_gradient_accumulation_steps = 1
    g = torch.Generator().manual_seed(0)
    prompt_ids = torch.randint(100, 1000, (6, 3), generator=g)
    completion_ids = torch.randint(100, 1000, (6, 4), generator=g)
    completion_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0],
                                    [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]])
    advantages = torch.tensor([1.0, -0.5, 2.0, -1.5, 0.7, -0.9])
    routes = torch.tensor([0, 0, 1, -1, 2, 2])  # row 3 is offline
    is_offline = routes == -1
    with torch.no_grad():
        logits = model(input_ids=torch.cat([prompt_ids, completion_ids], 1)).logits[:, 2:-1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    behaviour = logp + 0.8 * torch.randn(logp.shape, generator=g)
    behaviour[is_offline] = float("nan")
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": torch.ones_like(prompt_ids), "completion_ids": completion_ids,
              "completion_mask": completion_mask, "advantages": advantages,
              "num_items_in_batch": (completion_mask * (~is_offline).unsqueeze(1)).sum(),  # as the driver counts
              "num_items_before_drops": completion_mask.sum(), "sampling_per_token_logps": behaviour,
              "dropped_from_objective": is_offline,  # OGER's drop_rows: its teacher rows leave TRL's objective
              "ase_route": routes, "is_offline": is_offline}
    loss = trainer._compute_loss(model, inputs)

    w = torch.where(routes[:, None] > 0, torch.exp(logp - behaviour).clamp(max=1.5), torch.ones_like(logp))
    p, a = logp.exp(), advantages[:, None]
    per_token = torch.where(is_offline[:, None], -a * p / (p + 0.1), -w * a)
    m = completion_mask.float()
    expected = ((per_token * m).sum(1) / m.sum(1)).mean()
    assert ((w > 1.0) | (w < 1.0)).any() and loss.item() == pytest.approx(expected.item(), rel=1e-4, abs=1e-6)


@pytest.mark.slow
def test_resume_replays_bank_replacements_and_routes(tmp_path, smollm2_tokenizer, monkeypatch):
    saved = {}

    class Snapshot(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            saved[state.global_step] = first.ase.bank.state_dict()

    first = _trainer(tmp_path / "a", smollm2_tokenizer, save_strategy="steps", save_steps=1, callbacks=[Snapshot()])
    rec_a = _instrument(first, monkeypatch)
    first.train()
    resumed = _trainer(tmp_path / "b", smollm2_tokenizer)
    rec_b = _instrument(resumed, monkeypatch)
    resumed.train(resume_from_checkpoint=str(tmp_path / "a" / "out" / "checkpoint-1"))

    (gen_a, gen_b) = rec_a["generations"][1], rec_b["generations"][0]  # step 1 of both runs
    assert torch.equal(gen_a["ase_route"], gen_b["ase_route"])
    assert torch.equal(gen_a["is_offline"], gen_b["is_offline"])
    assert torch.equal(gen_a["completion_ids"], gen_b["completion_ids"])  # the teacher drawn and the sampled tokens
    assert rec_a["replacements"][1]["chosen"].tolist() == rec_b["replacements"][0]["chosen"].tolist()
    assert torch.equal(rec_a["steering"][-1]["vectors"], rec_b["steering"][-1]["vectors"])  # the restored bank
    assert torch.equal(first.ase.bank.vectors, resumed.ase.bank.vectors)
    assert saved[1]["active"] is not None
    for (name, pa), pb in zip(first.model.named_parameters(), resumed.model.parameters()):
        assert torch.equal(pa, pb), name


def test_contradictory_options_fail_at_construction(tmp_path, smollm2_tokenizer):
    with pytest.raises(ValueError, match="include_offline_in_bank=True but num_replacements=0"):
        _config(tmp_path, include_offline_in_bank=True, num_replacements=0)
    with pytest.raises(ValueError, match="steer_prompt=False"):
        _config(tmp_path, use_vllm=True, steer_prompt=False)
    with pytest.raises(ValueError, match="num_vectors \\+ 1"):  # too few rollouts for the routes
        _config(tmp_path, num_vectors=6)
    with pytest.raises(ValueError, match="non-zero weight"):  # OGER's "w/o Reward" with a weighted OGER reward
        _trainer(tmp_path, smollm2_tokenizer, use_exploration_reward=False, reward_weights=[1.0, 1.0])
    with pytest.raises(NotImplementedError, match="continuous batching"):  # a backend that cannot steer
        _trainer(tmp_path, smollm2_tokenizer, use_transformers_continuous_batching=True)
    with pytest.raises(ValueError, match="out of range|steering_layer"):
        _trainer(tmp_path, smollm2_tokenizer, steering_layer=5)
    with pytest.raises(ValueError, match="correctness_reward_index"):
        _trainer(tmp_path, smollm2_tokenizer, correctness_reward_index=2)
    with pytest.raises(TypeError, match="OGERASEConfig"):
        from trl_explore import OGERConfig

        OGERASETrainer(make_tiny_causal_lm(smollm2_tokenizer), args=OGERConfig(output_dir=str(tmp_path), use_cpu=True),
                       train_dataset=_dataset(), processing_class=smollm2_tokenizer)


def test_recipes_load_with_trl_parser():
    from trl import ModelConfig, TrlParser

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "examples"))
    from train_oger_ase import ScriptArguments

    parser = TrlParser((ScriptArguments, OGERASEConfig, ModelConfig))
    for recipe in ("oger_ase_qwen2.5_math_1.5b.yaml", "oger_ase_smollm2_champ_cpu.yaml"):
        script, config, model = parser.parse_args_and_config(
            args=["--config", str(root / "recipes" / recipe), "--output_dir", "/tmp/unused", "--use_cpu", "true"]
        )
        assert isinstance(config, OGERASEConfig) and config.num_replacements == 1
        if "qwen" in recipe:  # the papers' settings: N = 8, K = 3, alpha 0.5, TIS cap 2, lr 1e-6, 128 prompts
            assert (config.num_generations, config.num_vectors, config.steering_alpha,
                    config.is_cap) == (8, 3, 0.5, 2.0)
            assert config.learning_rate == 1e-6 and config.use_vllm
            assert config.vllm_importance_sampling_mode == "token_truncate"
            assert model.model_name_or_path == "Qwen/Qwen2.5-Math-1.5B"


_TWO_PROCESS_SCRIPT = '''
import json, sys
from pathlib import Path

from transformers import AutoTokenizer

from trl_explore import OGERASEConfig, OGERASETrainer, OGERRewardFunction
from trl_explore.defaults import default_policy_path
from trl_explore.testing import DOUBLING_TEACHERS, doubling_dataset, make_tiny_causal_lm, parity_reward
from trl_explore.testing import tiny_oger_ase_args

out = Path(sys.argv[1])
tokenizer = AutoTokenizer.from_pretrained(default_policy_path())
args = OGERASEConfig(**tiny_oger_ase_args(out / "out", max_steps=2))
trainer = OGERASETrainer(make_tiny_causal_lm(tokenizer), args=args,
                         reward_funcs=[parity_reward, OGERRewardFunction(verifier=parity_reward)],
                         train_dataset=doubling_dataset(2, DOUBLING_TEACHERS), processing_class=tokenizer)
groups = []
original = trainer._generate_and_score_completions


def spy(inputs):
    output = original(inputs)
    groups.append({"prompts": [row["prompt"][0]["content"] for row in inputs], "routes": output["ase_route"].tolist(),
                   "offline": output["is_offline"].tolist()})
    return output


trainer._generate_and_score_completions = spy
trainer.train()
bank = trainer.ase.bank
(out / f"rank{trainer.accelerator.process_index}.json").write_text(json.dumps({
    "groups": groups, "vectors": None if bank.vectors is None else bank.vectors.tolist(),
    "num_updates": bank.num_updates, "diagnostics": trainer.ase.bank_diagnostics,
}))
'''


@pytest.mark.slow
def test_two_processes_keep_whole_groups_and_one_bank(tmp_path):
    script = tmp_path / "oger_ase_two_process.py"
    script.write_text(_TWO_PROCESS_SCRIPT)
    result = run_two_cpu_processes(script, tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["vectors"] is not None and ranks[0]["vectors"] == ranks[1]["vectors"]  # one bank, bit for bit
    assert ranks[0]["num_updates"] == ranks[1]["num_updates"] == 2
    assert ranks[0]["diagnostics"] == ranks[1]["diagnostics"]
    for step in range(2):
        local = [rank["groups"][step] for rank in ranks]
        for group in local:  # each process holds one whole group: one prompt, one replaced row
            assert len(group["prompts"]) == NUM_GENERATIONS and len(set(group["prompts"])) == 1
            assert sum(group["offline"]) == 1
            if step == 1:  # steered: the online rows keep the balanced routes, the offline row has none
                routes = [r for r, off in zip(group["routes"], group["offline"]) if not off]
                assert sorted(routes + [-1]) == sorted(group["routes"]) and set(routes) <= {0, 1, 2}
        assert {local[0]["prompts"][0], local[1]["prompts"][0]} == {"What is 0 + 0?", "What is 1 + 1?"}
