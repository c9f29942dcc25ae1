"""Adaptive-count decoding over the gaps between revealed tokens, a few candidates per gap (CPU fast path).

An adaptive count that reads the first P = :data:`~dllm_lit.decoding.confidence_decoding.COUNT_PREFIX` sorted
scores (the EB-sampler's entropy bound) needs, at each step, only the P best positions of each sequence, ties by
``tie_rule``.  Under a :class:`~dllm_lit.denoisers.LocalDenoiser` whose neighbourhood keys cap both distances at a
depth D (:meth:`~dllm_lit.denoisers.LocalDenoiser.neighbour_key_depth`; the oracle: its certified table depth), a
masked position of the gap (L, R) between two revealed positions with d_left >= D and d_right >= D (a side without
a revealed token counts as far) has the same key - the same posterior, the same score - as every other such
position of the gap.  So under tie rule "lowest" the first D - 1 + P positions and the last D - 1 of each gap hold
the P best of the sequence ("highest": the first D - 1 and the last D - 1 + P): any other position is beaten, in
the tie order, by P positions of its gap with its key.  The sorted prefix, the count and the committed set
computed over these candidates are those of the whole row, so the commits and the draws are the same
(``docs/samplers/confidence.md``).  Where the prefix does not decide the count (``count_prefix`` false) the row's
every masked position is scored and fully sorted, as the dense loop does.

A step costs O(G (2D + P)) for G gaps (the EB-sampler decodes nearly left to right: one or two gaps per sequence)
instead of O(B T) index work over a posterior cache.  Rows are memoised per neighbourhood key
(:class:`~dllm_lit.decoding.neighbourhood_rows.NeighbourhoodRows`) with the same row-wise features as the cache, so
scores are the same numbers; proposals are drawn from rows recomputed from the neighbours, as the cache draws them.
"""
from __future__ import annotations

import torch

from dllm_lit.denoisers.local import LocalDenoiser, neighbour_distances
from dllm_lit.util.indices import flat_nonzero, nonzero_pairs, ranges
from dllm_lit.samplers.draws import categorical, categorical_from_stored_cdf, row_chunks
from dllm_lit.decoding.posterior_cache import CachedFeatures
from dllm_lit.decoding.sparse_rows import SparseNeighbourhoodRows, keyed_rows
from dllm_lit.samplers.selection import rank_positions, top_n_mask, unique_top_n
from dllm_lit.decoding.step_view import StepView

__all__ = ["GapBlock", "gaps_apply", "decode_gaps"]


def gaps_apply(den, x: torch.Tensor, lo: int, hi: int, prefix: int) -> bool:
    """Whether :class:`GapBlock` serves block [lo, hi) of x: x on the CPU, a :class:`LocalDenoiser` whose keys are
    memoised (:meth:`SparseNeighbourhoodRows.applies`: a known key range, dense or sorted memo) and capped at a known
    depth, no masked position outside the block, and a block longer than the ``prefix``."""
    if x.device.type != "cpu" or not SparseNeighbourhoodRows.applies(den) or den.neighbour_key_depth() is None:
        return False
    masked = x == den.mask_id
    return hi - lo > prefix and not bool(masked[:, :lo].any()) and not bool(masked[:, hi:].any())


class GapBlock:
    """The masked positions of a [B, T] state x (all inside [lo, hi)) as gaps ``(gb, gL, gR)``: row, nearest revealed
    position on the left (-1: none) and on the right (T: none), sorted by (row, gL).

    Acts as the ``post`` of a :class:`~dllm_lit.decoding.confidence_decoding.StepView` whose ``sel`` indexes the
    current :meth:`entries` (features by key slot; ``fresh`` features recomputed from the neighbours; proposals
    drawn from ``law`` of recomputed rows, as :meth:`PosteriorCache.draw`).
    """

    cache = None  #: no :class:`PosteriorCache`: :class:`StepView` reads features through :meth:`get`

    def __init__(self, den: LocalDenoiser, x: torch.Tensor, lo: int, hi: int, spec: CachedFeatures,
                 row0: int = 0) -> None:
        self.den, self.x, self.lo, self.hi, self.row0 = den, x, lo, hi, row0
        self.names, self.fresh, self.law, self.law_scores = set(spec.widths), set(spec.fresh), spec.law, spec.law_scores
        features = spec.features
        self.depth = int(den.neighbour_key_depth())
        self.memo = keyed_rows(den, lambda rows: {k: v for k, v in features(rows).items()
                                                         if k not in self.fresh}, device=x.device)
        B, T = x.shape
        m = x == den.mask_id
        first = m.clone()
        first[:, 1:] &= ~m[:, :-1]
        last = m.clone()
        last[:, :-1] &= ~m[:, 1:]
        s, e = flat_nonzero(first), flat_nonzero(last)  # run starts and ends, paired in row-major order
        self.gb = torch.div(s, T, rounding_mode="floor")
        self.gL, self.gR = s - self.gb * T - 1, e - self.gb * T + 1
        self._entries: tuple[torch.Tensor, ...] | None = None

    @property
    def draws_law(self) -> bool:
        """Whether proposals are drawn by :meth:`draw_law`."""
        return self.law is not None

    def masked_count(self) -> torch.Tensor:
        """Masked positions per row, [B]."""
        out = torch.zeros(self.x.shape[0], dtype=torch.long)
        return out.index_add_(0, self.gb, self.gR - self.gL - 1)

    def entries(self, heads: int | None, tails: int | None, rows: torch.Tensor | None = None) -> torch.Tensor:
        """Set the step's entries (row, position, gap) to the first ``heads`` and last ``tails`` masked positions of
        every gap (of the rows listed in ``rows``; None: all; ``heads`` None: every position), in (row, position)
        order, compute their key slots (new rows for keys not met before) and return their number per gap."""
        gi = torch.arange(self.gb.numel())
        if rows is not None:
            gi = gi[torch.isin(self.gb, rows)]
        L, R = self.gL.index_select(0, gi), self.gR.index_select(0, gi)
        g = R - L - 1
        if heads is None:
            head, tail = g, torch.zeros_like(g)
        else:
            head = g.clamp(max=heads)
            tail = (g - head).clamp(max=tails)
        count = head + tail
        e_gap = gi.repeat_interleave(count)
        off = ranges(torch.zeros_like(count), count)  # offset within the gap's candidates
        skip = (g - head - tail).repeat_interleave(count)  # plateau positions left out, before the tail
        head_e = head.repeat_interleave(count)
        e_p = self.gL.index_select(0, e_gap) + 1 + off + torch.where(off >= head_e, skip, 0)
        e_b = self.gb.index_select(0, e_gap)
        self._entries = (e_b, e_p, e_gap, torch.empty(0, dtype=torch.long))
        slot = self.memo.slots(self._query(torch.arange(e_b.numel())))
        self._entries = (e_b, e_p, e_gap, slot)
        return count

    def _query(self, sel: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(x_left, d_left, x_right, d_right) of the entries ``sel``."""
        e_b, e_p, e_gap, _ = self._entries
        b, p, gap = e_b.index_select(0, sel), e_p.index_select(0, sel), e_gap.index_select(0, sel)
        a, c = self.gL.index_select(0, gap), self.gR.index_select(0, gap)
        T = self.x.shape[1]
        d1, d2 = neighbour_distances(p, a, c, T)
        flat, row = self.x.view(-1), b * T
        return flat.index_select(0, row + a.clamp(min=0)), d1, flat.index_select(0, row + c.clamp(max=T - 1)), d2

    def get(self, name: str, b: torch.Tensor, p: torch.Tensor, k: torch.Tensor | None = None,
            sel: torch.Tensor | None = None) -> torch.Tensor:
        """Feature ``name`` at the entries ``sel`` (entry k of each row with ``k``)."""
        if name in self.fresh:
            rows = self.den.probs_given_neighbours(*self._query(sel))
            return rows if k is None else rows.gather(1, k[:, None]).squeeze(1)
        table, slot = self.memo.features[name], self._entries[3].index_select(0, sel)
        return table.index_select(0, slot) if k is None else table[slot, k]

    def draw(self, u: torch.Tensor, name: str, b: torch.Tensor, p: torch.Tensor,
             sel: torch.Tensor | None = None) -> torch.Tensor:
        """Inverse-CDF draws from the stored float64 cdf feature ``name`` at the entries ``sel``."""
        return categorical_from_stored_cdf(self.memo.features[name], self._entries[3].index_select(0, sel), u)

    def draw_law(self, view, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Proposals from ``law`` of the rows at the entries ``view.sel`` and their posterior (``law_scores``: law)
        probabilities, as :meth:`PosteriorCache.draw`."""
        query = self._query(view.sel)
        n = view.sel.numel()
        tok = torch.empty(n, dtype=torch.long)
        prob = torch.empty(n, dtype=torch.float64 if self.law_scores else self.den.output_dtype)
        for sl in row_chunks(n, self.den.vocab_size, view.sel.device):
            rows = self.den.probs_given_neighbours(*(q[sl] for q in query))
            law = self.law(rows)
            t = categorical(law, u[sl])
            tok[sl] = t
            prob[sl] = (law if self.law_scores else rows).gather(1, t[:, None]).squeeze(1)
        return tok, prob

    def commit(self, sel: torch.Tensor, tokens: torch.Tensor) -> None:
        """Write ``tokens`` at the entries ``sel`` and split their gaps there."""
        e_b, e_p, e_gap, _ = self._entries
        b, p, gap = e_b.index_select(0, sel), e_p.index_select(0, sel), e_gap.index_select(0, sel)
        T = self.x.shape[1]
        self.x.view(-1)[b * T + p] = tokens
        order = torch.argsort(b * T + p)
        p, gap = p[order], gap[order]
        first = torch.ones_like(gap, dtype=torch.bool)
        first[1:] = gap[1:] != gap[:-1]
        last = torch.ones_like(first)
        last[:-1] = first[1:]
        prev = torch.where(first, self.gL.index_select(0, gap), torch.cat([p[:1], p[:-1]]))
        hit = torch.zeros(self.gb.numel(), dtype=torch.bool)
        hit[gap] = True
        keep = ~hit
        nb = torch.cat([self.gb[keep], self.gb.index_select(0, gap), self.gb.index_select(0, gap[last])])
        nL = torch.cat([self.gL[keep], prev, p[last]])
        nR = torch.cat([self.gR[keep], p, self.gR.index_select(0, gap[last])])
        ok = nR - nL > 1
        nb, nL, nR = nb[ok], nL[ok], nR[ok]
        order = torch.argsort(nb * (T + 2) + nL + 1)
        self.gb, self.gL, self.gR = nb[order], nL[order], nR[order]
        self._entries = None

    def entries_table(self) -> tuple[torch.Tensor, ...]:
        """The step's entries: (rows, positions, gaps, key slots)."""
        return self._entries

    def set_entries(self, table: tuple[torch.Tensor, ...]) -> None:
        """Replace the step's entries (e.g. by two tables joined, for one :meth:`commit`)."""
        self._entries = table

    def entry_rows(self) -> torch.Tensor:
        """Rows of the step's entries."""
        return self._entries[0]

    def entry_positions(self) -> torch.Tensor:
        """Absolute positions of the step's entries."""
        return self._entries[1]


def _padded(rows: torch.Tensor, values: torch.Tensor, B: int, fill: float,
            width: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """values [n] of entries in row order ``rows`` (sorted) as a [B, C] matrix (row b's entries in its first columns,
    ``fill`` after; C >= ``width``) and each row's first entry index [B]."""
    counts = torch.zeros(B, dtype=torch.long).index_add_(0, rows, torch.ones_like(rows))
    start = torch.cumsum(counts, 0) - counts
    C = max(width, int(counts.max()) if B else 0)
    out = torch.full((B, C), fill, dtype=values.dtype)
    col = torch.arange(rows.numel()) - start.index_select(0, rows)
    out[rows, col] = values
    return out, start


def decode_gaps(block: GapBlock, taken: torch.Tensor, propose, score, count, count_prefix, tie_rule: str,
                prefix: int) -> None:
    """Decode every masked position of ``block`` under the adaptive ``count`` with its ``count_prefix`` of the first
    ``prefix`` sorted scores (see :func:`~dllm_lit.decoding.confidence_decoding.decode_blocks`; ``taken`` counts each
    row's steps in place): the commits and draws of the dense loop."""
    B = block.x.shape[0]
    D, lo, hi = block.depth, block.lo, block.hi
    heads, tails = (D - 1 + prefix, D - 1) if tie_rule == "lowest" else (D - 1, D - 1 + prefix)
    rows_b = torch.arange(B)
    while block.gb.numel():
        m_count = block.masked_count()
        active = m_count > 0
        j_rows = taken.clone()  # each row's step index
        block.entries(heads, tails)
        e_b, e_p = block.entry_rows(), block.entry_positions()
        s = score(StepView(block, e_b, e_p, j_rows.index_select(0, e_b), lo, hi, torch.arange(e_b.numel())))
        scores, start = _padded(e_b, s, B, -torch.inf, prefix)
        top, top_cols = torch.topk(scores, prefix, dim=1)
        exact = count_prefix(top) | ~active
        n = count(top, m_count).long() * active * exact
        taken += active.long()
        first = torch.arange(prefix)[None, :] < n[:, None]
        if bool(unique_top_n(top, n).all()):  # no tie at the n-th score: topk's first n columns
            rr, cc = rows_b[:, None].expand_as(first)[first], top_cols[first]
        else:
            rr, cc = nonzero_pairs(top_n_mask(scores, top, n, tie_rule))
        sel = start.index_select(0, rr) + cc
        tok = propose(StepView(block, rr, e_p.index_select(0, sel), j_rows.index_select(0, rr), lo, hi, sel))
        inexact = rows_b[~exact]
        if inexact.numel():  # every masked position of these rows, fully sorted (as the dense loop)
            prefix_entries = block.entries_table()
            block.entries(None, None, inexact)
            f_b, f_p = block.entry_rows(), block.entry_positions()
            fs = score(StepView(block, f_b, f_p, j_rows.index_select(0, f_b), lo, hi, torch.arange(f_b.numel())))
            local = torch.searchsorted(inexact, f_b)
            dense = torch.full((inexact.numel(), hi - lo), -torch.inf, dtype=torch.float64)
            index = torch.zeros((inexact.numel(), hi - lo), dtype=torch.long)
            dense[local, f_p - lo] = fs
            index[local, f_p - lo] = torch.arange(f_b.numel())
            order = rank_positions(dense, tie_rule)
            nf = count(dense.gather(1, order), m_count.index_select(0, inexact)).long()
            fsel = index.gather(1, order)[torch.arange(hi - lo)[None, :] < nf[:, None]]
            fb = f_b.index_select(0, fsel)
            f_tok = propose(StepView(block, fb, f_p.index_select(0, fsel), j_rows.index_select(0, fb), lo, hi, fsel))
            sel = torch.cat([sel, fsel + prefix_entries[0].numel()])  # one entry table: the prefix's, then these
            block.set_entries(tuple(torch.cat([a, c]) for a, c in zip(prefix_entries, block.entries_table())))
            tok = torch.cat([tok, f_tok])
        block.commit(sel, tok)
