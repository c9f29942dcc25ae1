"""The HMM posterior under absorbing masks in an order-k context world, one segment at a time, with a memo.

In an order-k context world (state s_t = (x_{t-k+1}, ..., x_t)) a run of k revealed tokens ending at p pins
the hidden state: s_p is known.  Given s_p, the tokens after p are independent of the evidence before p, so
the posterior at a masked position j depends only on its *segment*: the evidence from its nearest pin p on
the left (or the sequence start) to its nearest pin q on the right (or the sequence end),

    p(x_j | z) = p(x_j | s_p, z_{p+1..q})      (k = 1: the first-order chain's nearest revealed neighbours).

Each segment is solved by the scaled forward-backward of :mod:`dllm_lit.denoisers.hmm_posterior` started from
a_{p+1} = A(s_p, .) (or a_0 = mu) and ended with b_q = 1.  Exact when every evidence has positive probability,
so it is used only for worlds whose context rows and initial law are strictly positive (otherwise the zero-
evidence rule of the full pass applies there).

A segment's rows depend only on its key (how it starts, its tokens), and each is computed with the same
per-row operations whatever else is batched with it, so they are kept in a bounded LRU memo: between two
sampler steps only the segments whose evidence changed are recomputed (at 256 steps on T = 256, one or two
per row).  Results are the same with the memo on or off, and for any batch composition (tested: torch.equal):
every product and normaliser is one of :mod:`~dllm_lit.markov.products`' (index-order sums of separate IEEE
multiplications and additions, :func:`~dllm_lit.util.reductions.fixed_order_sum`'s tree), never a BLAS call or
``torch.sum``, whose rounding can depend on the number of rows and their alignment (a memo row would then differ
from a fresh one by an ulp).
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch

from dllm_lit.markov.products import (context_blocks, context_sums, left_product, normalise_or, normalised,
                                             right_product)
from dllm_lit.markov.hmm import HMMWorld

__all__ = ["SegmentedPosterior", "segments_apply"]


def segments_apply(world: HMMWorld) -> bool:
    """Whether the segmented path is exact for ``world``: an order-k context world with positive rows and mu."""
    return world.order is not None and bool((world.rows > 0).all()) and bool((world.initial > 0).all())


class SegmentedPosterior:
    """p(x_t = v | z) under absorbing masks for a context world, float64 [B, T, V], with a segment memo.

    Args:
        world: an order-k context :class:`HMMWorld` with :func:`segments_apply` true.
        memo_bytes: bound on the memo's stored posterior rows (float64); 0 switches the memo off.
        block_bytes: bound on the messages (float64 [segments, length, S], two of them) held at once.
    """

    def __init__(self, world: HMMWorld, memo_bytes: int = 2**26, block_bytes: int = 2**26) -> None:
        if not segments_apply(world):
            raise ValueError("the segmented posterior needs an order-k context world with positive rows and initial law")
        self.world, self.memo_bytes, self.block_bytes = world, int(memo_bytes), int(block_bytes)
        self.k, self.V, self.S = int(world.order), world.vocab_size, world.num_states
        self._memo: OrderedDict[tuple[bool, bytes], torch.Tensor] = OrderedDict()
        self._memo_size = 0
        self.computed_positions = 0  # segment positions solved (not found in the memo), for benchmarks

    # ------------------------------------------------------------------ segmentation
    def _pins(self, z: torch.Tensor) -> torch.Tensor:
        """pin[b, t]: t >= k - 1 and z_{t-k+1..t} all revealed (s_t known)."""
        rev = z < self.V
        pin = rev.clone()
        for j in range(1, self.k):
            pin[:, j:] &= rev[:, :-j]
            pin[:, :j] = False
        return pin

    @torch.no_grad()
    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        V, k = self.V, self.k
        z = z.cpu().long()
        Bsz, T = z.shape
        out = torch.zeros(Bsz, T, V, dtype=torch.float64)
        rev = z < V
        out[rev] = torch.nn.functional.one_hot(z[rev], V).to(torch.float64)
        masked = ~rev
        if not masked.any():
            return out
        pin = self._pins(z)
        zn = z.numpy().astype(np.uint8 if V < 255 else np.int32)
        pin_n, masked_n = pin.numpy(), masked.numpy()
        todo: dict[tuple[bool, bytes], tuple[int, int, int]] = {}
        places: list[tuple[int, np.ndarray, int, tuple[bool, bytes]]] = []
        for b in range(Bsz):
            pins = np.flatnonzero(pin_n[b])
            mpos = np.flatnonzero(masked_n[b])
            if mpos.size == 0:
                continue
            seg = np.searchsorted(pins, mpos)  # segment g: positions (pins[g-1], pins[g]]
            row = zn[b].tobytes()
            width = zn.itemsize
            bounds = np.flatnonzero(np.diff(seg)) + 1
            for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, mpos.size]):
                g = int(seg[lo])
                start = int(pins[g - 1]) + 1 if g > 0 else 0
                end = int(pins[g]) if g < pins.size else T - 1
                key_start = start - k if g > 0 else 0
                key = (g > 0, row[key_start * width:(end + 1) * width])
                places.append((b, mpos[lo:hi], start, key))
                if key not in self._memo and key not in todo:
                    todo[key] = (b, start, end)
        fresh = self._solve(z, list(todo.items()))
        # one gather for every masked position: the rows of all segments used, stacked, indexed by base + offset
        keys = list(dict.fromkeys(key for *_, key in places))
        tables = []
        for key in keys:
            rows = fresh.get(key)
            if rows is None:
                rows = self._memo[key]
                self._memo.move_to_end(key)
            tables.append(rows)
        base = dict(zip(keys, np.cumsum([0] + [t.shape[0] for t in tables[:-1]]).tolist()))
        b_idx = np.concatenate([np.full(pos.size, b) for b, pos, _, _ in places])
        t_idx = np.concatenate([pos for _, pos, _, _ in places])
        src = np.concatenate([pos - start + base[key] for _, pos, start, key in places])
        out[torch.from_numpy(b_idx), torch.from_numpy(t_idx)] = torch.cat(tables)[torch.from_numpy(src)]
        for key, rows in fresh.items():
            self._remember(key, rows)
        return out

    def _remember(self, key: tuple[bool, bytes], rows: torch.Tensor) -> None:
        if self.memo_bytes <= 0:
            return
        nbytes = rows.numel() * 8 + len(key[1])
        if nbytes > self.memo_bytes:
            return
        self._memo[key] = rows
        self._memo_size += nbytes
        while self._memo_size > self.memo_bytes:
            old_key, old = self._memo.popitem(last=False)
            self._memo_size -= old.numel() * 8 + len(old_key[1])

    # ------------------------------------------------------------------ solving segments
    def _solve(self, z: torch.Tensor, items: list) -> dict[tuple[bool, bytes], torch.Tensor]:
        """Posterior rows [length, V] (every position of the segment) for each (key, (b, start, end))."""
        if not items:
            return {}
        lengths = np.array([end - start + 1 for _, (_, start, end) in items])
        order = np.argsort(-lengths, kind="stable")
        fresh: dict = {}
        cap = max(1, self.block_bytes // (2 * 8 * self.S * int(lengths.max())))
        for lo, hi in _groups(lengths[order], self.STEP_COST_ROWS):
            for i in range(lo, hi, cap):
                group = [items[o] for o in order[i:min(hi, i + cap)]]
                fresh.update(self._solve_group(z, group, int(lengths[order[i]])))
        self.computed_positions += int(lengths.sum())
        return fresh

    #: the fixed cost of one message step, in rows of S states: sets how much padding a merged group may carry
    STEP_COST_ROWS = 32.0

    def _solve_group(self, z: torch.Tensor, group: list, L: int) -> dict:
        world, V, S, k = self.world, self.V, self.S, self.k
        n = len(group)
        mask_id = V
        zl = torch.full((n, L), mask_id, dtype=torch.long)  # left-aligned evidence (forward pass)
        zr = torch.full((n, L), mask_id, dtype=torch.long)  # right-aligned evidence (backward pass)
        lens = torch.empty(n, dtype=torch.long)
        init = torch.empty(n, S, dtype=torch.float64)
        pinned_rows, pinned_states = [], []
        radix = V ** torch.arange(k - 1, -1, -1)
        Qr, Ql = context_blocks(world.rows.to(torch.float64), V)  # A((a, r), (r, c)) = Qr[r, a, c] = Ql[r, c, a]
        for r, ((from_pin, _), (b, start, end)) in enumerate(group):
            seg = z[b, start:end + 1]
            ln = seg.numel()
            lens[r] = ln
            zl[r, :ln] = seg
            zr[r, L - ln:] = seg
            if from_pin:
                pinned_rows.append(r)
                pinned_states.append(int((z[b, start - k:start] * radix).sum()))
            else:
                init[r] = world.initial
        if pinned_rows:  # a_{p+1} = onehot(s_p) A
            onehot = torch.zeros(len(pinned_rows), S, dtype=torch.float64)
            onehot[torch.arange(len(pinned_rows)), torch.tensor(pinned_states)] = 1.0
            init[torch.tensor(pinned_rows)] = right_product(onehot, Qr)
        E = torch.cat([torch.nn.functional.one_hot(torch.arange(V), V).to(torch.float64).repeat(1, S // V),
                       torch.ones(1, S, dtype=torch.float64)])  # E(z, s) = L(z, s mod V) under absorbing masks
        a_store = torch.empty(n, L, S, dtype=torch.float64)
        a = init
        for t in range(L):
            a_store[:, t] = a
            if t + 1 < L:
                ev = E[zl[:, t]]
                f = normalise_or(a * ev, ev)
                a = normalised(right_product(f, Qr))[0]
        b_store = torch.empty(n, L, S, dtype=torch.float64)
        ones = torch.ones(n, S, dtype=torch.float64)
        b_store[:, L - 1] = 1.0 / S
        for t in range(L - 1, 0, -1):
            ev = E[zr[:, t]]
            m = normalise_or(ev * b_store[:, t], ev)
            b_store[:, t - 1] = normalise_or(left_product(m, Ql), ones)
        # posteriors at the masked positions only: a_t (left-aligned) with b at right-aligned index t + L - len
        sel = (zl == mask_id) & (torch.arange(L)[None, :] < lens[:, None])
        r_idx, t_idx = sel.nonzero(as_tuple=True)
        a_sel = a_store[r_idx, t_idx].view(-1, S // V, V)
        q = context_sums(a_sel * b_store[r_idx, t_idx + L - lens[r_idx]].view(-1, S // V, V))
        left_only = context_sums(a_sel)
        post = torch.zeros(n, L, V, dtype=torch.float64)
        post[r_idx, t_idx] = normalise_or(q, normalise_or(left_only, torch.ones_like(left_only)))
        return {key: post[r, :int(lens[r])].clone() for r, (key, _) in enumerate(group)}


def _groups(lengths: np.ndarray, step_cost: float) -> list[tuple[int, int]]:
    """Split lengths sorted in decreasing order into runs [lo, hi) padded to their first length, minimising
    sum over runs of L_run * (step_cost + rows_run) (a dynamic programme over the distinct lengths)."""
    values, first = np.unique(-lengths, return_index=True)  # distinct lengths, decreasing, and where each starts
    values, ends = -values, np.r_[first[1:], lengths.size]
    D = values.size
    best = np.zeros(D + 1)
    cut = np.zeros(D + 1, dtype=np.int64)
    for j in range(1, D + 1):  # best[j]: cost of the first j distinct lengths; the last run starts at distinct i
        i = np.arange(j)
        cost = best[i] + values[i] * (step_cost + ends[j - 1] - first[i])
        c = int(np.argmin(cost))
        best[j], cut[j] = cost[c], c
    runs, j = [], D
    while j > 0:
        i = int(cut[j])
        runs.append((int(first[i]), int(ends[j - 1])))
        j = i
    return runs[::-1]
