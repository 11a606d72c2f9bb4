"""Issue 30 item 2: a row a component replaces keeps no per-row field of the completion it replaced. TRL forwards the
extra per-completion fields of a ``rollout_func`` to the reward functions; the driver (``settle_rewrites``) clears them
on every rewritten row unless the rewriting component gives its own, and the reward functions read ``row_owner``."""

import pytest

from trl_explore import ExplorationConfig, ExplorationTrainer, OGERComponent, OGEROptions
from trl_explore.driver.components import Component
from trl_explore.testing import DOUBLING_TEACHERS, doubling_dataset, parity_reward, tiny_training_args

ONLINE = ["two", "it is four", "maybe 2", "the sum is two"]


def rollout_func(prompts, trainer):
    """Fixed completions, one per prompt copy, with two per-completion fields an environment would add."""
    tokenizer = trainer.processing_class
    texts = [ONLINE[i % len(ONLINE)] for i in range(len(prompts))]
    prompt_ids = [tokenizer(tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False),
                            add_special_tokens=False)["input_ids"] for p in prompts]
    completion_ids = [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids,
            "logprobs": [[-1.0] * len(ids) for ids in completion_ids],
            "env_text_len": [len(t) for t in texts], "env_tag": [f"online-{i}" for i in range(len(texts))]}


class Recorder:
    __name__ = "recorder"

    def __init__(self):
        self.calls = []

    def __call__(self, completions, **kwargs):
        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        self.calls.append({"texts": texts, **{k: kwargs.get(k) for k in ("env_text_len", "env_tag", "row_owner")}})
        return [0.0] * len(completions)


def _trainer(tmp_path, tokenizer, model, components, reward):
    args = ExplorationConfig(**tiny_training_args(tmp_path, max_steps=1, max_completion_length=24))
    return ExplorationTrainer(model, reward_funcs=[parity_reward, reward], args=args,
                              train_dataset=doubling_dataset(2, DOUBLING_TEACHERS), processing_class=tokenizer,
                              components=components, rollout_func=rollout_func)


@pytest.mark.slow
def test_an_oger_teacher_row_carries_no_rollout_func_field_of_the_replaced_completion(tmp_path, smollm2_tokenizer,
                                                                                        tiny_model):
    reward = Recorder()
    oger = OGERComponent(OGEROptions(embedding_model="embedded", use_exploration_reward=False))
    _trainer(tmp_path, smollm2_tokenizer, tiny_model, [oger], reward).train()

    call = reward.calls[0]
    (teacher,) = [i for i, off in enumerate(oger.generation.is_offline) if off]  # one replacement per group of 4
    assert call["texts"][teacher] not in ONLINE
    # before the fix: env_text_len of the online completion (e.g. 3 for "two") and its tag reached the reward
    assert call["env_text_len"][teacher] is None and call["env_tag"][teacher] is None
    assert call["row_owner"][teacher] == "oger"
    for i in set(range(4)) - {teacher}:
        assert call["env_text_len"][i] == len(call["texts"][i]) and call["env_tag"][i] == f"online-{i}"
        assert call["row_owner"][i] is None


class ReplayOwnFields(Component):
    """Swaps row 1 after the rewards, giving its own ``env_tag`` and no ``env_text_len``."""

    name, edits_rows = "replay", True

    def edit_scored(self, scored):
        ids = self.trainer.processing_class("replayed: 2", add_special_tokens=False)["input_ids"]
        return scored.rollout.swap_rows(self.name, {1: (ids, [{"role": "assistant", "content": "replayed: 2"}])},
                                        extra_fields={1: {"env_tag": "from-buffer"}})


@pytest.mark.slow
def test_a_row_swapped_after_the_rewards_gets_its_own_fields_or_none(tmp_path, smollm2_tokenizer, tiny_model):
    reward = Recorder()
    _trainer(tmp_path, smollm2_tokenizer, tiny_model, [ReplayOwnFields()], reward).train()

    first, rescored = reward.calls[:2]
    assert first["env_tag"] == [f"online-{i}" for i in range(4)] and first["row_owner"] == [None] * 4
    assert rescored == {"texts": ["replayed: 2"], "env_text_len": [None], "env_tag": ["from-buffer"],
                        "row_owner": ["replay"]}
