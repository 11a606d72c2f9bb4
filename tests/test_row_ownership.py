"""Issue 29, "Measured" items 4-6 in composed runs: a row swapped after OGER or after ASE-GRPO (row ownership), two
components giving one field name, and the components' random streams."""

import types

import pytest
import torch

from trl_explore import (
    ASEComponent,
    ASEOptions,
    ExplorationConfig,
    ExplorationTrainer,
    OGERComponent,
    OGEROptions,
    OGERRewardFunction,
)
from trl_explore.ase.controls import CLEAN_ROUTE, OFFLINE_ROUTE
from trl_explore.driver.components import Component
from trl_explore.oger import fields
from trl_explore.testing import DOUBLING_TEACHERS, doubling_dataset, parity_reward, tiny_training_args

SWAP_TEXT = "A replayed answer: \\boxed{0}"


class Swapper(Component):
    """Swaps the first row of each group that nobody rewrote yet for SWAP_TEXT (subclasses: in ``transform_rollout``,
    the position of a later component, or in ``edit_scored``, that of an experience-replay method)."""

    name, edits_rows = "swapper", True

    def __init__(self):
        super().__init__()
        self.swapped = []

    def _swap(self, rollout):
        if rollout.mode != "train":
            return rollout
        ids = self.trainer.processing_class(SWAP_TEXT, add_special_tokens=False)["input_ids"]
        swaps = {}
        for start in range(0, rollout.num_rows, rollout.num_generations):
            i = next(j for j in range(start, start + rollout.num_generations) if rollout.owner[j] is None)
            swaps[i] = (ids, [{"role": "assistant", "content": SWAP_TEXT}])
        self.swapped.append(sorted(swaps))
        return rollout.swap_rows(self.name, swaps)


class EditScoredSwapper(Swapper):
    def edit_scored(self, scored):
        return self._swap(scored.rollout)


class TransformSwapper(Swapper):
    def transform_rollout(self, rollout):
        return self._swap(rollout)


class RecordingOGERReward(OGERRewardFunction):
    """OGER's reward, recording the OGER kwargs and the values of every call."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls = []

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs):
        values = super().__call__(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        self.calls.append({"texts": texts, "values": list(values), "owner": kwargs.get("row_owner"),
                           **{k: list(kwargs[k]) for k in fields.REWARD_FIELDS}})
        return values


def _args(tmp_path, **overrides):
    return ExplorationConfig(**tiny_training_args(tmp_path, **{
        "max_steps": 1, "max_completion_length": 16, **overrides}))


@pytest.mark.slow
@pytest.mark.parametrize("swapper", [TransformSwapper, EditScoredSwapper])
def test_a_row_swapped_after_oger_gets_no_exploration_reward_of_the_replaced_completion(
        swapper, tmp_path, smollm2_tokenizer, tiny_model):
    reward = RecordingOGERReward(verifier=parity_reward)
    swap = swapper()
    trainer = ExplorationTrainer(
        tiny_model, reward_funcs=[parity_reward, reward], args=_args(tmp_path),
        train_dataset=doubling_dataset(2, DOUBLING_TEACHERS), processing_class=smollm2_tokenizer,
        components=[OGERComponent(OGEROptions(embedding_model="embedded")), swap])
    batches = []
    original = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: batches.append(original(inputs)) or batches[-1]
    trainer.train()

    (row,) = swap.swapped[0]
    call = reward.calls[-1]  # the swapped row alone (edit_scored: re-scored) or the whole batch (transform_rollout)
    at = call["texts"].index(SWAP_TEXT)
    # before the fix: oger_is_offline False and the divergence / H_last of the completion it replaced
    assert call[fields.IS_OFFLINE][at] is True and call["owner"][at] == "swapper"
    assert call[fields.DIVERGENCE][at] is None and call[fields.LAST_TOKEN_ENTROPY][at] is None
    assert call[fields.TEACHER][at] is None and call["values"][at] == 0.0  # R_OGER = 0 on offline rows (Eq. 7)
    if swapper is EditScoredSwapper:
        assert len(call["texts"]) == 1  # only the changed row was scored again
    oger_rows = trainer.component("oger").generation.is_offline
    assert not oger_rows[row]  # OGER never replaced it: the swap took an untouched row
    # OGER trains only its own teacher rows by policy shaping; the swapped row stays in TRL's objective
    assert batches[0]["is_offline"].tolist() == list(oger_rows)


@pytest.mark.slow
@pytest.mark.parametrize("swapper", [TransformSwapper, EditScoredSwapper])
def test_a_row_swapped_after_ase_takes_the_offline_route_and_no_behaviour_logps(
        swapper, tmp_path, smollm2_tokenizer, tiny_model):
    swap = swapper()
    ase = ASEComponent(ASEOptions(num_vectors=1, pca_dim=4, kmeans_n_init=2, min_pairs_per_cluster=1))
    trainer = ExplorationTrainer(
        tiny_model, reward_funcs=[parity_reward], args=_args(tmp_path), train_dataset=doubling_dataset(2),
        processing_class=smollm2_tokenizer, components=[ase, swap])
    batches = []
    original = trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: batches.append(original(inputs)) or batches[-1]
    trainer.train()

    (row,) = swap.swapped[0]
    routes = batches[0]["ase_route"].tolist()
    assert routes[row] == OFFLINE_ROUTE  # before the fix: the route it was sampled under (clean, 0)
    assert all(r == CLEAN_ROUTE for i, r in enumerate(routes) if i != row)
    assert trainer.component("ase").rollout.routes.tolist() == routes  # what its loss hooks read


def test_a_component_with_row_state_before_a_rewrite_is_refused_at_construction(tmp_path, smollm2_tokenizer,
                                                                                tiny_model):
    class Routes(Component):
        name = "routes"

        def sampling_context(self, call):
            return None

    with pytest.raises(ValueError, match="component 'swapper' rewrites rows after component 'routes'"):
        ExplorationTrainer(tiny_model, reward_funcs=[parity_reward], args=_args(tmp_path),
                           train_dataset=doubling_dataset(2), processing_class=smollm2_tokenizer,
                           components=[Routes(), EditScoredSwapper()])


# ---------------------------------------------------------------------------------------------------- field names
class Fields(Component):
    def __init__(self, name, reward=None, batch=None):
        super().__init__()
        self.name, self._reward, self._batch = name, reward or {}, batch or {}

    def reward_fields(self, rollout):
        return {k: [v] * rollout.num_rows for k, v in self._reward.items()}

    def batch_fields(self, batch):
        return {k: torch.full((batch.rollout.num_rows,), v) for k, v in self._batch.items()}


@pytest.mark.slow
@pytest.mark.parametrize("first, second, message", [
    (Fields("a", reward={"shared": 1}), Fields("b", reward={"shared": 2}),
     "reward_fields of component 'b' returns 'shared', which component 'a' gives already"),
    (Fields("a", batch={"shared": 1}), Fields("b", batch={"shared": 2}),
     "batch_fields of component 'b' returns 'shared', which component 'a' gives already"),
    (Fields("a", batch={"advantages": 0.0}), Fields("b"),
     "batch_fields of component 'a' returns 'advantages', which GRPOTrainer gives already"),
    (Fields("a", reward={"trainer_state": 0}), Fields("b"),
     "reward_fields of component 'a' returns 'trainer_state', which TRL's reward kwargs gives already"),
])
def test_two_parties_with_one_field_name_are_refused_naming_both(first, second, message, tmp_path, smollm2_tokenizer,
                                                                 tiny_model):
    # before: a plain dict update, the later value silently replaced the earlier one (TRL's advantages included)
    trainer = ExplorationTrainer(tiny_model, reward_funcs=[parity_reward], args=_args(tmp_path),
                                 train_dataset=doubling_dataset(2), processing_class=smollm2_tokenizer,
                                 components=[first, second])
    with pytest.raises(ValueError, match=message):
        trainer.train()


# ---------------------------------------------------------------------------------------------------- random streams
def _draws(trainer, component, step, *terms):
    component.trainer = trainer
    trainer.state.global_step = step
    return torch.randint(0, 2**31, (8,), generator=component.generator(*terms)).tolist()


def test_each_component_draws_from_its_own_stream():
    trainer = types.SimpleNamespace(args=types.SimpleNamespace(seed=0), state=types.SimpleNamespace(global_step=0))
    trainer.step_generator = ExplorationTrainer.step_generator.__get__(trainer)
    oger, ase = OGERComponent(OGEROptions()), ASEComponent(ASEOptions())
    # before: step_generator(*terms) summed its terms and knew no component, so OGER's replacement draws at process
    # index p and ASE's route draws at micro-step p came from one stream, and (a, b) gave what (b, a) gave
    assert _draws(trainer, oger, 3, 1) != _draws(trainer, ase, 3, 1)
    assert _draws(trainer, oger, 3, 1, 2) != _draws(trainer, oger, 3, 2, 1)
    # a function of (seed, step, terms, name) only: the same after a resume, whatever other components exist
    assert _draws(trainer, oger, 3, 1) == _draws(trainer, OGERComponent(OGEROptions()), 3, 1)
    assert _draws(trainer, oger, 3, 1) != _draws(trainer, oger, 4, 1)


@pytest.mark.slow
def test_adding_a_component_does_not_change_oger_draws(tmp_path, smollm2_tokenizer, make_tiny_lm, monkeypatch):
    from trl_explore.oger import component as oger_component

    class Draws(Component):  # draws from its own stream at every generation
        name = "draws"

        def transform_rollout(self, rollout):
            self.value = torch.rand(1, generator=self.generator(0)).item()
            return rollout

    picks, select = {}, oger_component.select_replacements
    for label, extra in (("alone", []), ("with another", [Draws()])):  # Draws after OGER: it keeps row state
        chosen = []

        def spy(d, k, rule, gen, chosen=chosen):
            chosen.append(select(d, k, rule, gen).tolist())
            return torch.tensor(chosen[-1], dtype=torch.long)

        monkeypatch.setattr(oger_component, "select_replacements", spy)
        trainer = ExplorationTrainer(
            make_tiny_lm(), reward_funcs=[parity_reward], args=_args(tmp_path / label, max_steps=2),
            train_dataset=doubling_dataset(2, DOUBLING_TEACHERS), processing_class=smollm2_tokenizer,
            components=[OGERComponent(OGEROptions(embedding_model="embedded", replacement_rule="random",
                                                  use_exploration_reward=False)), *extra])
        trainer.train()
        picks[label] = chosen
    assert len(picks["alone"]) == 2 and picks["alone"] == picks["with another"]
