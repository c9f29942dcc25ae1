"""Dependence profile: empirical I(X_i; X_{i+d}) of the samples against the world's exact curve
(:mod:`dllm_lit.metrics.functional.world`): how much long-range structure a sampler keeps.

Table keys ``dep_excess`` (mean over :data:`DEP_DISTANCES` of the row's plug-in MI minus the exact samples')
and ``dep_excess_far`` (d >= 16), with paired centred bootstrap intervals; :meth:`DependenceProfile.profile`
gives the per-distance curve for the figure (:mod:`dllm_lit.results.dependence_figure`).
"""
from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from dllm_lit.metrics.bootstrap import IntervalPolicy
from dllm_lit.metrics.functional.transition import PairCounts
from dllm_lit.metrics.functional.world import DEP_DISTANCES, mi_from_pair_counts
from dllm_lit.metrics.world_samples import WorldSampleMetric

__all__ = ["DEPENDENCE_KEYS", "DependenceProfile", "empirical_profile"]

DEPENDENCE_KEYS = ("dep_excess", "dep_excess_far")
FAR = 16


def _pair_codes(x: Tensor, d: int, V: int) -> Tensor:
    return x[:, :-d].long() * V + x[:, d:].long()


def empirical_profile(x: Tensor, vocab_size: int, distances=DEP_DISTANCES) -> Tensor:
    """Plug-in I(X_i; X_{i+d}) for each d (distances >= T give NaN): float64 [len(distances)]."""
    out = torch.full((len(distances),), float("nan"), dtype=torch.float64)
    for j, d in enumerate(distances):
        if d < x.shape[1]:
            codes, counts = torch.unique(_pair_codes(x, d, vocab_size), return_counts=True)
            out[j] = mi_from_pair_counts(codes, counts, vocab_size)
    return out


def _summary(row: Tensor, ref: Tensor | None) -> dict[str, float | None]:
    if ref is None:
        return {"dep_excess": None, "dep_excess_far": None}
    diff = row - ref
    far = torch.tensor([d >= FAR for d in DEP_DISTANCES]) & ~diff.isnan()
    ok = ~diff.isnan()
    return {"dep_excess": float(diff[ok].mean()) if ok.any() else None,
            "dep_excess_far": float(diff[far].mean()) if far.any() else None}


class DependenceProfile(WorldSampleMetric):
    """``compute() -> {dep_excess, dep_excess_far}`` (None without a reference row)."""

    interval_policy = {k: IntervalPolicy("centred") for k in DEPENDENCE_KEYS}

    def profile(self) -> Tensor:
        x, _ = self.ordered()
        return empirical_profile(x, self.world.vocab_size)

    def compute(self) -> dict[str, float | None]:
        x, index = self.ordered()
        ref = self.reference_aligned(index)
        V = self.world.vocab_size
        return _summary(empirical_profile(x, V), None if ref is None else empirical_profile(ref, V))

    def sequence_statistics(self) -> dict[str, Tensor]:
        x, index = self.samples()
        ref = self.reference_aligned(index)
        return {"x": x} if ref is None else {"x": x, "ref": ref}

    def resampling_statistic(self, statistics: Mapping[str, Tensor]):
        V, T = self.world.vocab_size, statistics["x"].shape[1]
        ds = [d for d in DEP_DISTANCES if d < T]
        own = {d: PairCounts(_pair_codes(statistics["x"], d, V)) for d in ds}
        ref = {d: PairCounts(_pair_codes(statistics["ref"], d, V)) for d in ds} if "ref" in statistics else None

        def curve(counts: dict, w: Tensor) -> Tensor:
            out = torch.full((w.shape[0], len(DEP_DISTANCES)), float("nan"), dtype=torch.float64)
            for j, d in enumerate(DEP_DISTANCES):
                if d in counts:
                    c = counts[d].counts(w)
                    out[:, j] = torch.tensor([mi_from_pair_counts(counts[d].pairs, c[r], V) for r in range(w.shape[0])])
            return out

        def stat(w: Tensor) -> dict[str, Tensor]:
            if ref is None:
                return {}
            rows, refs = curve(own, w), curve(ref, w)
            vals = [_summary(rows[r], refs[r]) for r in range(w.shape[0])]
            # a key without a value (dep_excess_far when T <= FAR: no distance that far) gets no interval
            return {k: torch.tensor([v[k] for v in vals], dtype=torch.float64) for k in DEPENDENCE_KEYS
                    if vals[0][k] is not None}

        return stat
