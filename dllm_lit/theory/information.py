r"""Information quantities of a stationary first-order chain, exact (no sampling).

With pi the stationary law and P the kernel, the *pair information* is

    g(d) = I(X_0; X_d) = sum_a pi_a KL(P^d(a, .) || pi),        d >= 1.

For a masked position i whose nearest revealed neighbours lie at distances d1 (left) and d2
(right), the Markov property and stationarity give (expanding H(X_a, X_i, X_c) = H(X_a, X_i) + H(X_c | X_i))

    I(X_i; X_revealed) = g(d1) + g(d2) - g(d1 + d2),         g(none) = 0.

The *information curve* of a segment of L positions is Z_j = E I(X_i; X_S): i uniform over the
segment, S a uniform (j - 1)-subset of the other L - 1 positions (j = 1..L); with ``left_revealed``
the position just before the segment is revealed too (a later block of a block sampler).  Z_j is a
finite sum over the distribution of (d1, d2), which is a ratio of binomial coefficients:

    P(d2 = x)          = (L - x)/L  C(L-1-x, j-2) / C(L-1, j-1)
    P(d1 = x)          = P(d2 = x) [+ 1/L C(L-x, j-1) / C(L-1, j-1) if left_revealed]
    P(d1 + d2 = s)     = (s-1)(L-s)/L C(L-s-1, j-3) / C(L-1, j-1)
                         [+ (s-1)/L C(L-s, j-2) / C(L-1, j-1) if left_revealed]

so Z_j = sum_x (P(d1 = x) + P(d2 = x)) g(x) - sum_s P(d1 + d2 = s) g(s).  Derivation and sources in
``docs/theory.md``; tested against brute-force enumeration (``tests/test_theory.py``).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from dllm_lit.engine.budget import check_memory, check_setup_time

__all__ = ["pair_information", "segment_pair_information", "information_curve", "total_correlation", "dual_total_correlation",
           "ChainInformation", "check_curve_size"]

#: the information curve's peak memory (bytes) and CPU time (seconds) per entry of its L x L tables
#: (measured: 45 bytes and 170 ns at L = 1000-4000)
_CURVE_BYTES = 48
_CURVE_SECONDS = 2e-7

#: powers P^d are iterated until sum_a pi_a chi^2(P^d(a, .) || pi) (an upper bound on g(d)) falls below this;
#: g is set to 0 beyond (its exact value is below the bound)
CHI2_STOP = 1e-18


def _kernel_and_pi(chain: Any) -> tuple[np.ndarray, np.ndarray]:
    """(P [V, V], pi [V]) as float64 numpy arrays from a MarkovChain or a (kernel, pi) pair."""
    if isinstance(chain, tuple):
        P, pi = chain
    else:
        P, pi = chain.kernel, chain.stationary
    P = np.asarray(P.cpu() if hasattr(P, "cpu") else P, dtype=np.float64)
    pi = np.asarray(pi.cpu() if hasattr(pi, "cpu") else pi, dtype=np.float64)
    if P.ndim != 2 or P.shape[0] != P.shape[1] or pi.shape != (P.shape[0],):
        raise ValueError(f"the kernel must be [V, V] and pi [V], got {P.shape} and {pi.shape}")
    return P, pi / pi.sum()


def _entropy(p: np.ndarray) -> float:
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


#: ||pi P - pi||_1 above which ``pi`` of a (kernel, pi) pair is not invariant (the chain's own tolerance)
INVARIANCE_TOL = 1e-8


def pair_information(chain: Any, max_distance: int, length: int | None = None) -> np.ndarray:
    """g[d] = I(X_0; X_d) in nats for d = 0..max_distance (g[0] = H(pi)); float64 [max_distance + 1].

    ``chain``: a MarkovChain or (kernel, pi).  Powers are iterated in float64 until the chi-square
    bound on g falls below :data:`CHI2_STOP` (then g = 0).

    A (kernel, mu0) pair whose mu0 is not invariant is the chain started from mu0: I(X_a; X_{a+d}) then depends
    on a, and with ``length`` (the segment 0..L-1) g[d] is its average over the L - d pairs of the segment,
    :func:`segment_pair_information`; without ``length`` it is refused."""
    P, pi = _kernel_and_pi(chain)
    resid = float(np.abs(pi @ P - pi).sum())
    if resid > INVARIANCE_TOL:
        if length is None:
            raise ValueError(f"pi is not invariant under the kernel (||pi P - pi||_1 = {resid:.3g} > "
                             f"{INVARIANCE_TOL:g}): pass length=L for the chain started from it, or its stationary law")
        return segment_pair_information(P, pi, int(length), int(max_distance))
    check_memory("max_distance", int(max_distance), 8.0 * (int(max_distance) + 1), "the pair information")
    g = np.zeros(int(max_distance) + 1)
    g[0] = _entropy(pi)
    Pd = np.eye(P.shape[0])
    pos = pi > 0
    for d in range(1, int(max_distance) + 1):
        Pd = Pd @ P
        rows = Pd[pos]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(rows > 0, rows / pi[None, :], 1.0)
            g[d] = max(float((pi[pos, None] * np.where(rows > 0, rows * np.log(ratio), 0.0)).sum()), 0.0)
            chi2 = float((pi[pos, None] * np.where(pi[None, :] > 0, (rows - pi[None, :]) ** 2 / pi[None, :], 0.0)).sum())
        if chi2 < CHI2_STOP:
            break
    return g


def segment_pair_information(P: np.ndarray, mu0: np.ndarray, length: int, max_distance: int) -> np.ndarray:
    """h[d] = (1 / (L - d)) sum_{a=0}^{L-1-d} I(X_a; X_{a+d}) for the chain X_0 ~ mu0, X_{t+1} ~ P(X_t, .) over a
    segment of L positions (d = 0..max_distance; h[d] = 0 for d >= L; h[0] the mean entropy), float64.

    The Markov identity I(X_i; X_a, X_b) = I(X_a; X_i) + I(X_i; X_b) - I(X_a; X_b) (a < i < b) holds for any initial
    law, and the probability that a uniform position i of the segment has its nearest revealed neighbours at
    distances (x, y) depends on (x, y) only; summed over i, the pairs at distance d enter through their mean
    h[d]: :func:`information_curve` of h (``left_revealed`` False) is the exact curve of the non-stationary
    segment.  With mu_a = mu0 P^a, I(X_a; X_{a+d}) = H(mu_{a+d}) + sum_u mu_a(u) sum_w P^d(u, w) log P^d(u, w)."""
    L, D = int(length), int(max_distance)
    check_curve_size(L)
    mu = np.empty((L, P.shape[0]))
    mu[0] = mu0
    for a in range(1, L):
        mu[a] = mu[a - 1] @ P
    ent = np.array([_entropy(m) for m in mu])
    h = np.zeros(D + 1)
    h[0] = float(ent.mean())
    Pd = np.eye(P.shape[0])
    for d in range(1, min(D, L - 1) + 1):
        Pd = Pd @ P
        with np.errstate(divide="ignore", invalid="ignore"):
            neg_row_entropy = np.where(Pd > 0, Pd * np.log(Pd), 0.0).sum(1)
        h[d] = max(float((ent[d:] + mu[:L - d] @ neg_row_entropy).mean()), 0.0)
    return h


def _log_binom(n: np.ndarray, k: np.ndarray) -> np.ndarray:
    """log C(n, k), -inf where k < 0, k > n or n < 0 (elementwise, float64; a table of log n!)."""
    n, k = np.broadcast_arrays(np.asarray(n, dtype=np.float64), np.asarray(k, dtype=np.float64))
    ok = (k >= 0) & (k <= n) & (n >= 0)
    top = int(n[ok].max()) if ok.any() else 0
    lf = np.array([math.lgamma(v + 1.0) for v in range(top + 1)])
    out = np.full(n.shape, -np.inf)
    nn, kk = n[ok].astype(np.int64), k[ok].astype(np.int64)
    out[ok] = lf[nn] - lf[kk] - lf[nn - kk]
    return out


def check_curve_size(length: int, name: str = "length") -> None:
    """One line naming the field when :func:`information_curve` of ``length`` positions would not fit this machine's
    memory (~48 L^2 bytes) or would take more than :data:`~dllm_lit.engine.budget.SETUP_SECONDS` (~200 ns x L^2),
    before any work."""
    L = int(length)
    if L < 1:
        raise ValueError(f"{name} must be >= 1, got {length}")
    n = float(L) ** 2
    check_memory(name, L, _CURVE_BYTES * n, f"the information curve's L x L = {n:.3g} entry tables")
    check_setup_time(name, L, _CURVE_SECONDS * n, f"the information curve (L x L = {n:.3g} entries)")


def information_curve(g: np.ndarray, length: int, left_revealed: bool = False) -> np.ndarray:
    """Z[j] = E I(X_i; X_S) for j = 0..L (Z[0] = 0 unused; |S| = j - 1), from the pair information ``g``
    (at least L + 1 entries; missing tail entries count as 0).  Float64 [L + 1]."""
    check_curve_size(length)
    L = int(length)
    gg = np.zeros(L + 1)
    n = min(len(g), L + 1)
    gg[1:n] = np.asarray(g, dtype=np.float64)[1:n]
    j = np.arange(1, L + 1, dtype=np.float64)[:, None]
    x = np.arange(1, L + 1, dtype=np.float64)[None, :]
    den = _log_binom(L - 1, j - 1)
    p_right = (L - x) / L * np.exp(_log_binom(L - 1 - x, j - 2) - den)
    p_left = p_right.copy()
    p_sum = (x - 1) * (L - x) / L * np.exp(_log_binom(L - x - 1, j - 3) - den)
    if left_revealed:
        p_left += np.exp(_log_binom(L - x, j - 1) - den) / L
        p_sum += (x - 1) / L * np.exp(_log_binom(L - x, j - 2) - den)
    Z = np.zeros(L + 1)
    Z[1:] = (p_left + p_right) @ gg[1:] - p_sum @ gg[1:]
    return np.maximum(Z, 0.0)


def total_correlation(g: np.ndarray, length: int) -> float:
    """TC = sum_i H(X_i) - H(X_1..X_T) = (T - 1) g(1) for the stationary chain of length T (nats)."""
    return (int(length) - 1) * float(g[1]) if length > 1 else 0.0


def dual_total_correlation(g: np.ndarray, length: int) -> float:
    """DTC = H(X) - sum_i H(X_i | X_-i) = (T - 1) g(1) - (T - 2) g(2) for T >= 2 (nats; T = 2: g(1))."""
    T = int(length)
    if T < 2:
        return 0.0
    return (T - 1) * float(g[1]) - (T - 2) * float(g[2] if len(g) > 2 else 0.0)


class ChainInformation:
    """One chain's pair information (extended on demand) and its information curves, cached by (L, left_revealed)."""

    def __init__(self, chain: Any) -> None:
        self.chain = chain
        self.g = pair_information(chain, 1)
        self._curves: dict[tuple[int, bool], np.ndarray] = {}

    def pair(self, max_distance: int) -> np.ndarray:
        """g[0..max_distance] (recomputed once for a longer range)."""
        if len(self.g) < max_distance + 1:
            self.g = pair_information(self.chain, max(max_distance, 2 * (len(self.g) - 1)))
        return self.g[: max_distance + 1]

    def curve(self, length: int, left_revealed: bool = False) -> np.ndarray:
        check_curve_size(length)  # before the pair information up to that distance
        key = (int(length), bool(left_revealed))
        if key not in self._curves:
            self._curves[key] = information_curve(self.pair(int(length)), length, left_revealed)
        return self._curves[key]
