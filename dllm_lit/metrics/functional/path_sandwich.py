r"""The importance-weighted sandwich on the sequence KL, its one-sided confidence bounds, and the certified bracket.

Per sequence n the sampler reports log q estimates L_K(x_n) <= log q(x_n) <= U_K(x_n) in expectation
(:mod:`dllm_lit.samplers.path_sandwich`); with log p(x_n) exact,

    seq_kl_iw_lower = mean_n (L_K(x_n) - log p(x_n)) / T,    E <= KL(q || p) / T
    seq_kl_iw_upper = mean_n (U_K(x_n) - log p(x_n)) / T,    E >= KL(q || p) / T

(at K = 1 the upper one is the path-level ``seq_kl_upper``).  Their confidence bounds (:func:`sandwich_intervals`)
form one bracket: the low end of the lower estimate's and the high end of the upper one's two-sided skewness-corrected
t interval at the level c, one-sided at (1 + c) / 2 each, so that the truth lies in [low end, high end] with
probability >= c (Bonferroni), and at K = 1 the upper end's is ``seq_kl_upper``'s interval.  One-sided at c each (the
former rule) the bounds cover at about their nominal level, so a 200-seed audit can read 92.0% (V = 3, one step,
seeds 0-199) by binomial noise alone: at one step (one path, exact log q) they covered 94.3-95.7% over 2000 seeds on
V = 3, 256 and 1024, and 96.9-97.8% at (1 + c) / 2 (``benchmarks/seq_kl_audit.py --groups one_step_level --seeds
2000``).

**When there is no interval** (:func:`interval_refusal`).  A confidence interval for a mean needs either a known range
of the values or enough of them (Bahadur and Savage 1956: no interval has guaranteed coverage for every law of
unbounded support), and the log-ratios have no useful range (69 nats per floored transition).  So:

* fewer than :data:`MIN_INTERVAL_N` sequences: no interval (the Student t with Hall's correction under-covered at
  N = 8: 84-89% in 4 of 9 small cases, ``benchmarks/seq_kl_audit.py``);
* every value equal: no interval; a zero sample variance is not certainty (the sharp chain's rare sequences carry
  the rest of the mean: AR(3) on a sharp V = 3 kernel, N = 64, T = 6 read (0.087515, 0.087515) against the truth
  0.085863).

**The certified bracket.**  ``seq_kl_bracket_lo`` is the larger of the lower confidence bounds of the cross-fitted DV
bound (:mod:`dllm_lit.metrics.functional.dv_bound`) and of ``seq_kl_iw_lower``, each at level 1 - alpha / m for the
m lower bounds available (Bonferroni: the maximum is below the KL with probability >= 1 - alpha), and at least 0;
``seq_kl_bracket_hi`` the smaller of the upper confidence bounds of ``seq_kl_upper`` and ``seq_kl_iw_upper`` in the
same way.  A sampler whose law is declared exact (``exact_law``) has the bracket [0, 0].
"""
from __future__ import annotations

import torch

from dllm_lit.metrics.functional.dv_bound import DVBound
from dllm_lit.metrics.functional.mean_interval import skew_corrected_t_interval

__all__ = ["MIN_INTERVAL_N", "certified_bracket", "interval_refusal", "mean_bounds", "mean_per_token",
           "sandwich_intervals"]

#: the fewest sequences for which the log-ratio means get an interval (at 16 and below the audited coverage of the
#: skewness-corrected t fell to 84-89%; at 32 it is the nominal one, ``benchmarks/seq_kl_audit.py``)
MIN_INTERVAL_N = 32

#: the reasons :func:`interval_refusal` gives (one line each, for the run metadata)
REFUSALS = {
    "few": f"fewer than {MIN_INTERVAL_N} sequences: no interval with the stated coverage (Student t under-covers there)",
    "flat": "every sequence has the same log-ratio: a zero sample variance is not certainty (no interval)",
    "missing": "the sampler reports no log q (or no sandwich) for some sequence",
}


def interval_refusal(values: torch.Tensor | None) -> str | None:
    """Why the mean of ``values`` (one per sequence) gets no interval (a key of :data:`REFUSALS`), or None."""
    if values is None or not values.numel() or not bool(torch.isfinite(values).all()):
        return "missing"
    if values.numel() < MIN_INTERVAL_N:
        return "few"
    if bool((values == values[0]).all()):
        return "flat"
    return None


def mean_per_token(values: torch.Tensor | None, T: int) -> float | None:
    """mean(values) / T, or None when a value is missing or not finite."""
    if values is None or not values.numel() or not bool(torch.isfinite(values).all()):
        return None
    return float(values.to(torch.float64).sum() / values.numel()) / T


def mean_bounds(values: torch.Tensor | None, T: int, confidence: float) -> tuple[float, float] | None:
    """One-sided (lower, upper) confidence bounds at level ``confidence`` each on mean(values) / T: the two-sided
    skewness-corrected t interval (:mod:`~dllm_lit.metrics.functional.mean_interval`) at level 2 confidence - 1;
    None when :func:`interval_refusal` refuses."""
    if interval_refusal(values) is not None:
        return None
    v = values.to(torch.float64) / T
    return skew_corrected_t_interval(v, 2.0 * confidence - 1.0, point=float(v.mean()))


def sandwich_intervals(lower: torch.Tensor | None, upper: torch.Tensor | None, T: int,
                       confidence: float) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
    """The sandwich's intervals at level ``confidence``: the two-sided skewness-corrected t interval of each
    estimate's mean / T (:func:`mean_bounds` at (1 + confidence) / 2), so that the low end of the lower one's and
    the high end of the upper one's bracket the truth together with probability >= ``confidence`` (module
    docstring); None for an estimate :func:`interval_refusal` refuses."""
    one_sided = (1.0 + confidence) / 2.0
    return mean_bounds(lower, T, one_sided), mean_bounds(upper, T, one_sided)


def certified_bracket(dv: DVBound | None, u_path: torch.Tensor | None, u_lower: torch.Tensor | None,
                      u_upper: torch.Tensor | None, T: int, confidence: float,
                      exact: bool = False) -> tuple[float | None, float | None]:
    """(lo, hi): certified one-sided bounds at level ``confidence`` on KL(q || p) / T (module docstring) from the DV
    bound, the path-level log-ratios u = log q(x | o*) - log p(x) and the sandwich's per-sequence log-ratios
    (None: not available); ``exact``: [0, 0].  An end with no bound available is None."""
    if exact:
        return 0.0, 0.0
    lows = [u_lower] if interval_refusal(u_lower) is None else []
    highs = [u for u in (u_path, u_upper) if interval_refusal(u) is None]
    m_lo = len(lows) + (dv is not None and dv.df >= 1)
    lo_vals = [mean_bounds(u, T, 1.0 - (1.0 - confidence) / m_lo)[0] for u in lows]
    if dv is not None and dv.df >= 1:
        lo_vals.append(dv.interval(1.0 - (1.0 - confidence) / m_lo)[0])
    hi_vals = [mean_bounds(u, T, 1.0 - (1.0 - confidence) / len(highs))[1] for u in highs]
    return (max(0.0, *lo_vals) if lo_vals else None), (min(hi_vals) if hi_vals else None)
