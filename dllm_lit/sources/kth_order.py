"""An order-k character chain (text8 alphabet, V = 27) as an HMM over contexts (S = 27^k, sparse A).

Counts C[context, next] come from the bundled English text (k = 1: the bigram table; k = 2, 3: the bundled
order-2 / order-3 files, same text) or from any text file (:func:`dllm_lit.corpus.char_ngrams.count_char_ngrams`,
any k >= 1).  Rows are built by the paper's recipe, per context (:func:`context_rows`): an unseen context takes
the unigram counts, P = normalise(C + pseudocount), top-K (``sparsity``: fixed K or the mass-percentile rule),
renormalised, then P' = (1 - eps) P_topK + eps 1 nu^T with nu the unigram.  The hidden state is the last k
characters; x_0 is the last character of a context drawn from the stationary law.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch

from dllm_lit import checks
from dllm_lit.markov.hmm import HMMWorld
from dllm_lit.sources.base import ChainSource, TextDecoder
from dllm_lit.sources.options import SparsityOptions

__all__ = ["KthOrderChars", "context_rows"]


def context_rows(counts: torch.Tensor, sparsity: SparsityOptions, pseudocount: float = 1e-8) -> torch.Tensor:
    """Rows [S, V] from counts [S, V] by the recipe of the module docstring."""
    C = counts.to(torch.float64)
    S, V = C.shape
    unigram = C.sum(0)
    if unigram.sum() <= 0:
        raise ValueError("counts are all zero; the text must hold at least one (k + 1)-gram")
    C = torch.where((C.sum(1) == 0)[:, None], unigram[None, :], C)
    P = C + pseudocount
    P = P / P.sum(1, keepdim=True)
    if sparsity.top_k is not None:
        K = checks.integer("sparsity.top_k", sparsity.top_k, 1, V)
    elif sparsity.target_mass is not None or sparsity.k_percentile is not None:
        tm = 0.99 if sparsity.target_mass is None else float(sparsity.target_mass)
        kp = 90.0 if sparsity.k_percentile is None else float(sparsity.k_percentile)
        k_star = ((P.sort(dim=1, descending=True).values.cumsum(1) < tm - 1e-12).sum(1) + 1).clamp(max=V)
        K = max(1, min(V, int(math.floor(torch.quantile(k_star.to(torch.float64), kp / 100.0).item()))))
    else:
        K = V
    if K < V:
        order = torch.sort(P, dim=1, descending=True, stable=True).indices[:, :K]
        keep = torch.zeros_like(P).scatter_(1, order, 1.0)
        P = P * keep
        P = P / P.sum(1, keepdim=True)
    nu = unigram / unigram.sum()
    return (1.0 - sparsity.eps) * P + sparsity.eps * nu[None, :]


class KthOrderChars(ChainSource):
    """Order-k English (or any text file's) character chain as an HMM world over contexts.

    Args:
        order: k >= 1 (bundled English: 1, 2 or 3; a text file: any).
        path: a text file to count (None: the bundled English counts).
        sparsity: top-K per context and teleport (default: K = V, eps = 0).
        encoding: of ``path``.
    """

    def __init__(self, order: int = 2, path: str | None = None, sparsity: SparsityOptions = SparsityOptions(),
                 encoding: str = "utf-8") -> None:
        self.order = checks.integer("order (k)", order, 1)
        self.path, self.encoding = path, encoding
        if path is None:
            checks.choice("order (k) of the bundled English counts (or give path)", self.order, (1, 2, 3))
        self.sparsity = SparsityOptions.coerce(sparsity)

    def counts(self) -> torch.Tensor:
        if self.path is None:
            if self.order == 1:
                from dllm_lit.corpus.charlevel import load_english_counts

                return load_english_counts()
            from dllm_lit.corpus.char_ngrams import load_english_ngram_counts

            return load_english_ngram_counts(self.order)
        from dllm_lit.corpus.char_ngrams import count_char_ngrams
        from dllm_lit.corpus.documents import read_text_file

        p = Path(self.path).expanduser()
        if not p.is_file():
            raise FileNotFoundError(f"KthOrderChars: text file not found: {p} (set data.source.init_args.path)")
        return count_char_ngrams(read_text_file(str(p), encoding=self.encoding), self.order)

    def build(self, cache_dir: Path | None = None) -> HMMWorld:
        rows = context_rows(self.counts(), self.sparsity)
        self._chain = HMMWorld(context_rows=rows, metadata={
            "source": "kth_order_chars", "order": self.order, "path": self.path, **self.sparsity.as_dict()})
        return self._chain

    def decoder(self) -> TextDecoder:
        from dllm_lit.corpus.charlevel import CharDecoder

        return CharDecoder()
