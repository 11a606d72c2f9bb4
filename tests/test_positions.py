"""Left padding without position_ids (issue "Hardening", numerics): every forward this package makes or controls
scores a left-padded row at the positions ``generate`` used, on a model with absolute positions (tiny GPT-2), and
leaves RoPE models untouched."""

import pytest
import torch
from datasets import Dataset
from torch import nn
from transformers import AutoModelForCausalLM, GPT2Config
from trl import GRPOConfig, GRPOTrainer

from trl_explore.ase.recording import BlockReadouts
from trl_explore.ase.steering import ActivationSteeringGenerator
from trl_explore.driver import ExplorationTrainer
from trl_explore.testing import make_tiny_causal_lm
from trl_explore.trl_guards.positions import (
    absolute_position_owner,
    check_position_ids_supported,
    mask_positions,
    positions_from_mask,
)

SHORT, LONG, COMPLETION = [11, 12, 13], [21, 22, 23, 24, 25, 26, 27], [31, 32, 33, 34]  # prompts of 3 and 7 tokens


def tiny_gpt2(tokenizer, seed=0):
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=64, n_layer=2, n_head=4, n_positions=256,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=tokenizer.bos_token_id,
                        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return AutoModelForCausalLM.from_config(config)


def _trainer(tmp_path, tokenizer, model):
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2, max_steps=1,
                      use_cpu=True, bf16=False, report_to="none")
    return ExplorationTrainer(model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)], args=args,
                              train_dataset=Dataset.from_list([{"prompt": "1 + 1 ="}] * 2), processing_class=tokenizer)


def _batch(pad):
    """The short prompt left-padded next to the long one, each followed by the same completion."""
    ids = torch.tensor([[pad] * 4 + SHORT + COMPLETION, LONG + COMPLETION])
    mask = torch.tensor([[0] * 4 + [1] * 7, [1] * 11])
    return ids, mask


def test_positions_from_mask_on_hand_values():
    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
    assert positions_from_mask(mask).tolist() == [[1, 1, 0, 1, 2, 1], [0, 1, 2, 3, 1, 1], [0, 1, 2, 3, 4, 5]]
    assert positions_from_mask(mask, 2).tolist() == [[2, 1], [1, 1], [4, 5]]
    with pytest.raises(ValueError, match="length must be in"):
        positions_from_mask(mask, 7)
    with pytest.raises(ValueError, match="2-D"):
        positions_from_mask(mask[0])


def test_generate_numbers_positions_from_the_mask(smollm2_tokenizer):
    """The reference the forwards must match: HF generate scores the padded row as if it were alone."""
    model = tiny_gpt2(smollm2_tokenizer).eval()
    pad = smollm2_tokenizer.pad_token_id
    ids = torch.tensor([[pad] * 4 + SHORT, LONG])
    mask = torch.tensor([[0] * 4 + [1] * 3, [1] * 7])
    kwargs = dict(max_new_tokens=3, do_sample=False, output_scores=True, return_dict_in_generate=True,
                  pad_token_id=pad)
    padded = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
    alone = model.generate(input_ids=ids[:1, 4:], attention_mask=mask[:1, 4:], **kwargs)
    for a, b in zip(padded.scores, alone.scores):
        assert (a[0] - b[0]).abs().max() < 1e-5


def test_trl_forwards_of_the_driver_score_padded_rows_at_generate_positions(tmp_path, smollm2_tokenizer):
    trainer = _trainer(tmp_path, smollm2_tokenizer, tiny_gpt2(smollm2_tokenizer))
    ids, mask = _batch(smollm2_tokenizer.pad_token_id)
    block = ActivationSteeringGenerator(trainer.model, layer=0).decoder_block()

    def run(forward, rows):
        with torch.no_grad(), BlockReadouts(block, ids[rows], mask[rows], len(COMPLETION), 0.5, 64) as readouts:
            logps, entropies, _ = forward(trainer.model, ids[rows], mask[rows], len(COMPLETION), compute_entropy=True)
        return logps, entropies, readouts.readouts()

    padded = run(trainer._get_per_token_logps_and_entropies, slice(0, 2))
    alone = run(trainer._get_per_token_logps_and_entropies, (slice(0, 1), slice(4, None)))
    for a, b in zip(padded, alone):  # log-probs, entropies, block-0 readouts
        assert (a[0] - b[0]).abs().max() < 1e-5
    # TRL's own forward, as it is without the driver, reads the padded row 4 positions late
    trl_padded = run(lambda *a, **k: GRPOTrainer._get_per_token_logps_and_entropies(trainer, *a, **k), slice(0, 2))
    assert (trl_padded[0][0] - alone[0][0]).abs().max() > 1e-2 and (trl_padded[2][0] - alone[2][0]).abs().max() > 1e-2

    # the OGER last-token-entropy forward (prompt and completion lists, padded by the driver)
    entropies = trainer.policy_forward([SHORT, LONG], [COMPLETION, COMPLETION]).entropies.float().cpu()
    assert (entropies[0] - alone[1][0]).abs().max() < 1e-5


def test_ase_score_reads_padded_rows_at_generate_positions(smollm2_tokenizer):
    model = tiny_gpt2(smollm2_tokenizer).eval()
    steerer = ActivationSteeringGenerator(model, layer=0, alpha=0.5)
    ids, mask = _batch(smollm2_tokenizer.pad_token_id)
    prompt, prompt_mask, completion = ids[:, :7], mask[:, :7], ids[:, 7:]
    vectors = torch.randn(2, 64, generator=torch.Generator().manual_seed(0))
    routes = torch.tensor([2, 0])
    padded = steerer.score(prompt, prompt_mask, completion, torch.ones_like(completion), routes, vectors,
                           temperature=1.0, readout_fraction=0.5)
    alone = steerer.score(prompt[:1, 4:], prompt_mask[:1, 4:], completion[:1], torch.ones_like(completion[:1]),
                          routes[:1], vectors, temperature=1.0, readout_fraction=0.5)
    assert (padded[0][0] - alone[0][0]).abs().max() < 1e-5  # behaviour log-probs
    assert (padded[1][0] - alone[1][0]).abs().max() < 1e-5  # steered block-0 readout


def test_rope_models_run_without_a_hook(tmp_path, smollm2_tokenizer):
    model = make_tiny_causal_lm(smollm2_tokenizer)
    assert absolute_position_owner(model) is None
    ids, mask = _batch(smollm2_tokenizer.pad_token_id)
    hooks = lambda: sum(len(m._forward_pre_hooks) for m in model.modules())  # noqa: E731
    before = hooks()
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask).logits
        with mask_positions(model):
            assert hooks() == before
            same = model(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(plain, same)


class _NoPositionIds(nn.Module):
    """A decoder stack with an absolute position table whose forward has no position_ids parameter."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.wpe = inner, inner.wpe

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        kwargs.pop("position_ids", None)
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, **kwargs)


def test_absolute_positions_without_position_ids_are_refused_naming_the_model_type(tmp_path, smollm2_tokenizer):
    model = tiny_gpt2(smollm2_tokenizer)
    check_position_ids_supported(model)  # GPT-2 takes position_ids
    assert type(absolute_position_owner(model)).__name__ == "GPT2Model"
    model.transformer = _NoPositionIds(model.transformer)
    with pytest.raises(ValueError, match="model type 'gpt2' has absolute position embeddings .* no position_ids"):
        _trainer(tmp_path, smollm2_tokenizer, model)


def test_block_readouts_save_nothing_for_backward_under_gradient_checkpointing():
    # a readout taken on the graph was saved for backward; the checkpointed block's recomputation runs after the
    # context removed the hook, and torch refused the different count of saved tensors (seen with transformers 5.17)
    torch.manual_seed(0)
    block = torch.nn.Linear(4, 4)
    x = torch.randn(2, 5, 4, requires_grad=True)
    input_ids, mask = torch.zeros(2, 5, dtype=torch.long), torch.ones(2, 5, dtype=torch.long)
    with BlockReadouts(block, input_ids, mask, logits_to_keep=2, fraction=1.0, hidden_size=4) as readouts:
        y = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
    y.sum().backward()  # recomputes the block without the hook
    assert torch.equal(readouts.readouts(), block(x)[:, 4].detach())  # prompt 3 + the last of 2 completion tokens
    assert not readouts.readouts().requires_grad
    assert torch.allclose(x.grad, block.weight.sum(0).expand(2, 5, 4))
