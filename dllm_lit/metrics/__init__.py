"""Metrics (torchmetrics, DDP-synchronised): transition-level, surface and language-model metrics."""
from dllm_lit.metrics.bootstrap import bootstrap_ci, ratio_ci
from dllm_lit.metrics.distributed import EmptyMetricError
from dllm_lit.metrics.language_model import GenerativePerplexity, MauveScore, ModelNotAvailableError
from dllm_lit.metrics.surface import DuplicationRate, NgramDiversity
from dllm_lit.metrics.transition import (
    METRIC_KEYS,
    TransitionMetrics,
    bootstrap_transition_cis,
    transition_counts,
    transition_metrics_from_counts,
    transition_metrics_from_pairs,
)

__all__ = [
    "METRIC_KEYS", "DuplicationRate", "EmptyMetricError", "GenerativePerplexity", "MauveScore", "ModelNotAvailableError",
    "NgramDiversity", "TransitionMetrics", "bootstrap_ci", "bootstrap_transition_cis", "ratio_ci", "transition_counts",
    "transition_metrics_from_counts", "transition_metrics_from_pairs",
]
