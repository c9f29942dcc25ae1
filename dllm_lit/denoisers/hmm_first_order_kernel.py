"""The compiled kernel of :mod:`dllm_lit.denoisers.hmm_first_order` (numba; imported on first use, so that
importing dllm_lit does not load numba).  Sequences are the innermost loop: each one's numbers are the same
operations in the same order whatever the batch, and the loops over them run at full speed.  The batch runs in
blocks of :data:`BLOCK` sequences through one scratch buffer of backward messages [T, S, BLOCK], so that the
forward pass reads them from the cache and no call maps a fresh [T, S, B] buffer (the blocking changes no number:
every sequence's operations are its own).  Evidence of the form "one value per noisy token z, another at one state
d(z)" (uniform noise, GIDD's mixed noise: checked bit for bit per call) is applied as one multiplier per sequence and
one correction, not a gather per state (the same products E[z, k] x[k])."""
from __future__ import annotations

import math

import numba
import numpy as np

from dllm_lit.markov.products import TINY

__all__ = ["first_order_batch", "BLOCK"]

#: sequences per block (inner loops of this length keep their vector width; the block's messages, [T, S, BLOCK]
#: float64, 14 MB at T = 1024, stay in the last-level cache)
BLOCK = 64


@numba.njit(cache=True)
def _scale(n: np.ndarray, out: np.ndarray, mx: np.ndarray, nb: int) -> bool:
    """out[:, i] = n[:, i] 2^-e_i (i < nb), e_i the binary exponent of max_j n[j, i]; False if a maximum is below
    TINY."""
    S = n.shape[0]
    for i in range(nb):
        mx[i] = n[0, i]
    for j in range(1, S):
        for i in range(nb):
            if n[j, i] > mx[i]:
                mx[i] = n[j, i]
    for i in range(nb):
        if not mx[i] >= TINY:
            return False
        mx[i] = math.ldexp(1.0, -math.frexp(mx[i])[1])
    for j in range(S):
        for i in range(nb):
            out[j, i] = n[j, i] * mx[i]
    return True


@numba.njit(cache=True)
def _product(m: np.ndarray, M: np.ndarray, n: np.ndarray, nb: int) -> None:
    """n[j, i] = sum_k m[k, i] M[k, j] (i < nb), added in index order k (sequences i innermost).  Four terms k are
    added per pass over n, for four outputs j at once (each m[k, i] loaded once for the four; the same additions in
    the same order: fewer loads and stores per term)."""
    S, K = n.shape[0], M.shape[0]
    for j in range(S):
        c = M[0, j]
        for i in range(nb):
            n[j, i] = m[0, i] * c
    j0 = 0
    while j0 + 4 <= S:
        k = 1
        while k + 4 <= K:
            a0, a1, a2, a3 = M[k, j0], M[k + 1, j0], M[k + 2, j0], M[k + 3, j0]
            b0, b1, b2, b3 = M[k, j0 + 1], M[k + 1, j0 + 1], M[k + 2, j0 + 1], M[k + 3, j0 + 1]
            c0, c1, c2, c3 = M[k, j0 + 2], M[k + 1, j0 + 2], M[k + 2, j0 + 2], M[k + 3, j0 + 2]
            d0, d1, d2, d3 = M[k, j0 + 3], M[k + 1, j0 + 3], M[k + 2, j0 + 3], M[k + 3, j0 + 3]
            for i in range(nb):
                x0, x1, x2, x3 = m[k, i], m[k + 1, i], m[k + 2, i], m[k + 3, i]
                n[j0, i] = (((n[j0, i] + x0 * a0) + x1 * a1) + x2 * a2) + x3 * a3
                n[j0 + 1, i] = (((n[j0 + 1, i] + x0 * b0) + x1 * b1) + x2 * b2) + x3 * b3
                n[j0 + 2, i] = (((n[j0 + 2, i] + x0 * c0) + x1 * c1) + x2 * c2) + x3 * c3
                n[j0 + 3, i] = (((n[j0 + 3, i] + x0 * d0) + x1 * d1) + x2 * d2) + x3 * d3
            k += 4
        _tail(m, M, n, nb, k, j0, j0 + 4)
        j0 += 4
    for j in range(j0, S):
        k = 1
        while k + 4 <= K:
            c0, c1, c2, c3 = M[k, j], M[k + 1, j], M[k + 2, j], M[k + 3, j]
            for i in range(nb):
                n[j, i] = (((n[j, i] + m[k, i] * c0) + m[k + 1, i] * c1) + m[k + 2, i] * c2) + m[k + 3, i] * c3
            k += 4
        _tail(m, M, n, nb, k, j, j + 1)


@numba.njit(cache=True)
def _tail(m: np.ndarray, M: np.ndarray, n: np.ndarray, nb: int, k0: int, j0: int, j1: int) -> None:
    """The terms k >= k0 of outputs j0 .. j1 - 1, one at a time in index order."""
    for k in range(k0, M.shape[0]):
        for j in range(j0, j1):
            c = M[k, j]
            for i in range(nb):
                n[j, i] = n[j, i] + m[k, i] * c


@numba.njit(cache=True)
def _evidence(Et: np.ndarray, zt: np.ndarray, x: np.ndarray, m: np.ndarray, nb: int, form: tuple) -> None:
    """m[k, i] = E[z_i, k] x[k, i] (i < nb); with the two-value form of E (:func:`_two_values`, ``form``'s dg[0] not
    -2) as w_i x[k, i] for all k, w_i = off[z_i], then at k = dg[z_i] on[z_i] x[k, i]: the same products."""
    off, on, dg, w = form
    S = m.shape[0]
    if dg[0] == -2:
        for k in range(S):
            for i in range(nb):
                m[k, i] = Et[k, zt[i]] * x[k, i]
        return
    for i in range(nb):
        w[i] = off[zt[i]]
    for k in range(S):
        for i in range(nb):
            m[k, i] = w[i] * x[k, i]
    for i in range(nb):
        d = dg[zt[i]]
        if d >= 0:
            m[d, i] = on[zt[i]] * x[d, i]


@numba.njit(cache=True)
def _two_values(Et: np.ndarray, off: np.ndarray, on: np.ndarray, dg: np.ndarray) -> None:
    """Per column z of Et [S, Z]: E[z, k] has the bits of off[z] for every k but dg[z] (-1: none), where it is
    on[z].  dg[0] = -2 where some column has two or more exceptions (then :func:`_evidence` gathers per state)."""
    S, Z = Et.shape
    for z in range(Z):
        v = Et[0, z]
        if S > 2 and not _same(v, Et[1, z]) and not _same(v, Et[2, z]):
            v = Et[1, z]
        off[z], on[z], dg[z] = v, v, -1
        for k in range(S):
            if not _same(Et[k, z], v):
                if dg[z] >= 0:
                    dg[0] = -2
                    return
                dg[z], on[z] = k, Et[k, z]


@numba.njit(cache=True)
def _same(a: float, b: float) -> bool:
    """The same float64 (sign of zero included; NaN never)."""
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


@numba.njit(cache=True)
def first_order_batch(A: np.ndarray, At: np.ndarray, mu: np.ndarray, Et: np.ndarray, Lt: np.ndarray, z: np.ndarray,
           loo: bool, o: np.ndarray) -> bool:
    """The module's recursions for all sequences, BLOCK at a time; o [B, T, S] receives the posteriors."""
    B, T, S = o.shape
    W = min(BLOCK, B)
    zt = np.empty((T, W), dtype=z.dtype)
    b = np.empty((T, S, W))
    m = np.empty((S, W))
    n = np.empty((S, W))
    mx = np.empty(W)
    a = np.empty((S, W))
    Z = Et.shape[1]
    form = (np.empty(Z), np.empty(Z), np.empty(Z, dtype=np.int64), np.empty(W))
    _two_values(Et, form[0], form[1], form[2])
    for i0 in range(0, B, W):
        nb = min(W, B - i0)
        for t in range(T):
            for i in range(nb):
                zt[t, i] = z[i0 + i, t]
        if not _block(A, At, mu, Et, Lt, zt, loo, o, i0, nb, b, m, n, mx, a, form):
            return False
    return True


@numba.njit(cache=True)
def _block(A: np.ndarray, At: np.ndarray, mu: np.ndarray, Et: np.ndarray, Lt: np.ndarray, zt: np.ndarray, loo: bool,
           o: np.ndarray, i0: int, nb: int, b: np.ndarray, m: np.ndarray, n: np.ndarray, mx: np.ndarray,
           a: np.ndarray, form: tuple) -> bool:
    """Sequences i0 .. i0 + nb - 1 (zt [T, >= nb] their tokens) into o[i0 + i]; ``form``: E's two-value form
    (:func:`_evidence`); the rest are scratch."""
    T, S = zt.shape[0], m.shape[0]
    for j in range(S):
        for i in range(nb):
            b[T - 1, j, i] = 1.0
    for t in range(T - 1, 0, -1):
        _evidence(Et, zt[t], b[t], m, nb, form)
        _product(m, At, n, nb)
        if not _scale(n, b[t - 1], mx, nb):
            return False
    for j in range(S):
        for i in range(nb):
            a[j, i] = mu[j]
    for t in range(T):
        bt = b[t]
        for j in range(S):
            for i in range(nb):
                m[j, i] = a[j, i] * bt[j, i]
        if not loo:
            for j in range(S):
                for i in range(nb):
                    m[j, i] = m[j, i] * Lt[j, zt[t, i]]
        # fixed_order_sum over j, per sequence (n: scratch)
        for j in range(S):
            for i in range(nb):
                n[j, i] = m[j, i]
        h_n = S
        while h_n > 1:
            h = h_n // 2
            for j in range(h):
                for i in range(nb):
                    n[j, i] = n[j, i] + n[j + h, i]
            if h_n % 2:
                for i in range(nb):
                    n[0, i] = n[0, i] + n[2 * h, i]
            h_n = h
        for i in range(nb):
            if not n[0, i] >= TINY:
                return False
        for i in range(nb):
            s = n[0, i]
            for j in range(S):
                o[i0 + i, t, j] = m[j, i] / s
        if t + 1 < T:
            _evidence(Et, zt[t], a, m, nb, form)
            _product(m, A, n, nb)
            if not _scale(n, a, mx, nb):
                return False
    return True
