"""Cosine similarity between two sets of vectors: the one implementation both methods use.

OGER compares trajectory embeddings (Eq. 3); ASE-GRPO matches steering vectors to the previous bank and measures
their alignment (§3.2, Fig. 5).
"""

from __future__ import annotations

import torch

EPS = 1e-12
"""Norms below this count as zero: a zero row has cosine 0 with everything (no division by zero)."""


def cosine_matrix(a: torch.Tensor, b: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Cosine similarities between the rows of ``a [m, d]`` and ``b [n, d]``; returns ``[m, n]`` in ``a``'s dtype.

    Each row is divided by ``max(norm, eps)``, so an all-zero row gives similarity 0 instead of NaN. ``b`` is moved to
    ``a``'s device and dtype. Shapes are not checked here (callers that take user input check them).
    """
    b = b.to(device=a.device, dtype=a.dtype)
    a_unit = a / a.norm(dim=1, keepdim=True).clamp(min=eps)
    b_unit = b / b.norm(dim=1, keepdim=True).clamp(min=eps)
    return a_unit @ b_unit.T
