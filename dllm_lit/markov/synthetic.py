"""Synthetic ground-truth chains for tests and benchmarks.

Each row i gets K distinct random neighbours with heavy-tailed (Zipf) probabilities

    P_topK(nbr_k | i) proportional to (k + 1)^(-a_i),   a_i ~ Uniform[0.8 alpha, 1.2 alpha],

and the teleport law nu is Zipf(alpha) over a random permutation of the vocabulary, so that,
like a real bigram kernel, a few continuations dominate each row and token frequencies are
skewed.  Everything is a deterministic function of ``seed``.
"""
from __future__ import annotations

import torch

from dllm_lit.markov.chain import ChainError, MarkovChain

__all__ = ["synthetic_chain"]


def synthetic_chain(
    vocab_size: int,
    top_k: int,
    eps: float = 1e-4,
    alpha: float = 1.1,
    seed: int = 0,
) -> MarkovChain:
    """A random sparse chain with V = vocab_size, K = top_k, teleport eps (see module docstring)."""
    if not (isinstance(vocab_size, int) and vocab_size >= 1):
        raise ChainError(f"vocab_size must be an integer >= 1, got {vocab_size!r}")
    if not (isinstance(top_k, int) and 1 <= top_k <= vocab_size):
        raise ChainError(f"top_k must be an integer in [1, vocab_size={vocab_size}], got {top_k!r}")
    if not alpha > 0:
        raise ChainError(f"alpha must be > 0, got {alpha!r}")
    g = torch.Generator().manual_seed(int(seed))
    V, K = vocab_size, top_k
    nbr = torch.rand(V, V, generator=g).topk(K, dim=1).indices if K < V else torch.stack([torch.randperm(V, generator=g) for _ in range(V)])
    a = alpha * (0.8 + 0.4 * torch.rand(V, 1, generator=g, dtype=torch.float64))
    ranks = torch.arange(1, K + 1, dtype=torch.float64)[None, :]
    prob = ranks.pow(-a)
    prob = prob / prob.sum(1, keepdim=True)
    perm = torch.randperm(V, generator=g)
    nu = torch.empty(V, dtype=torch.float64)
    nu[perm] = torch.arange(1, V + 1, dtype=torch.float64).pow(-alpha)
    nu = nu / nu.sum()
    meta = {"source": "synthetic", "vocab_size": V, "top_k": K, "eps": eps, "alpha": alpha, "seed": seed}
    return MarkovChain(nbr, prob, eps=eps, nu=nu, metadata=meta)
