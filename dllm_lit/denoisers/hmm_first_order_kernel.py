"""The compiled kernel of :mod:`dllm_lit.denoisers.hmm_first_order` (numba; imported on first use, so that
importing dllm_lit does not load numba).  Sequences are the innermost loop: each one's numbers are the same
operations in the same order whatever the batch, and the loops over them run at full speed."""
from __future__ import annotations

import math

import numba
import numpy as np

from dllm_lit.denoisers.hmm_first_order import TINY

__all__ = ["first_order_batch"]


@numba.njit(cache=True)
def _scale(n: np.ndarray, out: np.ndarray, mx: np.ndarray) -> bool:
    """out[:, i] = n[:, i] 2^-e_i, e_i the binary exponent of max_j n[j, i]; False if a maximum is below TINY."""
    S, B = n.shape
    for i in range(B):
        mx[i] = n[0, i]
    for j in range(1, S):
        for i in range(B):
            if n[j, i] > mx[i]:
                mx[i] = n[j, i]
    for i in range(B):
        if not mx[i] >= TINY:
            return False
        mx[i] = math.ldexp(1.0, -math.frexp(mx[i])[1])
    for j in range(S):
        for i in range(B):
            out[j, i] = n[j, i] * mx[i]
    return True


@numba.njit(cache=True)
def _product(m: np.ndarray, M: np.ndarray, n: np.ndarray) -> None:
    """n[j, i] = sum_k m[k, i] M[k, j], added in index order k (sequences i innermost)."""
    S, B = n.shape
    for j in range(S):
        c = M[0, j]
        for i in range(B):
            n[j, i] = m[0, i] * c
    for k in range(1, M.shape[0]):
        for j in range(S):
            c = M[k, j]
            for i in range(B):
                n[j, i] = n[j, i] + m[k, i] * c


@numba.njit(cache=True)
def _evidence(Et: np.ndarray, zt: np.ndarray, x: np.ndarray, m: np.ndarray) -> None:
    """m[k, i] = E[z_i, k] x[k, i]."""
    S, B = m.shape
    for k in range(S):
        for i in range(B):
            m[k, i] = Et[k, zt[i]] * x[k, i]


@numba.njit(cache=True)
def first_order_batch(A: np.ndarray, At: np.ndarray, mu: np.ndarray, Et: np.ndarray, Lt: np.ndarray, z: np.ndarray,
           loo: bool, o: np.ndarray) -> bool:
    """The module's recursions for all sequences at once; o [B, T, S] receives the posteriors."""
    B, T, S = o.shape
    zt = np.ascontiguousarray(z.T)
    b = np.empty((T, S, B))
    m = np.empty((S, B))
    n = np.empty((S, B))
    mx = np.empty(B)
    a = np.empty((S, B))
    b[T - 1] = 1.0
    for t in range(T - 1, 0, -1):
        _evidence(Et, zt[t], b[t], m)
        _product(m, At, n)
        if not _scale(n, b[t - 1], mx):
            return False
    for j in range(S):
        for i in range(B):
            a[j, i] = mu[j]
    for t in range(T):
        bt = b[t]
        for j in range(S):
            for i in range(B):
                m[j, i] = a[j, i] * bt[j, i]
        if not loo:
            for j in range(S):
                for i in range(B):
                    m[j, i] = m[j, i] * Lt[j, zt[t, i]]
        # fixed_order_sum over j, per sequence (n: scratch)
        for j in range(S):
            for i in range(B):
                n[j, i] = m[j, i]
        h_n = S
        while h_n > 1:
            h = h_n // 2
            for j in range(h):
                for i in range(B):
                    n[j, i] = n[j, i] + n[j + h, i]
            if h_n % 2:
                for i in range(B):
                    n[0, i] = n[0, i] + n[2 * h, i]
            h_n = h
        for i in range(B):
            if not n[0, i] >= TINY:
                return False
        for i in range(B):
            s = n[0, i]
            for j in range(S):
                o[i, t, j] = m[j, i] / s
        if t + 1 < T:
            _evidence(Et, zt[t], a, m)
            _product(m, A, n)
            if not _scale(n, a, mx):
                return False
    return True
