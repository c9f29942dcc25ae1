r"""A confidence interval for a mean from skewed data: Student t with Hall's skewness correction.

For n values with mean m, standard deviation s (n - 1 denominator), se = s / sqrt(n) and sample
skewness g = mean(d^3) / mean(d^2)^{3/2} (d = x - m), the studentised mean t = (m - mu) / se has
mean ~ -g / (2 sqrt n) and skewness ~ -2 g / sqrt n; the monotone map (Hall 1992, "On the removal
of skewness by transformation", J. R. Stat. Soc. B 54, 221-228), with a = g / (3 sqrt n),

    h(t) = t + a t^2 + a^2 t^3 / 3 + g / (6 sqrt n) = ((1 + a t)^3 - 1) / (3 a) + g / (6 sqrt n),

removes both to order 1 / sqrt n, so {mu : |h((m - mu) / se)| <= t_{(1 + c) / 2, n - 1}} is the
interval at level c, with the closed-form inverse h^{-1}(y) = (cbrt(1 + 3 a (y - g / (6 sqrt n))) - 1) / a.
At g = 0 it is the Student t interval; as n grows both tend to the normal interval.  h is
increasing, and h^{-1}(+-z) brackets 0 whenever |g| < 12 sqrt(n) z, which the sample skewness
(<= sqrt n) always satisfies, so the interval contains m; it is also clamped to contain ``point``.
"""
from __future__ import annotations

import math

import torch
from scipy.stats import t as student_t

__all__ = ["skew_corrected_t_interval"]


def _inverse(y: float, g: float, n: int) -> float:
    a, shift = g / (3.0 * math.sqrt(n)), g / (6.0 * math.sqrt(n))
    if a == 0.0:
        return y - shift
    r = 1.0 + 3.0 * a * (y - shift)
    return (math.copysign(abs(r) ** (1.0 / 3.0), r) - 1.0) / a


def skew_corrected_t_interval(values: torch.Tensor, confidence: float,
                              point: float | None = None) -> tuple[float, float]:
    """Two-sided interval at level ``confidence`` for the mean of ``values`` (1-D, finite) by Hall's
    skewness-corrected Student t (module docstring); ``point`` (default: the mean) is inside it.
    Fewer than two values, or no spread: ``(m, m)``."""
    x = torch.as_tensor(values).detach().to("cpu", torch.float64).reshape(-1)
    n = x.numel()
    if n == 0 or not bool(torch.isfinite(x).all()):
        raise ValueError("values must be a non-empty tensor of finite numbers")
    m = float(x.mean())
    point = m if point is None else float(point)
    d = x - m
    m2 = float((d * d).mean())
    if n < 2 or m2 <= 0.0:
        return min(m, point), max(m, point)
    se = math.sqrt(m2 * n / (n - 1)) / math.sqrt(n)
    g = float((d ** 3).mean()) / m2 ** 1.5
    z = float(student_t.ppf((1.0 + confidence) / 2.0, n - 1))
    lower, upper = m - _inverse(z, g, n) * se, m - _inverse(-z, g, n) * se
    return min(lower, point), max(upper, point)
