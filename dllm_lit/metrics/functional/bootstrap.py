r"""The one interval path of every metric: a bootstrap over sequences through resample *weights*.

A bootstrap resample of ``N`` items drawn with replacement is fully described by its count vector
:math:`w \sim \mathrm{Multinomial}(N; 1/N, \dots, 1/N)` (:math:`w_i` = how often item ``i`` was
drawn).  Any statistic that is a function of per-item sufficient statistics can then be evaluated
on the resample without materialising it, e.g. a ratio of sums

.. math::
   \hat\theta^{*}_b = \frac{\sum_i w_{bi}\, a_i}{\sum_i w_{bi}\, b_i} ,

which covers n-gram diversity and GenPPL (via its mean NLL); the transition metrics evaluate their
functional on the weighted pair counts :math:`\sum_i w_{bi} c_i(j, k)`.

From the ``B`` resampled values an :class:`IntervalPolicy` makes the interval at level
:math:`1-\alpha` (:math:`Q` = empirical quantile with linear interpolation):

* ``"percentile"`` (Efron & Tibshirani 1993, ch. 13):
  :math:`[Q_{\alpha/2}(\hat\theta^*), Q_{1-\alpha/2}(\hat\theta^*)]`.  It is transformation
  equivariant: for a monotone increasing ``g`` (the policy's ``transform``) the interval of
  :math:`g(\theta)` is ``g`` of the endpoints (GenPPL = exp(mean NLL)).
* ``"basic"`` (reverse percentile; Davison & Hinkley 1997, Sec. 5.2):
  :math:`[2\hat\theta - Q_{1-\alpha/2},\; 2\hat\theta - Q_{\alpha/2}]`, optionally clipped at the
  statistic's lower bound.  It cancels, to first order, a bias that resampling repeats (plug-in
  functionals of an empirical kernel, whose bias grows when a resample duplicates sequences).
* ``"centred"`` (percentile interval re-centred at the estimate):
  :math:`[\hat\theta + Q_{\alpha/2} - Q_{1/2},\; \hat\theta + Q_{1-\alpha/2} - Q_{1/2}]`, optionally
  clipped at the statistic's lower bound.  It keeps the spread of the bootstrap distribution and
  drops its shift: for a plug-in functional whose bias a resample *repeats* (duplicated sequences
  look like fewer distinct transitions), the percentile interval is shifted away from the estimate
  and the basic interval shifted to the other side (it can exclude the estimate when the bias
  dominates, e.g. the KL of exact samples).  The centred interval always contains the estimate and
  describes the estimator's sampling spread around its own expectation at this ``N`` and ``T`` -
  what a comparison of two rows at equal ``N`` and ``T`` needs; the bias itself is reported by the
  floor-corrected columns (``docs/metrics.md``).
* ``"lower_confidence"``: not a bootstrap: the metric computes the interval itself (its
  ``own_intervals(confidence)``), a one-sided lower confidence bound at level :math:`1-\alpha` as
  the low end (``seq_kl_lower``, whose sequences are split rather than resampled).
* ``"skew_corrected_t"``: not a bootstrap either: the metric computes it (``own_intervals``), a
  Student t interval for a mean with Hall's skewness correction
  (:mod:`dllm_lit.metrics.functional.mean_interval`; ``seq_kl_upper``, a mean over sequences of a
  skewed log-ratio, whose percentile interval under-covers at small N).
* ``"clopper_pearson"``: not a bootstrap: the exact binomial interval of a proportion of sequences (the metric
  computes it, ``own_intervals``; ``task_accuracy``), coverage at least the level by construction.
* ``None``: no interval, with the reason stated by the policy.

A metric with several values may give one policy per value (a mapping ``{key: IntervalPolicy}``);
the resamples are drawn once and shared by every value.

Resamples are vectorised: the statistic receives a ``[B_chunk, N]`` float64 matrix of counts, with
``B_chunk * N`` bounded by ``max_chunk_elements`` (chunking over resamples otherwise).  Results are
deterministic given ``seed`` (a private CPU ``torch.Generator``; the global RNG is untouched) and,
because the generator draws sequentially, independent of the chunk size (tested).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Union

import torch
from torch import Tensor

from dllm_lit import checks

__all__ = [
    "PERCENTILE",
    "Interval",
    "IntervalPolicy",
    "Policies",
    "policy_enabled",
    "bootstrap_ci",
    "bootstrap_distribution",
    "bootstrap_interval",
    "ratio_ci",
    "RatioOfSums",
    "resample_weights",
]

DEFAULT_CHUNK_ELEMENTS = 1 << 22

Interval = tuple[float, float]
#: a statistic maps resample counts ``[B, N]`` to one value per resample, ``[B]``, or to several named ones
Statistic = Callable[[Tensor], Union[Tensor, Mapping[str, Tensor]]]

_METHODS = ("percentile", "basic", "centred", "lower_confidence", "skew_corrected_t", "clopper_pearson")
#: methods whose interval the metric computes itself (``own_intervals(confidence)``), not from resamples
OWN_METHODS = ("lower_confidence", "skew_corrected_t", "clopper_pearson")


@dataclass(frozen=True)
class IntervalPolicy:
    """How a metric turns its bootstrap distribution into an interval (see the module docstring).

    Attributes:
        method: ``"percentile"``, ``"basic"``, ``"centred"``, ``"lower_confidence"`` or ``"skew_corrected_t"``
            (the metric's own, see the module docstring) or ``None`` (the metric has no interval).
        reason: why there is no interval (required when ``method`` is None).
        lower_bound: ``"basic"`` / ``"centred"`` only: endpoints are clipped at this lower bound of the statistic.
        transform: ``"percentile"`` only: a monotone increasing map applied to both endpoints.
    """

    method: str | None
    reason: str | None = None
    lower_bound: float | None = None
    transform: Callable[[float], float] | None = None

    def __post_init__(self) -> None:
        if self.method is None:
            if not self.reason:
                raise ValueError("an IntervalPolicy without a method must state the reason")
            return
        checks.choice("method", self.method, _METHODS)
        if self.lower_bound is not None and self.method not in ("basic", "centred"):
            raise ValueError("lower_bound applies to basic and centred intervals only")
        if self.transform is not None and self.method != "percentile":
            raise ValueError("transform applies to percentile intervals only (they are transformation equivariant)")

    @property
    def enabled(self) -> bool:
        """Whether the metric has an interval at all."""
        return self.method is not None

    @property
    def own(self) -> bool:
        """Whether the metric computes the interval itself (:data:`OWN_METHODS`), not from resamples."""
        return self.method in OWN_METHODS

    @property
    def needs_point(self) -> bool:
        """Whether the endpoints need the point estimate (basic, centred)."""
        return self.method in ("basic", "centred")

    def describe(self) -> dict[str, object]:
        """``{"method": ..., "lower_bound": ...}`` or ``{"method": None, "reason": ...}`` (for run outputs)."""
        if self.method is None:
            return {"method": None, "reason": self.reason}
        out: dict[str, object] = {"method": self.method}
        if self.reason is not None:
            out["reason"] = self.reason
        if self.lower_bound is not None:
            out["lower_bound"] = self.lower_bound
        if self.transform is not None:
            out["transform"] = getattr(self.transform, "__name__", repr(self.transform))
        return out

    def endpoints(self, boot: Tensor, point: float | None, confidence: float) -> Interval:
        """The interval from ``B`` resampled values (float64 ``[B]``) and the point estimate."""
        alpha = 1.0 - float(confidence)
        q = torch.tensor([alpha / 2.0, 1.0 - alpha / 2.0], dtype=torch.float64)
        q_lo, q_hi = torch.quantile(boot, q).tolist()
        if self.method == "percentile":
            lower, upper = float(q_lo), float(q_hi)
            if self.transform is not None:
                lower, upper = float(self.transform(lower)), float(self.transform(upper))
                if not (math.isfinite(lower) and math.isfinite(upper)) or lower > upper:
                    raise ValueError("`transform` must be a finite, monotone increasing function")
            return lower, upper
        if self.method in ("basic", "centred"):
            if point is None:
                raise ValueError(f"a {self.method} interval needs the point estimate")
            if self.method == "basic":
                lower, upper = 2 * point - q_hi, 2 * point - q_lo
            else:
                median = float(torch.quantile(boot, 0.5))
                lower, upper = point + (q_lo - median), point + (q_hi - median)
                lower, upper = min(lower, point), max(upper, point)  # exact containment despite rounding
            if self.lower_bound is not None:
                lower, upper = max(self.lower_bound, lower), max(self.lower_bound, upper)
            return lower, upper
        if self.own:
            raise ValueError(f"a {self.method} interval is computed by the metric (own_intervals), not from resamples")
        raise ValueError(f"no interval: {self.reason}")


#: percentile intervals of a statistic without a transform
PERCENTILE = IntervalPolicy("percentile")

#: one policy for every value of a metric, or one per named value
Policies = Union[IntervalPolicy, Mapping[str, IntervalPolicy]]


def policy_enabled(policy: Policies) -> bool:
    """Whether any value under ``policy`` has an interval."""
    if isinstance(policy, Mapping):
        return any(p.enabled for p in policy.values())
    return policy.enabled


def _check_common(num_items: int, num_resamples: int, confidence: float, seed: int) -> None:
    checks.integer("`num_items`", num_items)
    checks.integer("`num_resamples`", num_resamples, minimum=2)
    checks.real("`confidence`", confidence, 0.0, 1.0, low_open=True, high_open=True)
    checks.integer("`seed`", seed, minimum=0)


def resample_weights(num_items: int, num_resamples: int, generator: torch.Generator) -> Tensor:
    """Draw ``num_resamples`` multinomial count vectors of ``num_items`` uniform draws each.

    Returns a float64 ``Tensor[num_resamples, num_items]`` whose rows sum to ``num_items``.
    """
    idx = torch.randint(0, num_items, (num_resamples, num_items), generator=generator)
    weights = torch.zeros(num_resamples, num_items, dtype=torch.float64)
    weights.scatter_add_(1, idx, torch.ones(num_resamples, num_items, dtype=torch.float64))
    return weights


def _evaluate(statistic: Statistic, weights: Tensor, vectorized: bool) -> dict[str | None, Tensor]:
    """``statistic`` on a ``[size, N]`` block of weights as ``{name: float64 Tensor[size]}`` (name None if unnamed)."""
    size = weights.shape[0]
    if vectorized:
        out = statistic(weights)
    else:
        rows = [statistic(w) for w in weights]
        if isinstance(rows[0], Mapping):
            out = {k: torch.stack([torch.as_tensor(r[k]).reshape(()) for r in rows]) for k in rows[0]}
        else:
            out = torch.stack([torch.as_tensor(r).reshape(()) for r in rows])
    named = dict(out) if isinstance(out, Mapping) else {None: out}
    cols = {}
    for name, value in named.items():
        value = torch.as_tensor(value)
        if value.shape != (size,):
            raise ValueError(
                f"vectorized `statistic` must map weights of shape {tuple(weights.shape)} to shape ({size},), got "
                f"{tuple(value.shape)}{'' if name is None else f' for {name!r}'}; pass vectorized=False for a "
                "per-resample statistic"
            )
        cols[name] = value.detach().to(device="cpu", dtype=torch.float64)
    return cols


def bootstrap_distribution(
    statistic: Statistic,
    num_items: int,
    num_resamples: int,
    seed: int,
    *,
    vectorized: bool = True,
    max_chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
) -> dict[str | None, Tensor]:
    """The ``num_resamples`` resampled values of ``statistic``: ``{name: float64 Tensor[B]}``.

    ``name`` is None for a statistic returning one tensor.  With ``vectorized=False`` the statistic
    receives one ``Tensor[num_items]`` per resample and returns a scalar (or a dict of scalars).

    Raises:
        ValueError: a wrongly shaped statistic output, or non-finite values (e.g. a zero
            denominator in some resample).
    """
    checks.integer("`max_chunk_elements`", max_chunk_elements)
    generator = torch.Generator().manual_seed(seed)
    chunk = max(1, max_chunk_elements // num_items)
    parts: list[dict[str | None, Tensor]] = []
    done = 0
    while done < num_resamples:
        size = min(chunk, num_resamples - done)
        parts.append(_evaluate(statistic, resample_weights(num_items, size, generator), vectorized))
        done += size
    boot = {name: torch.cat([p[name] for p in parts]) for name in parts[0]}
    bad = sum(int((~torch.isfinite(v)).sum()) for v in boot.values())
    if bad:
        raise ValueError(f"`statistic` returned non-finite values for {bad} of {num_resamples} bootstrap resamples")
    return boot


def bootstrap_interval(
    statistic: Statistic,
    num_items: int,
    policy: Policies,
    num_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    *,
    vectorized: bool = True,
    max_chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
) -> Interval | dict[str, Interval] | None:
    r"""Bootstrap interval(s) of ``statistic`` over ``num_items`` resampled sequences under ``policy``.

    Args:
        statistic: maps resample counts to the statistic (see :func:`bootstrap_distribution`); for
            the point estimate (basic intervals) it is called with ``torch.ones(1, num_items)``.
        num_items: number of resampled units (sequences, texts), ``>= 1``.
        policy: how the distribution becomes an interval (``method=None``: returns None), or one
            policy per named value (a value whose policy has no method gets None).
        num_resamples: ``B``, the number of bootstrap resamples (``>= 2``).
        confidence: coverage level :math:`1-\alpha`, in ``(0, 1)``.
        seed: seed of the private generator (results are deterministic given it).
        vectorized, max_chunk_elements: as in :func:`bootstrap_distribution`.

    Returns:
        ``(lower, upper)`` for a statistic returning one tensor, ``{name: (lower, upper)}`` for a
        statistic returning named tensors, None when the policy has no method.
    """
    if not policy_enabled(policy):
        return None
    _check_common(num_items, num_resamples, confidence, seed)
    boot = bootstrap_distribution(statistic, num_items, num_resamples, seed, vectorized=vectorized,
                                  max_chunk_elements=max_chunk_elements)
    if isinstance(policy, Mapping):
        missing = set(boot) - set(policy)
        if missing:
            raise ValueError(f"no interval policy for value(s) {sorted(missing, key=str)}")
        policies = {k: policy[k] for k in boot}  # type: ignore[index]
    else:
        policies = dict.fromkeys(boot, policy)
    points: dict[str | None, float | None] = dict.fromkeys(boot)
    if any(p.needs_point for p in policies.values()):  # the plug-in estimate: every sequence once
        ones = torch.ones(1, num_items, dtype=torch.float64)
        points = {k: float(v[0]) for k, v in _evaluate(statistic, ones, vectorized).items()}
    intervals = {k: (policies[k].endpoints(v, points[k], confidence) if policies[k].enabled else None)
                 for k, v in boot.items()}
    return intervals[None] if None in intervals else intervals  # type: ignore[return-value]


def bootstrap_ci(
    statistic: Callable[[Tensor], Tensor],
    num_items: int,
    num_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    *,
    vectorized: bool = True,
    max_chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
) -> Interval:
    """Percentile interval of a statistic of resample weights (:func:`bootstrap_interval` with
    :data:`PERCENTILE`).  With ``vectorized=True`` the statistic maps ``[B, N]`` to ``[B]``."""
    return bootstrap_interval(statistic, num_items, PERCENTILE, num_resamples, confidence, seed,  # type: ignore[return-value]
                              vectorized=vectorized, max_chunk_elements=max_chunk_elements)


class RatioOfSums:
    r"""The statistic :math:`w \mapsto \sum_i w_i a_i / \sum_i w_i b_i` of resample weights ``[B, N]``.

    Validates the per-item :math:`a_i` (finite) and :math:`b_i` (finite, non-negative, positive total).
    """

    def __init__(self, numerators: Tensor, denominators: Tensor) -> None:
        a = torch.as_tensor(numerators).detach().to("cpu", torch.float64).reshape(-1)
        b = torch.as_tensor(denominators).detach().to("cpu", torch.float64).reshape(-1)
        if a.numel() == 0:
            raise ValueError("`numerators` is empty; pass at least one item")
        if a.shape != b.shape:
            raise ValueError(
                f"`numerators` and `denominators` must have the same length, got {a.numel()} and {b.numel()}"
            )
        if not bool(torch.isfinite(a).all()) or not bool(torch.isfinite(b).all()):
            raise ValueError("`numerators` and `denominators` must be finite")
        if bool((b < 0).any()) or float(b.sum()) <= 0.0:
            raise ValueError("`denominators` must be non-negative with a positive sum")
        self.a, self.b = a, b
        self.num_items = a.numel()

    def __call__(self, w: Tensor) -> Tensor:
        # elementwise product + sum rather than a BLAS mat-vec: no BLAS thread pool (which stalls
        # on oversubscribed CPUs) and a reduction order fixed by torch, not by the BLAS build
        return (w * self.a).sum(dim=-1) / (w * self.b).sum(dim=-1)


def ratio_ci(
    numerators: Tensor,
    denominators: Tensor,
    num_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    transform: Callable[[float], float] | None = None,
) -> Interval:
    r"""Percentile interval of a ratio of sums :math:`\sum_i a_i / \sum_i b_i` (:class:`RatioOfSums`),
    with an optional monotone increasing ``transform`` of the endpoints (e.g. ``math.exp``)."""
    statistic = RatioOfSums(numerators, denominators)
    policy = IntervalPolicy("percentile", transform=transform)
    return bootstrap_interval(statistic, statistic.num_items, policy, num_resamples, confidence, seed)  # type: ignore[return-value]
