"""Deprecated import location of the surface metrics, kept only until the results writer imports
them from their own modules (:mod:`dllm_lit.metrics.ngram_diversity`,
:mod:`dllm_lit.metrics.duplication_rate`, :mod:`dllm_lit.metrics.functional.ngram`)."""
from dllm_lit.metrics.duplication_rate import DuplicationRate
from dllm_lit.metrics.functional.ngram import distinct_ngrams_per_sequence
from dllm_lit.metrics.ngram_diversity import NgramDiversity

__all__ = ["DuplicationRate", "NgramDiversity", "distinct_ngrams_per_sequence"]
