"""Transition-level metrics of samples against the known kernel P' (paper Sec. 5, App. D).

With empirical transition counts c(i, j) over all N (T - 1) transitions, M = sum c,
w_i = pi_hat(i) = sum_j c(i, j) / M and p_hat(j | i) = c(i, j) / sum_j' c(i, j'):

    NLL        = -sum_ij (c_ij / M) log q(j|i)                  (q = P', clamped at 1e-30)
    KL         =  sum_i w_i KL(p_hat(.|i) || q(.|i))            (sum over observed edges)
    TV         =  sum_i w_i 1/2 sum_j |p_hat(j|i) - q(j|i)|     (observed terms + unobserved q mass)
    entropy    =  sum_i w_i H(p_hat(.|i))
    other_mass =  sum_{ij : j not in S_i} c_ij / M              (S_i = top-K support of row i)
    support_frac = |{(i, j) : c_ij > 0}| / M                    (type/token ratio)
    unigram_l1 =  sum_i |pi_hat(i) - pi(i)|                     (L1, no 1/2; pi stationary)

These are the definitions of the paper's reference evaluation (see ``docs/metrics.md``).
:class:`ResampledTransitionMetrics` evaluates them on bootstrap resamples of sequences.
"""
from __future__ import annotations

import torch

from dllm_lit.markov.chain import MarkovChain
from dllm_lit.metrics.functional.bootstrap import PERCENTILE, IntervalPolicy

__all__ = [
    "METRIC_KEYS",
    "PairCounts",
    "TRANSITION_INTERVALS",
    "ResampledTransitionMetrics",
    "transition_codes",
    "transition_counts",
    "transition_metrics_from_counts",
    "transition_metrics_from_pairs",
]

METRIC_KEYS = ("nll", "kl", "tv", "entropy", "unigram_l1", "other_mass", "support_frac")

#: Plug-in functionals of the empirical kernel (kl, tv, entropy, unigram_l1) have a bias of order
#: #observed pairs / M, and a resample with replacement repeats sequences, which adds to that bias:
#: the percentile interval is shifted away from the estimate, the basic interval (reverse percentile)
#: to the other side, so either can exclude the estimate (the basic one did for the AR row's kl and
#: tv).  They get the "centred" interval (the bootstrap spread around the estimate), clipped at 0;
#: the bias itself is what the floor-corrected columns report.  nll and other_mass are linear in the
#: counts (ratios of sums, unbiased under resampling): percentile.  support_frac counts *distinct*
#: pairs, and a resample's duplicated sequences remove distinct pairs by construction (as for
#: dup_rate): no interval.
_CENTRED0 = IntervalPolicy("centred", lower_bound=0.0)
TRANSITION_INTERVALS: dict[str, IntervalPolicy] = {
    "nll": PERCENTILE,
    "kl": _CENTRED0,
    "tv": _CENTRED0,
    "entropy": _CENTRED0,
    "unigram_l1": _CENTRED0,
    "other_mass": PERCENTILE,
    "support_frac": IntervalPolicy(None, reason="a resample repeats sequences, which removes distinct transition "
                                                "pairs by construction (as for dup_rate)"),
}


def transition_codes(samples: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Transition codes x_t * V + x_{t+1} as int64 [N, T - 1]."""
    x = samples.long()
    return x[:, :-1] * vocab_size + x[:, 1:]


def transition_counts(samples: torch.Tensor, vocab_size: int, weights: torch.Tensor | None = None) -> torch.Tensor:
    """c(i, j) = sum_n weight_n * #{t : x_t = i, x_{t+1} = j} as float64 [V, V] (int64 if unweighted)."""
    codes = transition_codes(samples, vocab_size)
    if weights is None:
        return torch.bincount(codes.reshape(-1), minlength=vocab_size * vocab_size).view(vocab_size, vocab_size)
    w = weights.to(torch.float64)[:, None].expand_as(codes)
    return torch.bincount(codes.reshape(-1), weights=w.reshape(-1), minlength=vocab_size * vocab_size).view(vocab_size, vocab_size)


def transition_metrics_from_pairs(codes: torch.Tensor, counts: torch.Tensor, chain: MarkovChain) -> dict[str, float]:
    """The metrics of the module docstring from observed pairs only.

    ``codes`` holds the distinct observed transitions i * V + j and ``counts`` their (possibly
    fractional, e.g. bootstrap-weighted) counts; pairs with zero count are ignored.  Every metric
    needs only observed pairs plus O(V) row totals: for TV, sum_j |p_hat - q| over a row equals
    sum_observed (|p_hat - q| - q) + 1 because each row of q sums to one.  Cost O(#pairs + V).
    """
    V = chain.vocab_size
    c = counts.to(torch.float64)
    keep = c > 0
    codes, c = codes[keep].long(), c[keep]
    M = c.sum()
    if codes.numel() == 0 or M <= 0:
        raise ValueError("no transitions were observed (sequences need length >= 2)")
    i, j = codes // V, codes % V
    row_tot = torch.zeros(V, dtype=torch.float64).index_add_(0, i, c)
    p_hat = c / row_tot[i]
    q = chain.kernel[i, j]
    logq = q.clamp_min(1e-30).log()
    logp = p_hat.log()
    w_pair = row_tot[i] / M
    support = chain.topk_support()[i, j]
    w = row_tot / M
    return {
        "nll": (-(c * logq).sum() / M).item(),
        "kl": ((c * (logp - logq)).sum() / M).item(),
        "tv": (0.5 * (1.0 + (w_pair * ((p_hat - q).abs() - q)).sum())).item(),
        "entropy": (-(c * logp).sum() / M).item(),
        "unigram_l1": (w - chain.stationary).abs().sum().item(),
        "other_mass": ((c * (~support).to(c.dtype)).sum() / M).item(),
        "support_frac": (codes.numel() / M).item(),
    }


def transition_metrics_from_counts(counts: torch.Tensor, chain: MarkovChain) -> dict[str, float]:
    """The metrics from a dense count matrix c [V, V]."""
    flat = counts.reshape(-1)
    codes = flat.nonzero().squeeze(1)
    return transition_metrics_from_pairs(codes, flat[codes], chain)


class PairCounts:
    """Per-sequence transition-pair counts as a sparse [U, N] matrix over the U distinct observed pairs
    (``pairs``, ascending codes), from codes int64 [N, T - 1]; :meth:`counts` applies resample weights."""

    def __init__(self, codes: torch.Tensor) -> None:
        N, L = codes.shape
        self.pairs, inv = torch.unique(codes.reshape(-1), return_inverse=True)
        seq_of = torch.arange(N).repeat_interleave(L)
        self.matrix = torch.sparse_coo_tensor(
            torch.stack([inv, seq_of]), torch.ones(inv.numel(), dtype=torch.float64), (self.pairs.numel(), N),
            check_invariants=False,
        ).coalesce()

    def counts(self, weights: torch.Tensor) -> torch.Tensor:
        """Weighted pair counts [B, U] for resample weights [B, N] (exact integer sums)."""
        return torch.sparse.mm(self.matrix, weights.T).T


class ResampledTransitionMetrics:
    """Bootstrap statistic of the transition metrics: resample weights ``[B, N]`` -> ``{key: Tensor[B]}``.

    A resample is a multinomial count vector w over the N sequences; its transition counts are
    sum_n w_n c_n(i, j).  They are one sparse product of the per-sequence pair counts (a [U, N]
    matrix over the U distinct observed pairs) with the weights, and the metrics are evaluated on
    the distinct observed pairs (:func:`transition_metrics_from_pairs`), so each resample costs
    O(N T) and no resampled data is materialised.

    Args:
        codes: per-sequence transition codes, int64 ``[N, T - 1]`` (:func:`transition_codes`).
        chain: the reference chain.
    """

    def __init__(self, codes: torch.Tensor, chain: MarkovChain) -> None:
        if codes.ndim != 2 or codes.shape[0] == 0 or codes.shape[1] == 0:
            raise ValueError(f"codes must have shape [N, T - 1] with N, T - 1 >= 1, got {tuple(codes.shape)}")
        self.chain = chain
        self.num_items = codes.shape[0]
        self.per_sequence = PairCounts(codes)
        self.pairs = self.per_sequence.pairs

    def __call__(self, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        counts = self.per_sequence.counts(weights)  # [B, U], exact integer sums
        values = [transition_metrics_from_pairs(self.pairs, counts[r], self.chain) for r in range(counts.shape[0])]
        return {k: torch.tensor([v[k] for v in values], dtype=torch.float64) for k in METRIC_KEYS}

