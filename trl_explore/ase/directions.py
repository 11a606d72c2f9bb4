"""Steering directions of ASE-GRPO's bank update (paper §3.2, App. D): the cluster candidates (PCA + K-means, means
in the original space), their one-to-one matching to the previous bank, the EMA, random directions for the controls,
and the cosine statistics of paper Fig. 5. Pure functions of tensors."""

from __future__ import annotations

import warnings

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans
from sklearn.decomposition import PCA
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

from trl_explore.utils.similarity import EPS as _EPS
from trl_explore.utils.similarity import cosine_matrix


def cluster_candidates(
    differences: torch.Tensor,
    num_clusters: int,
    *,
    pca_dim: int = 64,
    kmeans_n_init: int = 16,
    seed: int = 0,
    num_threads: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PCA + K-means on the contrast vectors; one mean-difference candidate per cluster.

    Paper §3.2 / App. D: PCA dimension 64, no feature scaling, K-means; the candidate of cluster k
    is the mean of its members' differences in the original ``d``-dimensional space (not
    normalised). PCA keeps ``min(pca_dim, P, d)`` components (scikit-learn ``PCA``, centred, solver
    chosen by scikit-learn, ``random_state=seed``); K-means is scikit-learn ``KMeans`` (k-means++,
    Lloyd, ``n_init=kmeans_n_init`` restarts, ``random_state=seed``). With ``num_clusters == 1``
    PCA and K-means are skipped (one cluster holds every pair).

    Args:
        differences: ``Tensor[P, d]`` float32, finite, ``P >= num_clusters``.
        num_clusters: K >= 1.
        pca_dim: upper bound on the PCA dimension (default 64).
        kmeans_n_init: K-means restarts (default 16); cost grows linearly with it.
        seed: ``random_state`` of PCA and K-means.
        num_threads: cap on the BLAS/OpenMP threads scikit-learn uses here (``threadpoolctl``);
            ``None`` (default) leaves the process settings alone.

    Returns:
        ``(candidates Tensor[K, d] float32, labels LongTensor[P])``. If K-means finds fewer than K
        distinct clusters (e.g. fewer than K distinct differences), the empty clusters get a zero
        candidate; check ``torch.bincount(labels, minlength=K)`` (``SteeringVectorBank`` skips the
        update in that case).

    Raises:
        ValueError: ``differences`` not 2-D, ``num_clusters < 1`` or ``P < num_clusters``.
    """
    if differences.dim() != 2:
        raise ValueError(f"differences must be 2-D [P, d], got shape {tuple(differences.shape)}")
    num_pairs, dim = differences.shape
    if num_clusters < 1:
        raise ValueError(f"num_clusters must be >= 1, got {num_clusters}")
    if num_pairs < num_clusters:
        raise ValueError(f"need at least num_clusters={num_clusters} differences, got {num_pairs}")
    differences = differences.detach().to(device="cpu", dtype=torch.float32)

    if num_clusters == 1:
        labels = torch.zeros(num_pairs, dtype=torch.long)
    else:
        features = differences.numpy()
        n_components = min(pca_dim, num_pairs, dim)
        kmeans = KMeans(n_clusters=num_clusters, n_init=kmeans_n_init, random_state=seed)
        with threadpool_limits(limits=num_threads):
            # Zero-variance input makes scikit-learn's explained-variance ratio divide 0 by 0; we do
            # not use that ratio, and K-means then finds fewer than K clusters (handled by the caller).
            with np.errstate(invalid="ignore", divide="ignore"):
                reduced = PCA(n_components=n_components, random_state=seed).fit_transform(features)
            with warnings.catch_warnings():
                # "Number of distinct clusters found smaller than n_clusters": reported through
                # empty clusters in ``labels`` instead.
                warnings.filterwarnings("ignore", "Number of distinct clusters", ConvergenceWarning)
                labels = torch.from_numpy(kmeans.fit_predict(reduced).astype(np.int64))

    counts = torch.bincount(labels, minlength=num_clusters)
    sums = torch.zeros(num_clusters, dim, dtype=torch.float32).index_add_(0, labels, differences)
    candidates = sums / counts.clamp(min=1).to(torch.float32)[:, None]
    return candidates, labels


def match_to_previous(previous: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """One-to-one matching of new candidates to the previous bank, maximising total cosine.

    Paper §3.2: "match candidates to the previous bank (maximum cosine, one-to-one)". Solved
    exactly with the Hungarian algorithm (``scipy.optimize.linear_sum_assignment``), which can differ
    from greedily taking the best pair first.

    Args:
        previous: ``Tensor[K, d]`` previous bank.
        candidates: ``Tensor[K, d]`` new candidates.

    Returns:
        ``LongTensor[K]`` permutation ``perm`` such that ``candidates[perm][k]`` is matched to
        ``previous[k]``.

    Raises:
        ValueError: shapes differ.
    """
    if previous.shape != candidates.shape:
        raise ValueError(
            f"previous {tuple(previous.shape)} and candidates {tuple(candidates.shape)} differ in shape"
        )
    cosines = cosine_matrix(previous.double(), candidates.double()).numpy()
    rows, cols = linear_sum_assignment(cosines, maximize=True)
    perm = torch.empty(previous.shape[0], dtype=torch.long)
    perm[torch.from_numpy(rows)] = torch.from_numpy(cols).long()
    return perm


def ema_update(previous: torch.Tensor, new: torch.Tensor, beta: float) -> torch.Tensor:
    """Exponential moving average ``beta * previous + (1 - beta) * new`` (paper §3.2, beta = 0.5).

    ``new`` must already be matched to ``previous`` row by row (``match_to_previous``).
    """
    return beta * previous + (1.0 - beta) * new


def random_directions_like(
    candidates: torch.Tensor, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Random-directions control: independent Gaussian directions with each candidate's L2 norm.

    Paper App. D: "each independent random vector is rescaled to the corresponding cluster
    candidate's original L2 norm before the EMA update".

    Args:
        candidates: ``Tensor[K, d]`` float32.
        generator: CPU ``torch.Generator``; one ``torch.randn(K, d)`` draw is taken from it.

    Returns:
        ``Tensor[K, d]`` float32, row k with norm ``candidates[k].norm()`` and a uniformly random
        direction.
    """
    directions = random_unit_vectors(candidates.shape[0], candidates.shape[1], generator)
    return directions * candidates.norm(dim=1, keepdim=True)


def random_unit_vectors(
    num_vectors: int, dim: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``Tensor[num_vectors, dim]`` float32 of independent, uniformly distributed unit vectors.

    Drawn as normalised standard Gaussians; one ``torch.randn(num_vectors, dim)`` draw from
    ``generator``.
    """
    gaussian = torch.randn(num_vectors, dim, generator=generator, dtype=torch.float32)
    return gaussian / gaussian.norm(dim=1, keepdim=True).clamp(min=_EPS)


def mean_pairwise_cosine(vectors: torch.Tensor) -> float:
    """Mean cosine over the unordered pairs of rows of ``vectors [K, d]``, K >= 2.

    The inter-cluster alignment of paper Fig. 5 (lower bound -1/(K-1), i.e. -0.5 for K = 3).
    """
    if vectors.shape[0] < 2:
        raise ValueError(f"need at least 2 vectors, got {vectors.shape[0]}")
    cosines = cosine_matrix(vectors, vectors)
    upper = torch.triu_indices(vectors.shape[0], vectors.shape[0], offset=1)
    return float(cosines[upper[0], upper[1]].mean())
