"""How a metric gets a bootstrap interval: one small protocol and a generic wrapper.

A metric opts in by declaring an :class:`IntervalPolicy` and two methods
(:class:`SequenceBootstrapMixin`):

* ``sequence_statistics()`` -- its per-sequence sufficient statistics, gathered over processes
  (collective), as tensors whose dim 0 runs over sequences, e.g. the number of distinct n-grams
  and of n-gram windows of every sequence;
* ``resampling_statistic(statistics)`` -- a function of resample weights ``[B, N]`` that
  recomputes the metric from those statistics (one value, or one per key, per resample).

The engine (:func:`dllm_lit.metrics.functional.bootstrap.bootstrap_interval`) then draws the
multinomial resample weights and applies the policy; the statistic is exact (no resampled data is
materialised) and cheap (one weighted sum per resample).  A metric that should not have an
interval declares ``IntervalPolicy(None, reason=...)`` and needs neither method.

:class:`SequenceBootstrapper` wraps any such metric for a results table (in the spirit of
torchmetrics' ``BootStrapper``, but exact): it forwards ``update`` and ``compute``, records the
global index of every sequence, and orders the gathered per-sequence statistics by that index
before resampling, so an interval does not depend on how sequences were split over processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.wrappers.abstract import WrapperMetric

from dllm_lit import checks
from dllm_lit.metrics.distributed import EmptyMetricError, TypedCatStateMixin, synced_cat_states
from dllm_lit.metrics.functional.bootstrap import (
    PERCENTILE,
    Interval,
    IntervalPolicy,
    Policies,
    RatioOfSums,
    Statistic,
    bootstrap_ci,
    bootstrap_interval,
    policy_enabled,
    ratio_ci,
    resample_weights,
)

__all__ = [
    "PERCENTILE",
    "Interval",
    "IntervalPolicy",
    "Policies",
    "RatioOfSums",
    "SequenceBootstrapMixin",
    "SequenceBootstrapper",
    "bootstrap_ci",
    "bootstrap_interval",
    "metric_interval",
    "policy_enabled",
    "ratio_ci",
    "resample_weights",
]


class SequenceBootstrapMixin:
    """The interval protocol of a metric (see the module docstring); gives it :meth:`bootstrap_ci`."""

    interval_policy: ClassVar[Policies]

    def sequence_statistics(self) -> dict[str, Tensor]:
        """Per-sequence sufficient statistics over all processes (collective); dim 0 = sequences.

        Metrics whose policy gives an interval must override this (and :meth:`resampling_statistic`).
        """
        raise TypeError(f"{type(self).__name__} declares an interval policy but does not define "
                        "sequence_statistics(); override it or set interval_policy to a policy without interval")

    def resampling_statistic(self, statistics: Mapping[str, Tensor]) -> Statistic:
        """The metric as a function of resample weights ``[B, N]`` over ``statistics``' sequences."""
        raise TypeError(f"{type(self).__name__} declares an interval policy but does not define "
                        "resampling_statistic(); override it or set interval_policy to a policy without interval")

    def bootstrap_ci(
        self, num_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
    ) -> Interval | dict[str, Interval] | None:
        """Bootstrap interval of the metric (under its policy), resampling sequences in the order
        they were seen.  Collective under DDP: call it on every process."""
        return metric_interval(self, num_resamples, confidence, seed)


def metric_interval(
    metric: Any, num_resamples: int, confidence: float, seed: int, order: Tensor | None = None,
    policy: Policies | None = None,
) -> Interval | dict[str, Interval | None] | None:
    """Interval of ``metric`` (a :class:`SequenceBootstrapMixin`) under its ``interval_policy``.

    Args:
        order: optional permutation applied to the sequences of ``sequence_statistics()`` first.
        policy: overrides the metric's ``interval_policy``.

    A key whose policy is the metric's own (``"lower_confidence"``, ``"skew_corrected_t"``) takes its interval
    from ``metric.own_intervals(confidence)`` (None where that gives none).

    Returns:
        ``(low, high)``, ``{key: (low, high)}`` for a metric with several values, or None when the
        policy has no interval.
    """
    policy = policy if policy is not None else _declared_policy(metric)
    if not policy_enabled(policy):
        return None
    statistics = metric.sequence_statistics()
    sizes = {v.shape[0] for v in statistics.values()}
    if len(sizes) != 1:
        raise ValueError(f"{type(metric).__name__}.sequence_statistics() must give one row per sequence, got sizes {sizes}")
    num_items = sizes.pop()
    if num_items == 0:
        raise EmptyMetricError(f"{type(metric).__name__}: no sequence was seen, so there is no interval")
    if order is not None:
        if order.numel() != num_items:
            raise ValueError(f"got {order.numel()} sequence indices for {num_items} sequences")
        statistics = {k: v[order.to(v.device)] for k, v in statistics.items()}
    statistic = metric.resampling_statistic(statistics)
    out = bootstrap_interval(statistic, num_items, policy, num_resamples, confidence, seed)
    own = [k for k, p in policy.items() if p.own] if isinstance(policy, Mapping) else []
    if own:  # intervals the metric computes itself (not from the resamples): added to the bootstrapped ones
        computed = metric.own_intervals(confidence)
        out = {**(out or {}), **{k: computed.get(k) for k in own}}
    return out


def _declared_policy(metric: Any) -> Policies:
    policy = getattr(metric, "interval_policy", None)
    ok = isinstance(policy, IntervalPolicy) or (
        isinstance(policy, Mapping) and policy and all(isinstance(p, IntervalPolicy) for p in policy.values()))
    if not ok:
        raise ValueError(f"{type(metric).__name__} must declare an `interval_policy` (an IntervalPolicy, or one per key)")
    return policy  # type: ignore[return-value]


class SequenceBootstrapper(TypedCatStateMixin, WrapperMetric):
    """Wrap a metric with its bootstrap interval, sequences ordered by their global index.

    ``update(*args, index=LongTensor[n])`` forwards ``args`` to the metric and records the indices
    of the batch's ``n`` sequences; ``compute()`` is the metric's value; :meth:`interval` its
    interval (None when the metric's policy has none).  Both are collective under DDP.

    Args:
        metric: a metric declaring ``interval_policy`` (and, if the policy has a method, the
            methods of :class:`SequenceBootstrapMixin`).
        num_resamples: bootstrap resamples (``>= 2``; 0 = no interval).
        confidence, seed: of the bootstrap.
        policy: overrides the metric's ``interval_policy``.
    """

    full_state_update = False
    _cat_state_specs = {"indices": (torch.int64, ())}

    def __init__(self, metric: Metric, num_resamples: int = 200, confidence: float = 0.95, seed: int = 0,
                 policy: Policies | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.policy = policy if policy is not None else _declared_policy(metric)
        self.metric = metric
        self.num_resamples = checks.integer("num_resamples", num_resamples, minimum=0)
        if self.num_resamples == 1:
            raise ValueError("num_resamples must be 0 (no interval) or >= 2, got 1")
        self.confidence = checks.real("confidence", confidence, 0.0, 1.0, low_open=True, high_open=True)
        self.seed = checks.integer("seed", seed, minimum=0)
        self.add_state("indices", default=[], dist_reduce_fx="cat")

    @property
    def interval_policy(self) -> Policies:
        return self.policy

    def update(self, *args: Any, index: Tensor, **kwargs: Any) -> None:
        """``metric.update(*args, **kwargs)`` for sequences with global indices ``index``."""
        self.metric.update(*args, **kwargs)
        self.indices.append(torch.as_tensor(index).reshape(-1).to(device=self.device, dtype=torch.int64))

    def compute(self) -> Any:
        return self.metric.compute()

    def interval(self) -> Interval | dict[str, Interval] | None:
        """The metric's interval, resampling its sequences in global index order (None: no interval)."""
        if not policy_enabled(self.policy) or self.num_resamples == 0:
            return None
        with synced_cat_states(self, {"indices": torch.int64}) as states:
            order = torch.argsort(states["indices"].cpu(), stable=True)
        return metric_interval(self.metric, self.num_resamples, self.confidence, self.seed, order=order,
                               policy=self.policy)

    def reset(self) -> None:
        super().reset()
        self.metric.reset()
