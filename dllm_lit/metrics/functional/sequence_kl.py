r"""Floor-corrected and bias-corrected transition KL, and a bracket on the sequence-level KL.

Notation as in :mod:`dllm_lit.metrics.functional.transition`: transition counts c(i, j) over
M = N (T - 1) transitions, n_i = sum_j c(i, j), m_i = #{j : c(i, j) > 0}, q = P'.

* **Floor correction.**  ``kl_excess = kl(row) - kl(reference row)``: the plug-in KL of the row
  minus the plug-in KL of exact chain samples at the same N and T (the run's reference row).  The
  plug-in bias, to first order sum_i (k_i - 1) / (2M), is nearly the same for both, so the
  difference estimates the population transition KL of the sampler.
* **Miller-Madow.**  The entropy rate of the transition metrics is
  H = sum_i (n_i / M) H(p_hat(. | i)).  Each conditional entropy is corrected by (m_i - 1) / (2 n_i)
  (Miller 1955), and with the same empirical weights n_i / M:

      entropy_mm = entropy + sum_{i : n_i > 0} (m_i - 1) / (2M) = entropy + (U - R) / (2M),

  with U the number of distinct observed pairs and R the number of distinct observed source
  states.  The cross-entropy term nll = -sum c_ij log q(j | i) / M is linear in the counts (q is
  known), so it needs no correction: ``kl_mm = nll - entropy_mm = kl - (U - R) / (2M)``.
* **Chao-Shen.**  ``kl_cs = nll - H_cs``, H_cs the per-row Chao-Shen coverage-adjusted entropy
  (:mod:`dllm_lit.metrics.functional.entropy`), which also accounts for unseen successors: the
  point estimate of the population transition KL with the smallest bias measured at V >= 256
  (docs/metrics.md).
* **Sequence-level KL, lower end.**  ``seq_kl_lower`` is the cross-fitted Donsker-Varadhan bound
  of :mod:`dllm_lit.metrics.functional.dv_bound`: an unbiased estimate of a valid lower bound on
  KL(p_s || p) / T, with no plug-in bias, whose one-sided lower confidence bound is its interval's
  low end.  It needs no reference row.
* **Transition KL, floor-corrected (an estimate, not a bound).**  For any p_s, the chain rule and
  joint convexity of KL give KL(p_s || p) >= (T - 1) KL_trans(p_s), KL_trans the *population*
  transition KL; ``trans_kl_corrected = (T - 1) / T * kl_excess`` plugs the floor-corrected
  estimate into it.  ``kl_excess`` keeps a first-order bias sum_i (k_i^row - k_i^ref) / (2M), so
  this column can lie above the sequence KL (or below 0) at small N (T - 1) / V^2 (docs/metrics.md).
* **Sequence-level KL, upper end.**  For a sampler whose unmasking order o does not depend on the
  tokens drawn, the law of a sample given its order is p_s(x | o) = prod_i q_i(x_i), q_i the law
  the token at i was drawn from (an argmax choice: 1), so with log q = sum_i log q_i(x_i) (reported
  by the sampler) u = log q - log p(x) has E[u | o] = KL(p_s(. | o) || p), and by convexity

      E[u] / T = E_o KL(p_s(. | o) || p) / T >= KL(p_s || p) / T =: seq_kl_upper's target bound.

  ``seq_kl_upper = mean(u) / T`` is an unbiased estimate of that upper bound.  It reads exactly 0 with interval
  [0, 0] when the sampler declares its law exact (``exact_law``: one position per step from the exact oracle's
  conditionals, exact chain sampling), whatever the float32 rounding of u; no tolerance on u decides it.
  Otherwise its interval (:func:`upper_interval`) is the Student t interval for the mean of u / T with Hall's
  skewness correction (:mod:`dllm_lit.metrics.functional.mean_interval`): u is a skewed sum of few terms at small
  T, where the percentile bootstrap under-covers (93.6% at V = 3, N = 64, T = 5 over 2000 seeds; docs/metrics.md);
  none below :data:`~dllm_lit.metrics.functional.path_sandwich.MIN_INTERVAL_N` sequences or when every u is equal
  (:func:`~dllm_lit.metrics.functional.path_sandwich.interval_refusal`).
* **The importance-weighted sandwich and the certified bracket** (``seq_kl_iw_lower``, ``seq_kl_iw_upper``,
  ``seq_kl_bracket_lo``, ``seq_kl_bracket_hi``): :mod:`dllm_lit.metrics.functional.path_sandwich`.

log p(x) floors every probability at 1e-30 (as ``nll`` and ``kl`` do), so an impossible sequence
counts about 69 nats per impossible transition instead of an infinite value.
"""
from __future__ import annotations

import torch

from dllm_lit.markov.chain import MarkovChain
from dllm_lit.metrics.functional.dv_bound import DVBound, dv_lower_bound
from dllm_lit.metrics.functional.entropy import entropy_from_pairs
from dllm_lit.metrics.functional.mean_interval import skew_corrected_t_interval
from dllm_lit.metrics.functional.path_sandwich import certified_bracket, interval_refusal, mean_per_token
from dllm_lit.metrics.functional.transition import PairCounts, transition_metrics_from_pairs

__all__ = [
    "LOG_FLOOR",
    "SEQUENCE_KL_KEYS",
    "ResampledSequenceKL",
    "miller_madow_bias",
    "sequence_kl_values",
    "sequence_log_prob",
    "upper_interval",
]

SEQUENCE_KL_KEYS = ("kl_excess", "entropy_mm", "kl_mm", "seq_kl_lower", "seq_kl_upper", "trans_kl_corrected", "kl_cs",
                    "seq_kl_iw_lower", "seq_kl_iw_upper", "seq_kl_bracket_lo", "seq_kl_bracket_hi")

#: probability floor in log p(x) (the transition metrics' clamp)
LOG_FLOOR = 1e-30


def sequence_log_prob(chain: MarkovChain, x: torch.Tensor) -> torch.Tensor:
    """log p(x) of sequences x [N, T] under the chain, probabilities floored at 1e-30: float64 [N]."""
    x = x.cpu().long()
    lp = chain.stationary.clamp_min(LOG_FLOOR).log()[x[:, 0]]
    if x.shape[1] > 1:
        lp = lp + chain.kernel[x[:, :-1], x[:, 1:]].clamp_min(LOG_FLOOR).log().sum(1)
    return lp


def miller_madow_bias(pairs: torch.Tensor, counts: torch.Tensor, vocab_size: int) -> float:
    """(U - R) / (2M): the Miller-Madow correction of the transition entropy rate, from observed pair
    codes i * V + j and their (possibly fractional) counts; pairs with zero count are ignored."""
    c = counts.to(torch.float64)
    keep = c > 0
    observed = pairs[keep].long()
    M = float(c[keep].sum())
    rows = torch.unique(observed // vocab_size).numel()
    return (observed.numel() - rows) / (2.0 * M)


def _corrected(pairs: torch.Tensor, counts: torch.Tensor, chain: MarkovChain) -> tuple[float, float, float, float]:
    """(kl, entropy_mm, kl_mm, kl_cs) of one set of weighted pair counts."""
    m = transition_metrics_from_pairs(pairs, counts, chain)
    bias = miller_madow_bias(pairs, counts, chain.vocab_size)
    return m["kl"], m["entropy"] + bias, m["kl"] - bias, m["nll"] - entropy_from_pairs(pairs, counts, chain.vocab_size, "cs")


def _upper_value(u: torch.Tensor, T: int, exact: bool) -> float | None:
    return 0.0 if exact else mean_per_token(u, T)


def upper_interval(u: torch.Tensor | None, T: int, confidence: float, exact: bool = False) -> tuple[float, float] | None:
    """``seq_kl_upper``'s interval at level ``confidence`` from u = log q - log p [N] (index order): [0, 0] for a
    declared exact law, else Hall's skewness-corrected t interval of mean(u / T), containing the estimate; None
    without log q (u None, empty or containing NaN), below MIN_INTERVAL_N sequences or when every u is equal."""
    if exact and u is not None and u.numel():
        return 0.0, 0.0
    if interval_refusal(u) is not None:
        return None
    return skew_corrected_t_interval(u.to(torch.float64) / T, confidence, point=_upper_value(u, T, False))


def sequence_kl_values(codes: torch.Tensor, u: torch.Tensor | None, chain: MarkovChain,
                       reference_codes: torch.Tensor | None, dv: DVBound | None = None,
                       first_order: bool = True, sandwich: tuple[torch.Tensor, torch.Tensor] | None = None,
                       exact: bool = False, confidence: float = 0.95) -> dict[str, float | None]:
    """The values of :data:`SEQUENCE_KL_KEYS` from per-sequence transition codes [N, T - 1] in index
    order, per-sequence u = log q - log p [N] (None or containing NaN: the sampler reports no log q)
    and the reference row's codes (None: no reference row); ``dv``: the DV bound if already
    computed for these codes; ``sandwich``: the sandwich's per-sequence (lower, upper) log-ratios
    (:mod:`~dllm_lit.metrics.functional.path_sandwich`); ``exact``: the sampler declares its law exact;
    ``confidence``: the level of the certified bracket.  Unavailable values are None; ``seq_kl_lower`` and
    ``trans_kl_corrected`` need a first-order world (the bigram-additive DV bound and the chain-rule estimate hold
    only there)."""
    pairs, counts = torch.unique(codes.reshape(-1), return_counts=True)
    kl, entropy_mm, kl_mm, kl_cs = _corrected(pairs, counts, chain)
    T = codes.shape[1] + 1
    if first_order and dv is None:
        dv = dv_lower_bound(codes, chain)
    out: dict[str, float | None] = {"kl_excess": None, "entropy_mm": entropy_mm, "kl_mm": kl_mm,
                                    "seq_kl_lower": dv.value if first_order else None, "seq_kl_upper": None,
                                    "trans_kl_corrected": None,
                                    "kl_cs": kl_cs}
    if reference_codes is not None:
        rp, rc = torch.unique(reference_codes.reshape(-1), return_counts=True)
        excess = kl - transition_metrics_from_pairs(rp, rc, chain)["kl"]
        out["kl_excess"] = excess
        out["trans_kl_corrected"] = (T - 1) / T * excess if first_order else None
    has_u = u is not None and u.numel() and bool(torch.isfinite(u).all())
    if has_u:
        out["seq_kl_upper"] = _upper_value(u, T, exact)
    lo_u, hi_u = sandwich if sandwich is not None else (None, None)
    out["seq_kl_iw_lower"] = 0.0 if exact and has_u else mean_per_token(lo_u, T)
    out["seq_kl_iw_upper"] = 0.0 if exact and has_u else mean_per_token(hi_u, T)
    lo, hi = certified_bracket(dv if first_order else None, u if has_u else None, lo_u, hi_u, T, confidence,
                               exact=exact and bool(has_u))
    out["seq_kl_bracket_lo"], out["seq_kl_bracket_hi"] = lo, hi
    return out


class ResampledSequenceKL:
    """Bootstrap statistic of the values but ``seq_kl_lower`` and ``seq_kl_upper`` (whose intervals are not
    bootstrapped: :func:`upper_interval`, :mod:`dllm_lit.metrics.functional.dv_bound`): resample weights
    ``[B, N]`` -> ``{key: Tensor[B]}``.

    The sampler row and the reference row are resampled with the *same* weights (paired by sequence
    index: both rows hold sequences 0 .. N-1 of the same seed), so the interval of ``kl_excess`` is
    that of the difference.  Keys that are unavailable (no reference row, no log q) are left out.
    """

    def __init__(self, codes: torch.Tensor, chain: MarkovChain, reference_codes: torch.Tensor | None,
                 first_order: bool = True) -> None:
        self.chain, self.first_order = chain, first_order
        self.T = codes.shape[1] + 1
        self.own = PairCounts(codes)
        self.ref = PairCounts(reference_codes) if reference_codes is not None else None

    def __call__(self, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        own = self.own.counts(weights)
        vals = [_corrected(self.own.pairs, own[r], self.chain) for r in range(weights.shape[0])]
        out = {"entropy_mm": torch.tensor([v[1] for v in vals], dtype=torch.float64),
               "kl_mm": torch.tensor([v[2] for v in vals], dtype=torch.float64),
               "kl_cs": torch.tensor([v[3] for v in vals], dtype=torch.float64)}
        if self.ref is not None:
            ref = self.ref.counts(weights)
            kl_ref = [transition_metrics_from_pairs(self.ref.pairs, ref[r], self.chain)["kl"] for r in range(weights.shape[0])]
            excess = torch.tensor([v[0] - k for v, k in zip(vals, kl_ref)], dtype=torch.float64)
            out["kl_excess"] = excess
            if self.first_order:
                out["trans_kl_corrected"] = (self.T - 1) / self.T * excess
        return out
