"""Results: metric accumulation during predict and the files a run writes."""
from dllm_lit.results.writer import ResultsWriter, StepsProgressBar, atomic_write_text

__all__ = ["ResultsWriter", "StepsProgressBar", "atomic_write_text"]
