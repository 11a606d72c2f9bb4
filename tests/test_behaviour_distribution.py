"""The trainers' recorders and behaviour forward use the sampler's effective settings
(trl_explore.trl_guards.sampler_settings):
real training steps with the temperature given through `generation_kwargs` and top-k / top-p, checked against a
teacher-forced forward processed by transformers' own logits-processor pipeline for the trainer's GenerationConfig
(`_get_logits_processor`, what `generate` builds), independent of the package's code."""

import dataclasses

import pytest
import torch
from transformers import LogitsProcessorList

from trl_explore import ASEConfig, ASEGRPOTrainer, OGERConfig, OGERTrainer
from trl_explore.driver.components import Rollout
from trl_explore.testing import (
    doubling_dataset,
    make_tiny_causal_lm,
    parity_reward,
    teacher_math_dataset,
    tiny_training_args,
)
from trl_explore.trl_guards.sampler_settings import SamplerSettings, entropy_from_logits

SAMPLER = {"temperature": 0.7, "top_k": 30, "top_p": 0.95}  # GRPOConfig.temperature stays 1.0


def _sharp_lm(tokenizer, seed=0):
    """Next-token entropies of a few nats (not log V): the temperature and the truncations matter."""
    model = make_tiny_causal_lm(tokenizer, seed=seed)
    with torch.no_grad():
        model.model.norm.weight.mul_(8.0)
    return model


def _hf_processors(trainer):
    """The processors `generate` builds from TRL's GenerationConfig (temperature, top-k, top-p, ...)."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    return model._get_logits_processor(generation_config=trainer.generation_config, input_ids_seq_length=1,
                                       encoder_input_ids=None, prefix_allowed_tokens_fn=None,
                                       logits_processor=LogitsProcessorList(), device="cpu")


def _reference_last_entropy(trainer, prompt_ids, completion_ids, lengths, processors):
    """Per row, unpadded: the entropy of the processed distribution that produced token ``lengths - 1``."""
    values = []
    with torch.no_grad():
        for prompt, completion, length in zip(prompt_ids, completion_ids, lengths):
            ids = torch.tensor([prompt + completion])
            logits = trainer.model(input_ids=ids).logits[:, len(prompt) + int(length) - 2].float()
            values.append(entropy_from_logits(processors(ids, logits)).item())
    return torch.tensor(values)


@pytest.mark.slow
def test_oger_h_last_is_the_entropy_of_the_sampler_distribution(tmp_path, smollm2_tokenizer, monkeypatch):
    """HF generation at T = 0.7 (generation_kwargs), top-k 30, top-p 0.95: H_last equals the teacher-forced entropy
    of the processed distribution, not the T = 1 entropy of the raw policy (the old value)."""
    args = OGERConfig(**tiny_training_args(tmp_path, max_steps=2, generation_kwargs=SAMPLER),
                      embedding_model="embedded")
    trainer = OGERTrainer(_sharp_lm(smollm2_tokenizer), args=args, train_dataset=teacher_math_dataset(),
                          processing_class=smollm2_tokenizer)
    assert trainer.sampler == SamplerSettings(temperature=0.7, top_k=30, top_p=0.95, origin=trainer.sampler.origin)
    processors, checked = _hf_processors(trainer), []
    original = trainer.oger.transform_rollout

    def spy(rollout):
        out = original(rollout)
        lengths = torch.tensor([len(c) for c in rollout.completion_ids])
        expected = _reference_last_entropy(trainer, rollout.prompt_ids, rollout.completion_ids, lengths, processors)
        raw = _reference_last_entropy(trainer, rollout.prompt_ids, rollout.completion_ids, lengths,
                                      lambda ids, logits: logits)
        online = [i for i, e in enumerate(trainer.oger.generation.entropy) if e is not None]
        got = torch.tensor([trainer.oger.generation.entropy[i] for i in online])
        checked.append((got, expected[online], raw[online]))
        return out

    monkeypatch.setattr(trainer.oger, "transform_rollout", spy)
    trainer.train()
    assert len(checked) == 2
    for got, expected, raw in checked:
        assert torch.allclose(got, expected, atol=1e-4), (got, expected)
        assert got.max() > 0.1  # not a degenerate (one-token) distribution
        assert (got - raw).abs().min() > 0.05  # the raw T = 1 entropy is another number


@pytest.mark.slow
def test_ase_behaviour_logprobs_are_those_of_the_steered_sampler(tmp_path, smollm2_tokenizer, monkeypatch):
    """Every rollout steered (unstructured random control), HF generation at T = 0.7 (generation_kwargs), top-k 30,
    top-p 0.95: the recorded behaviour log-probs equal a steered teacher-forced forward processed like generate."""
    args = ASEConfig(**tiny_training_args(tmp_path, per_device_train_batch_size=4, max_steps=2,
                                          generation_kwargs=SAMPLER),
                     num_vectors=1, bank_control="unstructured_random", steering_alpha=2.0)
    trainer = ASEGRPOTrainer(_sharp_lm(smollm2_tokenizer, seed=1), reward_funcs=[parity_reward], args=args,
                             train_dataset=doubling_dataset(), processing_class=smollm2_tokenizer)
    processors, checked = _hf_processors(trainer), []
    original = trainer._generate_and_score_completions

    def spy(inputs):
        out = original(inputs)
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
        mask = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
        width = out["completion_ids"].size(1)
        with torch.no_grad(), trainer.ase.behaviour_context("train"):  # the rollouts' steering, row by row
            logits = trainer.model(input_ids=ids, attention_mask=mask,
                                   position_ids=(mask.cumsum(1) - 1).clamp(min=0)).logits[:, -width - 1 : -1]
        scores = torch.stack([processors(ids, logits[:, t].float()) for t in range(width)], 1)
        expected = torch.log_softmax(scores, -1).gather(-1, out["completion_ids"].unsqueeze(-1)).squeeze(-1)
        plain = torch.log_softmax(logits.float(), -1).gather(-1, out["completion_ids"].unsqueeze(-1)).squeeze(-1)
        checked.append((out["sampling_per_token_logps"], expected, plain, out["completion_mask"].bool()))
        return out

    monkeypatch.setattr(trainer, "_generate_and_score_completions", spy)
    trainer.train()
    assert len(checked) == 2
    for got, expected, plain, mask in checked:
        assert torch.allclose(got[mask], expected[mask], atol=1e-4)
        assert got[mask].min() < -0.1  # not a degenerate (one-token) distribution
        assert (got[mask] - plain[mask]).abs().max() > 0.1  # the steered T = 1 log-probs are other numbers


def _oger_trainer(tmp_path, tokenizer, **overrides):
    args = OGERConfig(**tiny_training_args(tmp_path, **overrides), embedding_model="embedded")
    return OGERTrainer(_sharp_lm(tokenizer), args=args, train_dataset=teacher_math_dataset(),
                       processing_class=tokenizer)


@pytest.mark.parametrize("sampler", [SAMPLER, {"temperature": 1.4, "min_p": 0.1}])
def test_behaviour_forward_processes_the_logits_like_generate(tmp_path, smollm2_tokenizer, sampler):
    """The driver's teacher-forced behaviour forward (OGER's H_last without the generate recorder, e.g. with vLLM)
    on rows of different prompt and completion lengths, every position and the last ones only."""
    trainer = _oger_trainer(tmp_path, smollm2_tokenizer, generation_kwargs=sampler)
    prompts, completions = [[5, 6, 7], [8, 9, 10, 11, 12]], [[300, 301, 302, 303], [400, 401]]
    processors = _hf_processors(trainer)
    full = trainer.behaviour_forward("eval", prompts, completions)
    last = trainer.behaviour_forward("eval", prompts, completions, positions=torch.tensor([3, 2]))
    with torch.no_grad():
        for i, (prompt, completion) in enumerate(zip(prompts, completions)):
            ids = torch.tensor([prompt + completion])
            logits = trainer.model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
            scores = processors(ids, logits)
            logps = torch.log_softmax(scores, -1).gather(1, torch.tensor(completion)[:, None])[:, 0]
            n = len(completion)
            assert torch.allclose(full.entropies[i, :n], entropy_from_logits(scores), atol=1e-5)
            finite = torch.isfinite(logps)
            assert torch.equal(torch.isfinite(full.logps[i, :n]), finite)
            assert torch.allclose(full.logps[i, :n][finite], logps[finite], atol=1e-5)
            assert last.entropies[i, 0].item() == pytest.approx(full.entropies[i, [2, 1][i]].item(), abs=1e-6)
    with pytest.raises(ValueError, match="rows \\[1\\]"):
        trainer.behaviour_forward("eval", prompts, completions, positions=torch.tensor([3, 3]))


def test_behaviour_forward_is_trls_forward_at_the_defaults(tmp_path, smollm2_tokenizer):
    trainer = _oger_trainer(tmp_path, smollm2_tokenizer)
    prompts, completions = [[5, 6, 7], [8, 9, 10, 11, 12]], [[300, 301, 302, 303], [400, 401]]
    assert trainer.sampler.matches_trl(trainer.temperature)
    full = trainer.policy_forward(prompts, completions)
    last = trainer.behaviour_forward("eval", prompts, completions, positions=torch.tensor([4, 2]))
    assert torch.equal(last.entropies[:, 0], full.entropies[[0, 1], [3, 1]])  # bit for bit: TRL's fused forward


@pytest.mark.parametrize(("sampler", "deferred"),
                         [(None, True), ({"temperature": 0.5}, False), ({"top_p": 0.9}, False)])
def test_h_last_waits_for_trls_scoring_forward_only_when_it_is_the_sampler_distribution(
        tmp_path, smollm2_tokenizer, sampler, deferred):
    """Without the generate recorder (vLLM, ...), with TRL's scoring forward after generation: that forward's
    entropies (softmax(logits / GRPOConfig.temperature)) are H_last only when that is the sampler's distribution;
    otherwise OGER takes them from the behaviour forward."""
    trainer = _oger_trainer(tmp_path, smollm2_tokenizer, steps_per_generation=2, generation_kwargs=sampler)
    prompts, completions = [[5, 6, 7]] * 4, [[300, 301, 302], [400, 401], [500], [600, 601, 602]]
    rollout = Rollout("train", tuple(teacher_math_dataset())[:1] * 4, 4, prompts, completions, None,
                      ["x"] * 4, None, {}, None, None, offline=(False,) * 4)
    trainer.oger._recorder = None
    lengths = torch.tensor([3, 2, 1, 3])
    values, was_deferred = trainer.oger._last_token_entropy(rollout, lengths)
    assert was_deferred is deferred
    if not deferred:
        expected = _reference_last_entropy(trainer, prompts, completions, lengths, _hf_processors(trainer))
        assert torch.allclose(values, expected, atol=1e-5)


def test_a_temperature_override_is_said_once(tmp_path, smollm2_tokenizer, caplog):
    with caplog.at_level("WARNING", logger="trl_explore.driver"):
        trainer = _oger_trainer(tmp_path, smollm2_tokenizer, generation_kwargs={"temperature": 0.5})
    notes = [r.getMessage() for r in caplog.records if "overrides GRPOConfig.temperature" in r.getMessage()]
    assert notes == [("generation_kwargs['temperature']=0.5 overrides GRPOConfig.temperature=1.0 for sampling only: "
                      "TRL's loss, old_per_token_logps, entropies and entropy mask use 1.0, while OGER's H_last and "
                      "ASE-GRPO's behaviour log-probs use 0.5")]
    assert dataclasses.replace(trainer.sampler, origin=()) == SamplerSettings(temperature=0.5)
