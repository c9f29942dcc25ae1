r"""Metrics that hold in every world (first-order chain or HMM), from the world's exact laws.

* ``world_nll`` = -log p(x) / T per sequence, p by the forward algorithm (``HMMWorld.log_prob``; a first-order
  chain's ``log_prob``), averaged over sequences.
* ``ngram_kl{n}`` = KL(p_hat_n || p_n) (n = 1, 2, 3): p_hat_n the empirical law of the N (T - n + 1) overlapping
  n-grams, p_n the exact stationary n-gram marginal (``hmm_exact.ngram_marginals``); probabilities floored at
  1e-30.  Plug-in, so biased upward by about (#support - 1) / (2 M); ``ngram_kl{n}_excess`` subtracts the same
  KL of the run's exact samples (same N, T, sequences), as ``kl_excess`` does for transitions.
* dependence profile: plug-in I_hat(d) = I(X_i; X_{i+d}) from the N (T - d) pairs at distance d, for d on
  :data:`DEP_DISTANCES`; ``dep_excess`` = mean_d [I_hat_row(d) - I_hat_ref(d)] (exact samples as the floor;
  negative: the sampler loses dependence), ``dep_excess_far`` the same over d >= 16.
"""
from __future__ import annotations

import torch

__all__ = ["DEP_DISTANCES", "LOG_FLOOR", "ngram_codes", "kl_from_counts", "mi_from_pair_counts", "exact_world_ngrams",
           "exact_world_profile"]

#: distances of the dependence profile in the results table and the figure
DEP_DISTANCES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
LOG_FLOOR = 1e-30


def ngram_codes(x: torch.Tensor, vocab_size: int, n: int) -> torch.Tensor:
    """Codes sum_j x_{i+j} V^(n-1-j) of the overlapping n-grams: int64 [N, T - n + 1]."""
    x = x.long()
    T = x.shape[1]
    code = torch.zeros(x.shape[0], T - n + 1, dtype=torch.int64)
    for j in range(n):
        code = code * vocab_size + x[:, j: T - n + 1 + j]
    return code


def kl_from_counts(codes: torch.Tensor, counts: torch.Tensor, exact: torch.Tensor) -> float:
    """KL(p_hat || p) with p_hat = counts / sum, over the observed ``codes`` (p = exact[codes], floored)."""
    c = counts.to(torch.float64)
    keep = c > 0
    p_hat = c[keep] / c[keep].sum()
    return float((p_hat * (p_hat.log() - exact[codes[keep]].clamp_min(LOG_FLOOR).log())).sum())


def mi_from_pair_counts(codes: torch.Tensor, counts: torch.Tensor, vocab_size: int) -> float:
    """Plug-in I(X; Y) of pair codes x V + y with their counts."""
    c = counts.to(torch.float64)
    keep = c > 0
    codes, c = codes[keep], c[keep]
    M = c.sum()
    V = vocab_size
    px = torch.zeros(V, dtype=torch.float64).index_add_(0, codes // V, c) / M
    py = torch.zeros(V, dtype=torch.float64).index_add_(0, codes % V, c) / M
    pj = c / M
    return float((pj * (pj.log() - px[codes // V].log() - py[codes % V].log())).sum())


def _as_world(world):
    from dllm_lit.markov.hmm import HMMWorld

    return world if isinstance(world, HMMWorld) else HMMWorld.from_chain(world)


def exact_world_ngrams(world) -> dict[int, torch.Tensor]:
    """Exact n-gram marginals (flattened) for n = 1, 2, 3 of an HMM world or a first-order chain."""
    from dllm_lit.markov.hmm_exact import ngram_marginals

    w = _as_world(world)
    return {n: ngram_marginals(w, n).reshape(-1) for n in (1, 2, 3)}


def exact_world_profile(world, max_distance: int = max(DEP_DISTANCES)) -> torch.Tensor:
    """Exact I(X_i; X_{i+d}), d = 1..max_distance."""
    from dllm_lit.markov.hmm_exact import dependence_profile

    return dependence_profile(_as_world(world), max_distance)
