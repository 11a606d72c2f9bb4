"""Entropy masking (TRL's `top_entropy_quantile`) with OGER's teacher rows: one threshold over every token of the
hybrid batch; the high-entropy tokens of both kinds are trained (TRL's objective / the shaping term) and enter the
entropy bonus; the others get neither. Checked on one micro-batch against a plain forward and the formulas."""

import pytest
import torch

from trl_explore import OGERConfig, OGERTrainer
from trl_explore.oger.entropy import entropy_from_logits
from trl_explore.testing import make_tiny_causal_lm, teacher_math_dataset, tiny_training_args

COEF = 0.01


def _batch():
    g = torch.Generator().manual_seed(0)
    prompt_ids = torch.randint(100, 1000, (4, 3), generator=g)
    completion_ids = torch.randint(100, 1000, (4, 4), generator=g)
    completion_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0]])
    advantages = torch.tensor([0.5, -1.0, 1.5, -0.5])
    is_offline = torch.tensor([False, False, True, False])  # row 2: a teacher trajectory, 4 tokens
    return {"prompt_ids": prompt_ids, "prompt_mask": torch.ones_like(prompt_ids), "completion_ids": completion_ids,
            "completion_mask": completion_mask, "advantages": advantages,
            "num_items_in_batch": (completion_mask * (~is_offline).unsqueeze(1)).sum(),  # as the driver counts
            "num_items_before_drops": completion_mask.sum(),
            "dropped_from_objective": is_offline,  # OGER's drop_rows: its teacher rows leave TRL's objective
            "is_offline": is_offline}


def _reference(model, inputs, quantile, loss_type):
    """The loss by hand: ratio 1 (one iteration), so TRL's per-token objective is -A; shaping -A p / (p + 0.1)."""
    with torch.no_grad():
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
        logits = model(input_ids=ids).logits[:, 2:-1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)
    entropies, p = entropy_from_logits(logits), logp.exp()
    mask = inputs["completion_mask"].float()
    threshold = torch.quantile(entropies[mask.bool()], 1 - quantile)  # over all 13 tokens, teacher ones included
    high = ((entropies >= threshold) & mask.bool()).float() if quantile < 1 else mask
    adv, offline = inputs["advantages"].unsqueeze(1), inputs["is_offline"].unsqueeze(1)
    per_token = torch.where(offline, -adv * p / (p + 0.1), -adv.expand(-1, 4)) * high
    if loss_type == "grpo":
        policy = ((per_token * mask).sum(1) / mask.sum(1)).mean()
    else:  # dapo: the batch's token count
        policy = (per_token * mask).sum() / mask.sum()
    bonus = (entropies * high * mask).sum() / (high * mask).sum()
    online_only = (entropies * high * mask * ~offline).sum() / (high * mask * ~offline).sum()
    return policy - COEF * bonus, bonus, online_only, high


@pytest.mark.slow
@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
@pytest.mark.parametrize("quantile", [1.0, 0.5, 0.2])
def test_one_rule_for_online_and_teacher_tokens(tmp_path, smollm2_tokenizer, loss_type, quantile):
    model = make_tiny_causal_lm(smollm2_tokenizer, seed=3)
    with torch.no_grad():  # entropies of a few nats that differ from token to token (not all near log V)
        model.model.norm.weight.mul_(8.0)
    args = OGERConfig(**tiny_training_args(tmp_path, max_completion_length=5, loss_type=loss_type,
                                           top_entropy_quantile=quantile, entropy_coef=COEF),
                      embedding_model="embedded")
    trainer = OGERTrainer(model, args=args, train_dataset=teacher_math_dataset(), processing_class=smollm2_tokenizer)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train() in a real run
    inputs = _batch()
    loss = trainer._compute_loss(trainer.model, inputs)
    expected, bonus, online_only, high = _reference(model, inputs, quantile, loss_type)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-7)
    if quantile == 0.5:  # the rule matters on this batch: 2 of the 4 teacher tokens are above the threshold ...
        assert high[2].tolist() == [1.0, 1.0, 0.0, 0.0]
        # ... and the bonus differs from the mean over the online tokens alone (TRL's, the old behaviour)
        assert abs(bonus.item() - online_only.item()) > 1e-3
    if quantile == 0.2:  # no teacher token is above the threshold: no shaping term at all
        assert high[2].sum() == 0
