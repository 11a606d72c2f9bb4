"""Issue 30, item 6: every place the package calls a user function that TRL allows to be async awaits it. TRL 1.16
awaits ``async def`` reward functions (and async callable objects, and partials of them); OGERRewardFunction calls its
verifier, so it is async itself when its verifier is, and TRL awaits both."""

import asyncio
import functools
import math

import pytest
from trl.trainer.utils import is_async_callable

from trl_explore.oger.reward import OGERRewardFunction
from trl_explore.rewards.checks import checked_reward_function
from trl_explore.testing import make_tiny_causal_lm, teacher_math_dataset, tiny_oger_args

FIELDS = dict(prompts=["q"] * 3, completions=["a", "b", "c"], oger_is_offline=[False, False, True],
              oger_divergence=[0.5, 0.2, None], oger_last_token_entropy=[0.0, math.log(2), None],
              oger_teacher=[None, None, "t"])
EXPECTED = [0.5, 0.0, 0.0]  # verdicts [1, 0, 1]: R_OGER = D exp(-H) R_m online, 0 offline


async def async_verifier(completions, **kwargs):
    await asyncio.sleep(0)
    return [1.0, 0.0, 1.0][: len(completions)]


class AsyncVerifier:
    async def __call__(self, completions, **kwargs):
        return await async_verifier(completions, **kwargs)


async def scaled_verifier(completions, scale=1.0, **kwargs):
    return [scale * v for v in await async_verifier(completions)]


@pytest.mark.parametrize("verifier", [async_verifier, AsyncVerifier(), functools.partial(scaled_verifier, scale=1.0)],
                         ids=["async def", "async __call__", "partial"])
def test_an_async_verifier_makes_the_reward_async_and_it_is_awaited(verifier):
    reward = OGERRewardFunction(verifier=verifier)
    assert is_async_callable(reward)  # TRL's test: it awaits the reward in its event loop
    assert isinstance(reward, OGERRewardFunction)  # the trainer's components still find it
    assert asyncio.run(reward(**FIELDS)) == pytest.approx(EXPECTED)
    checked = checked_reward_function(reward, "oger_reward")  # the driver's per-call wrapper keeps it async
    assert is_async_callable(checked) and asyncio.run(checked(**FIELDS)) == pytest.approx(EXPECTED)


def test_a_sync_verifier_keeps_the_reward_sync():
    reward = OGERRewardFunction(verifier=lambda completions, **kw: [1.0, 0.0, 1.0])
    assert not is_async_callable(reward) and reward(**FIELDS) == pytest.approx(EXPECTED)


def test_a_verifier_that_returns_an_awaitable_from_a_plain_call_is_refused_by_name():
    def hidden_async(completions, **kwargs):  # a plain function returning a coroutine: TRL would not await it
        return async_verifier(completions)

    with pytest.raises(TypeError, match="hidden_async.*awaitable.*async def"):
        OGERRewardFunction(verifier=hidden_async)(**FIELDS)


@pytest.mark.slow
def test_oger_trains_with_an_async_verifier(tmp_path, smollm2_tokenizer):
    from trl_explore import OGERConfig, OGERTrainer

    async def verifier(completions, **kwargs):
        return [1.0] * len(completions)

    trainer = OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer),
                          reward_funcs=[verifier, OGERRewardFunction(verifier=verifier)],
                          args=OGERConfig(**tiny_oger_args(tmp_path / "out", max_steps=1)),
                          train_dataset=teacher_math_dataset(), processing_class=smollm2_tokenizer)
    trainer.train()  # was: TypeError: 'coroutine' object is not iterable
    logged = trainer.state.log_history[0]
    assert logged["rewards/verifier/mean"] == 1.0 and logged["oger/failed_ratio"] == 0.0
    assert logged["rewards/oger_reward/mean"] > 0  # every online row correct: D exp(-H) > 0
