"""The steering-vector bank of ASE-GRPO: K directions estimated online from rollout outcomes.

Source: ASE paper §3.2 ("vector-bank estimation") and App. D; SPEC §3.1, §3.4, §3.6, §3.8.

One bank update, from the rollouts of one step (``SteeringVectorBank.update``):

1. ``contrast_pairs``: inside each problem, pair every correct rollout (reward > 0.5) with every
   incorrect one (optionally capped per problem).
2. ``pair_differences``: CAA-style difference ``a_pos - a_neg`` of the block-L readout activations.
3. ``cluster_candidates``: PCA to at most ``pca_dim`` dimensions, K-means into K clusters; the
   candidate of cluster k is the mean difference of its members in the ORIGINAL space (natural
   norm, not normalised).
4. ``match_to_previous``: one-to-one matching of the candidates to the previous bank by cosine
   (Hungarian algorithm, maximising the total cosine).
5. ``ema_update``: ``v <- beta * v_old + (1 - beta) * v_new``; the first estimate is taken as is.

The new bank is *pending*: it becomes the *active* bank (the one used for steering) only when the
trainer calls ``activate()`` after the optimizer step (paper: "a newly estimated bank becomes
active only after actor optimization").

Every step is a small pure function of tensors; ``SteeringVectorBank`` only strings them together
and keeps the state (vectors, counters, random generator).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Hashable, Sequence

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from trl_explore.ase.contrasts import CORRECT_THRESHOLD, contrast_pairs, pair_differences, shuffle_pair_labels
from trl_explore.ase.controls import BANK_CONTROLS
from trl_explore.ase.directions import (
    cluster_candidates,
    ema_update,
    match_to_previous,
    mean_pairwise_cosine,
    random_directions_like,
    random_unit_vectors,
)
from trl_explore.utils.similarity import EPS as _EPS
from trl_explore.utils.similarity import cosine_matrix  # noqa: F401 - re-exported with the bank's steps

__all__ = [  # the pure steps live in contrasts.py and directions.py; re-exported here, where the recipe uses them
    "CORRECT_THRESHOLD", "SteeringVectorBank", "applied_strength", "bank_metrics", "cluster_candidates",
    "cosine_matrix", "contrast_pairs", "ema_update", "match_to_previous", "mean_pairwise_cosine", "pair_differences",
    "random_directions_like", "random_unit_vectors", "shuffle_pair_labels",
]

CONTROLS = BANK_CONTROLS
"""Names accepted by ``SteeringVectorBank(control=...)`` (defined in ``trl_explore.ase.controls``)."""

BANK_TENSORS_FILE = "steering_bank.safetensors"
BANK_METADATA_FILE = "steering_bank.json"


# --------------------------------------------------------------------------------------------
# The bank: state + the update recipe
# --------------------------------------------------------------------------------------------


class SteeringVectorBank:
    """K steering vectors estimated online from correct-vs-incorrect activation contrasts.

    A non-parametric training state (SPEC §3.1, paper §3.2): it is checkpointed with the trainer
    (``save``/``load`` or ``state_dict``/``load_state_dict``) and discarded for deployment. The
    clean route ``v_0 = 0`` is not stored.

    Life cycle in the trainer, once per generation step::

        routes = balanced_uniform_routes(...)            # trl_explore.ase.routing
        generate with steering  alpha * bank.vectors[route - 1]  on rows with route > 0
        diagnostics = bank.update(readout_activations, problem_ids, rewards)   # -> pending bank
        ... optimizer step(s) on the unsteered policy using these rollouts ...
        bank.activate()               # pending -> active, before the next generation step

    Active vs pending: ``update`` never touches the active bank (``vectors``); it writes the
    *pending* bank, and ``activate`` promotes it (paper: "a newly estimated bank becomes active only
    after actor optimization and weight synchronization"). The EMA and the matching of an update use
    the bank's latest estimate: the pending bank if one is waiting, else the active one. Before the
    first successful update ``vectors`` is ``None``: no steering (every route behaves as clean).

    Vectors live on the CPU in float32; move them to the model's device and dtype for steering.
    Activations must come from all rollouts of each problem (gather across ranks first), and every
    rank must run the same updates (same inputs, same seed) or receive the bank from rank 0.

    Controls (SPEC §3.6, one switch each, ``control=``):

    * ``"none"``: the method.
    * ``"random_directions"``: after clustering, each candidate is replaced by an independent random
      direction with the candidate's L2 norm, then matched and EMA-updated as usual.
    * ``"shuffled_labels"``: each pair's positive/negative labels are swapped with probability 1/2
      (its difference negated) before PCA, K-means and the cluster means.
    * ``"reversed"``: candidates are negated after clustering (cluster assignments unchanged).
      Matching and EMA commute with negation, so the bank is exactly the negation of the
      ``"none"`` bank for the same data and seed.
    * ``"unstructured_random"``: no bank at all (``update`` estimates nothing, ``vectors`` stays
      ``None``); the trainer instead steers every rollout with its own unit random vector from
      ``random_rollout_vectors`` (paper App. D.2: no clustering, no EMA).

    Randomness: one CPU ``torch.Generator`` seeded with ``seed`` and saved in the state. Per update
    the draws happen in this order: pair capping (only for problems over the cap), label shuffling
    (``shuffled_labels``), one integer ``random_state`` for PCA and K-means, random directions
    (``random_directions``). ``"reversed"`` and ``"none"`` therefore draw identically.

    Args:
        hidden_size: d, width of the steered block's output.
        num_vectors: K, number of steering routes (default 3, paper).
        pca_dim: PCA dimension before K-means (default 64, paper App. D).
        ema_beta: beta in ``v <- beta * v_old + (1 - beta) * v_new`` (default 0.5, paper), in [0, 1].
        kmeans_n_init: K-means restarts (default 16). The paper used 512 for its inference-time
            sweep. K-means time grows linearly with it: on 2048 pairs in 64 PCA dimensions (one CPU
            thread) 16 restarts take ~0.1-0.2 s, 512 take ~1.3-5 s (clustered vs. unstructured data),
            next to ~0.7-1.3 s for the PCA at d = 8192 (``benchmarks/bank_update.py``).
        max_pairs_per_problem: cap on contrast pairs per problem, chosen uniformly at random without
            replacement when it binds (``contrast_pairs``). ``None`` (default, paper) keeps all, at
            most ``(N/2)^2`` = 16 per problem for N = 8.
        min_pairs_per_cluster: an update is skipped (the bank kept) when a K-means cluster holds fewer
            pairs than this, or when there are fewer than ``K * min_pairs_per_cluster`` pairs at all.
            Default 1: every cluster non-empty (the paper gives no minimum); ``ASEConfig`` uses 4.
        control: one of ``CONTROLS`` (default ``"none"``).
        seed: seed of the bank's generator (default 0).
        num_threads: cap on scikit-learn's BLAS/OpenMP threads during PCA and K-means (default
            ``None``: process settings). On an oversubscribed CPU, OpenMP K-means slows down by an
            order of magnitude; 1 is then much faster (measured: 0.12 s vs 2.6 s).

    Raises:
        ValueError: any argument out of range or an unknown ``control``.
    """

    def __init__(
        self,
        hidden_size: int,
        num_vectors: int = 3,
        *,
        pca_dim: int = 64,
        ema_beta: float = 0.5,
        kmeans_n_init: int = 16,
        max_pairs_per_problem: int | None = None,
        min_pairs_per_cluster: int = 1,
        control: str = "none",
        seed: int = 0,
        num_threads: int | None = None,
    ):
        if hidden_size < 1:
            raise ValueError(f"hidden_size must be >= 1, got {hidden_size}")
        if num_vectors < 1:
            raise ValueError(f"num_vectors must be >= 1, got {num_vectors}")
        if pca_dim < 1:
            raise ValueError(f"pca_dim must be >= 1, got {pca_dim}")
        if not 0.0 <= ema_beta <= 1.0:
            raise ValueError(f"ema_beta must be in [0, 1], got {ema_beta}")
        if kmeans_n_init < 1:
            raise ValueError(f"kmeans_n_init must be >= 1, got {kmeans_n_init}")
        if max_pairs_per_problem is not None and max_pairs_per_problem < 1:
            raise ValueError(f"max_pairs_per_problem must be >= 1 or None, got {max_pairs_per_problem}")
        if min_pairs_per_cluster < 1:
            raise ValueError(f"min_pairs_per_cluster must be >= 1, got {min_pairs_per_cluster}")
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"num_threads must be >= 1 or None, got {num_threads}")
        BANK_CONTROLS.check(control, "control")
        self.hidden_size = int(hidden_size)
        self.num_vectors = int(num_vectors)
        self.pca_dim = int(pca_dim)
        self.ema_beta = float(ema_beta)
        self.kmeans_n_init = int(kmeans_n_init)
        self.max_pairs_per_problem = max_pairs_per_problem
        self.min_pairs_per_cluster = int(min_pairs_per_cluster)
        self.control = control
        self.seed = int(seed)
        self.num_threads = num_threads

        self._active: torch.Tensor | None = None
        self._pending: torch.Tensor | None = None
        self.num_updates = 0  # successful estimates (the first one included)
        self.num_skipped_updates = 0  # updates that kept the bank (too few pairs, or a cluster too small)
        self.num_activations = 0  # activate() calls that promoted a pending bank
        self._generator = torch.Generator().manual_seed(self.seed)

    # -- reading the bank ---------------------------------------------------------------------

    @property
    def vectors(self) -> torch.Tensor | None:
        """Active bank ``Tensor[K, d]`` float32 (CPU), used for steering; ``None`` before any estimate."""
        return self._active

    @property
    def pending_vectors(self) -> torch.Tensor | None:
        """Estimated bank waiting for ``activate()``; ``None`` if there is none."""
        return self._pending

    def _latest(self) -> torch.Tensor | None:
        return self._pending if self._pending is not None else self._active

    # -- the update ---------------------------------------------------------------------------

    def update(
        self,
        activations: torch.Tensor,
        problem_ids: Sequence[Hashable],
        rewards: torch.Tensor,
    ) -> dict[str, float]:
        """Estimate a new (pending) bank from one step's rollouts (paper §3.2, SPEC §3.4).

        Args:
            activations: ``Tensor[B, d]`` block-L readout activations, any float dtype (bf16/fp16
                accepted; computed in float32) and device; must be finite.
            problem_ids: ``B`` hashable ids, equal for rollouts of the same problem.
            rewards: ``Tensor[B]`` (or a list) of verifier rewards; ``> 0.5`` is correct
                (``CORRECT_THRESHOLD``).

        Returns:
            Diagnostics (paper Fig. 5), Python floats:

            * ``num_pairs``: contrast pairs used (after capping); always present.
            * ``skipped``: 1.0 if the bank was kept (fewer than ``K * min_pairs_per_cluster`` pairs, or a
              cluster with fewer than ``min_pairs_per_cluster`` pairs), else 0.0; always present except
              for ``"unstructured_random"``.
            * ``smallest_cluster``: pairs in the smallest K-means cluster, when clustering ran.
            * ``cluster_share/k`` for k < K: fraction of pairs in the cluster that feeds bank slot k.
            * ``temporal_alignment``: mean cosine between the (matched) new candidates and the
              previous vectors; absent for the first estimate.
            * ``inter_cluster_alignment``: mean pairwise cosine of the updated bank (K >= 2).
            * ``mean_vector_norm``: mean L2 norm of the updated bank's vectors.

        Raises:
            ValueError: ``activations`` not ``[B, hidden_size]``, not floating point or not finite;
                ``rewards`` / ``problem_ids`` length mismatch or non-finite rewards.
        """
        activations = self._check_activations(activations)
        rewards = torch.as_tensor(rewards)
        if rewards.shape != (activations.shape[0],):
            raise ValueError(
                f"rewards must have shape ({activations.shape[0]},) to match activations, "
                f"got {tuple(rewards.shape)}"
            )
        pairs = contrast_pairs(
            problem_ids,
            rewards,
            max_pairs_per_problem=self.max_pairs_per_problem,
            generator=self._generator,
        )
        diagnostics: dict[str, float] = {"num_pairs": float(len(pairs))}
        control = BANK_CONTROLS[self.control]
        if not control.estimates_bank:
            return diagnostics
        if len(pairs) < self.num_vectors * self.min_pairs_per_cluster:
            return self._skip(diagnostics)

        differences = pair_differences(activations, pairs)
        if control.shuffle_labels:
            differences, _ = shuffle_pair_labels(differences, self._generator)
        cluster_seed = int(torch.randint(0, 2**31 - 1, (1,), generator=self._generator))
        candidates, labels = cluster_candidates(
            differences,
            self.num_vectors,
            pca_dim=self.pca_dim,
            kmeans_n_init=self.kmeans_n_init,
            seed=cluster_seed,
            num_threads=self.num_threads,
        )
        counts = torch.bincount(labels, minlength=self.num_vectors)
        diagnostics["smallest_cluster"] = float(counts.min())
        if (counts < self.min_pairs_per_cluster).any():
            return self._skip(diagnostics)
        if control.random_directions:
            candidates = random_directions_like(candidates, self._generator)
        elif control.reverse:
            candidates = -candidates

        shares = counts.to(torch.float64) / len(pairs)
        previous = self._latest()
        if previous is None:
            new_bank = candidates
        else:
            perm = match_to_previous(previous, candidates)
            candidates, shares = candidates[perm], shares[perm]
            new_bank = ema_update(previous, candidates, self.ema_beta)
            diagnostics["temporal_alignment"] = float(
                torch.nn.functional.cosine_similarity(candidates, previous, dim=1, eps=_EPS).mean()
            )
        self._pending = new_bank.contiguous()
        self.num_updates += 1

        diagnostics["skipped"] = 0.0
        for k, share in enumerate(shares.tolist()):
            diagnostics[f"cluster_share/{k}"] = share
        if self.num_vectors >= 2:
            diagnostics["inter_cluster_alignment"] = mean_pairwise_cosine(new_bank)
        diagnostics["mean_vector_norm"] = float(new_bank.norm(dim=1).mean())
        return diagnostics

    def _skip(self, diagnostics: dict[str, float]) -> dict[str, float]:
        self.num_skipped_updates += 1
        diagnostics["skipped"] = 1.0
        return diagnostics

    def _check_activations(self, activations: torch.Tensor) -> torch.Tensor:
        if not isinstance(activations, torch.Tensor):
            raise ValueError(f"activations must be a torch.Tensor, got {type(activations).__name__}")
        if activations.dim() != 2 or activations.shape[1] != self.hidden_size:
            raise ValueError(
                f"activations must have shape [B, hidden_size={self.hidden_size}], "
                f"got {tuple(activations.shape)}"
            )
        if not activations.is_floating_point():
            raise ValueError(f"activations must be floating point, got {activations.dtype}")
        activations = activations.detach().to(device="cpu", dtype=torch.float32)
        if not torch.isfinite(activations).all():
            bad_rows = (~torch.isfinite(activations)).any(dim=1).nonzero().flatten().tolist()
            raise ValueError(f"activations contains NaN or inf in rows {bad_rows[:10]}")
        return activations

    def activate(self) -> bool:
        """Promote the pending bank to active; call after the optimizer step.

        Returns:
            ``True`` if a pending bank was promoted, ``False`` if there was none (the active bank is
            then unchanged, e.g. after a skipped update).
        """
        if self._pending is None:
            return False
        self._active = self._pending
        self._pending = None
        self.num_activations += 1
        return True

    # -- unstructured random control ------------------------------------------------------------

    def random_rollout_vectors(
        self, num_rollouts: int, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Unstructured-random control (paper App. D.2): one unit random vector per rollout.

        The trainer calls this once per generation step instead of reading ``vectors`` and adds
        ``alpha * u_i`` to the block output of rollout i, for every rollout (no clean route, no
        clustering, no EMA; the vectors depend on neither activations nor rewards). Available for
        any ``control``, but meant for ``"unstructured_random"``.

        Args:
            num_rollouts: number of rows N (>= 0).
            generator: CPU ``torch.Generator``; default: the bank's own (saved in the state).

        Returns:
            ``Tensor[num_rollouts, hidden_size]`` float32 unit vectors.
        """
        if num_rollouts < 0:
            raise ValueError(f"num_rollouts must be >= 0, got {num_rollouts}")
        if generator is None:
            generator = self._generator
        return random_unit_vectors(num_rollouts, self.hidden_size, generator)

    # -- state ----------------------------------------------------------------------------------

    def config(self) -> dict:
        """Constructor arguments, JSON-serialisable."""
        return {
            "hidden_size": self.hidden_size,
            "num_vectors": self.num_vectors,
            "pca_dim": self.pca_dim,
            "ema_beta": self.ema_beta,
            "kmeans_n_init": self.kmeans_n_init,
            "max_pairs_per_problem": self.max_pairs_per_problem,
            "min_pairs_per_cluster": self.min_pairs_per_cluster,
            "control": self.control,
            "seed": self.seed,
            "num_threads": self.num_threads,
        }

    def state_dict(self) -> dict:
        """Full state: ``active``/``pending`` (``Tensor[K, d]`` or ``None``), counters,
        ``generator_state`` (``ByteTensor``) and ``config``. Tensors are copies."""
        return {
            "active": None if self._active is None else self._active.clone(),
            "pending": None if self._pending is None else self._pending.clone(),
            "num_updates": self.num_updates,
            "num_skipped_updates": self.num_skipped_updates,
            "num_activations": self.num_activations,
            "generator_state": self._generator.get_state(),
            "config": self.config(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore ``state_dict()`` output exactly (vectors, counters, generator).

        The other knobs (beta, ``pca_dim``, control, ...) stay this bank's own, so a run can resume
        with changed knobs; only K and d must agree.

        Raises:
            ValueError: ``num_vectors``/``hidden_size`` differ, or a vector has the wrong shape.
        """
        saved = state["config"]
        for key in ("num_vectors", "hidden_size"):
            if saved[key] != getattr(self, key):
                raise ValueError(f"state has {key}={saved[key]} but this bank has {getattr(self, key)}")
        expected = (self.num_vectors, self.hidden_size)
        for key in ("active", "pending"):
            if state[key] is not None and tuple(state[key].shape) != expected:
                raise ValueError(f"state[{key!r}] has shape {tuple(state[key].shape)}, expected {expected}")
        self._active = None if state["active"] is None else state["active"].to(torch.float32).clone()
        self._pending = None if state["pending"] is None else state["pending"].to(torch.float32).clone()
        self.num_updates = int(state["num_updates"])
        self.num_skipped_updates = int(state["num_skipped_updates"])
        self.num_activations = int(state["num_activations"])
        self._generator.set_state(state["generator_state"].clone())

    def save(self, directory: str | os.PathLike) -> None:
        """Write the state to ``directory`` (created if needed), without pickle.

        ``steering_bank.safetensors`` holds the tensors (``active``, ``pending`` when present,
        ``generator_state``); ``steering_bank.json`` holds the config and the counters.
        """
        os.makedirs(directory, exist_ok=True)
        state = self.state_dict()
        tensors = {"generator_state": state["generator_state"]}
        for key in ("active", "pending"):
            if state[key] is not None:
                tensors[key] = state[key].contiguous()
        save_file(tensors, os.path.join(directory, BANK_TENSORS_FILE))
        metadata = {key: state[key] for key in ("num_updates", "num_skipped_updates", "num_activations")}
        metadata["config"] = state["config"]
        with open(os.path.join(directory, BANK_METADATA_FILE), "w") as f:
            json.dump(metadata, f, indent=2)

    @classmethod
    def load(cls, directory: str | os.PathLike) -> SteeringVectorBank:
        """Build a bank from ``save(directory)`` output (its saved config and state).

        Raises:
            FileNotFoundError: a file is missing.
            ValueError: a file is torn or unreadable (the message names it).
        """
        path = os.path.join(directory, BANK_METADATA_FILE)
        try:
            with open(path) as f:
                metadata = json.load(f)
            path = os.path.join(directory, BANK_TENSORS_FILE)
            tensors = load_file(path)
        except (ValueError, SafetensorError) as err:  # JSONDecodeError is a ValueError
            raise ValueError(f"the steering bank file {path} is torn or unreadable ({type(err).__name__}: {err}); "
                             "resume from an earlier checkpoint") from err
        bank = cls(**metadata["config"])
        bank.load_state_dict(
            {
                "active": tensors.get("active"),
                "pending": tensors.get("pending"),
                "generator_state": tensors["generator_state"],
                **metadata,
            }
        )
        return bank

    def __repr__(self) -> str:
        return (
            f"SteeringVectorBank(K={self.num_vectors}, d={self.hidden_size}, control={self.control!r}, "
            f"active={self._active is not None}, pending={self._pending is not None}, "
            f"updates={self.num_updates}, skipped={self.num_skipped_updates})"
        )


def applied_strength(vectors: torch.Tensor, alpha: float, hidden_states: torch.Tensor) -> torch.Tensor:
    """Relative size of each route's offset: ``||alpha * v_k|| / median_i ||h_i||`` (ASE §3.3's ``alpha v_s`` against
    the activations it is added to).

    The figure that tells whether ``alpha`` nudges or overwrites block L's output: near 0 a small push, near 1 the
    offset is as large as a typical activation (a replay of the CPU demo's first bank, from 10 pairs, gives 0.36,
    0.47 and 0.98 at ``alpha = 0.5``: ``benchmarks/bank_readout_offset.py``).

    Args:
        vectors: ``Tensor[K, d]``, the bank (route ``s`` uses ``vectors[s - 1]``).
        alpha: the steering strength (finite, >= 0).
        hidden_states: ``Tensor[N, d]``, clean (unsteered) outputs of the steered block, one row per token sampled
            (the trainer passes the bank's readouts: one token per rollout, at ``f * len``).

    Returns:
        ``Tensor[K]`` float64; the median is the usual one (mean of the two middle values for even ``N``).

    Raises:
        ValueError: shapes disagree, no hidden state, a non-finite ``alpha`` or a zero median norm.
    """
    if vectors.dim() != 2 or hidden_states.dim() != 2 or vectors.shape[1] != hidden_states.shape[1]:
        raise ValueError(f"vectors [K, d] and hidden_states [N, d] must share d; got {tuple(vectors.shape)} and "
                         f"{tuple(hidden_states.shape)}")
    if hidden_states.shape[0] == 0:
        raise ValueError("hidden_states is empty: no activation to compare the vectors with")
    if not (math.isfinite(alpha) and alpha >= 0):
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha}")
    median = torch.quantile(hidden_states.double().norm(dim=1), 0.5)
    if median == 0:
        raise ValueError("the median norm of hidden_states is 0")
    return alpha * vectors.double().norm(dim=1) / median


def bank_metrics(diagnostics: dict) -> dict[str, float]:
    """The ``ase/*`` training metrics of one bank update's diagnostics (see ``SteeringVectorBank.update``; the
    trainer adds ``applied_strength/<route>``, see :func:`applied_strength`)."""
    names = {"temporal_alignment": "ase/temporal_alignment", "inter_cluster_alignment": "ase/inter_cluster_alignment",
             "mean_vector_norm": "ase/vector_norm", "smallest_cluster": "ase/smallest_cluster"}
    out = {f"ase/cluster_share_{k.split('/')[1]}": v for k, v in diagnostics.items() if k.startswith("cluster_share/")}
    out.update({f"ase/route_{k.split('/')[1]}_applied_strength": v for k, v in diagnostics.items()
                if k.startswith("applied_strength/")})
    out.update({names[k]: v for k, v in diagnostics.items() if k in names})
    return out
