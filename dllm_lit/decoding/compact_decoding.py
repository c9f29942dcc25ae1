"""Fixed-schedule, score-bounded decoding of one block over its masked positions only (compact columns).

Under a fixed schedule every sequence commits the same number k of tokens at a step, so when the
block starts with the same number n of masked positions in every sequence, every sequence still has
the same number of masked positions after each step.  :class:`CompactBlock` therefore keeps the masked
positions of the block as the columns of dense [B, n] tensors - their absolute positions (ascending), their
nearest revealed neighbours and the score bounds - and drops the k committed columns after every step.
All bookkeeping (neighbour scans, bound refresh, top-k) then costs O(B n) with n the masked count, instead
of O(B L) over the whole block, and needs no [B, L] masks.  Posterior rows are computed once per distinct
neighbourhood (most masked positions share a few hundred on the English chain).

The steps are those of :func:`~dllm_lit.decoding.confidence_decoding.decode_blocks` with a ``bound``:
proposals are drawn first at the columns of largest bound, then wherever the bound reaches the k-th largest
score found so far; columns are in position order, so the stable top-k over columns is the top-k over
positions with the same tie rule.  Which positions are drawn first does not change the commits (every
position never drawn scores strictly below the k-th), and proposals are keyed by (step, position), so the
draws are identical to the dense path's.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from dllm_lit.denoisers.local import LocalDenoiser, nearest_revealed, neighbour_distances
from dllm_lit.util.indices import flat_nonzero, nonzero_pairs, ranges
from dllm_lit.samplers.draws import ROW_CHUNK_ELEMENTS, categorical, categorical_from_stored_cdf, row_chunks
from dllm_lit.decoding.neighbourhood_rows import NeighbourhoodRows, rows_by_key, law_row_features

__all__ = ["CompactBlock", "compact_applies", "compact_counts"]


def compact_applies(den, x: torch.Tensor, lo: int, hi: int, counts: list[int]) -> bool:
    """Whether a :class:`CompactBlock` can decode block [lo, hi) of x with the commit counts ``counts``: x on the
    CPU, a :class:`LocalDenoiser` with a row-free max-probability bound, the same number n of masked positions
    in every sequence, and at most n commits in all.  On CUDA the dense path, a few large kernels per step
    without host synchronisation, is faster (OWT-sized LLaDA grid on an H100: 20 s dense, 41 s compact)."""
    if x.device.type != "cpu" or not (isinstance(den, LocalDenoiser) and den.has_max_prob_bound) or x.shape[0] == 0:
        return False
    return x.is_contiguous() and compact_counts(x, den.mask_id, lo, hi, counts)


def compact_counts(x: torch.Tensor, mask_id: int, lo: int, hi: int, counts: list[int]) -> bool:
    """Whether every sequence of x holds the same number n of masked positions in [lo, hi), with at most n
    commits in all (so every row keeps the same count after each step of a fixed schedule)."""
    if x.shape[0] == 0:
        return False
    n = (x[:, lo:hi] == mask_id).sum(1)
    return bool((n == n[0]).all()) and sum(counts) <= int(n[0])


class CompactBlock:
    """The masked positions of block [lo, hi) of a [B, T] state x as the columns of [B, n] tensors.

    ``pos``: absolute positions (ascending per row); ``left`` / ``right``: nearest revealed positions
    (-1 / T: none); ``bound``: float64 upper bounds of max_v p(x0 = v | x), refreshed where the neighbours
    changed (with ``exact_bounds``, the exact row maximum when the distinct rows are few, else the denoiser's
    row-free bound, then tightened to the row maximum where a row is drawn).  Acts as the ``post`` of a
    :class:`~dllm_lit.decoding.confidence_decoding.StepView` whose ``sel`` holds flat column indices
    (``row * n + column``): proposals are then drawn by :meth:`draw_law`.
    ``law``: posterior rows -> the unnormalised proposal law; ``row0``: the state's first row in the caller's batch;
    ``exact_bounds``: whether refreshed bounds may be exact row maxima (worth it where rows are cheap: exact bounds
    make fewer draws); ``law_scores``: drawn proposals come with their probability under ``law`` (normalised) instead
    of the posterior's.
    """

    names: frozenset[str] = frozenset()  #: no stored row features
    draws_law = True

    def __init__(self, den: LocalDenoiser, x: torch.Tensor, lo: int, hi: int,
                 law: Callable[[torch.Tensor], torch.Tensor], row0: int = 0, exact_bounds: bool = True,
                 law_scores: bool = False) -> None:
        self.den, self.x, self.lo, self.hi, self.law, self.row0 = den, x, lo, hi, law, row0
        self.law_scores = law_scores
        self.exact_bounds = exact_bounds
        B = x.shape[0]
        left, right = nearest_revealed(x, den.mask_id)
        masked = x[:, lo:hi] == den.mask_id
        n = int(masked[0].sum()) if B else 0
        self.pos = nonzero_pairs(masked)[1].view(B, n) + lo
        self.left = left[:, lo:hi][masked].view(B, n).long()
        self.right = right[:, lo:hi][masked].view(B, n).long()
        self.bound = torch.empty(self.pos.shape, dtype=torch.float64, device=x.device)
        self.memo = None  # with exact bounds and a small key range: rows by key for the whole block
        if exact_bounds and NeighbourhoodRows.applies(den):
            self.memo = NeighbourhoodRows(den, self._row_features, device=x.device)
        self._refresh(torch.arange(B * n, device=x.device))

    @property
    def n(self) -> int:
        """Masked positions per sequence."""
        return self.pos.shape[1]

    def _refresh(self, sel: torch.Tensor) -> None:
        """Bounds at the flat columns ``sel`` from their current neighbours: with ``exact_bounds`` and few distinct
        rows (:meth:`_rows_by_key`) the exact row maxima, else the denoiser's row-free bound."""
        if sel.numel() == 0:
            return
        query = self._query(sel, torch.div(sel, self.n, rounding_mode="floor"))
        keyed = self._rows_by_key(query) if self.exact_bounds else None
        if keyed is None:
            self.bound.view(-1)[sel] = self.den.max_prob_bound(*query).to(torch.float64)
        else:
            f, index = keyed
            self.bound.view(-1)[sel] = f["max"].index_select(0, index)

    def _row_features(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """What the block needs of a posterior row: its proposal law's float64 cdf, its maximum, the row."""
        return law_row_features(self.law, self.law_scores)(rows)

    def _rows_by_key(self, query: tuple[torch.Tensor, ...]) -> tuple[dict[str, torch.Tensor], torch.Tensor] | None:
        """:func:`rows_by_key` of the queries: from the block's memo, else one row per distinct key (None when the
        denoiser names no keys or the distinct rows exceed one chunk of ``ROW_CHUNK_ELEMENTS``)."""
        return rows_by_key(self.den, query, self._row_features, self.memo,
                           max_rows=ROW_CHUNK_ELEMENTS // self.den.vocab_size)

    def _query(self, sel: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(x_left, d_left, x_right, d_right) of the flat columns ``sel`` (in rows ``rows``), the arguments of the
        denoiser's neighbour queries."""
        T = self.x.shape[1]
        p, a, r = (t.view(-1).index_select(0, sel) for t in (self.pos, self.left, self.right))
        d1, d2 = neighbour_distances(p, a, r, T)
        start = rows * T
        flat = self.x.view(-1)
        return flat.index_select(0, start + a.clamp(min=0)), d1, flat.index_select(0, start + r.clamp(max=T - 1)), d2

    def draw_law(self, view, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Proposals at the columns ``view.sel`` (flat), drawn by the float64 inverse CDF of ``law(row)`` with
        uniforms ``u``, and their posterior probabilities (as :meth:`PosteriorCache.draw`); the drawn columns'
        bounds become the exact row maxima.  With :meth:`_rows_by_key`, each neighbourhood's row is computed once
        and drawn from by :func:`categorical_from_stored_cdf` (the same row, cdf and target: the same draws)."""
        sel = view.sel
        query = self._query(sel, view.rows)
        flat_bound = self.bound.view(-1)
        keyed = self._rows_by_key(query)
        if keyed is not None:
            f, index = keyed
            tok = categorical_from_stored_cdf(f["cdf"], index, u)
            flat_bound[sel] = f["max"].index_select(0, index)
            if not self.law_scores:
                view.drawn_rows = (f["rows"], f["max"], index)
            return tok, f["rows"].reshape(-1).index_select(0, index * self.den.vocab_size + tok)
        tok = torch.empty_like(sel)
        prob = torch.empty(sel.shape, dtype=torch.float64 if self.law_scores else self.den.output_dtype,
                           device=sel.device)
        for sl in row_chunks(sel.numel(), self.den.vocab_size, sel.device):
            rows = self.den.probs_given_neighbours(*(q[sl] for q in query))
            law = self.law(rows)
            t = categorical(law, u[sl])
            tok[sl] = t
            prob[sl] = (law if self.law_scores else rows).gather(1, t[:, None]).squeeze(1)
            flat_bound[sel[sl]] = rows.amax(1).to(torch.float64)  # a max is exact: any order, the same number
        return tok, prob

    def commit(self, cols: torch.Tensor, tokens: torch.Tensor) -> None:
        """Write ``tokens`` [B, k] at the columns ``cols`` [B, k] (ascending per row) into the state, drop those
        columns and update the neighbours and bounds that changed.

        A committed column c at position P in the gap (L, R) of its row (L, R its revealed neighbours) becomes
        the right neighbour of the gap's columns before it and the left neighbour of those after it, up to the
        next committed column of the same gap; every other column keeps its neighbours.
        """
        B, n = self.pos.shape
        k = cols.shape[1]
        P, L, R = self.pos.gather(1, cols), self.left.gather(1, cols), self.right.gather(1, cols)
        row = torch.arange(B, device=cols.device)[:, None]
        base = row * n
        self.x.view(-1)[(row * self.x.shape[1] + P).view(-1)] = tokens.reshape(-1)
        start = cols - (P - L.clamp(min=self.lo - 1) - 1)  # first and last column of the gap
        end = cols + (R.clamp(max=self.hi) - P - 1)
        prev = torch.cat([torch.full_like(cols[:, :1], -1), cols[:, :-1]], 1)
        nxt = torch.cat([cols[:, 1:], torch.full_like(cols[:, :1], n)], 1)
        after_len = torch.minimum(end, nxt - 1) - cols  # columns that get left = P
        before_start = torch.maximum(start, prev + 1)  # columns that get right = P
        before_len = cols - before_start
        after = ranges((base + cols + 1).view(-1), after_len.view(-1))
        before = ranges((base + before_start).view(-1), before_len.view(-1))
        self.left.view(-1)[after] = P.view(-1).repeat_interleave(after_len.view(-1))
        self.right.view(-1)[before] = P.view(-1).repeat_interleave(before_len.view(-1))
        # columns between two commits of one gap are in both lists: refresh the "before" ones only once
        alone = (prev < start).view(-1)
        self._refresh(torch.cat([after, ranges((base + before_start).view(-1)[alone], before_len.view(-1)[alone])]))
        keep = torch.ones_like(self.pos, dtype=torch.bool)
        keep.scatter_(1, cols, False)
        keep = flat_nonzero(keep).view(B, n - k) - base  # every row keeps n - k columns
        self.pos, self.bound = self.pos.gather(1, keep), self.bound.gather(1, keep)
        self.left, self.right = self.left.gather(1, keep), self.right.gather(1, keep)

