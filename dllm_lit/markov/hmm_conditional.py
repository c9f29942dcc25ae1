"""An HMM world given revealed tokens: the evidence's probability and exact conditional sampling.

A canvas ``z`` [N, T] holds a revealed token (< V) or MASK (= V) at each position.  With ``E_t(s) = B(s, z_t)``
at a revealed position and 1 at a MASK,

    log p(z)       = sum_t log c_t,   a_0 = mu,  c_t = sum_s a_t(s) E_t(s),  a_{t+1} = (a_t o E_t / c_t) A
    p(x | z)       = p(x) / p(z)  for every x that agrees with z (0 otherwise)

and exact conditional sampling ("AR from the prompt": left to right, each token from its exact conditional
law given the tokens drawn so far and the whole canvas) uses the right messages of the canvas:

    beta_{T-1} = 1,   beta_{t-1} propto A (E_t o beta_t)
    p(x_t = v | x_<t, z) propto [z_t = MASK or v = z_t] sum_s a_t(s) B(s, v) beta_t(s),   a_{t+1} propto (a_t o B(., x_t)) A

Uniforms are counter-based (``Stream.CHAIN``, step 1, slot 0 at position t), and every product and normaliser is
an index-order sum (:attr:`~dllm_lit.markov.hmm.HMMWorld.products`, no BLAS): sequence n's numbers and draws depend
only on (seed, n) and its canvas, never on the batch or its chunking.  Cost O(N T (S V + cost of m A)); memory
N T S float64 for the right messages, in chunks of rows.

The exact pair law of two adjacent free positions (forward-backward, :func:`pair_rows`), with a_t the forward
(predictive) message, a_0 = mu, a_{t+1} propto (a_t o E_t) A:

    p(x_t = a, x_{t+1} = b | z) = p(x_t = a | z) p(x_{t+1} = b | x_t = a, z),
    p(x_t = a | z)          propto sum_s a_t(s) B(s, a) beta_t(s)
    p(x_{t+1} = b | a, z)   propto sum_s' [(a_t o B(., a)) A](s') B(s', b) beta_{t+1}(s')
"""
from __future__ import annotations

import torch

from dllm_lit import rng
from dllm_lit.markov.chain import inverse_cdf
from dllm_lit.markov.hmm import HMMWorld
from dllm_lit.markov.products import dense_product, normalised

__all__ = ["emission_table", "log_evidence", "pair_rows", "sample_given", "CONDITIONAL_STEP"]

#: the ``step`` coordinate of conditional sampling's uniforms (HMMWorld.sample uses step 0)
CONDITIONAL_STEP = 1
#: bytes of right messages held at once
_MESSAGE_BYTES = 2**28


def emission_table(world: HMMWorld) -> torch.Tensor:
    """E [V + 1, S]: row v = B(., v) (a revealed token), row V = 1 (a MASK)."""
    return torch.cat([world.B.T, torch.ones(1, world.num_states, dtype=torch.float64)]).contiguous()


@torch.no_grad()
def log_evidence(world: HMMWorld, z: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """log p(revealed tokens of z) for canvases z [N, T]: float64 [N], -inf where the evidence is impossible.
    With ``weights`` w [N, T, V] >= 0: log sum_x p(x) prod_t w_t(x_t) over the x agreeing with z (a tilted
    evidence: E_p[exp(sum_t g_t(x_t)) | z] = exp(log_evidence(z, e^g) - log_evidence(z)))."""
    z = z.cpu().long()
    E, ops, Bt = emission_table(world), world.products, world.B.T.contiguous()
    N, T = z.shape
    a = world.initial.expand(N, -1)
    out = torch.zeros(N, dtype=torch.float64)
    for t in range(T):
        if weights is None:
            e = E[z[:, t]]
        else:  # sum_v [v allowed by z_t] w_t(v) B(., v)
            allowed = (z[:, t, None] == world.vocab_size) | (z[:, t, None] == torch.arange(world.vocab_size))
            e = dense_product(weights[:, t].to(torch.float64) * allowed, Bt)
        f, c, _ = normalised(a * e)
        out += c[:, 0].log()  # log 0 = -inf stays -inf
        a = ops.right(torch.where(c > 0, f, world.initial))
    return out


def _right_messages(world: HMMWorld, z: torch.Tensor, E: torch.Tensor) -> torch.Tensor:
    """beta_t [N, T, S], each row normalised to sum 1 (uniform where the right evidence is impossible)."""
    N, T = z.shape
    S = world.num_states
    b = torch.empty(N, T, S, dtype=torch.float64)
    b[:, T - 1] = 1.0 / S
    for t in range(T - 1, 0, -1):
        m, s, _ = normalised(world.products.left(E[z[:, t]] * b[:, t]))
        b[:, t - 1] = torch.where(s > 0, m, torch.full_like(m, 1.0 / S))
    return b


def _left_messages(world: HMMWorld, z: torch.Tensor, E: torch.Tensor) -> torch.Tensor:
    """a_t [N, T, S]: the state law at t given the evidence before t (rows sum to 1; mu again after an
    impossible evidence, as :func:`log_evidence`)."""
    N, T = z.shape
    a = torch.empty(N, T, world.num_states, dtype=torch.float64)
    a[:, 0] = world.initial
    for t in range(T - 1):
        f, c, _ = normalised(a[:, t] * E[z[:, t]])
        a[:, t + 1] = world.products.right(torch.where(c > 0, f, world.initial))
    return a


def _normalised(w: torch.Tensor) -> torch.Tensor:
    return normalised(w)[0]


@torch.no_grad()
def pair_rows(world: HMMWorld, z: torch.Tensor, m: torch.Tensor, t: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """p(x_t = a, x_{t+1} = v | z_m) over v for each query (m, t, a) [Q] (module docstring): float64 [Q, V].
    Positions t and t + 1 must be free in z_m (:meth:`~dllm_lit.markov.world_api.ExactWorld.pair_rows`)."""
    z = z.cpu().long()
    E = emission_table(world)
    used, m = torch.unique(m.cpu(), return_inverse=True)  # messages of the queried canvases only
    fwd, bwd = _left_messages(world, z[used], E), _right_messages(world, z[used], E)
    t, a, ops = t.cpu(), a.cpu(), world.products
    rows = max(1, _MESSAGE_BYTES // (8 * 3 * world.num_states))
    out = []
    for i in range(0, m.numel(), rows):
        mi, ti, ai = m[i:i + rows], t[i:i + rows], a[i:i + rows]
        at = fwd[mi, ti]
        first = _normalised(ops.emit(at * bwd[mi, ti])).gather(1, ai[:, None])
        nxt = ops.right(_normalised(at * world.B[:, ai].T))
        out.append(first * _normalised(ops.emit(nxt * bwd[mi, ti + 1])))
    return torch.cat(out) if out else torch.zeros(0, world.vocab_size, dtype=torch.float64)


@torch.no_grad()
def sample_given(world: HMMWorld, z: torch.Tensor, seed: int, indices: torch.Tensor) -> torch.Tensor:
    """Exact samples of p(x | z) for canvases z [N, T] (module docstring); ``indices`` [N] key the uniforms.
    Every canvas must have positive probability (:func:`log_evidence` > -inf)."""
    z = z.cpu().long()
    N, T = z.shape
    rows = max(1, _MESSAGE_BYTES // (8 * max(T, 1) * world.num_states))
    if N > rows:
        return torch.cat([sample_given(world, z[i:i + rows], seed, indices[i:i + rows]) for i in range(0, N, rows)])
    V, ops = world.vocab_size, world.products
    E = emission_table(world)
    b = _right_messages(world, z, E)
    keys = rng.sequence_keys(seed, indices.cpu(), rng.Stream.CHAIN)
    u = rng.uniform(keys[:, None], CONDITIONAL_STEP, torch.arange(T)[None, :], slot=0)
    x = torch.empty(N, T, dtype=torch.long)
    a = world.initial.expand(N, -1)
    for t in range(T):
        w = ops.emit(a * b[:, t])
        drawn = inverse_cdf(w.cumsum(1), u[:, t])
        x[:, t] = torch.where(z[:, t] < V, z[:, t], drawn)
        a = ops.right(_normalised(a * E[x[:, t]]))
    return x
