"""Evaluation metrics of the two papers: mean@k, unbiased pass@k, macro averages, pairwise answer disagreement.

Sources:

* OGER Table 1 / App. A.2: "pass@1 at 32 rollouts" for AIME 2024/2025 and AMC, pass@1 at one rollout
  elsewhere; "AVG" is the unweighted mean over benchmarks. Fig. 3 (pass@k, k up to 256) and
  App. E / Fig. 6 (pass@8 against the decoding temperature).
* ASE Tables 1-3: "Mean@8 is the average accuracy over eight sampled answers; Pass@8 is the fraction
  of problems with at least one correct answer"; "Math Avg." and "OOD Avg." are unweighted means of
  benchmark-level scores. Fig. 3: Pass@k for k = 8 ... 128. Fig. 4: pairwise answer disagreement within groups
  (also logged in training by ASE).

Every function here is pure (numbers in, numbers out). Conventions:

* one problem has ``n`` graded samples, ``c`` of them correct (``0 <= c <= n``);
* per-problem scores are averaged over problems with equal weight (a benchmark score), and benchmark
  scores are averaged with equal weight (a macro average);
* scores are fractions in ``[0, 1]``; tables multiply by 100.

pass@k is the unbiased estimator of Chen et al. (2021, HumanEval), ``1 - C(n - c, k) / C(n, k)``: the
probability that a uniformly drawn subset of ``k`` of the ``n`` samples holds at least one correct one.
With ``k = 1`` it equals ``c / n``, so "pass@1 at 32 rollouts" (OGER) is mean@32, and with ``k = n`` it
is ``1[c > 0]`` (ASE's Pass@8 with eight samples).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"`{name}` must be an integer, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"`{name}` must be >= {minimum}, got {value}")
    return int(value)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem: ``1 - C(n - c, k) / C(n, k)``.

    Computed in the product form ``1 - prod_{i = n - c + 1}^{n} (1 - k / i)`` (float64), which never
    forms a binomial coefficient, so it is exact to rounding for any ``n`` (256, 10 000, ...). When
    ``n - c < k`` every ``k``-subset holds a correct sample and the result is exactly 1.0.

    Source: OGER Fig. 3 / App. E, ASE Fig. 3 (estimator of Chen et al., 2021).

    Args:
        n: number of graded samples of the problem (``>= 1``).
        c: number of correct samples (``0 <= c <= n``).
        k: subset size (``1 <= k <= n``).

    Returns:
        A float in ``[0, 1]``: 0.0 when ``c == 0``, ``c / n`` when ``k == 1``, ``1.0`` when ``c > 0`` and
        ``k == n``.

    Raises:
        TypeError: an argument is not an integer.
        ValueError: ``n < 1``, ``c`` outside ``[0, n]``, or ``k`` outside ``[1, n]`` (``k > n`` cannot be
            estimated from ``n`` samples: draw more samples).
    """
    n = _check_int(n, "n", 1)
    c = _check_int(c, "c", 0)
    k = _check_int(k, "k", 1)
    if c > n:
        raise ValueError(f"`c`={c} correct samples is more than `n`={n} samples")
    if k > n:
        raise ValueError(f"pass@{k} needs at least k={k} samples per problem, got n={n}")
    if n - c < k:
        return 1.0
    i = np.arange(n - c + 1, n + 1, dtype=np.float64)
    return float(1.0 - np.prod(1.0 - k / i))


def _counts(num_samples: Sequence[int] | np.ndarray,
            num_correct: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validate per-problem ``(n, c)`` arrays: 1-D, same length >= 1, integers, ``0 <= c <= n``, ``n >= 1``."""
    n = np.asarray(num_samples)
    c = np.asarray(num_correct)
    if n.ndim != 1 or c.shape != n.shape:
        raise ValueError(
            f"`num_samples` and `num_correct` must be 1-D of the same length, got shapes {n.shape} and {c.shape}"
        )
    if n.size == 0:
        raise ValueError("no problems: `num_samples` is empty")
    for name, arr in (("num_samples", n), ("num_correct", c)):
        whole_floats = np.issubdtype(arr.dtype, np.floating) and np.all(arr == np.round(arr))
        if not (np.issubdtype(arr.dtype, np.integer) or whole_floats):
            raise TypeError(f"`{name}` must hold integers, got dtype {arr.dtype}")
    n, c = n.astype(np.int64), c.astype(np.int64)
    if (n < 1).any():
        raise ValueError(f"problem {int(np.argmax(n < 1))} has {int(n[n < 1][0])} samples; every problem needs >= 1")
    bad = (c < 0) | (c > n)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"problem {i} has num_correct={int(c[i])} outside [0, num_samples={int(n[i])}]")
    return n, c


def pass_at_k_per_problem(num_samples: Sequence[int], num_correct: Sequence[int], k: int) -> np.ndarray:
    """pass@k of each problem (see :func:`pass_at_k`).

    Args:
        num_samples: ``[P]`` samples per problem ``n_p``.
        num_correct: ``[P]`` correct samples per problem ``c_p``.
        k: subset size, ``1 <= k <= min_p n_p``.

    Returns:
        ``float64[P]``.

    Raises:
        ValueError / TypeError: bad counts (the message names the problem index), or ``k`` larger than
            the smallest ``n_p`` (names that problem).
    """
    n, c = _counts(num_samples, num_correct)
    k = _check_int(k, "k", 1)
    if k > n.min():
        i = int(np.argmin(n))
        raise ValueError(f"pass@{k} needs at least k={k} samples per problem; problem {i} has only {int(n[i])}")
    return np.array([pass_at_k(int(ni), int(ci), k) for ni, ci in zip(n, c)], dtype=np.float64)


def benchmark_pass_at_k(num_samples: Sequence[int], num_correct: Sequence[int], k: int) -> float:
    """Benchmark pass@k: the mean over problems of the per-problem unbiased pass@k.

    Source: OGER Table 1 (pass@1 at 32 or 1 rollouts), Fig. 3, Fig. 6 (pass@8); ASE Tables 1-3 (Pass@8).

    Args:
        num_samples: ``[P]`` samples per problem.
        num_correct: ``[P]`` correct samples per problem.
        k: ``1 <= k <= min n``.

    Returns:
        A float in ``[0, 1]``.

    Raises:
        ValueError / TypeError: see :func:`pass_at_k_per_problem`.
    """
    return float(pass_at_k_per_problem(num_samples, num_correct, k).mean())


def mean_at_k(num_samples: Sequence[int], num_correct: Sequence[int]) -> float:
    """Benchmark mean@k: the mean over problems of the per-problem accuracy ``c_p / n_p``.

    Source: ASE Tables 1-3 ("Mean@8 is the average accuracy over eight sampled answers"); equal to
    OGER's "pass@1 at 32 rollouts" when every ``n_p = 32``. With unequal ``n_p`` each problem still
    weighs the same (it is not the pooled fraction of correct samples).

    Args:
        num_samples: ``[P]`` samples per problem (``k = n_p``).
        num_correct: ``[P]`` correct samples per problem.

    Returns:
        A float in ``[0, 1]``.

    Raises:
        ValueError / TypeError: see :func:`pass_at_k_per_problem`.
    """
    n, c = _counts(num_samples, num_correct)
    return float((c / n).mean())


def correct_counts(verdicts: np.ndarray | Sequence[Sequence[bool]]) -> tuple[np.ndarray, np.ndarray]:
    """``(n, c)`` per problem from a verdict matrix.

    Args:
        verdicts: ``bool[P, n]`` (a problem per row, a sample per column), or a list of per-problem
            verdict lists (ragged allowed).

    Returns:
        ``(num_samples int64[P], num_correct int64[P])``.

    Raises:
        ValueError: no problems, or a problem with no verdict (names its index).
    """
    rows = [np.asarray(row, dtype=bool).reshape(-1) for row in verdicts]
    if not rows:
        raise ValueError("no problems: the verdict matrix is empty")
    for i, row in enumerate(rows):
        if row.size == 0:
            raise ValueError(f"problem {i} has no graded sample")
    return np.array([r.size for r in rows], dtype=np.int64), np.array([r.sum() for r in rows], dtype=np.int64)


def default_ks(n: int) -> list[int]:
    """The k grid of a pass@k curve: ``1, 2, 4, ..., `` up to ``n``, and ``n`` itself.

    Source: OGER Fig. 3 (k = 1 ... 256, powers of two), ASE Fig. 3 (k = 8 ... 128).

    Args:
        n: samples per problem (``>= 1``).

    Returns:
        Increasing list of ints, e.g. ``default_ks(8) == [1, 2, 4, 8]``, ``default_ks(12) == [1, 2, 4, 8, 12]``.
    """
    n = _check_int(n, "n", 1)
    ks = [2**i for i in range(n.bit_length()) if 2**i <= n]
    return ks if ks[-1] == n else ks + [n]


def pass_at_k_curve(num_samples: Sequence[int], num_correct: Sequence[int],
                    ks: Iterable[int] | None = None) -> dict[int, float]:
    """Benchmark pass@k for several k from one set of samples (no extra generation).

    Source: OGER Fig. 3, ASE Fig. 3.

    Args:
        num_samples: ``[P]`` samples per problem.
        num_correct: ``[P]`` correct samples per problem.
        ks: the k values (each ``<= min n``); default :func:`default_ks` of ``min n``.

    Returns:
        ``{k: pass@k}`` in increasing k.

    Raises:
        ValueError / TypeError: see :func:`pass_at_k_per_problem`.
    """
    n, _ = _counts(num_samples, num_correct)
    ks = default_ks(int(n.min())) if ks is None else sorted({_check_int(k, "k", 1) for k in ks})
    return {k: benchmark_pass_at_k(num_samples, num_correct, k) for k in ks}


def macro_average(scores: Mapping[str, float], names: Sequence[str] | None = None) -> float:
    """Unweighted mean of benchmark scores (OGER Table 1 "AVG"; ASE "Math Avg." / "OOD Avg.").

    Args:
        scores: ``{benchmark: score}``.
        names: the benchmarks to average (default: all keys of ``scores``).

    Returns:
        The mean of the selected scores.

    Raises:
        ValueError: nothing to average, a named benchmark is missing from ``scores`` (names it), or a
            score is not a finite number (names it).
    """
    names = list(scores) if names is None else list(names)
    if not names:
        raise ValueError("macro_average: no benchmark scores to average")
    missing = [name for name in names if name not in scores]
    if missing:
        raise ValueError(f"macro_average: no score for benchmark(s) {missing}; have {sorted(scores)}")
    values = []
    for name in names:
        value = scores[name]
        if (isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer))
                or not math.isfinite(value)):
            raise ValueError(f"macro_average: score of benchmark {name!r} is not a finite number: {value!r}")
        values.append(float(value))
    return float(np.mean(values))


def pairwise_answer_disagreement(answers: Sequence[str | None], num_generations: int) -> float | None:
    """Fraction of same-prompt answer pairs that differ (ASE paper Fig. 4, "pairwise disagreement").

    For each prompt (``num_generations`` consecutive entries) every unordered pair ``i < j`` of
    completions is compared; answers are compared as exact strings, so normalise them first (e.g.
    the extracted ``\\boxed{}`` content). A pair in which either answer is ``None`` (no answer could
    be extracted) is left out: a missing answer says nothing about agreement, and counting it as a
    disagreement would mix truncation into the exploration measure. The result pools all counted
    pairs of all prompts (equal to the mean over prompts when no answer is ``None``).

    Args:
        answers: ``P * N`` extracted answers (or ``None``), prompt-major.
        num_generations: N (>= 1).

    Returns:
        Disagreeing pairs / counted pairs, in [0, 1]; ``None`` if no pair could be counted
        (N = 1, or too many ``None``).

    Raises:
        ValueError: ``num_generations < 1`` or ``len(answers)`` not a multiple of it.
    """
    if num_generations < 1:
        raise ValueError(f"num_generations must be >= 1, got {num_generations}")
    if len(answers) % num_generations != 0:
        raise ValueError(f"len(answers)={len(answers)} is not a multiple of num_generations={num_generations}")
    counted = differing = 0
    for start in range(0, len(answers), num_generations):
        group = [a for a in answers[start : start + num_generations] if a is not None]
        for i in range(len(group)):
            for j in range(i + 1, len(group)):
                counted += 1
                differing += group[i] != group[j]
    return differing / counted if counted else None


def paired_bootstrap_interval(before: Sequence[float], after: Sequence[float], num_resamples: int = 10_000,
                              confidence: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """The mean of ``after - before`` over problems, with a percentile bootstrap interval that resamples problems.

    Each problem's two scores (e.g. its mean@k before and after training) stay paired; ``num_resamples`` draws of
    ``P`` problems with replacement give the distribution of the mean difference (Efron's percentile interval).

    Args:
        before, after: ``[P]`` per-problem scores (same problems, same order), ``P >= 1``.
        num_resamples: bootstrap draws (default 10,000).
        confidence: the interval's coverage (default 0.95: the 2.5th and 97.5th percentiles).
        seed: the resampling generator's seed (the interval is a function of the data and the seed).

    Returns:
        ``(mean difference, low, high)``.

    Raises:
        ValueError: empty or unequal lengths, non-finite scores, ``confidence`` outside (0, 1), ``num_resamples < 1``.
    """
    a, b = np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape or a.size == 0:
        raise ValueError(f"need two equal-length, non-empty 1-D score lists, got shapes {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("scores must be finite")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    _check_int(num_resamples, "num_resamples", 1)
    diff = b - a
    rng = np.random.default_rng(seed)
    draws = diff[rng.integers(0, diff.size, size=(num_resamples, diff.size))].mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(draws, [tail, 1 - tail])
    return float(diff.mean()), float(low), float(high)


def distinct_answer_fraction(answers: Sequence[str | None], num_samples: int) -> float:
    """Fraction of problems whose ``num_samples`` answers are not all the same (``None``, no answer, counts as an
    answer of its own): the share of problems on which sampling still explores.

    Args:
        answers: ``P * n`` extracted answers, problem-major.
        num_samples: ``n >= 1``.

    Raises:
        ValueError: ``len(answers)`` is not a positive multiple of ``num_samples``.
    """
    _check_int(num_samples, "num_samples", 1)
    if not answers or len(answers) % num_samples != 0:
        raise ValueError(f"len(answers)={len(answers)} is not a positive multiple of num_samples={num_samples}")
    groups = [answers[i : i + num_samples] for i in range(0, len(answers), num_samples)]
    return sum(len(set(group)) > 1 for group in groups) / len(groups)


def seed_problem_bootstrap_interval(baseline, treated, num_resamples: int = 10_000, confidence: float = 0.95,
                                    seed: int = 0) -> tuple[float, float, float]:
    """The difference of two methods' mean scores with a bootstrap interval over training seeds AND problems.

    ``baseline[s, p]`` and ``treated[s, p]`` are per-problem scores (e.g. mean@k) of each method's run with training
    seed ``s`` on the same problems ``p``. Each draw resamples the problems once (shared: the comparison stays paired
    by problem) and each method's seeds independently (runs of different methods are not paired), then takes
    ``mean(treated) - mean(baseline)`` over the drawn seeds and problems (percentile interval). With one problem
    column it is a bootstrap over seeds only (e.g. a per-run mean entropy). With 3 seeds the seed resampling can draw
    only 10 distinct multisets per method, so the interval is coarse: read it with the per-seed values.

    Args:
        baseline: ``[S_a, P]`` (or ``[S_a]``) scores; treated: ``[S_b, P]`` (or ``[S_b]``); ``S >= 1``, same ``P``.
        num_resamples, confidence, seed: as :func:`paired_bootstrap_interval`.

    Returns:
        ``(mean difference, low, high)``.

    Raises:
        ValueError: different problem counts, empty or non-finite scores, ``confidence`` outside (0, 1).
    """
    a = np.asarray(baseline, dtype=np.float64)
    b = np.asarray(treated, dtype=np.float64)
    a, b = (x.reshape(-1, 1) if x.ndim == 1 else x for x in (a, b))
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1] or a.size == 0 or b.size == 0:
        raise ValueError(f"need [seeds, problems] scores with the same problems, got shapes {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("scores must be finite")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    _check_int(num_resamples, "num_resamples", 1)
    rng = np.random.default_rng(seed)
    num_problems = a.shape[1]
    draws = np.empty(num_resamples)
    for i in range(num_resamples):
        problems = rng.integers(0, num_problems, size=num_problems)
        sa = rng.integers(0, a.shape[0], size=a.shape[0])
        sb = rng.integers(0, b.shape[0], size=b.shape[0])
        draws[i] = b[np.ix_(sb, problems)].mean() - a[np.ix_(sa, problems)].mean()
    tail = (1 - confidence) / 2
    low, high = np.quantile(draws, [tail, 1 - tail])
    return float(b.mean() - a.mean()), float(low), float(high)


def seed_paired_bootstrap_interval(baseline, treated, num_resamples: int = 10_000, confidence: float = 0.95,
                                   seed: int = 0) -> tuple[float, float, float]:
    """The difference of two methods' mean scores with a bootstrap interval over training seeds AND problems, the
    runs paired by seed.

    ``baseline[s, p]`` and ``treated[s, p]`` are per-problem scores (e.g. mean@k) of each method's run with the SAME
    training seed ``s`` (row ``s`` of both: runs of one seed share their prompts and first samples) on the same
    problems ``p``. Each draw resamples the seeds once and the problems once, both shared by the two methods, and
    takes the mean of ``treated - baseline`` over the drawn seeds and problems (percentile interval). Seed-to-seed
    variation that both methods share cancels, which :func:`seed_problem_bootstrap_interval` (seeds drawn
    independently per method) cannot exploit. With one problem column (or 1-D ``[S]`` per-run scalars, e.g. a mean
    entropy) it is a bootstrap over seeds only. With 3 seeds the draws hold only 10 distinct seed multisets, so the
    interval is coarse: read it with the per-seed values.

    Args:
        baseline, treated: ``[S, P]`` (or ``[S]``) scores of the same shape, ``S, P >= 1``, row ``s`` of both from
            training seed ``s``.
        num_resamples, confidence, seed: as :func:`paired_bootstrap_interval`.

    Returns:
        ``(mean difference treated - baseline, low, high)``.

    Raises:
        ValueError: different shapes (different seeds or problems), empty or non-finite scores, ``confidence``
            outside (0, 1), ``num_resamples < 1``.
    """
    a = np.asarray(baseline, dtype=np.float64)
    b = np.asarray(treated, dtype=np.float64)
    if a.shape != b.shape or a.ndim not in (1, 2) or a.size == 0:
        raise ValueError(f"need [seeds, problems] (or [seeds]) scores of the same, non-empty shape, paired by seed; "
                         f"got shapes {a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("scores must be finite")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    _check_int(num_resamples, "num_resamples", 1)
    diff = (b - a).reshape(a.shape[0], -1)
    num_seeds, num_problems = diff.shape
    rng = np.random.default_rng(seed)
    # a draw with replacement, as counts: how often each seed (each problem) was drawn
    seeds = rng.multinomial(num_seeds, np.full(num_seeds, 1 / num_seeds), size=num_resamples)
    problems = rng.multinomial(num_problems, np.full(num_problems, 1 / num_problems), size=num_resamples)
    draws = np.einsum("rs,sp,rp->r", seeds, diff, problems) / (num_seeds * num_problems)
    tail = (1 - confidence) / 2
    low, high = np.quantile(draws, [tail, 1 - tail])
    return float(diff.mean()), float(low), float(high)
