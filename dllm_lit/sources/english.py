"""The bundled English character chain: the offline default of every config.

A 27 x 27 bigram count table (a-z and space, text8 conventions) counted from the King James Bible as
packaged by Debian (public domain; provenance in ``dllm_lit/resources/ENGLISH_CHAR_BIGRAMS.md``) ships
inside the package.  The chain is built with the paper's text8 rule (App. E): P = row_normalise(C + 1e-8),
K = V = 27, eps = 0.
"""
from __future__ import annotations

from pathlib import Path

import torch

from dllm_lit.markov import MarkovChain
from dllm_lit.sources.base import ChainSource, TextDecoder

__all__ = ["EnglishChars", "english_char_chain"]


def english_char_chain(
    top_k: int | None = None,
    target_mass: float | None = None,
    k_percentile: float | None = None,
    eps: float = 0.0,
    nu: torch.Tensor | None = None,
) -> MarkovChain:
    """Chain over 'a'..'z', ' ' (space = 26) from the bundled counts; settings as in ``from_counts``."""
    from dllm_lit.corpus.charlevel import load_english_counts

    return MarkovChain.from_counts(
        load_english_counts(), top_k=top_k, target_mass=target_mass, k_percentile=k_percentile,
        eps=eps, nu=nu, metadata={"source": "bundled_english_kjv", "alphabet": "abcdefghijklmnopqrstuvwxyz "},
    )


class EnglishChars(ChainSource):
    """The bundled English character chain (a-z and space, V = 27; works offline).

    Defaults follow the paper's text8 oracle: K = V (no sparsification), eps = 0.
    """

    def __init__(self, top_k: int | None = None, target_mass: float | None = None, k_percentile: float | None = None, eps: float = 0.0) -> None:
        self.top_k, self.target_mass, self.k_percentile, self.eps = top_k, target_mass, k_percentile, eps

    def build(self, cache_dir: Path | None = None) -> MarkovChain:
        self._chain = english_char_chain(top_k=self.top_k, target_mass=self.target_mass, k_percentile=self.k_percentile, eps=self.eps)
        return self._chain

    def decoder(self) -> TextDecoder:
        from dllm_lit.corpus.charlevel import CharDecoder

        return CharDecoder()
