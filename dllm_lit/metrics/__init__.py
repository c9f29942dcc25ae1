"""Metrics (torchmetrics, DDP-synchronised), one per module, with their arithmetic in
:mod:`dllm_lit.metrics.functional` and one bootstrap interval path (:mod:`dllm_lit.metrics.bootstrap`).

=========================  ======================================  ===================================
module                     metric                                  interval policy
=========================  ======================================  ===================================
``transition``             :class:`TransitionMetrics` (7 values)   basic, clipped at 0
``ngram_diversity``        :class:`NgramDiversity`                 percentile (ratio of sums)
``duplication_rate``       :class:`DuplicationRate`                none (resampling creates duplicates)
``genppl``                 :class:`GenerativePerplexity`           percentile of the mean NLL, exp
``mauve``                  :class:`MauveScore`                     none (k-means per resample)
=========================  ======================================  ===================================
"""
from dllm_lit.metrics.bootstrap import (
    IntervalPolicy,
    SequenceBootstrapMixin,
    SequenceBootstrapper,
    bootstrap_ci,
    metric_interval,
    ratio_ci,
)
from dllm_lit.metrics.distributed import EmptyMetricError
from dllm_lit.metrics.duplication_rate import DuplicationRate
from dllm_lit.metrics.functional.transition import (
    METRIC_KEYS,
    transition_counts,
    transition_metrics_from_counts,
    transition_metrics_from_pairs,
)
from dllm_lit.metrics.genppl import GenerativePerplexity
from dllm_lit.metrics.lm_loading import ModelNotAvailableError
from dllm_lit.metrics.mauve import MauveScore
from dllm_lit.metrics.ngram_diversity import NgramDiversity
from dllm_lit.metrics.transition import TransitionMetrics

__all__ = [
    "METRIC_KEYS", "DuplicationRate", "EmptyMetricError", "GenerativePerplexity", "IntervalPolicy", "MauveScore",
    "ModelNotAvailableError", "NgramDiversity", "SequenceBootstrapMixin", "SequenceBootstrapper", "TransitionMetrics",
    "bootstrap_ci", "metric_interval", "ratio_ci", "transition_counts",
    "transition_metrics_from_counts", "transition_metrics_from_pairs",
]
