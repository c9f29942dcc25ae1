"""Deprecated import location of the language-model metrics, kept only until the results writer
imports them from their own modules (:mod:`dllm_lit.metrics.genppl`, :mod:`dllm_lit.metrics.mauve`)."""
from dllm_lit.metrics.genppl import GenerativePerplexity
from dllm_lit.metrics.mauve import MauveScore

__all__ = ["GenerativePerplexity", "MauveScore"]
