"""OGER's exploration reward: embedding divergence (Eq. 3-5) refined by last-token entropy (Eq. 6-8).

All functions are pure (tensors in, tensors out). Paper: "OGER: A Robust Offline-Guided Exploration
Reward for Hybrid Reinforcement Learning", §3.1-3.2.
"""

from __future__ import annotations

import torch

from trl_explore.utils.similarity import cosine_matrix


def cosine_similarity_matrix(online: torch.Tensor, offline: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Pairwise cosine similarity ``s_ij = cos(E_on_i, E_off_j)`` (OGER Eq. 3).

    Args:
        online: ``[N, d]`` embeddings of the online trajectories.
        offline: ``[M, d]`` embeddings of the offline (teacher) trajectories.
        eps: floor on the norms, so an all-zero embedding gives similarity 0 instead of NaN.

    Returns:
        ``[N, M]`` float32 tensor with values in ``[-1, 1]``.

    Raises:
        ValueError: if either input is not 2-D or the embedding sizes differ.
    """
    if online.dim() != 2 or offline.dim() != 2:
        raise ValueError(f"expected 2-D embeddings, got online {tuple(online.shape)} and offline "
                         f"{tuple(offline.shape)}")
    if online.size(1) != offline.size(1):
        raise ValueError(f"embedding sizes differ: online d={online.size(1)}, offline d={offline.size(1)}")
    return cosine_matrix(online.float(), offline, eps)


def divergence(online: torch.Tensor, offline: torch.Tensor) -> torch.Tensor:
    """Semantic divergence ``D_i = 1 - mean_j s_ij`` of each online trajectory (OGER Eq. 4-5).

    Args:
        online: ``[N, d]`` online embeddings.
        offline: ``[M, d]`` offline embeddings, ``M >= 1``.

    Returns:
        ``[N]`` float32 tensor in ``[0, 2]`` (0: identical direction to every teacher on average).

    Raises:
        ValueError: if ``offline`` is empty (the mean of Eq. 4 is undefined) or shapes mismatch.
    """
    if offline.dim() == 2 and offline.size(0) == 0:
        raise ValueError("divergence needs at least one offline trajectory (M >= 1), got M = 0")
    return 1.0 - cosine_similarity_matrix(online, offline).mean(dim=1)


def exploration_reward(
    divergence: torch.Tensor,
    last_token_entropy: torch.Tensor,
    correctness: torch.Tensor,
    is_offline: torch.Tensor,
    entropy_refinement: bool = True,
) -> torch.Tensor:
    """The OGER reward ``R_OGER_i = D_i * exp(-H_last_i) * R_m_i`` for online rows, 0 for offline rows (Eq. 7-8).

    Added to the verifiable reward ``R_m`` this gives Eq. 8's total reward: ``R_m + R_OGER`` online,
    ``R_m`` offline.

    Args:
        divergence: ``[B]`` divergence ``D_i`` (Eq. 5).
        last_token_entropy: ``[B]`` Shannon entropy in nats of the policy's distribution that produced
            the final completion token (Eq. 6). Ignored where ``is_offline`` or when
            ``entropy_refinement=False``.
        correctness: ``[B]`` verifiable reward ``R_m`` in ``{0, 1}``.
        is_offline: ``[B]`` bool, True for offline teacher rows.
        entropy_refinement: False gives the paper's "w/o Refinement" ablation ``D_i * R_m_i``.

    Returns:
        ``[B]`` float32 reward, exactly 0 on offline and incorrect rows.

    Raises:
        ValueError: on mismatched lengths or a NaN in the inputs of an online correct row.
    """
    n = divergence.numel()
    for name, t in (("last_token_entropy", last_token_entropy), ("correctness", correctness),
                    ("is_offline", is_offline)):
        if t.numel() != n:
            raise ValueError(f"{name} has {t.numel()} values, divergence has {n}")
    divergence = divergence.float().reshape(-1)
    correctness = correctness.float().reshape(-1).to(divergence.device)
    active = (~is_offline.bool().reshape(-1).to(divergence.device)) & (correctness != 0)
    reward = divergence * correctness
    if entropy_refinement:
        reward = reward * torch.exp(-last_token_entropy.float().reshape(-1).to(divergence.device))
    if torch.isnan(reward[active]).any():
        bad = torch.nonzero(torch.isnan(reward) & active).flatten().tolist()
        raise ValueError(f"NaN exploration reward for online rows {bad}: check divergence and last_token_entropy")
    return torch.where(active, reward, torch.zeros_like(reward))
