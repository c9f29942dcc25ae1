"""Results: metric accumulation during predict and the files a run writes; the metrics of the
table are the entries of :data:`dllm_lit.results.registry.METRICS`."""
from dllm_lit.results.figures import plot_metric, write_figures
from dllm_lit.results.registry import METRICS, MetricContext, MetricSpec, register
from dllm_lit.results.writer import ResultsWriter, load_metrics

__all__ = ["METRICS", "MetricContext", "MetricSpec", "ResultsWriter", "load_metrics", "plot_metric", "register", "write_figures"]
