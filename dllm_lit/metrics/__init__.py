"""Metrics (torchmetrics, DDP-synchronised): transition-level, surface and language-model metrics."""
from dllm_lit.metrics.transition import METRIC_KEYS, TransitionMetrics, transition_counts, transition_metrics_from_counts

__all__ = ["METRIC_KEYS", "TransitionMetrics", "transition_counts", "transition_metrics_from_counts"]
