"""Reference HMM smoothing by forward-backward in float64 (paper Sec. 3.2, App. A).

Masking is hard evidence e_t(v) = 1[v = z_t] at revealed positions and e_t = 1 at masked ones.

    alpha_0 = normalise(pi * e_0),        alpha_t = normalise((alpha_{t-1} P') * e_t)
    beta_{T-1} = 1,                       beta_{t-1} = normalise(P' (e_t * beta_t))
    gamma_t = normalise(alpha_t * beta_t)

Zero-probability evidence (two revealed tokens the chain cannot connect, possible when P' has
zeros and a sampler decodes in parallel) would make these 0/0.  dllm_lit's rule, shared with the
fast oracle: *evidence that is impossible given everything to its left is dropped*.  Concretely,
a forward message that vanishes restarts from e_t, a backward message that vanishes restarts
from e_t (the right evidence beyond t is ignored), and if alpha_t * beta_t vanishes then
gamma_t = alpha_t (the posterior given the left evidence only).  Under hard evidence this is the
same as: gamma_i is computed from its nearest revealed neighbours, and if the right neighbour
is unreachable the left-only law is used.

This path is O(T V^2) with a dense kernel: it is the test reference, not the fast path.
"""
from __future__ import annotations

import torch

from dllm_lit.markov.chain import MarkovChain

__all__ = ["forward_backward_posterior"]


def _normalise_or(x: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    s = x.sum(-1, keepdim=True)
    fb = fallback / fallback.sum(-1, keepdim=True)
    return torch.where(s > 0, x / s.clamp_min(1e-300), fb)


def forward_backward_posterior(chain: MarkovChain, z: torch.Tensor) -> torch.Tensor:
    """Exact posterior marginals p(x_t = v | z) as float64 [B, T, V] (see module docstring)."""
    V = chain.vocab_size
    P = chain.kernel
    pi = chain.stationary
    z = z.cpu().long()
    B, T = z.shape
    revealed = z != chain.mask_id
    ev = torch.ones(B, T, V, dtype=torch.float64)
    onehot = torch.nn.functional.one_hot(z.clamp(max=V - 1), V).to(torch.float64)
    ev = torch.where(revealed[..., None], onehot, ev)

    alpha = torch.empty(B, T, V, dtype=torch.float64)
    alpha[:, 0] = _normalise_or(pi[None] * ev[:, 0], ev[:, 0])
    for t in range(1, T):
        alpha[:, t] = _normalise_or((alpha[:, t - 1] @ P) * ev[:, t], ev[:, t])

    beta = torch.empty(B, T, V, dtype=torch.float64)
    beta[:, T - 1] = 1.0
    for t in range(T - 1, 0, -1):
        m = _normalise_or(ev[:, t] * beta[:, t], ev[:, t])
        beta[:, t - 1] = _normalise_or(m @ P.T, torch.ones_like(m))
    gamma = _normalise_or(alpha * beta, alpha)
    return gamma
