"""ExGRPO's replay buffer (:class:`ExperienceBuffer`): correct trajectories per prompt, bucketed by the prompt's
latest correct count, with the retired prompts and the replay switch; a plain-data ``state_dict`` for checkpoints.

The maths it applies (collection, retirement, bucket weights and draws) are the pure functions of
:mod:`trl_explore.exgrpo.experience`.
"""

from __future__ import annotations

import dataclasses

import torch

from trl_explore.exgrpo.experience import allocate_draws, bucket_weights

STATE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """One stored correct completion.

    Attributes:
        completion_ids: its token ids (the completion as sampled, EOS included when it stopped).
        behaviour_logps: the log-prob (nats) of each token under the distribution it was sampled from (TRL's
            ``old_per_token_logps`` or the sampler's), one per id; None when none was recorded.
    """

    completion_ids: tuple[int, ...]
    behaviour_logps: tuple[float, ...] | None = None

    def __post_init__(self):
        if self.behaviour_logps is not None and len(self.behaviour_logps) != len(self.completion_ids):
            raise ValueError(f"a trajectory of {len(self.completion_ids)} tokens has {len(self.behaviour_logps)} "
                             f"behaviour log-probs")


@dataclasses.dataclass
class _Entry:
    num_correct: int
    trajectories: list[Trajectory]


class ExperienceBuffer:
    """The experience pool of ExGRPO (Zhan et al. 2025, §3.1), keyed by prompt.

    Args:
        num_generations: ``K``, the group size the correct counts refer to (``>= 2``).

    Attributes:
        started: whether replay has been switched on (after the first step whose batch pass rate exceeded the
            threshold; :func:`~trl_explore.exgrpo.experience.replay_starts`). Saved with the buffer.
        retired: the prompts every rollout of which was correct once; never collected or replayed again.

    A prompt is a string key chosen by the caller (e.g. the dataset's ``problem_id``). Iteration order (insertion)
    and every draw are deterministic given the generator, so a buffer restored by :meth:`load_state_dict` draws what
    the saved one would have drawn.
    """

    def __init__(self, num_generations: int):
        if isinstance(num_generations, bool) or not isinstance(num_generations, int) or num_generations < 2:
            raise ValueError(f"num_generations must be an int >= 2, got {num_generations!r}")
        self.num_generations = num_generations
        self.started = False
        self.retired: set[str] = set()
        self._entries: dict[str, _Entry] = {}

    # ---------------------------------------------------------------- reading
    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def keys(self) -> list[str]:
        """The prompts held, in insertion order."""
        return list(self._entries)

    def num_correct(self, key: str) -> int:
        """The prompt's bucket: its latest correct count ``k`` (``0 < k < K``)."""
        return self._entries[key].num_correct

    def trajectories(self, key: str) -> list[Trajectory]:
        """The prompt's stored trajectories, in the order they were collected."""
        return list(self._entries[key].trajectories)

    def bucket_sizes(self) -> dict[int, int]:
        """Prompts per bucket, ``{k: count}``, ``k`` ascending (for logging)."""
        sizes: dict[int, int] = {}
        for entry in self._entries.values():
            sizes[entry.num_correct] = sizes.get(entry.num_correct, 0) + 1
        return dict(sorted(sizes.items()))

    def num_trajectories(self) -> int:
        return sum(len(e.trajectories) for e in self._entries.values())

    # ---------------------------------------------------------------- writing
    def record_group(self, key: str, completions: list[Trajectory], correct: list[bool], collect: bool = True,
                     storable: list[bool] | None = None) -> str:
        """Update the buffer with one finished group of ``K`` rollouts of prompt ``key``.

        Rules (ExGRPO §3.1, authors' ``collect_experience_entries`` and skip set): every rollout correct -> the prompt
        is retired (dropped from the buffer for good); ``0 < k < K`` and ``collect`` -> the prompt moves to bucket
        ``k`` and its correct completions not stored yet (same ids) are added; no correct rollout, or ``collect``
        False -> nothing changes. A retired prompt is ignored.

        Args:
            key: the prompt.
            completions: the group's ``K`` completions (a replayed one included: it counts in ``k`` and is not
                stored twice).
            correct: ``K`` bools.
            collect: False before replay has started (the authors collect only once mixing is on; retirement applies
                from the first step).
            storable: ``K`` bools, the rows whose completion may be stored (default all): the policy's own rollouts,
                not rows another method wrote (e.g. OGER's teacher rows, which still count in ``k``), and not rows
                masked out of the loss (truncated completions under ``mask_truncated_completions``). A prompt
                enters the buffer only with at least one stored trajectory: a group whose only correct rows are not
                storable leaves a new prompt out (and moves a held prompt to bucket ``k``, its trajectories kept).

        Returns:
            ``"retired"``, ``"collected"``, ``"ignored"`` (already retired) or ``"unchanged"``.

        Raises:
            ValueError: lengths other than ``K``.
        """
        k_total = self.num_generations
        if len(completions) != k_total or len(correct) != k_total:
            raise ValueError(f"prompt {key!r}: a group has {k_total} rollouts, got {len(completions)} completions "
                             f"and {len(correct)} correctness flags")
        if key in self.retired:
            return "ignored"
        k = sum(bool(c) for c in correct)
        if k == k_total:
            self.retired.add(key)
            self._entries.pop(key, None)
            return "retired"
        if k == 0 or not collect:
            return "unchanged"
        storable = [True] * k_total if storable is None else storable
        entry = self._entries.get(key)
        stored = set() if entry is None else {t.completion_ids for t in entry.trajectories}
        new = []
        for trajectory, ok, own in zip(completions, correct, storable):
            if ok and own and trajectory.completion_ids not in stored:
                new.append(trajectory)
                stored.add(trajectory.completion_ids)
        if entry is None and not new:  # every correct row was another method's (or not storable): nothing to replay
            return "unchanged"
        if entry is None:
            entry = self._entries[key] = _Entry(k, [])
        entry.num_correct = k
        entry.trajectories.extend(new)
        return "collected"

    # ---------------------------------------------------------------- drawing
    def draw(self, candidates: list[str], num_draws: int, generator: torch.Generator | None = None,
             weighting: str = "normal", sigma: float = 1.0) -> list[str]:
        """Draw ``num_draws`` distinct prompts among ``candidates`` (those held), prioritised by bucket.

        Buckets are formed from the candidates; :func:`~trl_explore.exgrpo.experience.allocate_draws` with
        :func:`~trl_explore.exgrpo.experience.bucket_weights` says how many come from each (ascending ``k``), and
        each bucket gives that many drawn uniformly without replacement.

        Returns:
            The drawn prompts, in the order of ``candidates`` (``min(num_draws, held candidates)`` of them).
        """
        held = [key for key in dict.fromkeys(candidates) if key in self._entries and self._entries[key].trajectories]
        buckets: dict[int, list[str]] = {}
        for key in held:
            buckets.setdefault(self._entries[key].num_correct, []).append(key)
        ks = sorted(buckets)
        if not ks or num_draws <= 0:
            return []
        weights = bucket_weights(torch.tensor(ks, dtype=torch.float64), self.num_generations, weighting, sigma)
        counts = allocate_draws(weights, torch.tensor([len(buckets[k]) for k in ks]), num_draws, generator)
        chosen: set[str] = set()
        for k, count in zip(ks, counts.tolist()):
            members = buckets[k]
            order = torch.randperm(len(members), generator=generator).tolist()
            chosen.update(members[i] for i in order[:count])
        return [key for key in held if key in chosen]

    # ---------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict:
        """The buffer as plain data (ints, floats, strings, lists; JSON- and ``torch.save``-able)."""
        return {
            "version": STATE_VERSION,
            "num_generations": self.num_generations,
            "started": self.started,
            "retired": sorted(self.retired),
            "entries": [
                {"key": key, "num_correct": entry.num_correct,
                 "trajectories": [{"completion_ids": list(t.completion_ids),
                                   "behaviour_logps": None if t.behaviour_logps is None else list(t.behaviour_logps)}
                                  for t in entry.trajectories]}
                for key, entry in self._entries.items()
            ],
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output exactly (the current content is replaced).

        Raises:
            ValueError: another state version, or a buffer of another group size.
        """
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"experience buffer state version {state.get('version')!r}; this code reads "
                             f"{STATE_VERSION}")
        if state["num_generations"] != self.num_generations:
            raise ValueError(f"the saved experience buffer counts groups of {state['num_generations']} rollouts, this "
                             f"run has num_generations={self.num_generations}")
        self.started = bool(state["started"])
        self.retired = set(state["retired"])
        self._entries = {
            e["key"]: _Entry(int(e["num_correct"]), [
                Trajectory(tuple(int(i) for i in t["completion_ids"]),
                           None if t["behaviour_logps"] is None else tuple(float(x) for x in t["behaviour_logps"]))
                for t in e["trajectories"]])
            for e in state["entries"] if e["trajectories"]  # an empty entry (older versions) has nothing to replay
        }
