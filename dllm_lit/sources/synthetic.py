"""A random heavy-tailed sparse chain (:func:`dllm_lit.markov.synthetic_chain`): offline, any size."""
from __future__ import annotations

from pathlib import Path

from dllm_lit import checks
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.markov.synthetic import check_synthetic_size
from dllm_lit.sources.base import ChainSource

__all__ = ["Synthetic"]


class Synthetic(ChainSource):
    """A random heavy-tailed sparse chain (:func:`dllm_lit.markov.synthetic_chain`); deterministic in ``seed``.

    ``top_k`` is the generated neighbour-list length (the chain is drawn sparse, not sparsified from
    counts) and ``eps`` the teleport weight; token ids decode as numbers.
    """

    def __init__(self, vocab_size: int = 4096, top_k: int = 206, eps: float = 1e-4, alpha: float = 1.1, seed: int = 0) -> None:
        self.vocab_size, self.top_k, self.eps, self.alpha, self.seed = vocab_size, top_k, eps, alpha, seed
        checks.integer("vocab_size", vocab_size, 1)
        checks.integer("top_k", top_k, 1, vocab_size)
        checks.real("eps", eps, 0.0, 1.0, high_open=True)
        checks.real("alpha", alpha, 0.0, low_open=True)
        checks.integer("seed", seed, 0)
        check_synthetic_size(vocab_size, top_k)  # before anything is drawn

    def build(self, cache_dir: Path | None = None) -> MarkovChain:
        self._chain = synthetic_chain(self.vocab_size, self.top_k, eps=self.eps, alpha=self.alpha, seed=self.seed)
        return self._chain
