"""Exact token posteriors of a first-order chain (HMM with B = I) under any evidence channel, fast and with the
same float64 numbers for any batch, chunking, thread count and device.

Scaled forward-backward with E(z) the evidence row of the noisy token z (:mod:`dllm_lit.denoisers.channels`):

    b_{T-1} = 1,   b_{t-1} = sc(A (E(z_t) o b_t)),     a_0 = mu,   a_{t+1} = sc((E(z_t) o a_t) A),
    p(x_t = v | z_{-t}) = a_t(v) b_t(v) / sum_v' a_t(v') b_t(v')     (leave-one-out; times L(z_t, v) for p(x_t | z)),

sc(m) = m 2^-e with e the binary exponent of max(m) (an exact rescaling, so it never changes a posterior).  Every
matrix-vector product is summed in index order k = 0, 1, ... with separate IEEE multiplications and additions
and the final sum is :func:`~dllm_lit.reductions.fixed_order_sum`'s pairwise tree: no BLAS call, whose rounding
depends on the batch size and on the rows' memory alignment.  :func:`first_order_posterior` runs a numba kernel
on the CPU (O(T S^2) per sequence, one thread, the sequences innermost) and the same operations as torch ops elsewhere
(:func:`first_order_posterior_torch`; the tests check that both give the same bits).

Vanishing evidence (a message whose maximum falls below 1e-300, or a posterior whose sum does) returns None:
the caller then runs the general loop of :mod:`dllm_lit.denoisers.hmm_posterior` with its fallback rules.
"""
from __future__ import annotations

import math

import numba
import numpy as np
import torch

from dllm_lit.reductions import fixed_order_sum

__all__ = ["first_order_posterior", "first_order_posterior_torch", "TINY"]

#: messages and sums below this count as vanishing (the general loop's fallbacks then apply)
TINY = 1e-300


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
def _batch(A: np.ndarray, At: np.ndarray, mu: np.ndarray, Et: np.ndarray, Lt: np.ndarray, z: np.ndarray,
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


def first_order_posterior(A: torch.Tensor, mu: torch.Tensor, E: torch.Tensor, L: torch.Tensor, z: torch.Tensor,
                          leave_one_out: bool) -> torch.Tensor | None:
    """p(x_t | z_{-t}) (or p(x_t | z)) of the chain (A [S, S], mu [S]) from evidence E [Z, S] = L [Z, S]:
    float64 [B, T, S] on z's device, or None on vanishing evidence (module docstring)."""
    if z.device.type != "cpu":
        return first_order_posterior_torch(A, mu, E, L, z, leave_one_out)
    Bsz, T = z.shape
    S = A.shape[0]
    f64 = [np.ascontiguousarray(x.detach().to(torch.float64).cpu().numpy()) for x in (A, A.T, mu, E.T, L.T)]
    out = np.empty((Bsz, T, S))
    if Bsz and T:
        if not _batch(*f64, np.ascontiguousarray(z.long().numpy()), bool(leave_one_out), out):
            return None
    return torch.from_numpy(out)


def _scale_torch(n: torch.Tensor) -> torch.Tensor | None:
    """:func:`_scale` row-wise: n 2^-e, the power of two built from its bits (exact); None if a row vanishes."""
    mx = n.amax(-1, keepdim=True)
    if not bool((mx >= TINY).all()):
        return None
    e = torch.frexp(mx).exponent.to(torch.int64)
    return n * ((1023 - e) << 52).view(torch.float64)


def _product_torch(m: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """:func:`_product` row-wise: m [B, S] times M [S, S], added in index order."""
    n = m[:, :1] * M[0]
    for k in range(1, M.shape[0]):
        n = n + m[:, k:k + 1] * M[k]
    return n


def first_order_posterior_torch(A: torch.Tensor, mu: torch.Tensor, E: torch.Tensor, L: torch.Tensor,
                                z: torch.Tensor, leave_one_out: bool) -> torch.Tensor | None:
    """:func:`first_order_posterior` by torch ops (any device; the same bits, slower on the CPU)."""
    dev = z.device
    A, mu, E, L = (x.to(device=dev, dtype=torch.float64) for x in (A, mu, E, L))
    At = A.T.contiguous()
    Bsz, T = z.shape
    S = A.shape[0]
    z = z.long()
    o = torch.empty(Bsz, T, S, dtype=torch.float64, device=dev)
    if Bsz == 0 or T == 0:
        return o
    o[:, T - 1] = 1.0
    for t in range(T - 1, 0, -1):
        n = _scale_torch(_product_torch(E[z[:, t]] * o[:, t], At))
        if n is None:
            return None
        o[:, t - 1] = n
    a = mu.expand(Bsz, S)
    for t in range(T):
        q = a * o[:, t]
        if not leave_one_out:
            q = q * L[z[:, t]]
        s = fixed_order_sum(q, keepdim=True)
        if not bool((s >= TINY).all()):
            return None
        o[:, t] = q / s
        if t + 1 < T:
            a = _scale_torch(_product_torch(E[z[:, t]] * a, A))
            if a is None:
                return None
    return o
