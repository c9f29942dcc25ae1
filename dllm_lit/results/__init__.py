"""Results: metric accumulation during predict and the files a run writes."""
from dllm_lit.results.figures import plot_metric, write_figures
from dllm_lit.results.writer import ResultsWriter

__all__ = ["ResultsWriter", "plot_metric", "write_figures"]
