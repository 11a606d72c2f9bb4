"""A third exploration method written outside the package, in this one file, composed with OGER and with ASE-GRPO.

The method: entropy-based advantage shaping ("Reasoning with Exploration: An Entropy Perspective", Cheng et al.,
arXiv 2506.14758, one of the entropy-exploration works the OGER paper cites). Each token's advantage gets a bonus from
the policy's (detached) entropy at that token, clipped so that it never flips the advantage's sign:

    psi_t = min(alpha * H_t.detach(), |A| / kappa),        A_t <- A + psi_t

It needs one hook (``advantages``), one declaration (the loss forward and its entropies) and an options dataclass; no
file under ``trl_explore/`` knows it. The tests check the equation on hand-computed values, that TRL's objective
receives the shaped advantages in runs composed with OGER and with ASE-GRPO, and that such a run resumes exactly.
"""

from dataclasses import dataclass, field

import pytest
import torch
from datasets import Dataset
from trl import GRPOTrainer, TrlParser

from trl_explore import (
    ASEComponent,
    ASEOptions,
    ComponentOptions,
    ExplorationConfig,
    ExplorationTrainer,
    OGERComponent,
    OGEROptions,
    OGERRewardFunction,
)
from trl_explore.driver.components import Component, Needs
from trl_explore.oger.entropy import entropy_from_logits
from trl_explore.testing import parity_reward

NUM_GENERATIONS = 4
TEACHERS = [["Zero plus zero is 0, so the answer is \\boxed{0}."], ["One plus one is 2, so the answer is \\boxed{2}."]]


# ---------------------------------------------------------------------------------------------------- the method
def entropy_shaped_advantages(advantages: torch.Tensor, entropies: torch.Tensor, alpha: float, kappa: float):
    """``A + min(alpha * H.detach(), |A| / kappa)`` (Cheng et al. 2025, Eq. of the entropy-based advantage).

    Args:
        advantages: ``[B, 1]`` (sequence-level, broadcast over tokens) or ``[B, T]``.
        entropies: ``[B, T]`` token entropies of the policy, nats.
        alpha: entropy weight (> 0); kappa: clip ratio (> 1: the bonus stays below |A|, so the sign is kept).

    Returns:
        ``[B, T]`` shaped advantages.
    """
    bonus = torch.minimum(alpha * entropies.detach(), advantages.abs() / kappa)
    return advantages + bonus


@dataclass
class EntropyShapingOptions(ComponentOptions):
    """Options of the entropy-based advantage shaping."""

    section = "Entropy advantage shaping"

    shaping_alpha: float = field(default=0.4, metadata={"help": "alpha: weight of the token entropy (nats)."})
    shaping_kappa: float = field(default=2.0, metadata={"help": "kappa: the bonus is at most |A| / kappa."})

    def validate(self):
        if not self.shaping_alpha > 0:
            raise ValueError(f"shaping_alpha must be > 0, got {self.shaping_alpha}")
        if not self.shaping_kappa > 1:
            raise ValueError(f"shaping_kappa must be > 1 (the bonus must not flip an advantage), "
                             f"got {self.shaping_kappa}")


class EntropyShaping(Component):
    """The method as a component: reads the loss forward's entropies, adds the bonus to the advantages."""

    name = "entropy_shaping"
    options_class = EntropyShapingOptions

    def needs(self, mode):
        return Needs(loss_forward=mode == "train")

    def advantages(self, call):
        if call.mode != "train":
            return call.advantages
        shaped = entropy_shaped_advantages(call.advantages, call.forward.entropies, self.options.shaping_alpha,
                                           self.options.shaping_kappa)
        mask = call.inputs["completion_mask"].bool()
        self.trainer._metrics[call.mode]["entropy_shaping/bonus_mean"].append(
            (shaped - call.advantages).expand_as(mask)[mask].mean().item())
        return shaped


# ---------------------------------------------------------------------------------------------------- the equation
def test_shaped_advantages_on_hand_computed_values():
    advantages = torch.tensor([[1.0], [-0.5]])
    entropies = torch.tensor([[0.5, 3.0], [1.0, 0.0]])
    # row 0: |A|/kappa = 0.5; bonus min(0.2, 0.5) = 0.2 and min(1.2, 0.5) = 0.5 -> 1.2, 1.5
    # row 1: |A|/kappa = 0.25; bonus min(0.4, 0.25) = 0.25 and min(0.0, 0.25) = 0 -> -0.25, -0.5 (sign kept)
    expected = torch.tensor([[1.2, 1.5], [-0.25, -0.5]])
    assert torch.allclose(entropy_shaped_advantages(advantages, entropies, alpha=0.4, kappa=2.0), expected)


def test_the_bonus_carries_no_gradient_to_the_entropy():
    entropies = torch.tensor([[0.5, 3.0]], requires_grad=True)
    assert not entropy_shaped_advantages(torch.tensor([[1.0]]), entropies, alpha=0.4, kappa=2.0).requires_grad


def test_options_are_checked_and_read_from_the_command_line():
    with pytest.raises(ValueError, match="shaping_kappa must be > 1"):
        EntropyShapingOptions(shaping_kappa=1.0)
    parser = TrlParser((ExplorationConfig, EntropyShapingOptions))
    config, options = parser.parse_args_into_dataclasses(
        ["--output_dir", "out", "--bf16", "false", "--shaping_alpha", "0.1"])
    assert isinstance(config, ExplorationConfig) and options == EntropyShapingOptions(shaping_alpha=0.1)


# ---------------------------------------------------------------------------------------------------- composed runs
def _dataset():
    return Dataset.from_list([
        {"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "answer": str(2 * i), "problem_id": f"p{i}",
         "offline_completions": TEACHERS[i], "offline_teachers": ["teacher"]}
        for i in range(2)
    ])


def _trainer(method, tmp_path, tokenizer, model, **overrides):
    """An ExplorationTrainer with ``[OGER or ASE, EntropyShaping]`` (no preset class, no config subclass)."""
    args = ExplorationConfig(**{
        **dict(output_dir=str(tmp_path), per_device_train_batch_size=NUM_GENERATIONS, num_generations=NUM_GENERATIONS,
               max_completion_length=8, max_steps=2, learning_rate=1e-3, logging_steps=1, report_to="none",
               save_strategy="no", use_cpu=True, bf16=False, seed=0, log_completions=False),
        **overrides,
    })
    if method == "oger":
        first = OGERComponent(OGEROptions(embedding_model="embedded"))
        rewards = [parity_reward, OGERRewardFunction(verifier=parity_reward)]
    else:
        first = ASEComponent(ASEOptions(num_vectors=1, pca_dim=4, kmeans_n_init=2, steering_alpha=4.0,
                                        min_pairs_per_cluster=1))
        rewards = [parity_reward]
    return ExplorationTrainer(model, reward_funcs=rewards, args=args, train_dataset=_dataset(),
                              processing_class=tokenizer, components=[first, EntropyShaping(EntropyShapingOptions())])


@pytest.mark.slow
@pytest.mark.parametrize("method", ["oger", "ase"])
def test_trl_objective_receives_the_shaped_advantages(method, tmp_path, smollm2_tokenizer, tiny_model, monkeypatch):
    trainer = _trainer(method, tmp_path, smollm2_tokenizer, tiny_model)
    checked = []
    objective = GRPOTrainer._compute_loss

    def spy(self, model, batch):  # TRL's objective, called by the driver with its batch copy
        if model.training:
            ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
            mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
            with torch.no_grad():  # an independent forward: the policy has not moved within this micro-step
                logits = model(input_ids=ids, attention_mask=mask).logits[:, -batch["completion_ids"].size(1) - 1 : -1]
            entropies = entropy_from_logits(logits.float() / self.temperature)
            checked.append((batch["advantages"].clone(), entropies, batch["completion_mask"].bool()))
        return objective(self, model, batch)

    monkeypatch.setattr(GRPOTrainer, "_compute_loss", spy)
    arrived = []  # the micro-batches as they reach the driver's loss (its batch copy then goes to TRL's objective)
    driver_loss = trainer._compute_loss
    trainer._compute_loss = lambda model, inputs: arrived.append(dict(inputs)) or driver_loss(model, inputs)
    trainer.train()

    assert trainer.state.global_step == 2 and len(checked) == 2
    for (shaped, entropies, mask), batch in zip(checked, arrived):
        assert shaped.shape == mask.shape  # [B, T]: token-level advantages reached TRL
        base = batch["advantages"].unsqueeze(1)
        if "dropped_from_objective" in batch:  # OGER's teacher rows left TRL's objective (Component.drop_rows)
            kept = ~batch["dropped_from_objective"]
            keys = ("ase_route", "sampling_per_token_logps")
            base, batch = base[kept], {k: batch[k][kept] for k in keys if k in batch}
        if method == "ase" and "sampling_per_token_logps" in batch:  # ASE multiplied its IS weights in first
            clean = (batch["ase_route"] <= 0)[:, None].expand_as(mask)
            base, shaped, entropies, mask = base.expand_as(mask)[clean], shaped[clean], entropies[clean], mask[clean]
        expected = entropy_shaped_advantages(base, entropies, 0.4, 2.0)
        assert torch.allclose(shaped.expand_as(expected)[mask.expand_as(expected)],
                              expected[mask.expand_as(expected)], atol=1e-5)
    history = {k: v for entry in trainer.state.log_history for k, v in entry.items()}
    assert history["entropy_shaping/bonus_mean"] > 0
    prefix = "oger/offline_fraction" if method == "oger" else "ase/num_pairs"
    assert prefix in history  # the other method ran alongside


@pytest.mark.slow
def test_composed_run_resumes_exactly(tmp_path, smollm2_tokenizer, make_tiny_lm):
    full = _trainer("ase", tmp_path / "full", smollm2_tokenizer, make_tiny_lm(),
                    save_strategy="steps", save_steps=1, steps_per_generation=2, per_device_train_batch_size=2)
    full.train()
    resumed = _trainer("ase", tmp_path / "resumed", smollm2_tokenizer, make_tiny_lm(seed=1),
                       steps_per_generation=2, per_device_train_batch_size=2)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-1"))  # inside a generation
    for (name, a), b in zip(full.model.named_parameters(), resumed.model.parameters()):
        assert torch.equal(a, b), name
    losses = [{e["step"]: e["loss"] for e in t.state.log_history if "loss" in e} for t in (full, resumed)]
    assert losses[0][2] == losses[1][2]
    assert torch.equal(full.component("ase").bank.vectors, resumed.component("ase").bank.vectors)
