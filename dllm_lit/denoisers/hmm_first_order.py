"""Exact token posteriors of a first-order chain (HMM with B = I) under any evidence channel, fast and with the
same float64 numbers for any batch, chunking, thread count and device.

Scaled forward-backward with E(z) the evidence row of the noisy token z (:mod:`dllm_lit.denoisers.channels`):

    b_{T-1} = 1,   b_{t-1} = sc(A (E(z_t) o b_t)),     a_0 = mu,   a_{t+1} = sc((E(z_t) o a_t) A),
    p(x_t = v | z_{-t}) = a_t(v) b_t(v) / sum_v' a_t(v') b_t(v')     (leave-one-out; times L(z_t, v) for p(x_t | z)),

sc(m) = m 2^-e with e the binary exponent of max(m) (an exact rescaling, so it never changes a posterior).  Every
matrix-vector product is summed in index order k = 0, 1, ... with separate IEEE multiplications and additions
and the final sum is :func:`~dllm_lit.util.reductions.fixed_order_sum`'s pairwise tree: no BLAS call, whose rounding
depends on the batch size and on the rows' memory alignment.  :func:`first_order_posterior` runs a numba kernel
on the CPU where the optional extra ``fast`` is installed (:mod:`~dllm_lit.denoisers.hmm_first_order_kernel`,
loaded on first use; O(T S^2) per sequence, one thread) and the same operations as torch ops elsewhere (:func:`first_order_posterior_torch`; the tests check that
both give the same bits).

Vanishing evidence (a message whose maximum falls below 1e-300, or a posterior whose sum does) returns None:
the caller then runs the general loop of :mod:`dllm_lit.denoisers.hmm_posterior` with its fallback rules.
"""
from __future__ import annotations

import numpy as np
import torch

from dllm_lit.markov.products import TINY, numba_available, torch_product
from dllm_lit.util.reductions import fixed_order_sum

__all__ = ["first_order_posterior", "first_order_posterior_torch", "numba_available", "TINY"]


def first_order_posterior(A: torch.Tensor, mu: torch.Tensor, E: torch.Tensor, L: torch.Tensor, z: torch.Tensor,
                          leave_one_out: bool, out: torch.Tensor | None = None) -> torch.Tensor | None:
    """p(x_t | z_{-t}) (or p(x_t | z)) of the chain (A [S, S], mu [S]) from evidence E [Z, S] = L [Z, S]:
    float64 [B, T, S] on z's device, or None on vanishing evidence (module docstring).  ``out``: a contiguous
    float64 CPU [B, T, S] the kernel writes into instead of fresh memory (the same numbers; a fresh buffer of
    this size costs more in page faults than the recursion itself, ``docs/performance.md``)."""
    if z.device.type != "cpu" or not numba_available():
        return first_order_posterior_torch(A, mu, E, L, z, leave_one_out)
    Bsz, T = z.shape
    S = A.shape[0]
    f64 = [np.ascontiguousarray(x.detach().to(torch.float64).cpu().numpy()) for x in (A, A.T, mu, E.T, L.T)]
    if out is None:
        out = torch.empty(Bsz, T, S, dtype=torch.float64)
    if Bsz and T:
        from dllm_lit.denoisers.hmm_first_order_kernel import first_order_batch
        if not first_order_batch(*f64, np.ascontiguousarray(z.long().numpy()), bool(leave_one_out), out.numpy()):
            return None
    return out


def _scale_torch(n: torch.Tensor) -> torch.Tensor | None:
    """The kernel's ``_scale`` row-wise: n 2^-e, the power of two built from its bits (exact); None if a row vanishes."""
    mx = n.amax(-1, keepdim=True)
    if not bool((mx >= TINY).all()):
        return None
    e = torch.frexp(mx).exponent.to(torch.int64)
    return n * ((1023 - e) << 52).view(torch.float64)


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
        n = _scale_torch(torch_product(E[z[:, t]] * o[:, t], At))
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
            a = _scale_torch(torch_product(E[z[:, t]] * a, A))
            if a is None:
                return None
    return o
