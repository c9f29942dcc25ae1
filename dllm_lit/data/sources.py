"""Where a ground-truth chain comes from: each source builds a :class:`MarkovChain` and knows how
to decode its token ids to text.  Sources are plain classes so LightningCLI configs pick them by
``class_path`` (see ``configs/data/``).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Protocol

import torch

from dllm_lit.markov import MarkovChain, english_char_chain, load_chain, load_paper_artifact, synthetic_chain

__all__ = ["ChainSource", "EnglishChars", "Synthetic", "ChainFile", "PaperArtifact", "TextDecoder", "IdDecoder"]


class TextDecoder(Protocol):
    vocab_size: int

    def decode_batch(self, ids: torch.Tensor) -> list[str]: ...


class IdDecoder:
    """Fallback decoder for chains without a text vocabulary: ids joined by spaces ("17 4 230")."""

    def __init__(self, vocab_size: int, itos: list[str] | None = None) -> None:
        self.vocab_size = vocab_size
        self.itos = itos

    def decode(self, ids: torch.Tensor) -> str:
        if self.itos is not None:
            return "".join(self.itos[i] for i in ids.tolist())
        return " ".join(str(i) for i in ids.tolist())

    def decode_batch(self, ids: torch.Tensor) -> list[str]:
        return [self.decode(row) for row in ids]


class ChainSource(ABC):
    """Base class: ``build(cache_dir) -> MarkovChain`` and ``decoder() -> TextDecoder``."""

    @abstractmethod
    def build(self, cache_dir: Path | None = None) -> MarkovChain:
        """Build (or load from ``cache_dir``) the chain."""

    def decoder(self) -> TextDecoder:
        chain = getattr(self, "_chain", None)
        return IdDecoder(chain.vocab_size if chain is not None else 0)

    def describe(self) -> dict[str, Any]:
        return {"source": type(self).__name__, **{k: v for k, v in vars(self).items() if not k.startswith("_")}}


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


class Synthetic(ChainSource):
    """A random heavy-tailed sparse chain (:func:`dllm_lit.markov.synthetic_chain`)."""

    def __init__(self, vocab_size: int = 4096, top_k: int = 206, eps: float = 1e-4, alpha: float = 1.1, seed: int = 0) -> None:
        self.vocab_size, self.top_k, self.eps, self.alpha, self.seed = vocab_size, top_k, eps, alpha, seed

    def build(self, cache_dir: Path | None = None) -> MarkovChain:
        self._chain = synthetic_chain(self.vocab_size, self.top_k, eps=self.eps, alpha=self.alpha, seed=self.seed)
        return self._chain


class ChainFile(ChainSource):
    """A chain saved with :func:`dllm_lit.markov.save_chain` (checksummed artifact)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def build(self, cache_dir: Path | None = None) -> MarkovChain:
        self._chain = load_chain(self.path)
        return self._chain

    def decoder(self) -> TextDecoder:
        return IdDecoder(self._chain.vocab_size, self._chain.metadata.get("itos"))


class PaperArtifact(ChainSource):
    """A ground-truth ``.pt`` released by the paper's authors (paper-reference-code.md Sec. 1)."""

    def __init__(self, path: str, trust_pickle: bool = False) -> None:
        self.path, self.trust_pickle = path, trust_pickle

    def build(self, cache_dir: Path | None = None) -> MarkovChain:
        self._chain, self._extras = load_paper_artifact(self.path, trust_pickle=self.trust_pickle)
        return self._chain

    def decoder(self) -> TextDecoder:
        return IdDecoder(self._chain.vocab_size, self._extras.get("itos"))
