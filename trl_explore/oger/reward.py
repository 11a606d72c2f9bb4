"""``OGERRewardFunction``: OGER's exploration reward as a TRL reward function (OGER Eq. 5-8).

With ``reward_funcs=[math_reward, OGERRewardFunction()]`` (weights 1, 1) TRL's summed reward is Eq. 8:
``R_m + R_OGER`` for online completions and ``R_m`` for offline ones.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable

import torch

from trl_explore.oger import fields
from trl_explore.oger.exploration import divergence as divergence_fn
from trl_explore.oger.exploration import exploration_reward
from trl_explore.rewards.correctness import CORRECT_THRESHOLD, check_threshold, correctness_note, correctness_values
from trl_explore.rewards.math_verify_reward import completion_text

logger = logging.getLogger(__name__)


class OGERRewardFunction:
    """Returns ``R_OGER_i = D_i * exp(-H_last_i) * R_m_i`` per completion, 0 for offline rows (Eq. 7-8).

    ``R_m_i`` here is the verifier's verdict read with the package's correctness rule
    (:mod:`trl_explore.rewards.correctness`): 1 when the verifier's reward is above ``correct_threshold`` (default
    0.5), else 0. For a verifier in ``{0, 1}`` (the paper's) that is its reward itself; a ``+1 / -1`` verifier
    (DAPO-style) gives wrong answers ``R_OGER = 0``, as the paper's gate means, not ``-D exp(-H)``.

    Inside :class:`~trl_explore.OGERTrainer` it reads, per completion, from TRL's reward kwargs (the
    trainer puts them there, :mod:`trl_explore.oger.fields`): ``oger_is_offline`` (bool), ``oger_divergence``
    (``D_i``, Eq. 5) and ``oger_last_token_entropy`` (``H_last_i`` in nats, Eq. 6; None on offline rows).
    ``R_m`` comes from ``verifier`` (default: :data:`trl_explore.rewards.math_verify_reward.math_reward`,
    whose results are memoised, so sharing it with TRL's first reward function verifies once).

    Standalone (outside the trainer): without ``oger_divergence`` the divergence is computed with
    ``encoder`` from each completion and its row's ``offline_completions`` (a prompt with no offline
    trajectory gets ``R_OGER = 0``); without ``oger_is_offline`` every row is online; ``oger_last_token_entropy``
    must then be given, unless ``entropy_refinement=False``.

    It also logs, through TRL's ``log_metric`` / ``log_extra`` kwargs when present: ``oger/reward_mean``
    and ``oger/reward_max`` (over online rows; the max is per process, averaged over processes),
    ``oger/failed_ratio`` (scored online rows read as wrong), and per-completion columns ``is_offline``,
    ``teacher``, ``divergence``, ``last_token_entropy``, ``R_OGER``.

    Args:
        verifier: a TRL reward function giving ``R_m`` (``{0, 1}`` in the paper; other values are read with
            ``correct_threshold``); sync or async (an async verifier makes this an
            :class:`AsyncOGERRewardFunction`, which TRL awaits). A None (or NaN) verdict stays None ("not
            scored"): with ``reward_funcs=[verifier, OGERRewardFunction(verifier=verifier)]`` such a row is unscorable
            for TRL (advantage 0, counted in ``rewards/unscorable``), as with ``verifier`` alone
            (:func:`unscored_as_nan`). The ``oger/*`` metrics count scored rows only.
        encoder: a :class:`~trl_explore.oger.embedding.TrajectoryEncoder` for standalone use.
        entropy_refinement: False is the paper's "w/o Refinement" ablation (``D_i * R_m_i``).
        offline_column: dataset column with each prompt's offline trajectories (standalone use).
        correct_threshold: a verifier reward above it is correct (default 0.5, ``CORRECT_THRESHOLD``); inside a
            trainer, ``ExplorationConfig.correct_threshold`` sets it.

    Raises:
        ValueError: ``correct_threshold`` not a finite number.
    """

    def __new__(cls, verifier: Callable | None = None, *args, **kwargs):
        # TRL 1.16 awaits a reward function whose __call__ is a coroutine function (trl.trainer.utils.
        # is_async_callable) and calls every other one inline: with an async verifier the reward must be async too
        if cls is OGERRewardFunction and verifier is not None and _is_async(verifier):
            cls = AsyncOGERRewardFunction
        return super().__new__(cls)

    def __init__(
        self,
        verifier: Callable | None = None,
        encoder=None,
        entropy_refinement: bool = True,
        offline_column: str = "offline_completions",
        correct_threshold: float = CORRECT_THRESHOLD,
    ):
        if verifier is None:
            from trl_explore.rewards.math_verify_reward import math_reward as verifier  # noqa: N813
        self.verifier = verifier
        self.encoder = encoder
        self.entropy_refinement = entropy_refinement
        self.offline_column = offline_column
        self.correct_threshold = check_threshold(correct_threshold)
        self._noted_values = False
        self.__name__ = "oger_reward"

    def _divergence(self, completions, kwargs) -> torch.Tensor:
        if self.offline_column not in kwargs:
            raise ValueError(
                f"OGERRewardFunction needs either {fields.DIVERGENCE!r} (from OGERTrainer) or the offline column "
                f"{self.offline_column!r} in the reward kwargs; got keys {sorted(kwargs)}"
            )
        if self.encoder is None:
            from trl_explore.oger.embedding import TrajectoryEncoder

            self.encoder = TrajectoryEncoder()
        online = self.encoder.encode([completion_text(c) for c in completions])
        values = []
        for i, offline_texts in enumerate(kwargs[self.offline_column]):
            if not offline_texts:
                values.append(0.0)  # no teacher for this prompt: no divergence signal
                continue
            offline = self.encoder.encode_cached(list(offline_texts))
            values.append(float(divergence_fn(online[i : i + 1], offline)[0]))
        return torch.tensor(values)

    def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs) -> list[float | None]:
        log_metric, log_extra, verifier_kwargs = self._split_kwargs(kwargs)
        correctness = self.verifier(prompts=prompts, completions=completions, completion_ids=completion_ids,
                                    **verifier_kwargs)
        if inspect.isawaitable(correctness):
            if inspect.iscoroutine(correctness):
                correctness.close()  # it will not be awaited: no "never awaited" warning on top of the error
            name = getattr(self.verifier, "__name__", type(self.verifier).__name__)
            raise TypeError(
                f"the verifier {name!r} of OGERRewardFunction returned an awaitable from a plain call: declare it "
                "`async def` (or give its class an `async def __call__`), so that OGERRewardFunction and TRL await it"
            )
        return self._score(correctness, completions, kwargs, log_metric, log_extra)

    def _split_kwargs(self, kwargs):
        log_metric = kwargs.pop("log_metric", None)
        log_extra = kwargs.pop("log_extra", None)
        verifier_kwargs = {k: v for k, v in kwargs.items() if k not in fields.REWARD_FIELDS}
        if log_metric is not None:  # as TRL passes it: MathVerifyReward reads the calling trainer's EOS ids from it
            verifier_kwargs["log_metric"] = log_metric
        return log_metric, log_extra, verifier_kwargs

    def _score(self, correctness, completions, kwargs, log_metric, log_extra) -> list[float | None]:
        """``R_OGER`` from the verifier's verdicts (the rest of :meth:`__call__`, shared with the async path)."""
        n = len(completions)
        is_offline = torch.tensor([bool(x) for x in kwargs.get(fields.IS_OFFLINE, [False] * n)])
        if fields.DIVERGENCE in kwargs:
            div_in = list(kwargs[fields.DIVERGENCE])
        else:
            div_in = self._divergence(completions, kwargs).tolist()
        if fields.LAST_TOKEN_ENTROPY in kwargs:
            entropy_in = list(kwargs[fields.LAST_TOKEN_ENTROPY])
        elif self.entropy_refinement:
            raise ValueError(
                f"OGERRewardFunction needs {fields.LAST_TOKEN_ENTROPY!r} (nats, one per completion) for the entropy "
                "refinement; pass it, or set entropy_refinement=False"
            )
        else:
            entropy_in = [0.0] * n
        correctness = [None if c is None or math.isnan(float(c)) else float(c) for c in correctness]  # NaN: TRL's None
        if not self._noted_values:
            name = getattr(self.verifier, "__name__", type(self.verifier).__name__)
            note = correctness_note(correctness, name, "OGER", self.correct_threshold)
            if note is not None:
                self._noted_values = True
                logger.warning(note)
        # the verdicts, 1 correct / 0 wrong / None not scored (trl_explore.rewards.correctness)
        correctness = [None if math.isnan(v) else v
                       for v in correctness_values(correctness, self.correct_threshold).tolist()]
        scored = unscored_as_nan(correctness, div_in, entropy_in, is_offline, self.entropy_refinement)
        r_m = torch.tensor([0.0 if c is None else c for c in correctness])
        div = torch.tensor([0.0 if d is None else float(d) for d in div_in])
        entropy = torch.tensor([0.0 if h is None else float(h) for h in entropy_in])
        reward = exploration_reward(div, entropy, torch.where(torch.isnan(scored), 0.0, r_m), is_offline,
                                    entropy_refinement=self.entropy_refinement)
        reward = reward + scored  # NaN (not scored) where R_m or a needed input is missing, + 0 elsewhere

        online = ~is_offline & ~torch.isnan(reward)  # the package's metrics count scored rows only
        if log_metric is not None and online.any():
            log_metric("oger/reward_mean", reward[online].mean().item())
            log_metric("oger/reward_max", reward[online].max().item())
            log_metric("oger/failed_ratio", (r_m[online] == 0).float().mean().item())
        values = [None if math.isnan(r) else r for r in reward.tolist()]
        if log_extra is not None:
            log_extra("is_offline", is_offline.tolist())
            log_extra("teacher", list(kwargs.get(fields.TEACHER, [None] * n)))
            log_extra("divergence", [None if off or d is None else round(float(d), 4)
                                     for d, off in zip(div_in, is_offline)])
            log_extra("last_token_entropy", list(kwargs.get(fields.LAST_TOKEN_ENTROPY, [None] * n)))
            log_extra("R_OGER", [None if r is None else round(r, 4) for r in values])
        return values


def unscored_as_nan(correctness, divergence, entropy, is_offline: torch.Tensor, entropy_refinement: bool
                    ) -> torch.Tensor:
    """``[B]`` float32: NaN where ``R_OGER`` cannot be computed ("not scored", TRL's ``None``), else 0.

    ``R_OGER_i = D_i * exp(-H_last_i) * R_m_i`` (Eq. 7) is not scored when ``R_m_i`` is None (the verifier could not
    grade the row: the row must stay unscorable for TRL's rule, which gives it advantage 0), or when the row is online,
    correct (``R_m_i != 0``) and ``D_i`` or (with ``entropy_refinement``) ``H_last_i`` is None. A wrong answer needs
    neither (``R_OGER = 0``); an offline row gets 0 whenever ``R_m`` is scored (Eq. 8).

    Args:
        correctness: ``B`` verdicts ``R_m`` (None: not scored); divergence, entropy: ``B`` values or None;
        is_offline: ``[B]`` bool; entropy_refinement: whether ``H_last`` is used.
    """
    out = []
    for r, d, h, off in zip(correctness, divergence, entropy, is_offline.tolist()):
        missing = r is None or (not off and float(r) != 0 and (d is None or (entropy_refinement and h is None)))
        out.append(math.nan if missing else 0.0)
    return torch.tensor(out, dtype=torch.float32)


class AsyncOGERRewardFunction(OGERRewardFunction):
    """:class:`OGERRewardFunction` with an async verifier (``OGERRewardFunction(verifier=...)`` returns one): its
    ``__call__`` is a coroutine function, so TRL awaits it (in its event loop, beside its other async reward
    functions), and it awaits the verifier."""

    async def __call__(self, prompts=None, completions=None, completion_ids=None, **kwargs) -> list[float | None]:
        log_metric, log_extra, verifier_kwargs = self._split_kwargs(kwargs)
        correctness = await self.verifier(prompts=prompts, completions=completions, completion_ids=completion_ids,
                                          **verifier_kwargs)
        return self._score(correctness, completions, kwargs, log_metric, log_extra)


def _is_async(func) -> bool:
    """Whether calling ``func`` returns a coroutine, as TRL decides it (``trl.trainer.utils.is_async_callable``:
    ``async def`` functions, partials of them, objects with an ``async def __call__``)."""
    from trl.trainer.utils import is_async_callable

    return is_async_callable(func)
