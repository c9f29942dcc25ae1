"""The compiled products of :mod:`dllm_lit.markov.products` (numba; imported on first use).

Each output number is the same sum, in the same index order, of separately rounded IEEE products as the torch
loops of :mod:`~dllm_lit.markov.products` compute (no fused multiply-add: numba compiles without
fast-math), so both give the same bits for any batch; the loops put the contiguous axis innermost so that they
vectorise across independent outputs."""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["dense_product", "blocked_product", "context_sums", "fixed_row_sums", "normalised_rows"]

#: rows of m that share one pass over the matrix (its rows stay in the L1 cache for all of them)
ROWS = 8


@numba.njit(cache=True)
def dense_product(m: np.ndarray, M: np.ndarray, out: np.ndarray) -> None:
    """out[i, j] = sum_k m[i, k] M[k, j], added in index order k (m [n, K], M [K, J]).  Blocks of ROWS rows
    share each pass over M, and eight terms k are added per pass over out[i] (the same additions in the same
    order: fewer loads and stores)."""
    n, K = m.shape
    J = M.shape[1]
    for i0 in range(0, n, ROWS):
        i1 = min(i0 + ROWS, n)
        for i in range(i0, i1):
            w = m[i, 0]
            for j in range(J):
                out[i, j] = w * M[0, j]
        k = 1
        while k + 8 <= K:
            for i in range(i0, i1):
                w0, w1, w2, w3 = m[i, k], m[i, k + 1], m[i, k + 2], m[i, k + 3]
                w4, w5, w6, w7 = m[i, k + 4], m[i, k + 5], m[i, k + 6], m[i, k + 7]
                for j in range(J):
                    x = (((out[i, j] + w0 * M[k, j]) + w1 * M[k + 1, j]) + w2 * M[k + 2, j]) + w3 * M[k + 3, j]
                    out[i, j] = (((x + w4 * M[k + 4, j]) + w5 * M[k + 5, j]) + w6 * M[k + 6, j]) + w7 * M[k + 7, j]
            k += 8
        for kk in range(k, K):
            for i in range(i0, i1):
                w = m[i, kk]
                for j in range(J):
                    out[i, j] = out[i, j] + w * M[kk, j]


@numba.njit(cache=True)
def context_sums(x: np.ndarray, out: np.ndarray) -> None:
    """out[i, v] = sum_r x[i, r, v], added in index order r (x [n, R, V])."""
    n, R, V = x.shape
    for i in range(n):
        for v in range(V):
            out[i, v] = x[i, 0, v]
        for r in range(1, R):
            for v in range(V):
                out[i, v] = out[i, v] + x[i, r, v]


@numba.njit(cache=True)
def blocked_product(x: np.ndarray, Q: np.ndarray, out: np.ndarray) -> None:
    """out[r, j, i] = sum_k x[r, k, i] Q[r, k, j], added in index order k (x [R, K, n], Q [R, K, J]): one small
    product per block r, the sequences i innermost (a context world's products, R blocks of V x V).  Four terms k
    are added per pass over out[r] (the same additions in the same order)."""
    R, K, n = x.shape
    J = Q.shape[2]
    for r in range(R):
        for j in range(J):
            c = Q[r, 0, j]
            for i in range(n):
                out[r, j, i] = x[r, 0, i] * c
        k = 1
        while k + 4 <= K:
            for j in range(J):
                c0, c1, c2, c3 = Q[r, k, j], Q[r, k + 1, j], Q[r, k + 2, j], Q[r, k + 3, j]
                for i in range(n):
                    out[r, j, i] = (((out[r, j, i] + x[r, k, i] * c0) + x[r, k + 1, i] * c1) + x[r, k + 2, i] * c2) \
                        + x[r, k + 3, i] * c3
            k += 4
        for kk in range(k, K):
            for j in range(J):
                c = Q[r, kk, j]
                for i in range(n):
                    out[r, j, i] = out[r, j, i] + x[r, kk, i] * c


@numba.njit(cache=True)
def fixed_row_sums(x: np.ndarray, out: np.ndarray) -> None:
    """out[i] = sum_j x[i, j] by :func:`~dllm_lit.util.reductions.fixed_order_sum`'s pairwise tree (the same bits)."""
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


@numba.njit(cache=True)
def normalised_rows(x: np.ndarray, out: np.ndarray, sums: np.ndarray) -> bool:
    """sums[i] = :func:`fixed_row_sums` of x[i], out[i] = x[i] / max(sums[i], 1e-300); whether every sum is > 0."""
    fixed_row_sums(x, sums)
    n, S = x.shape
    positive = True
    for i in range(n):
        positive = positive and sums[i] > 0
        d = sums[i] if sums[i] > 1e-300 else 1e-300
        for j in range(S):
            out[i, j] = x[i, j] / d
    return positive
