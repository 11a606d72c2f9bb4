"""Time one ``SteeringVectorBank.update`` at a few sizes, and its PCA / K-means parts.

Run (package installed, e.g. ``pip install -e .``):
``python benchmarks/bank_update.py [--threads 1] [--quick] [--no-kmeans512]``
(about a minute on 2 CPU cores; ``--quick`` stops at d = 2048).

Sizes: d is the hidden size (Qwen3-1.7B: 2048, Qwen3-8B: 4096, 8192 for larger models). With N = 8
rollouts per prompt and 4 of them correct, a prompt gives 16 contrast pairs, so 128 prompts give
2048 pairs. The activations are random (timing barely depends on their content, except K-means
iterations, which converge faster on clustered data).

Columns:
* ``update``: first update of a fresh bank (pairs, PCA, K-means with n_init=16, candidates);
  ``2nd``: a further update (adds matching and EMA).
* ``sk PCA`` / ``torch PCA``: scikit-learn ``PCA(64)`` (randomized solver, 7 power iterations) vs
  ``torch.pca_lowrank(q=64, niter=7)``, same work, to see whether a torch rewrite would pay off.
* ``KM16`` / ``KM512``: scikit-learn K-means (K = 3) on the 64-dim PCA features, n_init 16 / 512.
"""

from __future__ import annotations

import argparse
import functools
import time

import torch
from sklearn.cluster import KMeans
from sklearn.decomposition import PCA
from threadpoolctl import threadpool_limits

from trl_explore.ase.bank import SteeringVectorBank


def synthetic_step(num_prompts: int, hidden_size: int, num_generations: int = 8):
    """Activations ``[P*N, d]``, problem ids and rewards with every other rollout correct."""
    generator = torch.Generator().manual_seed(0)
    num_rows = num_prompts * num_generations
    activations = torch.randn(num_rows, hidden_size, generator=generator)
    problem_ids = [row // num_generations for row in range(num_rows)]
    rewards = torch.tensor([float(row % 2) for row in range(num_rows)])
    return activations, problem_ids, rewards


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description="Time SteeringVectorBank.update")
    parser.add_argument("--threads", type=int, default=None, help="BLAS/OpenMP threads (default: all)")
    parser.add_argument("--quick", action="store_true", help="only d <= 2048")
    parser.add_argument("--no-kmeans512", action="store_true", help="skip the slow n_init=512 column")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    sizes = [(2048, 32), (2048, 128), (8192, 128), (8192, 256)]  # (d, prompts)
    if args.quick:
        sizes = sizes[:2]
    print(f"threads={args.threads or 'default'} (torch: {torch.get_num_threads()}); 16 pairs per prompt")
    print(
        f"{'d':>5} {'pairs':>5} | {'update':>7} {'2nd':>7} | {'sk PCA':>7} {'torch PCA':>9} | "
        f"{'KM16':>6} {'KM512':>6}"
    )
    for hidden_size, num_prompts in sizes:
        activations, problem_ids, rewards = synthetic_step(num_prompts, hidden_size)
        bank = SteeringVectorBank(hidden_size, 3, kmeans_n_init=16, num_threads=args.threads)
        update = functools.partial(bank.update, activations, problem_ids, rewards)
        first = seconds(update)
        second = seconds(update)

        positives = activations[1::2].reshape(num_prompts, 4, 1, hidden_size)  # rewards: odd rows = 1
        negatives = activations[0::2].reshape(num_prompts, 1, 4, hidden_size)
        differences = (positives - negatives).reshape(num_prompts * 16, hidden_size)
        with threadpool_limits(limits=args.threads):
            sk_pca = seconds(functools.partial(PCA(64, random_state=0).fit_transform, differences.numpy()))
            torch_pca = seconds(functools.partial(torch.pca_lowrank, differences, q=64, center=True, niter=7))
            features = PCA(64, random_state=0).fit_transform(differences.numpy())
            km16 = seconds(functools.partial(KMeans(3, n_init=16, random_state=0).fit, features))
            km512 = float("nan")
            if not args.no_kmeans512 and num_prompts * 16 <= 2048:
                km512 = seconds(functools.partial(KMeans(3, n_init=512, random_state=0).fit, features))
        print(f"{hidden_size:>5} {num_prompts * 16:>5} | {first:>6.2f}s {second:>6.2f}s | {sk_pca:>6.2f}s "
              f"{torch_pca:>8.2f}s | {km16:>5.2f}s {km512:>5.2f}s")


if __name__ == "__main__":
    main()
