"""The stability engine: rules whose commits read how each position's posterior moved since the previous denoiser
call (KLASS).  A rule declaring ``stability_history = H`` gets, at step s of a block, per masked position,
``stable`` = the last H values of ``rule.divergence(p_now, p_prev)`` are all below ``rule.stability_threshold``
(p_prev: the position's row at the sequence's previous call; the previous block's last call at a block's first
step; all zeros before the first call; never stable before step H - 1), and ``rule.stable_commits`` decides the
commits from the step's scores.  The engine keeps the previous rows; ``D(p, p) = 0`` (declared by the rule) lets it
skip them entirely on a local denoiser: a row that did not change has divergence 0, so divergences are computed only
where a nearest revealed neighbour changed (per neighbourhood key where keys are few, or lazily, only where the rule
reads ``stable``: :class:`_PendingKL`; "KL" below is the rule's divergence, KLASS's).  Every path gives the draws
of computing every divergence (tested).
"""
from __future__ import annotations

import math

import torch

from dllm_lit.decoding.confidence_decoding import BlockPosteriors, StepView, cache_width, sub_batches
from dllm_lit.decoding.neighbourhood_rows import NeighbourhoodRows
from dllm_lit.decoding.posterior_cache import CachedFeatures
from dllm_lit.denoisers.local import distinct_queries, neighbour_distances
from dllm_lit.samplers.draws import StepUniforms, row_chunks
from dllm_lit.util.indices import flat_nonzero, nonzero_pairs

__all__ = ["decode_stable"]


@torch.no_grad()
def decode_stable(rule, x: torch.Tensor, indices: torch.Tensor, steps: int, seed: int) -> torch.Tensor:
    """Decode x [B, T] (all MASK) in place by a rule declaring ``stability_history`` (module docstring), block after
    block with the rule's counts; returns the denoiser calls of each sequence (float64 [B]: one per step at which its
    block still had a masked position).  Runs in sub-batches that fit the posterior cache (identical draws)."""
    den = rule.denoiser
    T, V = x.shape[1], den.vocab_size
    blocks, counts = rule.block_schedule(T, steps)
    greedy = rule.propose(torch.full((1, V), 1.0 / V, device=x.device)) is None
    bl = max((hi - lo for lo, hi in blocks), default=0)
    # numbers kept per position: the greedy path over a local denoiser in one block keeps the cache's row-free
    # features only (rows recomputed where read, no previous rows), so the whole batch runs at once; otherwise the
    # stored rows and the previous call's rows
    width = cache_width(den, _widths(V, greedy), ("probs",), other=2 * V + 2) if greedy and len(blocks) == 1 \
        else 2 * V + 2
    nfe = torch.zeros(x.shape[0], dtype=torch.float64, device=x.device)
    for sl in sub_batches(x.shape[0], width, bl, rule.use_cache):
        nfe[sl] = _decode_batch(rule, den, x[sl], StepUniforms(seed, indices[sl], steps), (blocks, counts),
                                greedy, width)
    return nfe


def _widths(V: int, greedy: bool) -> dict:
    """The cache's features: rows, the argmax and (greedy) the score of the argmax, or the proposal law's cdf."""
    w = {"probs": ((V,), None), "argmax": ((), torch.int64)}
    w.update({"score": ((), torch.float64)} if greedy else {"cdf": ((V,), torch.float64)})
    return w


def _decode_batch(rule, den, x: torch.Tensor, tok_u: StepUniforms, schedule, greedy: bool,
                  width: int) -> torch.Tensor:
    """:func:`decode_stable` on one sub-batch (``x`` and ``tok_u`` its rows); returns its denoiser calls."""
    M, (B, T), V, H, dev = den.mask_id, x.shape, den.vocab_size, rule.stability_history, x.device
    threshold, blocks, counts = rule.stability_threshold, *schedule
    nfe = torch.zeros(B, dtype=torch.float64, device=dev)
    rows_b = torch.arange(B, device=dev)
    prev = None  # p_prev: rows of the previous call, [B, bl, V] float64; None: all zeros (before the first call)
    # with a small key range the cache keeps features by key: the float64 rows too, for divergences between keys
    keyed = greedy and NeighbourhoodRows.applies(den)

    def features(probs: torch.Tensor) -> dict[str, torch.Tensor]:
        tok = probs.argmax(-1)
        out = {"probs": probs, "argmax": tok}
        if greedy:  # the proposal is a function of the row: so is its score (read without positions)
            out["score"] = rule.score(probs, tok, None).to(torch.float64)
        else:
            out["cdf"] = rule.propose(probs).to(torch.float64).cumsum(-1)
        return {**out, "rows64": probs.to(torch.float64)} if keyed else out

    base = 0
    for blk, (lo, hi) in enumerate(blocks):
        if rule.announces_blocks:
            den.block_start(lo, hi)
        bl, S = hi - lo, len(counts[blk])
        spec = CachedFeatures(features, _widths(V, greedy), fresh=("probs",) if greedy else (), width=width)
        post = BlockPosteriors(den, B, lo, hi, spec, dev, rule.use_cache)
        cache = post.cache
        # greedy proposals over a cache of neighbours: rows only where a neighbour changed (module docstring)
        fast = greedy and cache is not None and cache.local
        # without a key memo: divergences only where the rule reads stability (see _PendingKL)
        pending = _PendingKL(H, B, bl, dev) if fast and cache.memo is None and threshold > 0 else None
        # per position, the last step whose divergence was not below the threshold (only "the last H values are all
        # below it" is read): stable needs lastbad <= s - H.  A divergence never computed at a step is 0 (the row
        # did not change), not below a threshold of 0.
        lastbad = torch.full((B, bl), -1, dtype=torch.long, device=dev)
        zero_bad = not 0.0 < threshold
        nxt = torch.zeros((B, bl, V), dtype=torch.float64, device=dev) if blk + 1 < len(blocks) else None
        masked = x[:, lo:hi] == M
        # scores [B, bl] of this step's proposals, -inf where revealed (the fast path's tokens: the cache's)
        tokd = None if fast else torch.zeros((B, bl), dtype=torch.long, device=dev)
        for s, k in enumerate(counts[blk]):
            active = masked.any(1)
            if not bool(active.any()):
                break
            nfe += active
            if fast:
                before = (cache.left, cache.right)  # the previous call's neighbours (refresh replaces them)
                post.load(x, None, None)
                scored = torch.where(masked, cache.column("score"), -math.inf)
                if pending is not None:
                    pending.record(s, masked if s == 0 else
                                   masked & ((cache.left != before[0]) | (cache.right != before[1])), before)
                    if s >= H - 1:  # the positions that are stable unless a divergence not yet computed is not below
                        pending.settle(s, rule.stability_read(scored) & (lastbad <= s - H), cache, prev, lastbad,
                                       threshold, rule.divergence)
                elif s == 0:  # against the previous block's last rows (zeros before the first call)
                    b, q = nonzero_pairs(masked)
                    _mark(lastbad, b * bl + q, _kl_at(cache, b, q + lo, lambda rb, rq: _previous(prev, rb, rq - lo, V),
                                                      rule.divergence), threshold, s)
                else:
                    if cache.memo is not None:  # 0 exactly where the key, hence the row, is the previous one
                        cf, then, now = cache.slot_changes
                        moved = flat_nonzero(then != now)
                        cf, then, now = cf[moved], then[moved], now[moved]
                        kl = _kl_by_slots(cache.memo, then, now, rule.divergence) if moved.numel() \
                            else then.to(torch.float64)
                    else:  # 0 exactly where the neighbours, hence the rows, are those of the previous call
                        cb, cq = nonzero_pairs(masked & ((cache.left != before[0]) | (cache.right != before[1])))
                        cf = cb * bl + cq
                        kl = _kl_at(cache, cb, cq + lo, lambda rb, rp: _rows_from(cache, before, rb, rp).to(
                            torch.float64), rule.divergence) if cb.numel() else cf.to(torch.float64)
                    _mark(lastbad, cf, kl, threshold, s, zero_bad)
            else:
                b, q = nonzero_pairs(masked)
                f = b * bl + q
                post.load(x, b, q + lo)
                view = StepView(post, b, q + lo, base + s, lo, hi)
                view.tok = view.get("argmax") if greedy else post.draw(view.uniforms(tok_u), "cdf", b, q + lo)
                rows = view.get("probs")
                cur = rows.to(torch.float64)
                if prev is None:
                    prev = torch.zeros((B, bl, V), dtype=torch.float64, device=dev)
                _mark(lastbad, f, rule.divergence(cur, prev[b, q]), threshold, s)
                prev[b, q] = cur
                scored = torch.full((B, bl), -math.inf, dtype=torch.float64, device=dev)
                scored.view(-1).index_copy_(0, f, rule.score(rows, view.tok, q + lo).to(torch.float64))
                tokd.view(-1).index_copy_(0, f, view.tok)
            stable = lastbad <= s - H if s >= H - 1 else torch.zeros_like(masked)
            commit = flat_nonzero(rule.stable_commits(scored, stable, masked, k, s == S - 1))
            masked.view(-1).index_fill_(0, commit, False)
            cb = torch.div(commit, bl, rounding_mode="floor")
            cp = commit - cb * bl + lo
            tok = cache.get("argmax", cb, cp) if fast else tokd.view(-1).index_select(0, commit)
            if nxt is not None:
                done = active & ~masked.any(1)
                if bool(done.any()):  # the next block's p_prev: rows at this (last) call's state
                    d = rows_b[done]
                    db = d.repeat_interleave(bl)
                    dp = torch.arange(hi, hi + bl, device=dev).repeat(d.numel())
                    nxt[d] = den.probs_at(x, db, dp).to(torch.float64).view(d.numel(), bl, V)
            x.view(-1).index_copy_(0, cb * T + cp, tok)
        base += S
        if nxt is not None:
            prev = nxt
    return nfe

def _mark(lastbad: torch.Tensor, flat: torch.Tensor, kl: torch.Tensor, threshold: float, s: int,
          others_bad: bool = False) -> None:
    """Record step s as the last one whose KL was not below ``threshold`` at the flat block positions ``flat``
    where ``kl`` is not (NaN included); with ``others_bad``, also at every position not in ``flat`` (their KL is
    0, and 0 is not below the threshold)."""
    if others_bad:
        good = flat.index_select(0, flat_nonzero(kl < threshold))
        kept = lastbad.view(-1).index_select(0, good)
        lastbad.fill_(s)
        lastbad.view(-1).index_copy_(0, good, kept)
        return
    bad = flat_nonzero(~(kl < threshold))
    if bad.numel():
        lastbad.view(-1).index_fill_(0, flat.index_select(0, bad), s)


def _query(cache, neighbours: tuple[torch.Tensor, torch.Tensor], b: torch.Tensor,
           p: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(x_left, d_left, x_right, d_right) at masked (b, p) of the cache's state given the block's [B, L] nearest
    revealed neighbours ``neighbours`` (current or earlier: revealed tokens never change)."""
    return _query_at(cache, b, p, neighbours[0][b, p - cache.lo], neighbours[1][b, p - cache.lo])


def _query_at(cache, b: torch.Tensor, p: torch.Tensor, a: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """(x_left, d_left, x_right, d_right) at masked (b, p) whose nearest revealed neighbours were ``a`` / ``c`` (-1 /
    T: none) at some call so far: the query of that call (revealed tokens never change, so the cache's state has
    them)."""
    T = cache.z.shape[1]
    a, c = a.long(), c.long()
    d1, d2 = neighbour_distances(p, a, c, T)
    return cache.z[b, a.clamp(min=0)], d1, cache.z[b, c.clamp(max=T - 1)], d2


def _previous(prev: torch.Tensor | None, b: torch.Tensor, q: torch.Tensor, V: int) -> torch.Tensor:
    """The previous call's float64 rows at block positions (b, q): ``prev[b, q]``, zeros when ``prev`` is None."""
    if prev is None:
        return torch.zeros((b.numel(), V), dtype=torch.float64, device=b.device)
    return prev[b, q]

class _PendingKL:
    """The divergences of the last H calls, computed only where the ready test reads them.

    Under a denoiser of nearest revealed neighbours a position's KL at call t is exactly 0 unless a neighbour
    changed at t (then it compares the rows of the neighbours before and after t; at a block's first call, the
    previous call's row).  With a threshold > 0 a 0 is below it, so "the last H KL values are below it" at step s
    reads only the KL values of the changes in (s - H, s], and only where the rule reads stability
    (``stability_read``).  Kept per step slot t mod H: where a neighbour changed at t, the neighbours before the
    change, and whether its KL is still to be computed; the neighbours after it are those before the next change, or
    the current ones.  A computed KL not below the threshold sets ``lastbad`` (the state the eager path keeps), so the
    ready test and the draws are those of computing every KL."""

    def __init__(self, H: int, B: int, bl: int, device: torch.device) -> None:
        self.H = H
        self.changed = torch.zeros((H, B, bl), dtype=torch.bool, device=device)
        self.open = torch.zeros((H, B, bl), dtype=torch.bool, device=device)
        self.left: torch.Tensor | None = None  # [H, B, bl] neighbours before the change (dtype of the cache's)
        self.right: torch.Tensor | None = None

    def record(self, s: int, changed: torch.Tensor, before: tuple[torch.Tensor | None, torch.Tensor | None]) -> None:
        """Step s's changes (bool [B, bl]: masked positions whose neighbours changed; at s = 0 every masked one) and
        the neighbours before them (the previous call's; unused at s = 0)."""
        j = s % self.H
        self.changed[j] = changed
        self.open[j] = changed
        if before[0] is None:
            return
        if self.left is None:
            self.left = torch.zeros((self.H, *changed.shape), dtype=before[0].dtype, device=changed.device)
            self.right = torch.zeros_like(self.left)
        self.left[j] = before[0]
        self.right[j] = before[1]

    def settle(self, s: int, cand: torch.Tensor, cache, prev: torch.Tensor | None, lastbad: torch.Tensor,
               threshold: float, divergence) -> None:
        """Compute the pending KL values of steps (s - H, s] at the candidate positions ``cand`` (bool [B, bl]) and
        record in ``lastbad`` the latest step whose KL is not below ``threshold`` (NaN included)."""
        bl = cand.shape[1]
        for t in range(s, max(s - self.H, -1), -1):
            j = t % self.H
            b, q = nonzero_pairs(cand & self.open[j])
            if b.numel() == 0:
                continue
            a, c = cache.left[b, q], cache.right[b, q]  # the neighbours after step t's change
            for u in range(s, t, -1):  # the earliest later change in the window has them as its "before"
                hit = self.changed[u % self.H, b, q]
                a = torch.where(hit, self.left[u % self.H, b, q], a)
                c = torch.where(hit, self.right[u % self.H, b, q], c)
            p = q + cache.lo
            kl = torch.empty(b.shape, dtype=torch.float64, device=b.device)
            V = cache.den.vocab_size
            for sl in row_chunks(b.numel(), V, b.device):
                bs, ps = b[sl], p[sl]
                now = cache.den.probs_given_neighbours(*_query_at(cache, bs, ps, a[sl], c[sl]))
                then = _previous(prev, bs, q[sl], V) if t == 0 else cache.den.probs_given_neighbours(
                    *_query_at(cache, bs, ps, self.left[j, bs, q[sl]], self.right[j, bs, q[sl]])).to(torch.float64)
                kl[sl] = divergence(now.to(torch.float64), then)
            self.open[j].view(-1).index_fill_(0, b * bl + q, False)
            bad = flat_nonzero(~(kl < threshold))
            if bad.numel():
                f = (b * bl + q).index_select(0, bad)
                lastbad.view(-1).index_copy_(0, f, lastbad.view(-1).index_select(0, f).clamp(min=t))


def _kl_by_slots(memo: NeighbourhoodRows, then: torch.Tensor, now: torch.Tensor, divergence) -> torch.Tensor:
    """``divergence`` of the memo's float64 rows ``rows64`` at slots ``now`` against those at ``then``, once per
    distinct (then, now) pair: equal slots are identical rows (the numbers :func:`_kl_at` computes from the
    neighbours), so equal pairs have identical KL."""
    rep, inv = distinct_queries(then * memo.size + now)
    rows = memo.features["rows64"]
    out = torch.empty(rep.shape, dtype=torch.float64, device=now.device)
    for sl in row_chunks(rep.numel(), rows.shape[1], now.device):
        r = rep[sl]
        out[sl] = divergence(rows.index_select(0, now.index_select(0, r)),
                               rows.index_select(0, then.index_select(0, r)))
    return out.index_select(0, inv)


def _rows_from(cache, neighbours: tuple[torch.Tensor, torch.Tensor], b: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Posterior rows at masked (b, p) of the cache's state given earlier nearest revealed neighbours (the block's
    [B, L] left / right indices): revealed tokens never change, so these are the rows of that earlier state."""
    return cache.den.probs_given_neighbours(*_query(cache, neighbours, b, p))


def _kl_at(cache, b: torch.Tensor, p: torch.Tensor, previous, divergence) -> torch.Tensor:
    """the rule's ``divergence`` of the current rows at masked (b, p) against ``previous(b, p)`` (float64 rows), in
    chunks of rows (bounded memory)."""
    out = torch.empty(b.shape, dtype=torch.float64, device=b.device)
    for sl in row_chunks(b.numel(), cache.den.vocab_size, b.device):
        out[sl] = divergence(cache.posterior(b[sl], p[sl]).to(torch.float64), previous(b[sl], p[sl]))
    return out
