"""The products of an HMM world's forward-backward, each output a function of its own row alone.

For a message m [n, S] (one row per sequence):

    right:  (m A)[i, s']      = sum_s  m[i, s] A(s, s')
    left:   (A m^T)^T[i, s]   = sum_s' A(s, s') m[i, s']
    emit:   (m B)[i, v]       = sum_s  m[i, s] B(s, v)          (a context world: sum over the contexts r of (r, v))
    row sums                  = fixed_order_sum's pairwise tree

Every product is summed in index order by separate IEEE multiplications and additions, never by a BLAS call:
a BLAS product of an [n, S] block rounds a row differently with n (n = 1 takes gemv, others gemm, with
blockings that depend on n) and with the row's memory alignment, so a sequence's posterior would depend on its
batch.  On the CPU in float64 the products run as numba kernels where the optional extra ``fast`` is installed
(:mod:`~dllm_lit.markov.products_kernel`, loaded on first use); elsewhere (CUDA, float32, no numba) the
same operations run as torch ops, in float64 with the same bits as the kernels (tested), so the numbers do not
depend on the batch, the chunking or the device.  A dense world costs O(S^2) per row and product, a context world O(S V).

Every per-sequence path uses them: the oracle's posteriors (:mod:`~dllm_lit.denoisers.hmm_posterior`) and the exact
world's log-probabilities, evidences, pair laws, conditional samples and max-product search
(:meth:`~dllm_lit.markov.hmm.HMMWorld.log_prob`, :mod:`~dllm_lit.markov.hmm_conditional`,
:mod:`~dllm_lit.markov.max_product`).  :meth:`HMMWorld.right` / :meth:`~HMMWorld.left` (BLAS) stay for the
computations that are not per sequence (the stationary law, exact enumerations over every context).
"""
from __future__ import annotations

import functools
import importlib.util
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from dllm_lit.util.reductions import fixed_order_sum

if TYPE_CHECKING:
    from dllm_lit.markov.hmm import HMMWorld

__all__ = ["WorldProducts", "dense_product", "torch_product", "context_blocks", "right_product", "left_product",
           "context_sums", "row_sums", "normalised", "normalise_or", "numba_available", "TINY"]

#: messages and sums below this count as vanishing (the first-order posterior's kernels and torch path then return
#: None and the general loop's fallbacks apply); here, below the compiled kernels, so a kernel never imports its caller
TINY = 1e-300


@functools.cache
def numba_available() -> bool:
    """Whether the optional compiled kernels can run (``pip install "dllm_lit[fast]"``); without numba the CPU runs
    the torch mirrors, the same numbers, slower."""
    return importlib.util.find_spec("numba") is not None


def _compiled(x: torch.Tensor) -> bool:
    return x.device.type == "cpu" and x.dtype == torch.float64 and numba_available()


def _np(x: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(x.detach().numpy())


def torch_product(m: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """m [n, K] times M [K, J] by torch ops, added in index order k (the kernel's ``dense_product``)."""
    out = m[:, :1] * M[0]
    for k in range(1, M.shape[0]):
        out = out + m[:, k:k + 1] * M[k]
    return out


def dense_product(m: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """m [n, K] times M [K, J], added in index order k (compiled on the CPU in float64, torch ops otherwise)."""
    if not _compiled(m):
        return torch_product(m, M)
    from dllm_lit.markov.products_kernel import dense_product as kernel
    out = np.empty((m.shape[0], M.shape[1]))
    kernel(_np(m), _np(M), out)
    return torch.from_numpy(out)


def _blocked(x: torch.Tensor, Q: torch.Tensor) -> torch.Tensor:
    """The kernel's ``blocked_product``: out[r, j, i] = sum_k x[r, k, i] Q[r, k, j] (x [R, K, n], Q [R, K, J])."""
    from dllm_lit.markov.products_kernel import blocked_product
    out = np.empty((Q.shape[0], Q.shape[2], x.shape[2]))
    blocked_product(_np(x), _np(Q), out)
    return torch.from_numpy(out)


def context_blocks(rows: torch.Tensor, V: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(Qr, Ql) of a context world's rows [S, V] (state (a, r) moves to (r, c) with probability P[a, r, c]):
    Qr[r, a, c] = Ql[r, c, a] = P[a, r, c], the V x V block of context r, contiguous."""
    P = rows.view(V, -1, V)
    return P.permute(1, 0, 2).contiguous(), P.permute(1, 2, 0).contiguous()


def right_product(m: torch.Tensor, Qr: torch.Tensor) -> torch.Tensor:
    """m A of a context world for m [n, S]: out[(r, c)] = sum_a m[(a, r)] Qr[r, a, c], added in index order
    a = 0, 1, ..."""
    R, V, _ = Qr.shape
    mv = m.reshape(m.shape[0], V, R)
    if _compiled(m):  # x[r, a, i] = m[i, (a, r)]; out [r, c, i]
        return _blocked(mv.permute(2, 1, 0), Qr).view(R * V, m.shape[0]).T.contiguous()
    out = mv[:, 0, :, None] * Qr[:, 0]
    for a in range(1, V):
        out = out + mv[:, a, :, None] * Qr[:, a]
    return out.reshape(m.shape[0], R * V)


def left_product(m: torch.Tensor, Ql: torch.Tensor) -> torch.Tensor:
    """(A m^T)^T of a context world for m [n, S]: out[(a, r)] = sum_c Ql[r, c, a] m[(r, c)], added in index
    order c."""
    R, V, _ = Ql.shape
    mv = m.reshape(m.shape[0], R, V)
    if _compiled(m):  # x[r, c, i] = m[i, (r, c)]; out [r, a, i]
        return _blocked(mv.permute(1, 2, 0), Ql).permute(2, 1, 0).reshape(m.shape[0], V * R)
    out = mv[:, :, 0, None] * Ql[:, 0]  # [n, r, a]
    for c in range(1, V):
        out = out + mv[:, :, c, None] * Ql[:, c]
    return out.transpose(1, 2).reshape(m.shape[0], V * R)


def context_sums(x: torch.Tensor) -> torch.Tensor:
    """x [n, R, V] summed over R in index order: [n, V]."""
    if _compiled(x):
        from dllm_lit.markov.products_kernel import context_sums as kernel
        out = np.empty((x.shape[0], x.shape[2]))
        kernel(_np(x), out)
        return torch.from_numpy(out)
    out = x[:, 0]
    for r in range(1, x.shape[1]):
        out = out + x[:, r]
    return out


def row_sums(x: torch.Tensor) -> torch.Tensor:
    """x [n, S] summed per row by :func:`~dllm_lit.util.reductions.fixed_order_sum`'s tree: [n] (compiled on the CPU
    in float64: the same bits)."""
    if not _compiled(x):
        return fixed_order_sum(x)
    from dllm_lit.markov.products_kernel import fixed_row_sums
    out = np.empty(x.shape[0])
    fixed_row_sums(_np(x), out)
    return torch.from_numpy(out)


def normalised(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(x / max(s, 1e-300), s, whether every s > 0) for x [n, S], s [n, 1] its row sums by
    :func:`~dllm_lit.util.reductions.fixed_order_sum`'s tree (compiled on the CPU in float64: the same bits)."""
    if not _compiled(x):
        s = fixed_order_sum(x, keepdim=True)
        return x / s.clamp_min(1e-300), s, bool((s > 0).all())
    from dllm_lit.markov.products_kernel import normalised_rows
    out, s = np.empty(x.shape), np.empty(x.shape[0])
    positive = normalised_rows(_np(x), out, s)
    return torch.from_numpy(out), torch.from_numpy(s)[:, None], positive


def normalise_or(x: torch.Tensor, fallback: torch.Tensor | Callable[[], torch.Tensor]) -> torch.Tensor:
    """x / sum(x) per row (the fixed-order tree), or the normalised fallback where a row of x sums to zero.
    ``fallback`` may be a function returning it: it is then computed only when some row vanishes."""
    out, s, positive = normalised(x)
    if positive:  # the usual case: the same numbers as the where below
        return out
    fb = fallback() if callable(fallback) else fallback
    return torch.where(s > 0, out, normalised(fb)[0])


class WorldProducts:
    """:meth:`right`, :meth:`left` and :meth:`emit` of one world, its matrices held once in ``dtype`` on
    ``device`` (module docstring)."""

    def __init__(self, world: HMMWorld, dtype: torch.dtype = torch.float64,
                 device: torch.device | str | None = None) -> None:
        self.world = world
        V = world.vocab_size
        if world.order is None:
            self.A = world.A.to(device=device, dtype=dtype).contiguous()
            self.At = self.A.T.contiguous()
            self.B = world.B.to(device=device, dtype=dtype).contiguous()
        else:
            self.Qr, self.Ql = context_blocks(world.rows.to(device=device, dtype=dtype), V)

    def right(self, m: torch.Tensor) -> torch.Tensor:
        """m A for m [n, S]."""
        return dense_product(m, self.A) if self.world.order is None else right_product(m, self.Qr)

    def left(self, m: torch.Tensor) -> torch.Tensor:
        """(A m^T)^T for m [n, S]."""
        return dense_product(m, self.At) if self.world.order is None else left_product(m, self.Ql)

    def emit(self, m: torch.Tensor) -> torch.Tensor:
        """m B for m [n, S]: [n, V] (a context world: state s emits s mod V)."""
        if self.world.order is None:
            return dense_product(m, self.B)
        V = self.world.vocab_size
        return context_sums(m.reshape(m.shape[0], self.world.num_states // V, V))
