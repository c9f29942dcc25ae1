"""Results: metric accumulation during predict and the files a run writes; the metrics of the
table are the entries of :data:`dllm_lit.results.registry.METRICS`.  Names load on first use, so the
registry, the file formats and the figures import without Lightning (only the writer needs it)."""
from typing import TYPE_CHECKING

from dllm_lit.util.lazy_exports import lazy_exports

_EXPORTS = {"METRICS": "registry", "MetricContext": "registry", "MetricSpec": "registry", "ResultsWriter": "writer",
            "load_metrics": "files", "plot_metric": "figures", "register": "registry", "write_figures": "figures"}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from dllm_lit.results.figures import plot_metric, write_figures
    from dllm_lit.results.files import load_metrics
    from dllm_lit.results.registry import METRICS, MetricContext, MetricSpec, register
    from dllm_lit.results.writer import ResultsWriter
