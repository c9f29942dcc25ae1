r"""Exact-sample Monte Carlo estimates of the information curve and of a schedule's expected KL, with their error.

Where no closed form is implemented (HMM worlds, chains above the exact theory's size) the curve is estimated
from exact samples.  Let c[n, j] = log p(x_{o_j} | x_{o_1}, .., x_{o_{j-1}}) for exact samples x_n and a uniformly
random order o per sample (:func:`dllm_lit.samplers.reference_scoring.order_log_conditionals`).  As o_j is a
uniform position and {o_1..o_{j-1}} a uniform (j - 1)-subset of the others, E c_j - E c_1 = Z_j, and the expected
KL of rounds k_1..k_m (:mod:`dllm_lit.theory.schedules`) is the mean of the per-sample value

    v_n = sum_j c[n, j] - sum_r k_r c[n, s_{r-1} + 1]       (the c_1 terms cancel: sum_r k_r = L),

an unbiased estimate with a Student t interval over the independent samples.  Estimated, not exact.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.stats import t as student_t

__all__ = ["information_curve_estimate", "schedule_kl_estimate"]


def information_curve_estimate(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Z[0..L], standard error[0..L]) from c [n, L] (Z[0] = Z[1] = 0 with zero error)."""
    c = np.asarray(c, dtype=np.float64)
    n, L = c.shape
    d = c - c[:, :1]
    Z, se = np.zeros(L + 1), np.zeros(L + 1)
    Z[1:] = d.mean(0)
    se[1:] = d.std(0, ddof=1) / math.sqrt(n) if n > 1 else np.inf
    return Z, se


def schedule_kl_estimate(c: np.ndarray, sizes: Sequence[int], confidence: float = 0.95) -> tuple[float, float, float]:
    """(estimate, low, high) of the expected KL in nats of rounds ``sizes`` (summing to L): the mean of v_n and its
    Student t interval at ``confidence``."""
    c = np.asarray(c, dtype=np.float64)
    n, L = c.shape
    sizes = [int(k) for k in sizes]
    if any(k < 0 for k in sizes) or sum(sizes) != L:
        raise ValueError(f"round sizes must be >= 0 and sum to the length {L}, got {sizes}")
    w = np.ones(L)
    s = 0
    for k in sizes:
        if k:
            w[s] -= k
            s += k
    v = c @ w
    m = float(v.mean())
    if n < 2:
        return m, -math.inf, math.inf
    half = float(student_t.ppf((1 + confidence) / 2, n - 1)) * float(v.std(ddof=1)) / math.sqrt(n)
    return m, m - half, m + half
