"""Issue 30, item 3: every component's state follows the weights wherever Transformers reloads them. With
``load_best_model_at_end`` Trainer reloads the best checkpoint's weights at the end of training; ASE's steering bank
(and OGER+ASE's) must come back with them, so that the model saved afterwards is one checkpoint, not a mix."""

import os

import pytest
import torch
from datasets import Dataset
from transformers import TrainerCallback

from trl_explore import ASEConfig, ASEGRPOTrainer, OGERASEConfig, OGERASETrainer
from trl_explore.ase.bank import SteeringVectorBank
from trl_explore.ase.component import BANK_DIR
from trl_explore.oger.reward import OGERRewardFunction
from trl_explore.testing import DOUBLING_TEACHERS, make_tiny_causal_lm, parity_reward


class BestAtStepOne(TrainerCallback):
    """A made-up evaluation metric, lowest at step 1, so that checkpoint-1 is the best one."""

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        metrics["eval_pick"] = float(state.global_step)


def _dataset():
    return Dataset.from_list([
        {"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "answer": str(2 * i), "problem_id": f"p{i}",
         "offline_completions": list(DOUBLING_TEACHERS[i]), "offline_teachers": ["t"] * len(DOUBLING_TEACHERS[i])}
        for i in range(2)
    ])


def _trainer(kind, tmp_path, tokenizer):
    config_cls, trainer_cls = (ASEConfig, ASEGRPOTrainer) if kind == "ase" else (OGERASEConfig, OGERASETrainer)
    extra = {} if kind == "ase" else {"embedding_model": "embedded", "num_replacements": 0}
    args = config_cls(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=6, per_device_eval_batch_size=6,
        num_generations=6, max_completion_length=8, max_steps=3, learning_rate=1e-2, logging_steps=1,
        report_to="none", use_cpu=True, bf16=False, seed=0, log_completions=False, num_vectors=2, pca_dim=4,
        kmeans_n_init=2, steering_alpha=4.0, min_pairs_per_cluster=1, eval_strategy="steps", eval_steps=1,
        save_strategy="steps", save_steps=1, load_best_model_at_end=True, metric_for_best_model="pick",
        greater_is_better=False, **extra)
    reward_funcs = [parity_reward] + ([OGERRewardFunction(verifier=parity_reward)] if kind != "ase" else [])
    data = _dataset().remove_columns(["offline_completions", "offline_teachers"]) if kind == "ase" else _dataset()
    return trainer_cls(make_tiny_causal_lm(tokenizer), reward_funcs=reward_funcs, args=args, train_dataset=data,
                       eval_dataset=data.select([0]), processing_class=tokenizer, callbacks=[BestAtStepOne()])


def _saved_bank(folder):
    return SteeringVectorBank.load(os.path.join(folder, BANK_DIR)).state_dict()


def _same_bank(a, b):
    return a.keys() == b.keys() and all(
        torch.equal(v, b[k]) if isinstance(v, torch.Tensor) else v == b[k] for k, v in a.items())


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["ase", "oger_ase"])
def test_load_best_model_at_end_restores_the_bank_with_the_weights(kind, tmp_path, smollm2_tokenizer):
    trainer = _trainer(kind, tmp_path, smollm2_tokenizer)
    trainer.train()
    best, last = tmp_path / "out" / "checkpoint-1", tmp_path / "out" / "checkpoint-3"
    assert trainer.state.best_model_checkpoint == str(best)
    assert not _same_bank(_saved_bank(best), _saved_bank(last))  # the bank moved after step 1: the test can fail
    assert _same_bank(trainer.ase.bank.state_dict(), _saved_bank(best))  # was: checkpoint-3's bank
    trainer.save_model(str(tmp_path / "final"))  # one checkpoint's weights and bank, not a mix
    assert _same_bank(_saved_bank(tmp_path / "final"), _saved_bank(best))


def test_the_best_model_reload_resyncs_vllm_and_loads_every_component(monkeypatch):
    """The override without a training run: every component loads from the best checkpoint, and vLLM (whose weights
    TRL syncs only when the step changed) is told to take the reloaded weights at its next generation."""
    from trl_explore.driver.components import Component as ComponentBase
    from trl_explore.driver.resume import ResumableTrainerMixin

    class Base:
        def _load_best_model(self):
            self.reloaded = True

    class Component(ComponentBase):
        name = "recorder"

        def __init__(self):
            self.loaded = []

        def load(self, checkpoint):
            self.loaded.append(checkpoint)

    class Trainer(ResumableTrainerMixin, Base):
        pass

    trainer = Trainer()
    trainer.components = [Component(), Component()]
    trainer.state = type("State", (), {"best_model_checkpoint": "out/checkpoint-1"})()
    trainer.use_vllm, trainer._last_loaded_step = True, 3
    trainer._load_best_model()
    assert trainer.reloaded and [c.loaded for c in trainer.components] == [["out/checkpoint-1"]] * 2
    assert trainer._last_loaded_step == -1
