"""A chain saved with :func:`dllm_lit.markov.save_chain` (dllm_lit's checksummed artifact)."""
from __future__ import annotations

from pathlib import Path

from dllm_lit.markov import MarkovChain, load_chain
from dllm_lit.sources.base import ChainSource, IdDecoder, TextDecoder

__all__ = ["ChainFile"]


class ChainFile(ChainSource):
    """A chain saved with :func:`dllm_lit.markov.save_chain` (checksummed artifact)."""

    example_init_args = {"path": "chain.pt"}

    def __init__(self, path: str) -> None:
        self.path = path

    def build(self, cache_dir: Path | None = None) -> MarkovChain:
        self._chain = load_chain(self.path)
        return self._chain

    def decoder(self) -> TextDecoder:
        return IdDecoder(self._chain.vocab_size, self._chain.metadata.get("itos"))
