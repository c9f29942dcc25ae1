r"""Per-row entropy estimators of the transition entropy rate H = sum_i w_i H(q(. | i)).

The transition KL splits as KL = CE(q, P) - H(q): the cross-entropy ``nll`` is linear in the counts
(P known), so it is unbiased, and the whole plug-in bias of ``kl`` is the (downward) bias of the
entropy.  Each row i with n_i transitions, m_i distinct successors and f1_i successors seen once
is estimated separately and weighted by n_i / M (as ``entropy``):

* ``plugin``: H(p_hat(. | i)), biased down by about (k_i - 1) / (2 n_i);
* ``mm`` (Miller 1955): plugin + (m_i - 1) / (2 n_i), the observed support in place of k_i;
* ``cs`` (Chao & Shen 2003, "Nonparametric estimation of Shannon's index of diversity when there
  are unseen species in sample"): coverage C_i = 1 - f1_i / n_i (f1_i = n_i - 1 when every
  successor was seen once), p_ij = C_i c_ij / n_i, and the Horvitz-Thompson sum
  -sum_j p_ij log p_ij / (1 - (1 - p_ij)^{n_i}), which accounts for unseen successors.

:func:`transition_entropy` evaluates one of them on weighted pair counts (bootstrap resamples too).
"""
from __future__ import annotations

import torch

from dllm_lit import checks

__all__ = ["ENTROPY_ESTIMATORS", "entropy_from_pairs", "transition_entropy"]

ENTROPY_ESTIMATORS = ("plugin", "mm", "cs")


def entropy_from_pairs(pairs: torch.Tensor, counts: torch.Tensor, vocab_size: int, estimator: str) -> float:
    """sum_i (n_i / M) H_hat_i from distinct pair codes i * V + j and their counts (zero counts ignored)."""
    checks.choice("estimator", estimator, ENTROPY_ESTIMATORS)
    c = counts.to(torch.float64)
    keep = c > 0
    pairs, c = pairs[keep].long(), c[keep]
    if c.numel() == 0:
        raise ValueError("no transitions were observed (sequences need length >= 2)")
    M = c.sum()
    i = pairs // vocab_size
    n = torch.zeros(vocab_size, dtype=torch.float64).index_add_(0, i, c)
    p = c / n[i]
    if estimator == "plugin":
        return float(-(c * p.log()).sum() / M)
    if estimator == "mm":
        m = torch.zeros(vocab_size, dtype=torch.float64).index_add_(0, i, torch.ones_like(c))
        return float((-(c * p.log()).sum() + ((m - 1) / 2)[n > 0].sum()) / M)
    f1 = torch.zeros(vocab_size, dtype=torch.float64).index_add_(0, i, (c == 1).to(torch.float64))
    f1 = torch.where(f1 >= n, n - 1, f1)
    pa = (1.0 - f1 / n.clamp_min(1.0))[i] * p
    terms = -pa * pa.log() / (1.0 - (1.0 - pa).pow(n[i]))
    h_row = torch.zeros(vocab_size, dtype=torch.float64).index_add_(0, i, terms)
    return float((n * h_row).sum() / M)


def transition_entropy(codes: torch.Tensor, vocab_size: int, estimator: str) -> float:
    """The transition entropy rate of codes [N, T - 1] under ``estimator`` (:data:`ENTROPY_ESTIMATORS`)."""
    pairs, counts = torch.unique(codes.reshape(-1), return_counts=True)
    return entropy_from_pairs(pairs, counts, vocab_size, estimator)
