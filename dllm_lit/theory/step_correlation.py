r"""Exact total correlation of one parallel unmasking step on a first-order chain.

A step that commits the masked positions B given the revealed tokens x_R draws them independently from their
marginals p(x_i | x_R); its error against drawing them jointly is

    TC(X_B | x_R) = sum_{i in B} H(X_i | x_R) - H(X_B | x_R)  =  KL(p(x_B | x_R) || prod_i p(x_i | x_R)).

Given x_R the chain splits at revealed tokens into independent gaps, and inside a gap (nearest revealed
tokens x_a, x_c) the committed positions b_1 < .. < b_n form a Markov chain, so

    TC = sum over consecutive committed pairs (b', b) inside one gap of I(X_b; X_b' | x_a, x_c),

each a V x V computation with the powers P^d.  The EB-sampler's rule bounds TC by sum H - max H (as H(X_B) >=
max_i H(X_i)); :func:`step_total_correlation` returns both, so the bound's slack can be measured.  Tested by
enumeration (``tests/test_theory.py``).
"""
from __future__ import annotations

import numpy as np

__all__ = ["chain_powers", "marginals", "step_total_correlation"]


def chain_powers(P: np.ndarray, max_distance: int) -> np.ndarray:
    """P^d for d = 0..max_distance, float64 [D + 1, V, V]."""
    out = np.empty((max_distance + 1, *P.shape))
    out[0] = np.eye(P.shape[0])
    for d in range(1, max_distance + 1):
        out[d] = out[d - 1] @ P
    return out


def _entropy_rows(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(p > 0, p * np.log(p), 0.0).sum(-1)


def _neighbours(z: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest revealed position left (-1: none) and right (T: none) of each position in ``pos`` (z < 0: masked)."""
    revealed = np.flatnonzero(z >= 0)
    i = np.searchsorted(revealed, pos)
    left = np.where(i > 0, revealed[np.maximum(i - 1, 0)] if revealed.size else -1, -1)
    right = np.where(i < revealed.size, revealed[np.minimum(i, max(revealed.size - 1, 0))] if revealed.size else len(z),
                     len(z))
    return left, right


def _right_factor(powers: np.ndarray, z: np.ndarray, pos: np.ndarray, right: np.ndarray) -> np.ndarray:
    """P^{c - i}(., x_c) per position [n, V] (ones without a right neighbour)."""
    T, V = len(z), powers.shape[1]
    has = right < T
    out = np.ones((len(pos), V))
    if has.any():
        out[has] = powers[right[has] - pos[has], :, z[right[has]]]
    return out


def marginals(powers: np.ndarray, pi: np.ndarray, z: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """p(x_i | x_R) for masked positions ``pos`` of the state ``z`` (token ids, -1 = masked): float64 [n, V]."""
    left, right = _neighbours(z, pos)
    lf = np.where((left >= 0)[:, None], powers[np.maximum(pos - left, 0), np.maximum(z[np.maximum(left, 0)], 0)], pi[None, :])
    m = lf * _right_factor(powers, z, pos, right)
    return m / m.sum(1, keepdims=True)


def step_total_correlation(powers: np.ndarray, pi: np.ndarray, z: np.ndarray,
                           committed: np.ndarray) -> tuple[float, float, float]:
    """(TC(X_B | x_R), sum_i H(X_i | x_R), max_i H(X_i | x_R)) in nats for committed masked positions B."""
    b = np.sort(np.asarray(committed, dtype=np.int64))
    mu = marginals(powers, pi, z, b)
    H = _entropy_rows(mu)
    left, right = _neighbours(z, b)
    same = (left[1:] == left[:-1]) & (right[1:] == right[:-1])  # consecutive committed in one gap
    tc = 0.0
    if same.any():
        prev, cur = b[:-1][same], b[1:][same]
        rf = _right_factor(powers, z, cur, right[1:][same])  # [n, V]
        rho = powers[cur - prev] * rf[:, None, :]  # [n, u, v]
        rho = rho / rho.sum(-1, keepdims=True)
        cond = (mu[:-1][same] * _entropy_rows(rho)).sum(-1)
        tc = float((H[1:][same] - cond).sum())
    return max(tc, 0.0), float(H.sum()), float(H.max())
