"""Rows a component drops (``Component.drop_rows``) leave TRL's objective with its normaliser: for every TRL 1.16
``loss_type``, the loss and gradients equal those of a batch built without those rows."""

import pytest
import torch

from trl_explore import ExplorationConfig, ExplorationTrainer
from trl_explore.driver.components import Component
from trl_explore.driver.config import TRL_CHOICES
from trl_explore.driver.objective import DROPPED, ITEMS_BEFORE_DROPS, objective_share, take_rows
from trl_explore.testing import doubling_dataset, parity_reward, tiny_training_args


def test_objective_share_on_hand_values():
    dropped = torch.tensor([False, True, False, True])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1]])
    assert objective_share("grpo", dropped, mask).item() == pytest.approx(0.5)
    assert objective_share("bnpo", dropped, mask).item() == pytest.approx(5 / 9)
    assert objective_share("dapo", dropped, mask, 5, 20).item() == pytest.approx(0.25)
    with pytest.raises(ValueError, match="needs num_items"):
        objective_share("dapo", dropped, mask)


def _inputs(rows):
    g = torch.Generator().manual_seed(0)
    completion_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])[:rows]
    return {
        "prompt_ids": torch.randint(100, 1000, (rows, 3), generator=g),
        "prompt_mask": torch.ones(rows, 3, dtype=torch.long),
        "completion_ids": torch.randint(100, 1000, (rows, 4), generator=g),
        "completion_mask": completion_mask,
        "advantages": torch.tensor([1.0, -0.5, 2.0, -1.5, 0.7])[:rows],
        "old_per_token_logps": -torch.rand(rows, 4, generator=g) - 1.0,  # a ratio away from 1: clipping counts
    }


@pytest.mark.parametrize("loss_type", TRL_CHOICES["loss_type"])
def test_dropped_rows_leave_every_loss_type(tmp_path, smollm2_tokenizer, make_tiny_lm, loss_type):
    level = "sequence" if loss_type == "luspo" else "token"
    args = ExplorationConfig(**tiny_training_args(tmp_path, loss_type=loss_type, importance_sampling_level=level,
                                                  max_completion_length=5, entropy_coef=0.01, beta=0.0))
    trainer = ExplorationTrainer(make_tiny_lm(seed=3), reward_funcs=[parity_reward], args=args,
                                 processing_class=smollm2_tokenizer, train_dataset=doubling_dataset(2))
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train() in a real run
    full = _inputs(5)
    dropped = torch.tensor([False, True, False, True, False])
    kept_tokens = (full["completion_mask"] * (~dropped)[:, None]).sum()
    full.update({DROPPED: dropped, "num_items_in_batch": kept_tokens,
                 ITEMS_BEFORE_DROPS: full["completion_mask"].sum()})
    smaller = take_rows({k: v for k, v in full.items() if k not in (DROPPED, ITEMS_BEFORE_DROPS)}, ~dropped)
    smaller["num_items_in_batch"] = kept_tokens  # a batch built without the rows counts only its own tokens

    results = []
    for inputs in (full, smaller):
        trainer.model.zero_grad()
        loss = trainer._compute_loss(trainer.model, inputs)
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in trainer.model.parameters() if p.grad is not None]))
    (loss_a, grads_a), (loss_b, grads_b) = results
    torch.testing.assert_close(loss_a, loss_b, rtol=1e-5, atol=1e-7)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)


class DropSecond(Component):
    name = "drop_second"

    def drop_rows(self, batch):
        return torch.arange(batch.rollout.num_rows) % 2 == 1


def test_the_generation_batch_counts_only_the_kept_tokens(tmp_path, smollm2_tokenizer, make_tiny_lm):
    args = ExplorationConfig(**tiny_training_args(tmp_path, max_completion_length=6))
    trainer = ExplorationTrainer(make_tiny_lm(), reward_funcs=[parity_reward], args=args,
                                 processing_class=smollm2_tokenizer, train_dataset=doubling_dataset(2),
                                 components=[DropSecond()])
    trainer.model.train()
    rows = [dict(doubling_dataset(2)[0])] * 4
    output = trainer._generate_and_score_completions(rows)
    mask = output["completion_mask"]
    assert output[DROPPED].tolist() == [False, True, False, True]
    assert output[ITEMS_BEFORE_DROPS].item() == mask.sum().item()
    assert output["num_items_in_batch"].item() == mask[[0, 2]].sum().item()


@pytest.mark.slow
def test_a_process_whose_micro_batch_is_all_dropped_keeps_step_with_the_others(tmp_path):
    """Two processes; process 0 drops every row of its micro-batches. TRL's objective still runs there (its metric
    gathers are collectives), with its term zeroed: both processes finish, process 1's rows train."""
    import json
    from pathlib import Path

    from trl_explore.testing import run_two_cpu_processes

    script = Path(__file__).parent / "scripts" / "all_rows_dropped_two_process.py"
    result = run_two_cpu_processes(script, tmp_path, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert len(ranks[0]["losses"]) == len(ranks[1]["losses"]) == 2
    assert ranks[0]["changed"] == ranks[1]["changed"] > 0  # DDP: one update for both, from process 1's rows
