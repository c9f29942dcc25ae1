"""Posterior rows memoised by neighbourhood key over a key range too large for a dense key -> slot map.

:class:`~dllm_lit.decoding.neighbourhood_rows.NeighbourhoodRows` keeps one int64 slot per possible key, which the
OWT-sized chain's oracle (V = 4096, depth D = 20: (2 D V + 2)^2 = 2.7e10 keys) cannot afford.  A run meets few of
them, though: the EB-sampler decodes nearly left to right, so the keys it asks about are mostly (left token,
distance <= D, no right neighbour), at most V D = 82k of them however many sequences and steps.  This memo keeps
the keys met, sorted, with their slots, and answers a step's queries by a binary search (``torch.searchsorted``);
rows are computed by the same ``probs_given_neighbours`` call, once per new key, and the features are row-wise,
so they are the numbers the dense memo or a direct computation gives.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from dllm_lit.denoisers.local import LocalDenoiser
from dllm_lit.decoding.neighbourhood_rows import NeighbourhoodRows

__all__ = ["SparseNeighbourhoodRows", "keyed_rows"]


class SparseNeighbourhoodRows(NeighbourhoodRows):
    """:class:`NeighbourhoodRows` for any key range: the keys met are kept sorted (``keys``) with their slots
    (``key_slots``), so memory grows with the keys met, not with the key range (:meth:`NeighbourhoodRows.slots`
    over this lookup and insertion)."""

    def __init__(self, den: LocalDenoiser, derive: Callable[[torch.Tensor], dict[str, torch.Tensor]],
                 device: torch.device | None = None) -> None:
        if not self.applies(den):
            raise ValueError("SparseNeighbourhoodRows needs a LocalDenoiser with neighbourhood keys "
                             "(neighbour_key_count not None)")
        self.den, self.derive = den, derive
        self.keys = torch.empty(0, dtype=torch.long, device=device)
        self.key_slots = torch.empty(0, dtype=torch.long, device=device)
        self.features: dict[str, torch.Tensor] = {}
        self.size = 0

    @classmethod
    def applies(cls, den) -> bool:
        """Whether ``den`` names neighbourhood keys in a known range (a :class:`LocalDenoiser`)."""
        return isinstance(den, LocalDenoiser) and den.neighbour_key_count() is not None

    def _lookup(self, keys: torch.Tensor) -> torch.Tensor:
        """Slots of ``keys`` (-1 where not met)."""
        if self.keys.numel() == 0:
            return torch.full_like(keys, -1)
        at = torch.searchsorted(self.keys, keys).clamp_(max=self.keys.numel() - 1)
        return torch.where(self.keys.index_select(0, at) == keys, self.key_slots.index_select(0, at), -1)

    def _insert(self, keys: torch.Tensor, slots: torch.Tensor) -> None:
        """Merge distinct ``keys`` (ascending, none met before) and their ``slots`` into the sorted table: the j-th
        new key lands at its insertion point among the old keys plus j, the old keys fill the rest in order."""
        n, m = self.keys.numel(), keys.numel()
        at = torch.searchsorted(self.keys, keys) + torch.arange(m, device=keys.device)
        old = torch.ones(n + m, dtype=torch.bool, device=keys.device)
        old[at] = False
        merged_keys, merged_slots = keys.new_empty(n + m), slots.new_empty(n + m)
        merged_keys[old], merged_slots[old] = self.keys, self.key_slots
        merged_keys[at], merged_slots[at] = keys, slots
        self.keys, self.key_slots = merged_keys, merged_slots


def keyed_rows(den: LocalDenoiser, derive: Callable[[torch.Tensor], dict[str, torch.Tensor]],
               device: torch.device | None = None) -> NeighbourhoodRows:
    """The dense memo where the key range allows it (the English chain), else the sorted one."""
    if NeighbourhoodRows.applies(den):
        return NeighbourhoodRows(den, derive, device=device)
    return SparseNeighbourhoodRows(den, derive, device=device)
