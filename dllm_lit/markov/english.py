"""The bundled English character chain: the offline default of every config.

A 27 x 27 bigram count table (a-z and space, text8 conventions) counted from the King James
Bible as packaged by Debian (public domain; provenance in
``dllm_lit/resources/ENGLISH_CHAR_BIGRAMS.md``) ships inside the package.  The chain is built
with the paper's text8 rule (App. E): P = row_normalise(C + 1e-8), K = V = 27, eps = 0.
"""
from __future__ import annotations

import torch

from dllm_lit.markov.chain import MarkovChain

__all__ = ["english_char_chain"]


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
