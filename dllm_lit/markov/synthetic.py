"""Synthetic ground-truth chains for tests and benchmarks.

Each row i gets K distinct random neighbours with heavy-tailed (Zipf) probabilities

    P_topK(nbr_k | i) proportional to (k + 1)^(-a_i),   a_i ~ Uniform[0.8 alpha, 1.2 alpha],

and the teleport law nu is Zipf(alpha) over a random permutation of the vocabulary, so that,
like a real bigram kernel, a few continuations dominate each row and token frequencies are
skewed.  Everything is a deterministic function of ``seed``.
"""
from __future__ import annotations

import functools
import math

import torch

from dllm_lit.engine.budget import check_memory
from dllm_lit.markov.chain import ChainError, MarkovChain

__all__ = ["synthetic_chain", "check_synthetic_size"]


def _zipf(n: int, a: float) -> list[float]:
    """(k + 1)^(-a) / sum, k < n, by the C library's ``pow`` and a correctly rounded ``math.fsum``.

    torch's vectorised ``pow`` and ``sum`` round differently on AVX2, AVX-512 and scalar CPUs (up to a
    few ulps), which gave the "same" chain a different fingerprint, and different metrics, per machine.
    """
    w = [math.pow(k, -a) for k in range(1, n + 1)]
    total = math.fsum(w)
    return [x / total for x in w]


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
    check_synthetic_size(vocab_size, top_k)
    nbr, prob, nu = (t.clone() for t in _draw(vocab_size, top_k, float(alpha), int(seed)))
    meta = {"source": "synthetic", "vocab_size": vocab_size, "top_k": top_k, "eps": eps, "alpha": alpha, "seed": seed}
    return MarkovChain(nbr, prob, eps=eps, nu=nu, metadata=meta)


def check_synthetic_size(vocab_size: int, top_k: int) -> None:
    """One line naming ``vocab_size`` when the draw would not fit this machine's memory: a V x V float32 table of
    uniforms (its top-K per row are the neighbours) and the K V neighbour lists (int64 and float64)."""
    V = float(vocab_size)
    check_memory("vocab_size", vocab_size, 4 * V * V + 24 * V * top_k,
                 "drawing the synthetic chain (a V x V float32 table of uniforms)")


@functools.lru_cache(maxsize=4)
def _draw(V: int, K: int, alpha: float, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(neighbour lists, their probabilities, nu) of :func:`synthetic_chain`, kept for the process: at V = 4096 the
    K V scalar ``pow`` calls take about 2 s of CPU, which every run of a grid (one per work unit) paid again."""
    g = torch.Generator().manual_seed(seed)
    nbr = torch.rand(V, V, generator=g).topk(K, dim=1).indices if K < V else torch.stack([torch.randperm(V, generator=g) for _ in range(V)])
    a = alpha * (0.8 + 0.4 * torch.rand(V, 1, generator=g, dtype=torch.float64))
    prob = torch.tensor([_zipf(K, ai) for ai in a[:, 0].tolist()], dtype=torch.float64).reshape(V, K)
    perm = torch.randperm(V, generator=g)
    nu = torch.empty(V, dtype=torch.float64)
    nu[perm] = torch.tensor(_zipf(V, alpha), dtype=torch.float64)
    return nbr, prob, nu
