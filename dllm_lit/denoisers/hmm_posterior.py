"""Exact token posteriors of an HMM world under any evidence channel, by scaled forward-backward.

With E(z, s) = sum_v L(z, v) B(s, v) the evidence a noisy token z puts on a hidden state
(:mod:`dllm_lit.denoisers.channels`),

    a_0 = mu,              f_t = normalise(a_t o E(z_t)),          a_{t+1} = f_t A       (predictive, left)
    b_{T-1} = 1,           b_{t-1} = normalise(A (E(z_t) o b_t))                         (right)
    p(x_t = v | z)       propto L(z_t, v) sum_s a_t(s) b_t(s) B(s, v)
    p(x_t = v | z_{-t})  propto            sum_s a_t(s) b_t(s) B(s, v)                   (leave-one-out)

Leave-one-out drops position t's own evidence only: the posterior an editing model approximates, and the
ratio SEDD-uniform's score needs, p(z with z_t = y) / p(z) = sum_v L(y, v) q_t(v) / sum_v L(z_t, v) q_t(v),
q_t the leave-one-out law.

Zero-probability evidence (possible when A or B have zeros), the rule of the first-order reference
(:mod:`dllm_lit.denoisers.forward_backward`): a forward message that vanishes restarts from E(z_t); in the
backward pass, E(z_t) o b_t vanishing drops the evidence beyond t and A (.) vanishing drops all right evidence;
a posterior that vanishes falls back to the left-only law.  Cost O(B T (S V + cost of m A)), memory B T S
for the right messages.  Runs on any device, in float64 (the reference) or float32.

Every product (m A, A m^T, m B) and every normaliser is one of :mod:`~dllm_lit.markov.products`': summed in
index order by separate IEEE operations (a numba kernel on the CPU in float64, the same bits by torch ops
elsewhere), never by BLAS, whose rounding of a row depends on how many rows share the call.  Each row's numbers are
therefore the same whatever the batch, the chunking, the order of the rows, and the rows' fallbacks (each fallback
is taken row by row); torch ops on another device perform the same IEEE operations, so they give the same bits.

A first-order chain (dense A, B = I: the oracle's world for uniform and mixed noise) in float64 takes
:func:`~dllm_lit.denoisers.hmm_first_order.first_order_posterior` (a compiled kernel whose numbers do not depend on
the batch, the chunking or the device), and this loop only where that reports vanishing evidence.
"""
from __future__ import annotations

import functools

import torch

from dllm_lit.denoisers.channels import ABSORBING, EvidenceChannel
from dllm_lit.denoisers.hmm_first_order import first_order_posterior
from dllm_lit.markov.products import WorldProducts, normalise_or, normalised
from dllm_lit.markov.hmm import HMMWorld

__all__ = ["hmm_posterior", "hmm_likelihood_tables"]


def hmm_likelihood_tables(world: HMMWorld, channel: EvidenceChannel, dtype: torch.dtype = torch.float64,
                          device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(L [Z, V], E = L B^T [Z, S]) in ``dtype`` on ``device``."""
    L = channel.likelihood(world.vocab_size)
    E = L @ world.B.T
    return L.to(device=device, dtype=dtype), E.to(device=device, dtype=dtype)


@torch.no_grad()
def hmm_posterior(world: HMMWorld, z: torch.Tensor, channel: EvidenceChannel = ABSORBING,
                  leave_one_out: bool = False, dtype: torch.dtype = torch.float64,
                  tables: tuple[torch.Tensor, torch.Tensor] | None = None,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """p(x_t = v | z) (or | z_{-t} with ``leave_one_out``) for z [B, T] on z's device: [B, T, V] in ``dtype``.
    ``out``: a buffer the first-order kernel may write into (:func:`first_order_posterior`; the result is then
    ``out`` itself, else a fresh tensor)."""
    channel.check_tokens(z, world.vocab_size)
    dev = z.device
    L, E = tables if tables is not None else hmm_likelihood_tables(world, channel, dtype, dev)
    if dtype == torch.float64 and _identity_emission(world):
        fast = first_order_posterior(world.A, world.initial, E, L, z, leave_one_out, out)
        if fast is not None:
            return fast
    Bsz, T = z.shape
    S, V = world.num_states, world.vocab_size
    z = z.long()
    ops = world.products if dtype == torch.float64 and dev.type == "cpu" else WorldProducts(world, dtype, dev)
    ones = torch.ones(Bsz, S, dtype=dtype, device=dev)
    b = torch.empty(Bsz, T, S, dtype=dtype, device=dev)
    b[:, T - 1] = 1.0 / S
    for t in range(T - 1, 0, -1):
        ev = E[z[:, t]]
        m = normalise_or(ev * b[:, t], ev)
        b[:, t - 1] = normalise_or(ops.left(m), ones)
    out = torch.empty(Bsz, T, V, dtype=dtype, device=dev)
    a = world.initial.to(device=dev, dtype=dtype).expand(Bsz, S)
    for t in range(T):
        q = ops.emit(a * b[:, t])
        if leave_one_out:  # the left-only law is computed only when some row of q vanishes
            out[:, t] = normalise_or(q, functools.partial(ops.emit, a))
        else:
            lz = L[z[:, t]]
            out[:, t] = normalise_or(q * lz, functools.partial(_left_only, ops, a, lz))
        if t + 1 < T:
            ev = E[z[:, t]]
            f = normalise_or(a * ev, ev)
            a = normalised(ops.right(f))[0]
    return out


def _left_only(ops: WorldProducts, a: torch.Tensor, lz: torch.Tensor) -> torch.Tensor:
    """The fallback of p(x_t | z): the left-only law times L(z_t, .), normalised (or L(z_t, .) itself)."""
    return normalise_or(ops.emit(a) * lz, lz)


def _identity_emission(world: HMMWorld) -> bool:
    """True for a dense-A world with B = I (a first-order chain): its emission products are the identity."""
    S, V = world.num_states, world.vocab_size
    return world.order is None and S == V and bool(torch.equal(world.B, torch.eye(V, dtype=world.B.dtype)))
