"""n-gram KL (n = 1, 2, 3) of the samples against the world's exact n-gram marginals, raw and with the
exact-sample floor subtracted (definitions in :mod:`dllm_lit.metrics.functional.world`).

Intervals: paired bootstrap over sequences (the row and the reference row resampled with the same weights),
centred, as ``kl_excess``.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from dllm_lit.metrics.bootstrap import IntervalPolicy
from dllm_lit.metrics.functional.transition import PairCounts
from dllm_lit.metrics.functional.world import exact_world_ngrams, kl_from_counts, ngram_codes
from dllm_lit.metrics.world_samples import WorldSampleMetric

__all__ = ["NGRAM_KL_KEYS", "NgramKL"]

NGRAM_KL_KEYS = tuple(k for n in (1, 2, 3) for k in (f"ngram_kl{n}", f"ngram_kl{n}_excess"))


class NgramKL(WorldSampleMetric):
    """``compute() -> {ngram_kl{n}, ngram_kl{n}_excess}`` (excess None without a reference row)."""

    interval_policy = {k: IntervalPolicy("centred") for k in NGRAM_KL_KEYS}

    def __init__(self, world: Any, exact: dict[int, Tensor] | None = None, **kwargs: Any) -> None:
        super().__init__(world, **kwargs)
        self.exact = exact if exact is not None else exact_world_ngrams(world)

    def _values(self, x: Tensor, ref: Tensor | None) -> dict[str, float | None]:
        V = self.world.vocab_size
        out: dict[str, float | None] = {}
        for n in (1, 2, 3):
            codes, counts = torch.unique(ngram_codes(x, V, n), return_counts=True)
            out[f"ngram_kl{n}"] = kl_from_counts(codes, counts, self.exact[n])
            if ref is None:
                out[f"ngram_kl{n}_excess"] = None
            else:
                rc, rn = torch.unique(ngram_codes(ref, V, n), return_counts=True)
                out[f"ngram_kl{n}_excess"] = out[f"ngram_kl{n}"] - kl_from_counts(rc, rn, self.exact[n])
        return out

    def compute(self) -> dict[str, float | None]:
        x, index = self.ordered()
        return self._values(x, self.reference_aligned(index))

    def sequence_statistics(self) -> dict[str, Tensor]:
        x, index = self.samples()
        out = {"x": x}
        ref = self.reference_aligned(index)
        if ref is not None:
            out["ref"] = ref
        return out

    def resampling_statistic(self, statistics: Mapping[str, Tensor]):
        V = self.world.vocab_size
        own = {n: PairCounts(ngram_codes(statistics["x"], V, n)) for n in (1, 2, 3)}
        ref = ({n: PairCounts(ngram_codes(statistics["ref"], V, n)) for n in (1, 2, 3)}
               if "ref" in statistics else None)

        def stat(w: Tensor) -> dict[str, Tensor]:
            out: dict[str, Tensor] = {}
            for n in (1, 2, 3):
                c = own[n].counts(w)
                kl = torch.tensor([kl_from_counts(own[n].pairs, c[r], self.exact[n]) for r in range(w.shape[0])],
                                  dtype=torch.float64)
                out[f"ngram_kl{n}"] = kl
                if ref is not None:
                    rc = ref[n].counts(w)
                    out[f"ngram_kl{n}_excess"] = kl - torch.tensor(
                        [kl_from_counts(ref[n].pairs, rc[r], self.exact[n]) for r in range(w.shape[0])],
                        dtype=torch.float64)
            return out

        return stat
