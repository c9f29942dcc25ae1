"""Transition-level metrics against the known kernel P' (paper Sec. 5, App. D).

With empirical transition counts c(i, j) over all N (T - 1) transitions, M = sum c,
w_i = pi_hat(i) = sum_j c(i, j) / M and p_hat(j | i) = c(i, j) / sum_j' c(i, j'):

    NLL        = -sum_ij (c_ij / M) log q(j|i)                  (q = P', clamped at 1e-30)
    KL         =  sum_i w_i KL(p_hat(.|i) || q(.|i))            (sum over observed edges)
    TV         =  sum_i w_i 1/2 sum_j |p_hat(j|i) - q(j|i)|     (observed terms + unobserved q mass)
    entropy    =  sum_i w_i H(p_hat(.|i))
    other_mass =  sum_{ij : j not in S_i} c_ij / M              (S_i = top-K support of row i)
    support_frac = |{(i, j) : c_ij > 0}| / M                    (type/token ratio)
    unigram_l1 =  sum_i |pi_hat(i) - pi(i)|                     (L1, no 1/2; pi stationary)

These match the authors' ``metrics_full.py`` (paper-reference-code.md Sec. 4).  The state is the
count matrix, summed across processes, so DDP gives exactly the single-process values.
Memory: a dense int64 [V, V] state, 8 V^2 bytes (5.8 KB for V = 27, 134 MB for V = 4096).
"""
from __future__ import annotations

import torch
from torchmetrics import Metric

from dllm_lit.markov.chain import MarkovChain

__all__ = ["TransitionMetrics", "transition_metrics_from_counts", "transition_counts", "METRIC_KEYS"]

METRIC_KEYS = ("nll", "kl", "tv", "entropy", "unigram_l1", "other_mass", "support_frac")


def transition_counts(samples: torch.Tensor, vocab_size: int, weights: torch.Tensor | None = None) -> torch.Tensor:
    """c(i, j) = sum_n weight_n * #{t : x_t = i, x_{t+1} = j} as float64 [V, V] (int64 if unweighted)."""
    x = samples.long()
    codes = (x[:, :-1] * vocab_size + x[:, 1:])
    if weights is None:
        return torch.bincount(codes.reshape(-1), minlength=vocab_size * vocab_size).view(vocab_size, vocab_size)
    w = weights.to(torch.float64)[:, None].expand_as(codes)
    return torch.bincount(codes.reshape(-1), weights=w.reshape(-1), minlength=vocab_size * vocab_size).view(vocab_size, vocab_size)


def transition_metrics_from_counts(counts: torch.Tensor, kernel: torch.Tensor, stationary: torch.Tensor, support: torch.Tensor) -> dict[str, float]:
    """The metrics of the module docstring from a count matrix (float64 arithmetic)."""
    c = counts.to(torch.float64)
    M = c.sum()
    if M <= 0:
        raise ValueError("no transitions were observed (sequences need length >= 2)")
    q = kernel.to(torch.float64).clamp_min(1e-30)
    rows = c.sum(1, keepdim=True)
    w = rows[:, 0] / M
    p_hat = torch.where(rows > 0, c / rows.clamp_min(1.0), torch.zeros_like(c))
    obs = c > 0
    logq = q.log()
    nll = -(c * logq).sum() / M
    log_ratio = torch.where(obs, p_hat.clamp_min(1e-300).log() - logq, torch.zeros_like(c))
    kl = (c * log_ratio).sum() / M
    tv_rows = 0.5 * (p_hat - kernel.to(torch.float64)).abs().sum(1)
    tv = (w * tv_rows).sum()
    ent = -(c * torch.where(obs, p_hat.clamp_min(1e-300).log(), torch.zeros_like(c))).sum() / M
    other = (c * (~support).to(c.dtype)).sum() / M
    support_frac = obs.sum().to(torch.float64) / M
    unigram_l1 = (w - stationary.to(torch.float64)).abs().sum()
    return {
        "nll": nll.item(), "kl": kl.item(), "tv": tv.item(), "entropy": ent.item(),
        "unigram_l1": unigram_l1.item(), "other_mass": other.item(), "support_frac": support_frac.item(),
    }


class TransitionMetrics(Metric):
    """torchmetrics wrapper: ``update(samples[N, T])`` accumulates counts; ``compute()`` returns a dict."""

    full_state_update = False
    higher_is_better = False
    is_differentiable = False

    def __init__(self, chain: MarkovChain, **kwargs) -> None:
        super().__init__(**kwargs)
        self.chain = chain
        V = chain.vocab_size
        self.add_state("counts", default=torch.zeros(V, V, dtype=torch.int64), dist_reduce_fx="sum")

    def update(self, samples: torch.Tensor) -> None:
        if samples.dim() != 2 or samples.shape[1] < 2:
            raise ValueError(f"samples must have shape [N, T] with T >= 2, got {tuple(samples.shape)}")
        x = samples.long()
        V = self.chain.vocab_size
        if x.numel() and (x.min() < 0 or x.max() >= V):
            raise ValueError(f"samples must hold token ids in [0, V={V}) with no MASK left")
        self.counts += transition_counts(x, V).to(self.counts.device)

    def compute(self) -> dict[str, float]:
        ch = self.chain
        return transition_metrics_from_counts(self.counts.cpu(), ch.kernel, ch.stationary, ch.topk_support())
