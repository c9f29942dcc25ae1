"""Every position's leave-one-out row, kept across the calls of one run (LLaDA 2.1's and P2's bounded calls).

A local denoiser's leave-one-out row at i is a function of the nearest revealed tokens strictly left and right of i
(:mod:`.row_providers`).  :class:`TrackedRows` keeps, for every position of a [B, T] state, the slot of that row in
a run-long :class:`~.neighbourhood_rows.NeighbourhoodRows` memo (one row, with the sampler's features of it, per
neighbourhood key met).  When a call changes the tokens at a set C of positions (commits, edits, re-masks), a
position i can have a new neighbourhood only if i lies in [a_c, b_c] for some c in C, a_c / b_c the nearest revealed
positions strictly left / right of c in the new state (proof: let c be the first position of C right of i; if no
revealed position lies strictly between i and c, then a_c <= i, else i's right neighbour and its token did not
change; the same on the left).  Only those ranges are looked up again: on the English chain, 1024 steps, about 15
positions per sequence and call instead of T = 1024.  The slots are those a lookup of every position gives (the
same keys), so the rows, features and draws are those of the direct computation.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from dllm_lit.denoisers.local import revealed_neighbours_at
from dllm_lit.util.indices import flat_nonzero, ranges
from dllm_lit.decoding.neighbourhood_rows import NeighbourhoodRows

__all__ = ["TrackedRows"]


class TrackedRows:
    """Slots ``slot`` [B, T] (int64) of every position's leave-one-out row in the run's memo, whose feature tables
    ``features[name]`` (``derive`` of the float64 rows) are read at those slots.

    The denoiser must be a :class:`~dllm_lit.denoisers.LocalDenoiser` that :class:`NeighbourhoodRows` serves;
    ``z`` is the run's state, looked up in full once here and then only where :meth:`update` says."""

    def __init__(self, den, derive: Callable[[torch.Tensor], dict[str, torch.Tensor]], z: torch.Tensor) -> None:
        self.den, self.T = den, z.shape[1]
        self.memo = NeighbourhoodRows(den, lambda rows: derive(rows.to(torch.float64)), device=z.device)
        self.slot = torch.empty(z.shape, dtype=torch.long, device=z.device)
        self._lookup(z, torch.arange(z.numel(), device=z.device))

    @property
    def features(self) -> dict[str, torch.Tensor]:
        return self.memo.features

    def at(self, flat: torch.Tensor) -> torch.Tensor:
        """Slots of the flat positions ``flat`` (b T + p)."""
        return self.slot.view(-1).index_select(0, flat)

    def update(self, z: torch.Tensor, changed: torch.Tensor) -> torch.Tensor:
        """After the tokens at the flat positions ``changed`` of z changed: look up again every position whose
        neighbourhood may have changed (module docstring) and return those flat positions (ranges that may share
        their ends: a position can be listed twice; they include ``changed``)."""
        if changed.numel() == 0:
            return changed
        T = self.T
        revealed = flat_nonzero(z != self.den.mask_id)
        b = torch.div(changed, T, rounding_mode="floor")
        a, c = revealed_neighbours_at(z, self.den.mask_id, b, changed - b * T, revealed)
        lo = b * T + a.clamp(min=0)
        looked = ranges(lo, b * T + c.clamp(max=T - 1) + 1 - lo)
        self._lookup(z, looked, revealed)
        return looked

    def _lookup(self, z: torch.Tensor, flat: torch.Tensor, revealed: torch.Tensor | None = None) -> None:
        b = torch.div(flat, self.T, rounding_mode="floor")
        p = flat - b * self.T
        a, c = revealed_neighbours_at(z, self.den.mask_id, b, p, revealed)
        self.slot.view(-1)[flat] = self.memo.slots(self.den.neighbour_query(z, b, p, a, c))
