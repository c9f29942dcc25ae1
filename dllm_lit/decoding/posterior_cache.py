"""Per-position posterior statistics kept across sampler steps, refreshed only where needed.

Samplers such as LLaDA (low-confidence remasking) or SEDD with a tempered score need, at every
step, a quantity derived from p(x0_i | z) at *every* masked position (a confidence, a total
score mass).  Under the exact oracle, p(x0_i | z) depends only on the nearest revealed
neighbours of i and their distances (paper App. A, hard evidence), so after a step it changes
only at positions whose nearest revealed neighbour changed - those in the gaps around the newly
revealed tokens.  :class:`PosteriorCache` stores the derived statistics per position and
recomputes them only there: a step costs O(B T) index work plus O(changed V), instead of
O(masked V).  For any denoiser that is not a :class:`~dllm_lit.denoisers.LocalDenoiser` every
masked position is recomputed at every refresh, which is what the sampler would do without the cache.

The cached values are exactly those a fresh query would give (same neighbours, same arithmetic),
so samplers produce identical draws with and without the cache (tested).  When the denoiser names
a key per neighbourhood (:meth:`~dllm_lit.denoisers.LocalDenoiser.neighbour_keys`), the features
are computed once per distinct key among the positions to refresh (the oracle: positions farther
than its certified depth from both neighbours share one posterior).  When the key range is small
(:class:`~dllm_lit.decoding.neighbourhood_rows.NeighbourhoodRows`: the English chain's oracle), the features
are kept once per key met in the run and each position stores only its key's slot: a refresh then looks
up keys (rows only for keys not met before) and writes one integer per position, and reads gather the
feature at the slot.  Same rows, same row-wise features, so the same numbers.

Bounds instead of rows.  A rule that only needs, at refresh, an upper bound of max_v p(x0_i = v | z)
(LLaDA's low-confidence remasking at temperature > 0 draws proposals only where the bound can reach the
k-th confidence) takes it from :meth:`~dllm_lit.denoisers.LocalDenoiser.max_prob_bound` when the denoiser
has one: O(1) per refreshed position and no posterior row at all.  :meth:`PosteriorCache.draw` computes
rows only at the positions drawn from, and tightens their bound to the exact row maximum.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from dllm_lit.denoisers.local import LocalDenoiser, distinct_queries, nearest_revealed, neighbour_distances
from dllm_lit.util.indices import flat_nonzero, nonzero_pairs, ranges
from dllm_lit.samplers.draws import categorical, categorical_from_stored_cdf, row_chunks
from dllm_lit.decoding.neighbourhood_rows import NeighbourhoodRows, law_row_features

__all__ = ["PosteriorCache", "CachedFeatures", "DEFAULT_CACHE_ELEMENTS"]

#: largest B * T * (feature width) the cache allocates (about 1 GB of float64)
DEFAULT_CACHE_ELEMENTS = 2**27

Features = Callable[[torch.Tensor], dict[str, torch.Tensor]]


@dataclass(frozen=True)
class CachedFeatures:
    """What a :class:`PosteriorCache` keeps per position, built once per run by its caller.

    Args:
        features: maps posterior rows [n, V] to named tensors with leading dimension n.
        widths: name -> (trailing shape, dtype) of each feature, for allocation; a dtype of None
            takes the dtype of the first computed values (e.g. the posterior's own dtype).
        fresh: names of features equal to the posterior rows themselves that are, for a
            :class:`LocalDenoiser`, not stored but recomputed from the stored neighbours where
            :meth:`PosteriorCache.get` reads them (identical values; O(V) per read instead of per refreshed position).
        law: for :meth:`PosteriorCache.draw`: maps posterior rows to the (unnormalised) law proposals are drawn from.
        bound: name of a float64 feature holding an upper bound of max_v p(x0_i = v | z) that, when the denoiser
            provides :meth:`~dllm_lit.denoisers.LocalDenoiser.max_prob_bound`, is computed from the neighbours
            alone at refresh (no posterior rows) and tightened to the exact row maximum wherever
            :meth:`PosteriorCache.draw` computes a row.  ``features`` may then be None (no row features at all).
        law_scores: :meth:`PosteriorCache.draw` returns each proposal's probability under ``law`` (a normalised
            law) instead of the posterior's.
        width: numbers per position the cache would store, for the memory check of the caller
            (:class:`~dllm_lit.decoding.confidence_decoding.BlockPosteriors`; None: from ``widths`` and ``fresh``).
    """

    features: Features | None
    widths: dict[str, tuple[tuple[int, ...], torch.dtype | None]]
    fresh: tuple[str, ...] = ()
    law: Callable[[torch.Tensor], torch.Tensor] | None = None
    bound: str | None = None
    law_scores: bool = False
    width: int | None = None


class PosteriorCache:
    """Per-position features of p(x0 | z) over the positions [lo, hi) of a [B, T] state.

    Args:
        denoiser: the sampler's denoiser (neighbour fast path if it is a :class:`LocalDenoiser`).
        spec: the features kept (:class:`CachedFeatures`).
        by_key: keep the features once per neighbourhood key and a slot per position, where the denoiser's key
            range is small (:class:`NeighbourhoodRows`).
    """

    def __init__(self, denoiser, B: int, lo: int, hi: int, spec: CachedFeatures, device: torch.device,
                 by_key: bool = False) -> None:
        features, widths, fresh, law, bound, law_scores = (spec.features, spec.widths, spec.fresh, spec.law,
                                                           spec.bound, spec.law_scores)
        self.den = denoiser
        self.lo, self.hi = lo, hi
        self.features = features
        self.local = isinstance(denoiser, LocalDenoiser)
        self.fresh = set(fresh) if self.local else set()
        self.shape = (B, hi - lo)
        self.device = device
        by_key = by_key and self.local and features is not None and bound is None and NeighbourhoodRows.applies(
            denoiser)
        self.store = {} if by_key else {
            name: torch.zeros((B, hi - lo, *shape), dtype=dt, device=device)
            for name, (shape, dt) in widths.items() if dt is not None and name not in self.fresh}
        self.left: torch.Tensor | None = None
        self.right: torch.Tensor | None = None
        self.z: torch.Tensor | None = None
        self.law = law if self.local else None  # draw() reads rows from the stored neighbours
        self.bound = bound
        self.law_scores = law_scores
        #: features by neighbourhood key (row-wise ``features`` of rows memoised per key) and each position's slot
        self.memo: NeighbourhoodRows | None = None
        self.slot: torch.Tensor | None = None
        #: revealed positions [B, T] at the last refresh (neighbours are then updated from the newly revealed ones)
        self.revealed: torch.Tensor | None = None
        #: with ``memo``: (flat block positions, their slots before, after) of the last :meth:`refresh`, the only
        #: positions whose slot it may have changed
        self.slot_changes: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        if by_key:
            self.memo = NeighbourhoodRows(denoiser, self._stored_features, device=device)
            self.slot = torch.zeros(self.shape, dtype=torch.long, device=device)
        #: rows that :meth:`draw` reads, by neighbourhood key (small key ranges)
        self.law_memo: NeighbourhoodRows | None = None
        if self.law is not None and NeighbourhoodRows.applies(denoiser):
            self.law_memo = NeighbourhoodRows(denoiser, law_row_features(law, law_scores), device=device)

    def _stored_features(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """The features of ``rows`` that are stored (``fresh`` ones are recomputed where read)."""
        return {name: v for name, v in self.features(rows).items() if name not in self.fresh}

    @staticmethod
    def fits(B: int, width: int, budget: int = DEFAULT_CACHE_ELEMENTS, length: int = 1) -> bool:
        """Whether B * length * width elements stay within ``budget``."""
        return B * length * width <= budget

    @staticmethod
    def max_batch(width: int, budget: int = DEFAULT_CACHE_ELEMENTS, length: int = 1) -> int:
        """Largest B with B * length * width within ``budget`` (0 if not even one sequence fits)."""
        return budget // max(1, length * width)

    def refresh(self, z: torch.Tensor) -> None:
        """Recompute the features of masked positions in [lo, hi) whose posterior may have changed."""
        M = self.den.mask_id
        lo, hi = self.lo, self.hi
        self.z = z
        changed = self._update_neighbours(z) if self.local else None
        if changed is not None:
            b, p = changed
        elif self.local:
            masked = z[:, lo:hi] == M
            left, right = nearest_revealed(z, M)
            l_blk, r_blk = left[:, lo:hi], right[:, lo:hi]
            need = masked if self.left is None else masked & ((l_blk != self.left) | (r_blk != self.right))
            self.left, self.right = l_blk, r_blk
            b, p = nonzero_pairs(need)
        else:
            b, p = nonzero_pairs(z[:, lo:hi] == M)
        if b.numel() == 0:
            if self.memo is not None:
                self.slot_changes = (b, b, b)
            return
        if self.local:  # masked positions only: straight from the neighbours, no one-hot rows
            pos = p + lo
            T = z.shape[1]
            a, c = self.left[b, p].long(), self.right[b, p].long()
            d1, d2 = neighbour_distances(pos, a, c, T)
            xl, xr = z[b, a.clamp(min=0)], z[b, c.clamp(max=T - 1)]
            if self.bound is not None:
                self.store[self.bound][b, p] = self.den.max_prob_bound(xl, d1, xr, d2).to(torch.float64)
            if self.features is None:
                return
            if self.memo is not None:  # one slot per position: rows only for keys not met before
                flat, new = b * (hi - lo) + p, self.memo.slots((xl, d1, xr, d2))
                self.slot_changes = (flat, self.slot.view(-1).index_select(0, flat), new)
                self.slot.view(-1).index_copy_(0, flat, new)
                return
            keys = self.den.neighbour_keys(xl, d1, xr, d2)
            if keys is None:
                inv = torch.arange(b.numel(), device=b.device)
                rep, order, bounds = inv, inv, None
            else:
                # one posterior per distinct neighbourhood (e.g. every position of a long gap
                # beyond the oracle's certified depth from both ends shares one)
                rep, inv = distinct_queries(keys)
                order = torch.argsort(inv)
                bounds = torch.searchsorted(inv[order], torch.arange(rep.numel() + 1, device=keys.device))
            for sl in row_chunks(rep.numel(), self.den.vocab_size, rep.device):  # bounded temporaries
                r = rep[sl]
                probs = self.den.probs_given_neighbours(xl[r], d1[r], xr[r], d2[r])
                if bounds is None:
                    dst, src = order[sl], None
                else:
                    lo_i, hi_i = int(bounds[sl.start]), int(bounds[sl.stop])
                    dst = order[lo_i:hi_i]
                    src = inv[dst] - sl.start
                self._write(b[dst], p[dst], self.features(probs), src)
            return
        self._write(b, p, self.features(self.den.probs_at(z, b, p + lo)))

    def _update_neighbours(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Nearest revealed neighbours updated from the positions revealed since the last refresh, and the block
        positions (b, column) whose neighbours changed, each once, in no particular order (the set the two full
        scans of :func:`nearest_revealed` find); None (after recording the revealed positions) when a full scan is needed:
        the first refresh, a position masked again, or one revealed outside the block.

        A position P revealed in the gap (L, R) of its row becomes the right neighbour of the gap's positions
        before it and the left neighbour of those after it, up to the next position revealed in the same gap.
        """
        revealed = z != self.den.mask_id
        prev, self.revealed = self.revealed, revealed
        if prev is None or self.left is None or prev.shape != revealed.shape:
            return None
        T, lo, hi = z.shape[1], self.lo, self.hi
        flat = flat_nonzero(revealed != prev)
        if flat.numel() == 0:
            return flat, flat
        b, P = torch.div(flat, T, rounding_mode="floor"), flat % T
        if not bool(revealed[b, P].all()) or int(P.min()) < lo or int(P.max()) >= hi:
            return None
        L, R = self.left[b, P - lo].long(), self.right[b, P - lo].long()
        first = torch.ones_like(b, dtype=torch.bool)
        first[1:] = b[1:] != b[:-1]
        last = torch.ones_like(first)
        last[:-1] = first[1:]
        prv = torch.where(first, -1, torch.cat([P[:1], P[:-1]]))  # the previous revealed one of the row (-1: none)
        nxt = torch.where(last, T, torch.cat([P[1:], P[-1:]]))
        after_len = torch.minimum(torch.minimum(R, nxt), torch.full_like(R, hi)) - P - 1  # get left = P
        before_start = torch.maximum(torch.maximum(L, prv) + 1, torch.full_like(L, lo))  # get right = P
        before_len = P - before_start
        rows = b * (hi - lo)
        after = ranges(rows + P + 1 - lo, after_len)
        before = ranges(rows + before_start - lo, before_len)
        left, right = self.left.clone(), self.right.clone()  # callers may hold the previous ones
        left.view(-1)[after] = P.to(left.dtype).repeat_interleave(after_len)
        right.view(-1)[before] = P.to(right.dtype).repeat_interleave(before_len)
        self.left, self.right = left, right
        # between two positions revealed in one gap: in both lists, refreshed once
        alone = prv <= L
        # no two entries alike, so their order does not matter (refresh writes per position; no sort)
        need = torch.cat([after, ranges((rows + before_start - lo)[alone], before_len[alone])])
        rb = torch.div(need, hi - lo, rounding_mode="floor")
        return rb, need - rb * (hi - lo)

    def _write(self, b: torch.Tensor, p: torch.Tensor, values: dict[str, torch.Tensor],
               src: torch.Tensor | None = None) -> None:
        """Store feature rows (``values[name][src]`` when ``src`` maps targets to computed rows)."""
        for name, value in values.items():
            if name in self.fresh:
                continue
            if name not in self.store:  # dtype taken from the first values
                self.store[name] = torch.zeros((*self.shape, *value.shape[1:]), dtype=value.dtype, device=self.device)
            self.store[name][b, p] = value if src is None else value[src]

    def rows(self, b: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """Flat row index of (batch, absolute position) pairs in a [B, hi - lo, ...] feature."""
        return b * (self.hi - self.lo) + (p - self.lo)

    def get(self, name: str, b: torch.Tensor, p: torch.Tensor, k: torch.Tensor | None = None) -> torch.Tensor:
        """Feature ``name`` at (batch, absolute position) pairs; with ``k``, only entry k of each row."""
        if name in self.fresh:
            rows = self.posterior(b, p)
            return rows if k is None else rows.gather(1, k[:, None]).squeeze(1)
        if self.memo is not None:
            table, slot = self.memo.features[name], self.slot.view(-1).index_select(0, self.rows(b, p))
            return table.index_select(0, slot) if k is None else table[slot, k]
        if k is None:
            return self.store[name][b, p - self.lo]
        return self.store[name][b, p - self.lo, k]

    def column(self, name: str) -> torch.Tensor:
        """A scalar feature at every position of the block, [B, hi - lo] (stale where not masked)."""
        if self.memo is not None and name in self.memo.features:
            return self.memo.features[name][self.slot]
        return self.store[name]

    def draw_stored(self, name: str, b: torch.Tensor, p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Inverse-CDF draws (uniforms ``u``) from the stored float64 cdf feature ``name`` at (b, p)
        (:func:`~dllm_lit.samplers.draws.categorical_from_stored_cdf`)."""
        if self.memo is not None:
            return categorical_from_stored_cdf(self.memo.features[name], self.slot[b, p - self.lo], u)
        cdf = self.store[name]
        return categorical_from_stored_cdf(cdf.view(-1, cdf.shape[-1]), self.rows(b, p), u)

    def neighbour_query(self, b: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(x_left, d_left, x_right, d_right) at masked (batch, absolute position) pairs from the stored neighbours."""
        T = self.z.shape[1]
        a, c = self.left[b, p - self.lo].long(), self.right[b, p - self.lo].long()
        d1, d2 = neighbour_distances(p, a, c, T)
        return self.z[b, a.clamp(min=0)], d1, self.z[b, c.clamp(max=T - 1)], d2

    def posterior(self, b: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """Posterior rows [n, V] at masked (batch, absolute position) pairs of the last refreshed state, from the
        stored nearest revealed neighbours (local denoisers; the numbers a refresh computes)."""
        return self.den.probs_given_neighbours(*self.neighbour_query(b, p))

    def draw(self, b: torch.Tensor, p: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Proposals at masked (batch, absolute position) pairs of the last refreshed state (local denoisers),
        drawn by the float64 inverse CDF of ``law(posterior row)`` with uniforms ``u``, and each proposal's
        posterior probability: exactly ``categorical(law(rows), u)`` and ``rows[tok]``.  With a ``bound``
        feature, the drawn positions' bound becomes the exact row maximum (valid until a neighbour changes)."""
        if self.law is None:
            raise ValueError("PosteriorCache.draw needs a proposal law and a LocalDenoiser")
        prob_dtype = torch.float64 if self.law_scores else self.den.output_dtype
        if self.law_memo is not None:  # one row per neighbourhood key met in the run: the same numbers
            slot = self.law_memo.slots(self.neighbour_query(b, p))
            f = self.law_memo.features
            tok = categorical_from_stored_cdf(f["cdf"], slot, u)
            if self.bound is not None:
                self.store[self.bound][b, p - self.lo] = f["max"].index_select(0, slot)
            return tok, f["rows"].reshape(-1).index_select(0, slot * self.den.vocab_size + tok).to(prob_dtype)
        tok = torch.empty_like(b)
        prob = torch.empty(b.shape, dtype=prob_dtype, device=b.device)
        for sl in row_chunks(b.numel(), self.den.vocab_size, b.device):
            rows = self.posterior(b[sl], p[sl])
            law = self.law(rows)
            t = categorical(law, u[sl])
            tok[sl] = t
            prob[sl] = (law if self.law_scores else rows).gather(1, t[:, None]).squeeze(1)
            if self.bound is not None:
                self.store[self.bound][b[sl], p[sl] - self.lo] = rows.amax(-1).to(torch.float64)
        return tok, prob
