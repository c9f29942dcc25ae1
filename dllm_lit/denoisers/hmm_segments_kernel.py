"""The compiled products of :mod:`dllm_lit.denoisers.hmm_segments` (numba; imported on first use).

Each output number is the same sum, in the same index order, of separately rounded IEEE products as the torch
loops of :func:`~dllm_lit.denoisers.hmm_segments.right_product` / ``left_product`` compute (no fused multiply-add:
numba compiles without fast-math), so both give the same bits for any batch; the loops put the contiguous axis
innermost so that they vectorise across independent outputs."""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["right_product", "left_product", "fixed_row_sums"]


@numba.njit(cache=True)
def right_product(m: np.ndarray, P: np.ndarray, out: np.ndarray) -> None:
    """out[i, r, c] = sum_a m[i, a, r] P[a, r, c], added in index order a (m [n, V, R], P [V, R, V])."""
    n, V, R = m.shape
    for i in range(n):
        for r in range(R):
            w = m[i, 0, r]
            for c in range(V):
                out[i, r, c] = w * P[0, r, c]
        for a in range(1, V):
            for r in range(R):
                w = m[i, a, r]
                for c in range(V):
                    out[i, r, c] = out[i, r, c] + w * P[a, r, c]


@numba.njit(cache=True)
def left_product(mT: np.ndarray, Pt: np.ndarray, out: np.ndarray) -> None:
    """out[i, a, r] = sum_c Pt[c, a, r] mT[i, c, r], added in index order c (mT [n, V, R], Pt [V, V, R])."""
    n, V, R = mT.shape
    for i in range(n):
        for a in range(V):
            for r in range(R):
                out[i, a, r] = Pt[0, a, r] * mT[i, 0, r]
        for c in range(1, V):
            for a in range(V):
                for r in range(R):
                    out[i, a, r] = out[i, a, r] + Pt[c, a, r] * mT[i, c, r]


@numba.njit(cache=True)
def fixed_row_sums(x: np.ndarray, out: np.ndarray) -> None:
    """out[i] = sum_j x[i, j] by :func:`~dllm_lit.reductions.fixed_order_sum`'s pairwise tree (the same bits)."""
    n, S = x.shape
    buf = np.empty(S)
    for i in range(n):
        for j in range(S):
            buf[j] = x[i, j]
        k = S
        while k > 1:
            h = k // 2
            for j in range(h):
                buf[j] = buf[j] + buf[j + h]
            if k % 2:
                buf[0] = buf[0] + buf[2 * h]
            k = h
        out[i] = buf[0] if S else 0.0
