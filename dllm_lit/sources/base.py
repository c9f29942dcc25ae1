"""What every chain source is: ``build(cache_dir) -> MarkovChain`` and ``decoder() -> TextDecoder``.

A chain source says where a ground-truth chain comes from (bundled counts, a corpus, a file, a random
generator) and how its token ids read as text.  Sources are plain classes, so LightningCLI configs pick
them by ``class_path`` (see ``configs/data/``).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Protocol

import torch

from dllm_lit.markov import MarkovChain

__all__ = ["ChainSource", "TextDecoder", "IdDecoder"]


class TextDecoder(Protocol):
    """Turns token ids into text: ``decode_batch(ids[N, T]) -> N strings``."""

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
