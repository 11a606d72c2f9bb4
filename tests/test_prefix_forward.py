"""The shared-prompt forward (trl_explore.trl_guards.prefix_forward): TRL's log-probs, entropies and gradients with
each group's prompt run once, where it applies, and TRL's own forward elsewhere."""

import logging

import pytest
import torch
import transformers
from packaging.version import Version
from transformers import GPT2Config, GPT2LMHeadModel
from trl.trainer.utils import add_fused_lm_head

from trl_explore import OGERConfig, OGERTrainer
from trl_explore.testing import make_tiny_causal_lm, teacher_math_dataset, tiny_oger_args
from trl_explore.trl_guards.prefix_forward import (
    can_share_prompt,
    group_chunks,
    share_prompt_blocker,
    shared_prompt_forward,
    shared_prompt_groups,
)

PROMPT, COMPLETION = 5, 4
CACHE_ARGUMENT = Version(transformers.__version__) >= Version("5.20")
"""The shared prompt forward needs the backbone's ``cache`` argument (transformers 5.20 on); with an older version
(the vLLM environment's, or what ``pip install ".[vllm]"`` resolves) it is refused and TRL's forward runs."""
needs_cache_argument = pytest.mark.skipif(not CACHE_ARGUMENT, reason="transformers < 5.20: the shared prompt forward "
                                          "is refused there (test_older_transformers_fall_back_to_trls_forward)")


def _batch(prompts, lengths, seed=0):
    """TRL's layout: left-padded prompts of PROMPT columns, right-padded completions of COMPLETION columns; row r
    has prompt ``prompts[r]`` (an index into random prompts of lengths 5, 3, 4) and ``lengths[r]`` completion
    tokens."""
    g = torch.Generator().manual_seed(seed)
    texts = [torch.randint(10, 1000, (n,), generator=g) for n in (5, 3, 4)]
    rows = len(prompts)
    ids = torch.zeros(rows, PROMPT + COMPLETION, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, (p, n) in enumerate(zip(prompts, lengths)):
        ids[r, PROMPT - len(texts[p]):PROMPT] = texts[p]
        mask[r, PROMPT - len(texts[p]):PROMPT] = 1
        ids[r, PROMPT:PROMPT + n] = torch.randint(10, 1000, (n,), generator=g)
        mask[r, PROMPT:PROMPT + n] = 1
    return ids, mask


def test_groups_are_runs_of_equal_prompt_columns():
    ids, mask = _batch([0, 0, 0, 1, 1, 2], [4, 2, 3, 1, 4, 4])
    assert shared_prompt_groups(ids, mask, COMPLETION) == [(0, 3), (3, 5), (5, 6)]
    ids, mask = _batch([0, 1, 0], [1, 1, 1])  # equal prompts that are not consecutive are not a group
    assert shared_prompt_groups(ids, mask, COMPLETION) is None
    assert shared_prompt_groups(ids[:1], mask[:1], COMPLETION) is None  # one row: nothing to share
    ids, mask = _batch([0, 0], [1, 1])
    assert shared_prompt_groups(ids[:, PROMPT - 1:], mask[:, PROMPT - 1:], COMPLETION) is None  # a 1-column prompt


def test_chunks_keep_whole_groups():
    groups = [(0, 4), (4, 8), (8, 12)]
    assert group_chunks(groups, None) == [groups]
    assert group_chunks(groups, 4) == [[(0, 4)], [(4, 8)], [(8, 12)]]
    assert group_chunks(groups, 6) == [[(0, 4), (4, 8)], [(8, 12)]]
    assert group_chunks([(0, 3), (3, 4)], 2) == [[(0, 3)], [(3, 4)]]


@pytest.mark.parametrize("arch, temperature", [("llama", 1.0), ("llama", 0.7), ("qwen2", 1.0)])
def test_equals_trls_forward_in_values_and_gradients(smollm2_tokenizer, arch, temperature):
    """Hand-built batch of two groups of 3 (prompts of 5 and 3 tokens, completions of 1-4 tokens): log-probs and
    entropies of the completion tokens as TRL's fused forward computes them, and the gradient of their sum."""
    model = make_tiny_causal_lm(smollm2_tokenizer, arch=arch)
    add_fused_lm_head(model, temperature=temperature, outputs=("log_probs", "entropy"))
    model.train()
    ids, mask = _batch([0, 0, 0, 1, 1, 1], [4, 2, 3, 1, 4, 4])
    scored = mask[:, PROMPT:].bool()

    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :-COMPLETION] = -100
    reference = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True)
    (reference.log_probs[:, -COMPLETION:] * scored).sum().backward()
    reference_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()

    groups = shared_prompt_groups(ids, mask, COMPLETION)
    logps, entropies = shared_prompt_forward(model, ids, mask, COMPLETION, groups, compute_entropy=True)
    (logps * scored).sum().backward()

    assert logps.shape == entropies.shape == (6, COMPLETION)
    torch.testing.assert_close(logps[scored], reference.log_probs[:, -COMPLETION:][scored], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropies[scored], reference.entropy[:, -COMPLETION:][scored], atol=1e-5, rtol=1e-5)
    for p, expected in zip(model.parameters(), reference_grads):
        torch.testing.assert_close(p.grad, expected, atol=1e-5, rtol=1e-4)


def test_older_transformers_fall_back_to_trls_forward(smollm2_tokenizer):
    model = make_tiny_causal_lm(smollm2_tokenizer)
    if CACHE_ARGUMENT:
        assert share_prompt_blocker(model, 1) is None
    else:
        assert share_prompt_blocker(model, 1) == ("LlamaForCausalLM has no backbone taking a key/value cache (PEFT, "
                                                  "or transformers < 5.20)")


@needs_cache_argument
def test_applies_only_where_the_forward_is_the_same(smollm2_tokenizer):
    model = make_tiny_causal_lm(smollm2_tokenizer)
    assert can_share_prompt(model, num_processes=1) and share_prompt_blocker(model, 1) is None
    assert not can_share_prompt(model, num_processes=2)  # DDP / FSDP / DeepSpeed expect one forward call a step
    assert share_prompt_blocker(model, 2).startswith("2 processes")
    handle = model.model.layers[0].register_forward_hook(lambda *args: None)  # e.g. ASE's steering
    assert not can_share_prompt(model, num_processes=1)
    assert share_prompt_blocker(model, 1) == "forward hooks on model.layers.0"
    handle.remove()
    model.gradient_checkpointing_enable()
    assert not can_share_prompt(model, num_processes=1)
    assert share_prompt_blocker(model, 1).startswith("gradient checkpointing is on")
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(smollm2_tokenizer), n_positions=32, n_embd=16, n_layer=1,
                                      n_head=2))  # absolute positions: left-padded columns would be read elsewhere
    assert not can_share_prompt(gpt2, num_processes=1)


def test_a_run_that_cannot_share_says_why_once(tmp_path, smollm2_tokenizer, caplog):
    """share_prompt_forward asked for where it cannot apply (gradient checkpointing): TRL's forward, one warning."""
    args = OGERConfig(**tiny_oger_args(tmp_path, share_prompt_forward=True, gradient_checkpointing=True, max_steps=1))
    trainer = OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=args, train_dataset=teacher_math_dataset(),
                          processing_class=smollm2_tokenizer)
    with caplog.at_level(logging.WARNING, logger="trl_explore.driver.forwards"):
        trainer.train()
    said = [r.getMessage() for r in caplog.records if r.name == "trl_explore.driver.forwards"]
    assert said == ["share_prompt_forward is on, but this forward runs TRL's: gradient checkpointing is on (it turns "
                    "the key/value cache off)"]


@needs_cache_argument
def test_oger_training_is_the_same_with_the_shared_forward(tmp_path, smollm2_tokenizer, monkeypatch):
    """Two OGER steps (groups of 4 with a teacher row each), TRL's forward against the shared one: the logged loss,
    entropy and rewards agree to float rounding, and so do the trained weights."""
    import trl_explore.driver.forwards as forwards

    calls = []
    real = forwards.shared_prompt_forward
    monkeypatch.setattr(forwards, "shared_prompt_forward", lambda *a, **k: calls.append(1) or real(*a, **k))
    runs = {}
    for shared in (False, True):
        calls.clear()
        torch.manual_seed(0)
        args = OGERConfig(**tiny_oger_args(tmp_path / str(shared), share_prompt_forward=shared, seed=0,
                                            gradient_checkpointing=False))
        trainer = OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=args, train_dataset=teacher_math_dataset(),
                              processing_class=smollm2_tokenizer)
        trainer.train()
        logs = [entry for entry in trainer.state.log_history if "loss" in entry]
        runs[shared] = (logs, [p.detach().clone() for p in trainer.model.parameters()], len(calls))
    (plain_logs, plain_weights, plain_calls), (shared_logs, shared_weights, shared_calls) = runs[False], runs[True]
    assert plain_calls == 0 and shared_calls >= 2  # the loss forward of each step at least
    assert len(plain_logs) == len(shared_logs) == 2
    for a, b in zip(plain_logs, shared_logs):
        for key in ("loss", "entropy", "reward", "completions/mean_length"):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-5), key
    for a, b in zip(plain_weights, shared_weights):
        torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-3)
