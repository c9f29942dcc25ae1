"""Posterior rows memoised by neighbourhood key for one sampling run.

A :class:`~dllm_lit.denoisers.LocalDenoiser` that names neighbourhood keys (``neighbour_keys``) returns the same
row for equal keys.  When its keys lie in a small range (``neighbour_key_count``; the English chain's oracle:
1190^2 keys), a run can keep one row per key it has met, with whatever the sampler derives from the row (its
proposal law's cdf, the nucleus-filtered row, the row maximum), and answer a step's queries by a lookup of the
keys instead of a sort for distinct keys and fresh rows.  On the English chain (N = 512, T = 1024, 1024 steps)
LLaDA's compact columns ask about 15,000 queries per call and meet 2,670 keys in the whole run, ReMDM-loop about
5,000 per step and 49,517 keys (most of them in the early steps' long gaps), out of 1.4 million.  Rows are
computed by the same ``probs_given_neighbours`` call and the derived features are row-wise, so they are the numbers
the direct computation gives, and so are the draws.  :func:`rows_by_key` falls back to one row per distinct key of
the queries at hand when no memo is kept.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from dllm_lit.denoisers.local import LocalDenoiser, distinct_queries

__all__ = ["NeighbourhoodRows", "MAX_KEYS", "rows_by_key", "law_row_features"]

#: the key range up to which a run keeps a dense key -> slot map (int64: 8 bytes per key)
MAX_KEYS = 1 << 22


class NeighbourhoodRows:
    """Rows of ``den`` and the features ``derive(rows)`` (a dict of tensors with one leading entry per row), one per
    neighbourhood key met, for one run.  :meth:`slots` maps queries to their rows' slots (computing the new keys'
    rows); ``features[name]`` is the table of a feature, read at those slots."""

    def __init__(self, den: LocalDenoiser, derive: Callable[[torch.Tensor], dict[str, torch.Tensor]],
                 device: torch.device | None = None) -> None:
        count = self.key_count(den)
        if count is None:
            raise ValueError("NeighbourhoodRows needs a LocalDenoiser whose neighbour_key_count is at most "
                             f"{MAX_KEYS}; check NeighbourhoodRows.applies(denoiser) first")
        self.den, self.derive = den, derive
        self.slot_of = torch.full((count,), -1, dtype=torch.long, device=device)
        self.features: dict[str, torch.Tensor] = {}
        self.size = 0

    @staticmethod
    def key_count(den) -> int | None:
        """The denoiser's key range when rows can be memoised by key (a LocalDenoiser with at most MAX_KEYS keys)."""
        if not isinstance(den, LocalDenoiser):
            return None
        count = den.neighbour_key_count()
        return count if count is not None and count <= MAX_KEYS else None

    @classmethod
    def applies(cls, den) -> bool:
        """Whether :class:`NeighbourhoodRows` can serve ``den``."""
        return cls.key_count(den) is not None

    def slots(self, query, keys: torch.Tensor | None = None) -> torch.Tensor:
        """Slots (int64 [n]) of the rows of the queries (x_left, d_left, x_right, d_right); rows of keys not met
        before are computed (one per new key) and their features appended.  With the queries' ``keys`` given,
        ``query`` may instead be a function returning the queries at given indices (called for new keys only)."""
        keys = self.den.neighbour_keys(*query) if keys is None else keys
        slot = self._lookup(keys)
        new = slot < 0
        if bool(new.any()):
            idx = new.nonzero().squeeze(1)
            rep, inv = distinct_queries(keys.index_select(0, idx))
            at = idx.index_select(0, rep)
            rows = self.den.probs_given_neighbours(*(query(at) if callable(query) else
                                                     (q.index_select(0, at) for q in query)))
            self._append(self.derive(rows))
            fresh = torch.arange(self.size - rep.numel(), self.size, device=keys.device)
            self._insert(keys.index_select(0, at), fresh)
            slot[idx] = fresh.index_select(0, inv)
        return slot

    def _lookup(self, keys: torch.Tensor) -> torch.Tensor:
        """Slots of ``keys`` (-1 where not met)."""
        return self.slot_of.index_select(0, keys)

    def _insert(self, keys: torch.Tensor, slots: torch.Tensor) -> None:
        """Record the ``slots`` of distinct ``keys`` (ascending, none met before)."""
        self.slot_of[keys] = slots

    def _append(self, values: dict[str, torch.Tensor]) -> None:
        n = next(iter(values.values())).shape[0]
        for name, v in values.items():
            table = self.features.get(name)
            if table is None or table.shape[0] < self.size + n:
                grown = torch.empty((max(2 * (self.size + n), 64), *v.shape[1:]), dtype=v.dtype, device=v.device)
                if table is not None:
                    grown[: self.size] = table[: self.size]
                self.features[name] = table = grown
            table[self.size: self.size + n] = v
        self.size += n


def rows_by_key(den: LocalDenoiser, query: tuple[torch.Tensor, ...],
                derive: Callable[[torch.Tensor], dict[str, torch.Tensor]], memo: NeighbourhoodRows | None = None,
                max_rows: int | None = None) -> tuple[dict[str, torch.Tensor], torch.Tensor] | None:
    """(features, index): the features ``derive(rows)`` of one posterior row per neighbourhood key and, per query,
    the index of its row - from the run's ``memo`` when given (its ``derive`` must be this one), else from the
    queries' distinct keys (:meth:`LocalDenoiser.distinct_rows`; None when the denoiser names no keys or there are
    more than ``max_rows`` distinct ones)."""
    if memo is not None:
        index = memo.slots(query)  # first: it may add rows
        return memo.features, index
    distinct = den.distinct_rows(query, max_rows)
    if distinct is None:
        return None
    rows, inv = distinct
    return derive(rows), inv


def law_row_features(law: Callable[[torch.Tensor], torch.Tensor], law_scores: bool = False
                     ) -> Callable[[torch.Tensor], dict[str, torch.Tensor]]:
    """What a proposal draw needs of a posterior row, as row-wise features: the float64 cdf of its proposal law
    ``law(row)``, its maximum (a tight bound of the confidence) and the row itself (``law_scores``: the law), read
    by :func:`~dllm_lit.samplers.draws.categorical_from_stored_cdf` and a gather - the numbers of
    ``categorical(law(rows), u)`` and ``rows[tok]``."""
    def derive(rows: torch.Tensor) -> dict[str, torch.Tensor]:
        lw = law(rows)
        return {"cdf": lw.to(torch.float64).cumsum(-1), "max": rows.amax(-1).to(torch.float64),
                "rows": lw if law_scores else rows}
    return derive
