"""The bundled English character chain: the offline default of every config.

A 27 x 27 bigram count table (a-z and space, text8 conventions) counted from the King James Bible as
packaged by Debian (public domain; provenance in ``dllm_lit/resources/ENGLISH_CHAR_BIGRAMS.md``) ships
inside the package.  The chain is built with the paper's text8 rule (App. E): P = row_normalise(C + 1e-8),
K = V = 27, eps = 0.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from dllm_lit.markov import MarkovChain
from dllm_lit.sources.base import ChainSource, TextDecoder
from dllm_lit.sources.options import SparsityOptions

__all__ = ["EnglishChars", "english_char_chain"]


def english_char_chain(sparsity: SparsityOptions | None = None, nu: torch.Tensor | None = None, **options: Any) -> MarkovChain:
    """Chain over 'a'..'z', ' ' (space = 26) from the bundled counts.

    ``sparsity`` (default: K = V, eps = 0) sets the K rule and teleport; its fields may instead be given
    as keywords (``english_char_chain(top_k=10, eps=1e-3)``).  ``nu``: the teleport law (default: the
    empirical unigram).
    """
    from dllm_lit.corpus.charlevel import load_english_counts

    if sparsity is None:
        sparsity = SparsityOptions(**options)
    elif options:
        raise TypeError(f"give sparsity or its fields ({', '.join(sorted(options))}), not both")
    else:
        sparsity = SparsityOptions.coerce(sparsity)
    return sparsity.chain_from_counts(
        load_english_counts(), nu=nu, metadata={"source": "bundled_english_kjv", "alphabet": "abcdefghijklmnopqrstuvwxyz "},
    )


class EnglishChars(ChainSource):
    """The bundled English character chain (a-z and space, V = 27; works offline).

    ``sparsity`` defaults to the paper's text8 oracle: K = V (no sparsification), eps = 0.
    """

    def __init__(self, sparsity: SparsityOptions = SparsityOptions()) -> None:
        self.sparsity = SparsityOptions.coerce(sparsity)

    def build(self, cache_dir: Path | None = None) -> MarkovChain:
        self._chain = english_char_chain(self.sparsity)
        return self._chain

    def decoder(self) -> TextDecoder:
        from dllm_lit.corpus.charlevel import CharDecoder

        return CharDecoder()
