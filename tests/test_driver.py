"""ExplorationTrainer (trl_explore/driver/trainer.py): when each hook of trl_explore/driver/components.py runs, what
it receives, and what its result changes, on a tiny model with recording components."""

import dataclasses

import pytest
import torch
from trl import GRPOConfig, GRPOTrainer

from trl_explore import ExplorationConfig, ExplorationTrainer
from trl_explore.driver.components import (
    Component,
    ForwardCall,
    ForwardResult,
    LossCall,
    Needs,
    Rollout,
    SamplingCall,
    ScoredBatch,
    TrainerPlan,
)
from trl_explore.testing import doubling_dataset, parity_reward, tiny_training_args


class Recorder(Component):
    """Records every hook call (name, the value's type, its mode) and optionally changes results."""

    name = "recorder"

    def __init__(self, needs=Needs(loss_forward=True), scale_advantages=1.0, mark_first_offline=False):
        super().__init__()
        self.calls, self._needs = [], needs
        self.scale_advantages, self.mark_first_offline = scale_advantages, mark_first_offline

    def _record(self, hook, value):
        self.calls.append((hook, type(value).__name__, getattr(value, "mode", None)))

    def prepare(self, plan):
        self._record("prepare", plan)
        return super().prepare(plan)

    def setup(self, trainer):
        self.calls.append(("setup", None, None))
        super().setup(trainer)

    def needs(self, mode):
        return self._needs

    def sampling_context(self, call):
        self._record("sampling_context", call)

    def transform_rollout(self, rollout):
        self._record("transform_rollout", rollout)
        self.seen_offline = rollout.offline
        if self.mark_first_offline:
            rollout = dataclasses.replace(rollout, offline=(True,) + rollout.offline[1:])
        return rollout

    def forward_context(self, call):
        self._record(f"forward_context:{call.kind}", call)

    def observe_forward(self, result):
        self._record(f"observe_forward:{result.call.kind}", result)

    def reward_fields(self, rollout):
        self._record("reward_fields", rollout)
        return {}

    def batch_fields(self, batch):
        self._record("batch_fields", batch)
        return {}

    def loss_batch(self, call):
        self._record("loss_batch", call)
        return call.batch

    def advantages(self, call):
        self._record("advantages", call)
        return call.advantages * self.scale_advantages

    def extra_loss(self, call):
        self._record("extra_loss", call)
        return call.loss

    def step_end(self, state):
        self.calls.append(("step_end", None, state.global_step))


def _trainer(tmp_path, tokenizer, model, components, reward_funcs=(parity_reward,), **overrides):
    args = ExplorationConfig(**tiny_training_args(tmp_path / "out", **overrides))
    return ExplorationTrainer(model, reward_funcs=list(reward_funcs) if reward_funcs else None, args=args,
                              train_dataset=doubling_dataset(2), processing_class=tokenizer, components=components)


def test_construction_hooks_and_component_lookup(tmp_path, smollm2_tokenizer, tiny_model):
    recorder = Recorder()
    trainer = _trainer(tmp_path, smollm2_tokenizer, tiny_model, [recorder])
    assert [c[0] for c in recorder.calls] == ["prepare", "setup"]
    assert recorder.calls[0][1] == "TrainerPlan" and recorder.trainer is trainer
    assert trainer.component("recorder") is recorder
    with pytest.raises(KeyError, match=r"no component 'oger'; this trainer has \['recorder'\]"):
        trainer.component("oger")


@pytest.mark.slow
def test_hooks_run_in_phase_order_with_the_values_they_document(tmp_path, smollm2_tokenizer, tiny_model):
    recorder = Recorder(needs=Needs(loss_forward=True))
    trainer = _trainer(tmp_path, smollm2_tokenizer, tiny_model, [recorder], max_steps=1)
    trainer.train()
    step = [c[0] for c in recorder.calls[2:]]
    assert step == ["sampling_context", "transform_rollout", "reward_fields", "batch_fields", "forward_context:loss",
                    "observe_forward:loss", "loss_batch", "advantages", "extra_loss", "step_end"]
    types = {hook: kind for hook, kind, _ in recorder.calls}
    assert types["sampling_context"] == SamplingCall.__name__ and types["transform_rollout"] == Rollout.__name__
    assert types["forward_context:loss"] == ForwardCall.__name__
    assert types["observe_forward:loss"] == ForwardResult.__name__ and types["batch_fields"] == ScoredBatch.__name__
    assert types["advantages"] == LossCall.__name__ and types["prepare"] == TrainerPlan.__name__
    assert {mode for _, _, mode in recorder.calls[2:-1]} == {"train"}
    assert recorder.seen_offline == (False,) * 4  # every row starts as sampled from the policy


@pytest.mark.slow
def test_without_the_loss_forward_declared_no_loss_hook_runs(tmp_path, smollm2_tokenizer, tiny_model):
    class EvalOnly(Recorder):  # declared in evaluation only (never declared at all is refused: test_silent_edges.py)
        def needs(self, mode):
            return Needs(loss_forward=mode == "eval")

    recorder = EvalOnly()
    _trainer(tmp_path, smollm2_tokenizer, tiny_model, [recorder], max_steps=1).train()
    hooks = {c[0] for c in recorder.calls}
    assert not hooks & {"forward_context:loss", "observe_forward:loss", "loss_batch", "advantages", "extra_loss"}


@pytest.mark.slow
def test_scoring_forward_hooks_run_when_trl_scores_after_generation(tmp_path, smollm2_tokenizer, tiny_model):
    # two micro-steps per generation and one optimizer step per micro-step: TRL keeps old log-probs (a scoring
    # forward right after generation); a component that declares it gets its contexts around that forward
    recorder = Recorder(needs=Needs(scoring_forward=True, scoring_entropy=True, loss_forward=True))
    trainer = _trainer(tmp_path, smollm2_tokenizer, tiny_model, [recorder], max_steps=2, per_device_train_batch_size=2,
                       steps_per_generation=2)
    trainer.train()
    hooks = [c[0] for c in recorder.calls]
    assert hooks.count("forward_context:scoring") == 1 == hooks.count("observe_forward:scoring")
    assert hooks.index("observe_forward:scoring") < hooks.index("reward_fields")  # before the rewards


@pytest.mark.slow
def test_advantages_hook_result_is_what_trl_optimises(tmp_path, smollm2_tokenizer, make_tiny_lm):
    # TRL's objective (dapo, no KL, no entropy bonus) is linear in the advantages: doubling them doubles the first
    # step's gradient (its loss is 0 there: the ratio is 1 and the advantages of a group sum to 0)
    norms = []
    for scale in (1.0, 2.0):
        trainer = _trainer(tmp_path / str(scale), smollm2_tokenizer, make_tiny_lm(),
                           [Recorder(needs=Needs(loss_forward=True), scale_advantages=scale)], max_steps=1)
        trainer.train()
        norms.append(trainer.state.log_history[0]["grad_norm"])
    assert norms[0] > 0 and norms[1] == pytest.approx(2 * norms[0], rel=1e-4)


@pytest.mark.slow
def test_rollout_fields_reach_the_next_component(tmp_path, smollm2_tokenizer, tiny_model):
    first, second = Recorder(mark_first_offline=True), Recorder()
    second.name = "second"  # names key streams and row owners: two components may not share one
    _trainer(tmp_path, smollm2_tokenizer, tiny_model, [first, second], max_steps=1).train()
    assert first.seen_offline == (False,) * 4 and second.seen_offline == (True, False, False, False)


def test_default_reward_is_the_verifier_and_a_component_may_add_one(tmp_path, smollm2_tokenizer, tiny_model):
    from trl_explore.rewards.math_verify_reward import MathVerifyReward

    def bonus(completions, **kwargs):
        return [0.0] * len(completions)

    class AddsReward(Component):
        name = "adds_reward"

        def prepare(self, plan):
            self.default_rewards = plan.default_rewards
            return dataclasses.replace(plan, reward_funcs=[*plan.reward_funcs, bonus])

    adds = AddsReward()
    trainer = _trainer(tmp_path, smollm2_tokenizer, tiny_model, [adds], reward_funcs=None)
    assert adds.default_rewards is True
    assert isinstance(trainer.reward_funcs[0], MathVerifyReward) and trainer.reward_funcs[1] is bonus


def test_a_dataset_column_a_component_writes_is_refused(tmp_path, smollm2_tokenizer, tiny_model):
    class Writes(Component):
        name = "writes"
        reward_field_names = ("problem_id",)

    with pytest.raises(ValueError, match=r"train_dataset has column\(s\) \['problem_id'\], which Writes adds"):
        _trainer(tmp_path, smollm2_tokenizer, tiny_model, [Writes()])


def test_a_plain_grpo_config_works_and_too_few_prompts_are_refused(tmp_path, smollm2_tokenizer, tiny_model):
    args = GRPOConfig(**tiny_training_args(tmp_path / "out"))
    trainer = ExplorationTrainer(tiny_model, [parity_reward], args=args, train_dataset=doubling_dataset(2),
                                 processing_class=smollm2_tokenizer)
    assert isinstance(trainer, GRPOTrainer) and trainer.components == ()
    with pytest.raises(ValueError, match=r"has 1 prompt\(s\) but one generation batch needs 2"):
        ExplorationTrainer(tiny_model, [parity_reward], args=GRPOConfig(**tiny_training_args(
            tmp_path / "o2", per_device_train_batch_size=8)), train_dataset=doubling_dataset(1),
            processing_class=smollm2_tokenizer)
    with pytest.raises(TypeError, match="needs a GRPOConfig"):
        ExplorationTrainer(tiny_model, [parity_reward], args=object(), train_dataset=doubling_dataset(2))


def test_step_generator_is_a_function_of_seed_step_and_terms(tmp_path, smollm2_tokenizer, tiny_model):
    trainer = _trainer(tmp_path, smollm2_tokenizer, tiny_model, [])
    draw = lambda *terms: torch.randint(0, 10**9, (1,), generator=trainer.step_generator(*terms)).item()  # noqa: E731
    assert draw(0) == draw(0) and draw(0) != draw(1)
    trainer.state.global_step = 5
    assert draw(0) != torch.randint(0, 10**9, (1,), generator=torch.Generator().manual_seed(0)).item()
