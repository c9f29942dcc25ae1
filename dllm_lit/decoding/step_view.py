"""What a confidence-ranked rule's proposal, score and count see at one step (:class:`StepView`), shared by the
engine (:mod:`~dllm_lit.decoding.confidence_decoding`) and its gap path (:mod:`~dllm_lit.decoding.gap_decoding`)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from dllm_lit.samplers.draws import StepUniforms, row_chunks

if TYPE_CHECKING:
    from dllm_lit.decoding.compact_decoding import CompactBlock
    from dllm_lit.decoding.confidence_decoding import BlockPosteriors

__all__ = ["StepView"]


@dataclass
class StepView:
    """What a proposal, score or count rule sees at one step: the loaded posteriors ``post``, the positions
    it covers (rows ``rows`` of the state, absolute positions ``p``; without the cache also their indices
    ``sel`` among the loaded positions, None = all), their proposals ``tok`` and step index ``j`` (an int,
    or a tensor per covered position).  ``tok_prob``: p_i(tok_i), when the proposal step computed it.
    ``post`` may also be a :class:`~dllm_lit.decoding.compact_decoding.CompactBlock`, ``sel`` then the covered
    flat columns."""

    post: BlockPosteriors | CompactBlock
    rows: torch.Tensor
    p: torch.Tensor
    j: int | torch.Tensor
    lo: int
    hi: int
    sel: torch.Tensor | None = None
    tok: torch.Tensor | None = None
    tok_prob: torch.Tensor | None = None
    #: (rows, maxima, index): the posterior rows of the covered positions and their maxima are rows[index] and
    #: maxima[index], when the draw looked them up in a table
    drawn_rows: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    _fresh: dict[str, torch.Tensor] | None = None

    @property
    def b(self) -> torch.Tensor:
        """Batch rows of the covered positions in the sampler's batch (the keys of its uniforms)."""
        return self.rows + self.post.row0 if self.post.row0 else self.rows

    def get(self, name: str, k: torch.Tensor | None = None) -> torch.Tensor:
        """Feature ``name`` at the covered positions (entry k of each row with ``k``)."""
        cache = self.post.cache
        if cache is not None and name in cache.fresh:  # recomputed rows: once per view
            if self._fresh is None:
                self._fresh = {}
            if name not in self._fresh:
                self._fresh[name] = cache.get(name, self.rows, self.p)
            rows = self._fresh[name]
            return rows if k is None else rows.gather(1, k[:, None]).squeeze(1)
        return self.post.get(name, self.rows, self.p, k, self.sel)

    def row_feature(self, derive: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """``derive(rows)`` (row-wise) of the posterior rows at the covered positions; over a cache of a local
        denoiser that names keys, one row per distinct neighbourhood key (equal keys: identical rows and values)."""
        cache = self.post.cache
        if cache is not None and cache.local and cache.z is not None:
            distinct = cache.den.distinct_rows(cache.neighbour_query(self.rows, self.p))
            if distinct is not None:
                rows = distinct[0]  # row-wise, in chunks that stay in cache (at V = 4096 one batch went to memory)
                chunks = row_chunks(rows.shape[0], rows.shape[-1], rows.device)
                derived = derive(rows) if len(chunks) <= 1 else torch.cat([derive(rows[sl]) for sl in chunks])
                return derived.index_select(0, distinct[1])
        return derive(self.get("probs"))

    def uniforms(self, u: StepUniforms, slot: int = 0) -> torch.Tensor:
        """``u`` at (step, covered position)."""
        return u.at(self.j, self.b, self.p, slot)

