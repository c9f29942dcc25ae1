"""Denoisers whose posterior at a masked position depends only on its nearest revealed neighbours.

Under hard masking evidence a first-order Markov chain factorises at revealed tokens: for a
masked position i with nearest revealed neighbours x_a (a < i) and x_b (b > i),

    p(x_i = v | z)  depends only on  (x_a, i - a, x_b, b - i).

:class:`LocalDenoiser` declares that property.  A subclass implements one method,
:meth:`LocalDenoiser.probs_given_neighbours`; the general queries (:meth:`probs_at`,
:meth:`forward`) follow from it.  Samplers detect the property with ``isinstance`` and use it
for their fast paths: decoding in a known order (each step queries only its committed positions
from their neighbours) and per-position posterior caches refreshed only where a neighbour changed.
"""
from __future__ import annotations

from abc import abstractmethod

import torch

from dllm_lit.denoisers.base import Denoiser, check_tokens
from dllm_lit.denoisers.channels import AbsorbingMask
from dllm_lit.util.indices import flat_nonzero

__all__ = ["LocalDenoiser", "nearest_revealed", "revealed_neighbours_at", "neighbour_distances", "distinct_queries"]


def nearest_revealed(z: torch.Tensor, mask_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices (int32) of the nearest revealed position strictly left (-1 if none) and right (T if none).

    Two scans over [B, T]: a running max of revealed indices from the left and a running min from
    the right, each shifted by one position.
    """
    B, T = z.shape
    pos = torch.arange(T, device=z.device, dtype=torch.int32).expand(B, T)
    revealed = z != mask_id
    left = torch.full((B, T), -1, dtype=torch.int32, device=z.device)
    right = torch.full((B, T), T, dtype=torch.int32, device=z.device)
    if T > 1:
        left[:, 1:] = torch.where(revealed[:, :-1], pos[:, :-1], -1).cummax(dim=1).values
        right[:, :-1] = torch.where(revealed[:, 1:], pos[:, 1:], T).flip(1).cummin(dim=1).values.flip(1)
    return left, right


def revealed_neighbours_at(z: torch.Tensor, mask_id: int, b: torch.Tensor, p: torch.Tensor,
                           revealed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`nearest_revealed` (as int64) at the positions (b, p) only.  On the CPU a binary search of each flat
    index b T + p in the sorted flat indices of the revealed positions, O(B T) for that list plus O(n log(B T)),
    instead of two full scans over [B, T]; elsewhere the two scans (the list's ``nonzero`` waits for the device,
    the scans do not: on an H100 the scans made the OWT-sized ReMDM grid faster).  Same numbers either way.
    ``revealed``: that list, ``flat_nonzero(z != mask_id)``, when the caller has it (CPU)."""
    if z.device.type != "cpu":
        left, right = nearest_revealed(z, mask_id)
        return left[b, p].long(), right[b, p].long()
    T = z.shape[1]
    if revealed is None:
        revealed = flat_nonzero(z != mask_id)
    row = b.long() * T
    q = row + p.long()
    if revealed.numel() == 0:
        return torch.full_like(q, -1), torch.full_like(q, T)
    i = torch.searchsorted(revealed, q)  # revealed[i - 1] < q
    j = torch.searchsorted(revealed, q, right=True)  # revealed[j] > q
    before = revealed[(i - 1).clamp(min=0)]
    after = revealed[j.clamp(max=revealed.numel() - 1)]
    left = torch.where((i > 0) & (before >= row), before - row, -1)
    right = torch.where((j < revealed.numel()) & (after < row + T), after - row, T)
    return left, right


def neighbour_distances(p: torch.Tensor, a: torch.Tensor, c: torch.Tensor, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Distances (d_left, d_right) from positions ``p`` to neighbours ``a`` (-1: none) and ``c`` (T: none); 0 = none."""
    return torch.where(a >= 0, p - a, 0), torch.where(c < seq_len, c - p, 0)


def distinct_queries(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rep, inv) for neighbourhood ``keys`` [n] (:meth:`LocalDenoiser.neighbour_keys`): ``rep[u]`` is one query
    holding the u-th distinct key and ``inv[i]`` the distinct key of query i, so the rows of the ``rep`` queries,
    read through ``inv``, are the rows of all n queries (equal keys give identical rows)."""
    uniq, inv = torch.unique(keys, return_inverse=True)
    rep = torch.empty(uniq.numel(), dtype=torch.long, device=keys.device)
    rep.scatter_(0, inv, torch.arange(keys.numel(), device=keys.device))
    return rep, inv


class LocalDenoiser(Denoiser):
    """A denoiser whose posterior at a masked position is a function of its nearest revealed neighbours."""

    @abstractmethod
    def probs_given_neighbours(self, x_left: torch.Tensor, d_left: torch.Tensor,
                               x_right: torch.Tensor, d_right: torch.Tensor) -> torch.Tensor:
        """p(x_i = . | neighbours) for n masked positions: [n, V], rows summing to one.

        ``x_left`` / ``x_right`` are the neighbours' tokens, ``d_left`` / ``d_right`` their
        distances; a distance <= 0 means no revealed token on that side.
        """

    def neighbour_keys(self, x_left: torch.Tensor, d_left: torch.Tensor,
                       x_right: torch.Tensor, d_right: torch.Tensor) -> torch.Tensor | None:
        """Int64 key per query such that equal keys give identical rows of :meth:`probs_given_neighbours`
        (callers may then compute one row per distinct key), or None when no such key is known."""
        return None

    def neighbour_key_count(self) -> int | None:
        """K such that every :meth:`neighbour_keys` key lies in [0, K), or None when unknown (or no keys)."""
        return None

    def neighbour_key_depth(self) -> int | None:
        """D such that :meth:`neighbour_keys` does not change when a distance >= D grows (distances are capped at D
        in the key), or None when unknown (or no keys)."""
        return None

    @property
    def has_max_prob_bound(self) -> bool:
        """Whether :meth:`max_prob_bound` gives bounds (False unless a subclass provides them)."""
        return False

    def max_prob_bound(self, x_left: torch.Tensor, d_left: torch.Tensor,
                       x_right: torch.Tensor, d_right: torch.Tensor) -> torch.Tensor | None:
        """Float64 upper bounds on max_v of the rows :meth:`probs_given_neighbours` returns, computed without
        those rows (O(1) per query), or None when the denoiser knows no such bound (see :attr:`has_max_prob_bound`)."""
        return None

    def neighbour_query(self, z: torch.Tensor, b: torch.Tensor, p: torch.Tensor, a: torch.Tensor,
                        c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The arguments (x_left, d_left, x_right, d_right) of :meth:`probs_given_neighbours` for the masked
        positions (b, p) of z with nearest revealed positions a (-1: none) and c (T: none)."""
        T = z.shape[1]
        d1, d2 = neighbour_distances(p, a, c, T)
        return z[b, a.clamp(min=0)], d1, z[b, c.clamp(max=T - 1)], d2

    def grid_query(self, z: torch.Tensor, a: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """:meth:`neighbour_query` at every position of z [B, T] (flattened row-major), with nearest revealed
        positions a, c [B, T] (:func:`nearest_revealed`): the same numbers by gathers along the rows."""
        T = z.shape[1]
        a, c = a.long(), c.long()
        d1, d2 = neighbour_distances(torch.arange(T, device=z.device), a, c, T)
        return (z.gather(1, a.clamp(min=0)).view(-1), d1.view(-1), z.gather(1, c.clamp(max=T - 1)).view(-1),
                d2.view(-1))

    def grid_keys(self, z: torch.Tensor) -> tuple[torch.Tensor | None, tuple[torch.Tensor, ...] | None]:
        """(keys, query): :meth:`neighbour_keys` of every position's leave-one-out neighbourhood in z [B, T]
        (flattened row-major; None when the denoiser names no keys) and the :meth:`grid_query` it was computed from
        (None where a subclass computes the keys without it)."""
        query = self.grid_query(z, *nearest_revealed(z, self.mask_id))
        return self.neighbour_keys(*query), query

    def probs_from_neighbours(self, z: torch.Tensor, b: torch.Tensor, p: torch.Tensor,
                              a: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """:meth:`probs_given_neighbours` for masked positions (b, p) of z with neighbour indices a, c."""
        return self.probs_given_neighbours(*self.neighbour_query(z, b, p, a, c))

    def distinct_rows(self, query: tuple[torch.Tensor, ...],
                      max_rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(rows, inv): one row of :meth:`probs_given_neighbours` per distinct :meth:`neighbour_keys` key among the
        queries (x_left, d_left, x_right, d_right), query i reading row ``inv[i]``: the same rows as querying all,
        at the cost of the distinct ones.  None when the denoiser names no keys or there are more than ``max_rows``
        distinct keys."""
        keys = self.neighbour_keys(*query)
        if keys is None:
            return None
        rep, inv = distinct_queries(keys)
        if max_rows is not None and rep.numel() > max_rows:
            return None
        return self.probs_given_neighbours(*(q.index_select(0, rep) for q in query)), inv

    def probs_at(self, z: torch.Tensor, batch_index: torch.Tensor, position_index: torch.Tensor,
                 neighbours: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """p(x0 | z) at the listed (batch, position) pairs: Tensor[n, V] (one-hot at revealed positions).

        ``neighbours`` may pass precomputed :func:`nearest_revealed` output for z.
        """
        check_tokens(z, self.vocab_size)
        b = batch_index.long()
        p = position_index.long()
        left, right = neighbours if neighbours is not None else nearest_revealed(z, self.mask_id)
        post = self.probs_from_neighbours(z, b, p, left[b, p].long(), right[b, p].long())
        tok = z[b, p]
        revealed = tok != self.mask_id
        onehot = torch.nn.functional.one_hot(tok.clamp(max=self.vocab_size - 1), self.vocab_size).to(post.dtype)
        return torch.where(revealed[:, None], onehot, post)

    def log_probs_at(self, z: torch.Tensor, batch_index: torch.Tensor, position_index: torch.Tensor,
                     neighbours: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        return self.probs_at(z, batch_index, position_index, neighbours).log()

    @torch.no_grad()
    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """log p(x0_i = v | z) for every position: Tensor[B, T, V] (one-hot at revealed positions).

        Posteriors are computed at masked positions only; revealed rows are written as 0 / -inf.
        """
        check_tokens(z, self.vocab_size)
        B, T = z.shape
        V = self.vocab_size
        flat = z.reshape(-1)
        masked = flat == self.mask_id
        out = torch.full((B * T, V), float("-inf"), dtype=self.output_dtype, device=z.device)
        idx = flat_nonzero(masked)
        if idx.numel():
            b, p = idx // T, idx % T
            out[idx] = self.probs_at(z, b, p).log_()
        rev = flat_nonzero(~masked)
        out[rev, flat[rev]] = 0.0
        return out.view(B, T, V)

    def supports(self, channel, leave_one_out: bool = False) -> bool:
        """Absorbing masks, also leave-one-out (:meth:`posterior`)."""
        return isinstance(channel, AbsorbingMask) or super().supports(channel, leave_one_out)

    @torch.no_grad()
    def posterior(self, z: torch.Tensor, channel=None, leave_one_out: bool = False) -> torch.Tensor:
        """Under absorbing masks, from the nearest revealed neighbours: p(x_i | z) ([B, T, V], one-hot at revealed
        positions) or, ``leave_one_out``, p(x_i | z_{-i}) = the row of the neighbours strictly left and right of i
        at every position (the function the samplers' leave-one-out fast path calls, so both give the same numbers).
        Other channels: :meth:`Denoiser.posterior`."""
        if channel is not None and not isinstance(channel, AbsorbingMask):
            return super().posterior(z, channel, leave_one_out)
        check_tokens(z, self.vocab_size)
        B, T = z.shape
        left, right = nearest_revealed(z, self.mask_id)
        b = torch.arange(B, device=z.device).repeat_interleave(T)
        p = torch.arange(T, device=z.device).repeat(B)
        if not leave_one_out:
            return self.probs_at(z, b, p, (left, right)).view(B, T, -1)
        return self.probs_from_neighbours(z, b, p, left.view(-1).long(), right.view(-1).long()).view(B, T, -1)

    def log_posterior(self, z: torch.Tensor, channel=None, leave_one_out: bool = False) -> torch.Tensor:
        """log of :meth:`posterior` under absorbing masks (``forward`` without ``leave_one_out``)."""
        if (channel is None or isinstance(channel, AbsorbingMask)) and leave_one_out:
            return self.posterior(z, channel, leave_one_out).log()
        return super().log_posterior(z, channel, leave_one_out)

    @property
    def output_dtype(self) -> torch.dtype:
        """Floating dtype of the posterior rows (float32 unless a subclass says otherwise)."""
        return torch.float32
