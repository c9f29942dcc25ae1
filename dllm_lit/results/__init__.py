"""Results: metric accumulation during predict and the files a run writes."""
from dllm_lit.results.writer import ResultsWriter, atomic_write_text

__all__ = ["ResultsWriter", "atomic_write_text"]
