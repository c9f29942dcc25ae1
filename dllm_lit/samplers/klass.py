"""KLASS: KL-Adaptive Stability Sampling; see ``docs/samplers/klass.md``.

Kim et al., "KLASS: KL-Adaptive Stability Sampling for Fast Inference in Masked Diffusion Models"
(arXiv:2511.05664); followed in shkim0116/KLASS ``src/model/llada_klass.py``
(``stable_confident_decode`` with ``alg="klass"``, ``unmask_strategy="all"``).

LLaDA's semi-autoregressive loop (blocks of ``block_length``, S = steps / blocks steps per block,
LLaDA's transfer counts k_s) with an extra commit rule.  At step s of a block, for every sequence
whose block still has masked positions (one denoiser call; a finished block is skipped):

* p_l = p(x0_l | z) at every masked position l of the block; proposal x̂_l = argmax p_l
  (temperature 0, upstream default) or x̂_l ~ p_l^(1/tau); confidence c_l = p_l(x̂_l);
* KL_l = sum_v p_l(v) [log(p_l(v) + 1e-12) - log(q_l(v) + 1e-12)], q_l = position l's row at the
  sequence's previous denoiser call (the previous block's last call at s = 0; all zeros before the
  first call), kept in a history of the last H values;
* ready: s >= H - 1 and the last H KL values are all < ``kl_threshold`` and c_l > ``conf_threshold``;
* if any position is ready, every ready position commits its proposal; otherwise the k_s most
  confident masked positions of the block commit (ties -> lower position), as LLaDA.

Departures from upstream (both only where upstream would misbehave; see the docs page):

* the fallback takes min(k_s, #masked) positions: upstream's ``topk`` would also pick positions
  that are already decoded or outside the block when ready steps got ahead of the schedule;
* the last step of a block commits every remaining proposal: upstream can otherwise leave MASK
  tokens in a block for good (ready steps that commit fewer than k_s tokens).

NFE: one per step at which the sequence's block still had a masked position, per sequence
(``generate_with_nfe``).  Memory: the previous posterior row per position of the block
(B x block x V, float64; not allocated while all zeros, e.g. in the one block of the cached greedy path, which
computes KL values from neighbours only where read: :class:`_PendingKL`) plus the posterior cache of the
confidence-decoding engine (:func:`~dllm_lit.decoding.confidence_decoding.propose_step`, LLaDA's proposals; run in sub-batches that
fit its memory budget).  Uniforms: Stream.TOKEN at (global step, position).
"""
from __future__ import annotations

import math

import torch

from dllm_lit import checks
from dllm_lit.decoding import (BlockPosteriors, NeighbourhoodRows, cache_width, confidence, in_sub_batches,
                               proposal_features, proposal_widths, propose_step)
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.util.indices import flat_nonzero, nonzero_pairs
from dllm_lit.samplers.base import Sampler
from dllm_lit.denoisers.local import distinct_queries, neighbour_distances
from dllm_lit.samplers.draws import StepUniforms, row_chunks
from dllm_lit.samplers.selection import topk_stable_mask, transfer_schedule

__all__ = ["KLASS", "KL_EPS", "stability_kl"]

#: upstream's additive epsilon inside both logarithms of the KL
KL_EPS = 1e-12


def stability_kl(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """KLASS's KL(p || q) per row in float64, with 1e-12 added inside both logarithms (upstream formula)."""
    p, q = p.to(torch.float64), q.to(torch.float64)
    return (p * (torch.log(p + KL_EPS) - torch.log(q + KL_EPS))).sum(-1)


class KLASS(Sampler):
    """KLASS decoding (see module docstring).

    Args:
        denoiser: frozen denoiser (None: the chain's exact oracle).
        steps: total steps (or a grid); must be divisible by the number of blocks.
        conf_threshold: tau_c in (0, 1]: commit only if the proposal's probability exceeds it (upstream 0.9).
        kl_threshold: tau_KL >= 0: every one of the last ``history`` KL values must be below it (upstream 0.01).
        history: H >= 1, number of KL values checked (upstream 2).
        block_length: semi-autoregressive block length; None = one block of length T (upstream scripts use 64).
        temperature: tau >= 0 of the proposal (upstream 0 = argmax).
    """

    sampler_name = "klass"
    no_log_q_reason = "positions are committed by the confidence and step-to-step KL of the drawn proposals, so the order depends on the tokens"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, conf_threshold: float = 0.9,
                 kl_threshold: float = 0.01, history: int = 2, block_length: int | None = None,
                 temperature: float = 0.0) -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.conf_threshold = checks.probability("conf_threshold", conf_threshold)
        self.kl_threshold = checks.real("kl_threshold", kl_threshold, 0.0)
        self.history = checks.integer("history", history)
        self.block_length = checks.optional_integer("block_length", block_length)
        self.temperature = checks.real("temperature", temperature, 0.0)
        #: reuse posterior features between steps (exact; see dllm_lit.decoding.posterior_cache)
        self.use_cache = True

    def _blocks(self, seq_len: int) -> tuple[int, int]:
        bl = self.block_length or seq_len
        return bl, seq_len // bl

    def check_run(self, seq_len: int, steps: int | None) -> None:
        """block_length divides T and steps divide into the blocks (upstream asserts both)."""
        checks.divides("block_length", self.block_length, seq_len)
        _, nb = self._blocks(seq_len)
        if steps is not None and steps % nb:
            raise ValueError(f"steps={steps} must be divisible by the number of blocks ({nb}) for seq_len={seq_len}")

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        return self.generate_with_nfe(indices, seq_len, steps, seed)[0]

    def generate_with_nfe(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        den, M, T, V, H = self.denoiser, self.mask_id, seq_len, self.vocab_size, self.history
        tau = self.temperature
        bl, nb = self._blocks(T)
        # numbers kept per position: the greedy path over a local denoiser in one block keeps the cache's row-free
        # features only (rows recomputed where read, no previous rows: KL values from neighbours), so the whole batch
        # runs at once; otherwise the stored rows and the previous call's rows.  Sub-batches give identical draws.
        width = cache_width(den, proposal_widths(V, tau, cdf=False), ("probs",), other=2 * V + 2) \
            if tau == 0 and nb == 1 else 2 * V + 2
        out = in_sub_batches(lambda ix: self.generate_with_nfe(ix, seq_len, steps, seed), indices, width, bl,
                             self.use_cache)
        if out is not None:
            return out
        B, dev = indices.numel(), indices.device
        x = torch.full((B, T), M, dtype=torch.long, device=dev)
        nfe = torch.zeros(B, dtype=torch.float64, device=dev)
        S = steps // nb
        tok_u = StepUniforms(seed, indices, steps)
        rows_b = torch.arange(B, device=dev)
        prev = None  # q: rows of the previous call, [B, bl, V] float64; None: all zeros (before the first call)
        # with a small key range the cache keeps features by key: the float64 rows too, for the KL between keys
        keyed = tau == 0 and NeighbourhoodRows.applies(den)

        def features(probs: torch.Tensor) -> dict[str, torch.Tensor]:
            out = proposal_features(probs, tau, cdf=tau != 0)
            return {**out, "rows64": probs.to(torch.float64)} if keyed else out

        for blk in range(nb):
            lo, hi = blk * bl, (blk + 1) * bl
            post = BlockPosteriors(den, B, lo, hi, features, proposal_widths(V, tau, cdf=tau != 0), dev,
                                   self.use_cache, width, fresh=("probs",) if tau == 0 else ())
            cache = post.cache
            # greedy proposals over a cache of neighbours: rows only where a neighbour changed (see docstring)
            fast = tau == 0 and cache is not None and cache.local
            # without a key memo: KL values only where a ready test reads them (see _PendingKL)
            pending = _PendingKL(H, B, bl, dev) if fast and cache.memo is None and self.kl_threshold > 0 else None
            # per position, the last step whose KL was not below the threshold (only "the last H KL values are all
            # below it" is read): ready needs lastbad <= s - H.  A KL never computed at a step is 0 (the row did not
            # change), not below a threshold of 0.
            lastbad = torch.full((B, bl), -1, dtype=torch.long, device=dev)
            zero_bad = not 0.0 < self.kl_threshold
            nxt = torch.zeros((B, bl, V), dtype=torch.float64, device=dev) if blk + 1 < nb else None
            masked = x[:, lo:hi] == M
            # confidences [B, bl] of this step's proposals, -inf where revealed (the fast path's tokens: the cache's)
            tokd = None if fast else torch.zeros((B, bl), dtype=torch.long, device=dev)
            for s, k in enumerate(transfer_schedule(bl, S)):
                active = masked.any(1)
                if not bool(active.any()):
                    break
                nfe += active
                if fast:
                    before = (cache.left, cache.right)  # the previous call's neighbours (refresh replaces them)
                    post.load(x, None, None)
                    confd = torch.where(masked, cache.column("pmax").to(torch.float64), -math.inf)
                    if pending is not None:
                        pending.record(s, masked if s == 0 else
                                       masked & ((cache.left != before[0]) | (cache.right != before[1])), before)
                        if s >= H - 1:  # the positions that are ready unless a KL not yet computed is not below
                            pending.settle(s, (confd > self.conf_threshold) & (lastbad <= s - H), cache, prev,
                                           lastbad, self.kl_threshold)
                    elif s == 0:  # against the previous block's last rows (zeros before the first call)
                        b, q = nonzero_pairs(masked)
                        _mark(lastbad, b * bl + q,
                              _kl_at(cache, b, q + lo, lambda rb, rq: _previous(prev, rb, rq - lo, V)),
                              self.kl_threshold, s)
                    else:
                        if cache.memo is not None:  # 0 exactly where the key, hence the row, is the previous one
                            cf, then, now = cache.slot_changes
                            moved = flat_nonzero(then != now)
                            cf, then, now = cf[moved], then[moved], now[moved]
                            kl = _kl_by_slots(cache.memo, then, now) if moved.numel() else then.to(torch.float64)
                        else:  # 0 exactly where the neighbours, hence the rows, are those of the previous call
                            cb, cq = nonzero_pairs(masked & ((cache.left != before[0]) | (cache.right != before[1])))
                            cf = cb * bl + cq
                            kl = _kl_at(cache, cb, cq + lo,
                                        lambda rb, rp: _rows_from(cache, before, rb, rp).to(torch.float64)) \
                                if cb.numel() else cf.to(torch.float64)
                        _mark(lastbad, cf, kl, self.kl_threshold, s, zero_bad)
                else:
                    b, q = nonzero_pairs(masked)
                    f = b * bl + q
                    view = propose_step(post, x, b, q + lo, blk * S + s, tau, tok_u)
                    cur = view.get("probs").to(torch.float64)
                    if prev is None:
                        prev = torch.zeros((B, bl, V), dtype=torch.float64, device=dev)
                    _mark(lastbad, f, stability_kl(cur, prev[b, q]), self.kl_threshold, s)
                    prev[b, q] = cur
                    confd = torch.full((B, bl), -math.inf, dtype=torch.float64, device=dev)
                    confd.view(-1).index_copy_(0, f, confidence(view))
                    tokd.view(-1).index_copy_(0, f, view.tok)
                commit = flat_nonzero(self._commits(confd, lastbad, masked, s, S, k))
                masked.view(-1).index_fill_(0, commit, False)
                cb = torch.div(commit, bl, rounding_mode="floor")
                cp = commit - cb * bl + lo
                tok = cache.get("argmax", cb, cp) if fast else tokd.view(-1).index_select(0, commit)
                if nxt is not None:
                    done = active & ~masked.any(1)
                    if bool(done.any()):  # the next block's q: rows at this (last) call's state
                        d = rows_b[done]
                        db = d.repeat_interleave(bl)
                        dp = torch.arange(hi, hi + bl, device=dev).repeat(d.numel())
                        nxt[d] = den.probs_at(x, db, dp).to(torch.float64).view(d.numel(), bl, V)
                x.view(-1).index_copy_(0, cb * T + cp, tok)
            if nxt is not None:
                prev = nxt
        return x, nfe

    def _commits(self, conf: torch.Tensor, lastbad: torch.Tensor, masked: torch.Tensor, s: int, S: int,
                 k: int) -> torch.Tensor:
        """Bool [B, bl]: the positions that commit at step s of S (k_s = ``k``) given the confidences ``conf``
        (-inf where revealed), the last step of a KL not below the threshold per position and the ``masked`` ones:
        every masked one at the last step; else, in a row with a ready position, the ready ones; else the stable
        top k of the confidences (ties -> lower position)."""
        if s == S - 1:
            return masked
        H = self.history
        ready = (conf > self.conf_threshold) & (lastbad <= s - H) if s >= H - 1 else torch.zeros_like(masked)
        any_ready = ready.any(1, keepdim=True)
        if not bool((masked.any(1, keepdim=True) & ~any_ready).any()):
            return ready
        return torch.where(any_ready, ready, stable_top_k(conf, k) & masked)


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


def stable_top_k(scores: torch.Tensor, k: int) -> torch.Tensor:
    """:func:`~dllm_lit.samplers.selection.topk_stable_mask` of ``scores`` [n, L]; for k = 1 the first maximum of
    each row (``argmax`` returns the first maximal index), no partial selection."""
    if k != 1:
        return topk_stable_mask(scores, k)
    mask = torch.zeros_like(scores, dtype=torch.bool)
    return mask.scatter_(1, scores.argmax(1, keepdim=True), True)


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
    """The stability KL values of the last H calls, computed only where the ready test reads them.

    Under a denoiser of nearest revealed neighbours a position's KL at call t is exactly 0 unless a neighbour
    changed at t (then it compares the rows of the neighbours before and after t; at a block's first call, the
    previous call's row).  With ``kl_threshold > 0`` a 0 is below the threshold, so "the last H KL values are below it"
    at step s reads only the KL values of the changes in (s - H, s], and only where the confidence exceeds its
    threshold.  Kept per step slot t mod H: where a neighbour changed at t, the neighbours before the change, and
    whether its KL is still to be computed; the neighbours after it are those before the next change, or the
    current ones.  A computed KL not below the threshold sets ``lastbad`` (the state the eager path keeps), so the
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
               threshold: float) -> None:
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
                kl[sl] = stability_kl(now.to(torch.float64), then)
            self.open[j].view(-1).index_fill_(0, b * bl + q, False)
            bad = flat_nonzero(~(kl < threshold))
            if bad.numel():
                f = (b * bl + q).index_select(0, bad)
                lastbad.view(-1).index_copy_(0, f, lastbad.view(-1).index_select(0, f).clamp(min=t))


def _kl_by_slots(memo: NeighbourhoodRows, then: torch.Tensor, now: torch.Tensor) -> torch.Tensor:
    """:func:`stability_kl` of the memo's float64 rows ``rows64`` at slots ``now`` against those at ``then``, once per
    distinct (then, now) pair: equal slots are identical rows (the numbers :func:`_kl_at` computes from the
    neighbours), so equal pairs have identical KL."""
    rep, inv = distinct_queries(then * memo.size + now)
    rows = memo.features["rows64"]
    out = torch.empty(rep.shape, dtype=torch.float64, device=now.device)
    for sl in row_chunks(rep.numel(), rows.shape[1], now.device):
        r = rep[sl]
        out[sl] = stability_kl(rows.index_select(0, now.index_select(0, r)),
                               rows.index_select(0, then.index_select(0, r)))
    return out.index_select(0, inv)


def _rows_from(cache, neighbours: tuple[torch.Tensor, torch.Tensor], b: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """Posterior rows at masked (b, p) of the cache's state given earlier nearest revealed neighbours (the block's
    [B, L] left / right indices): revealed tokens never change, so these are the rows of that earlier state."""
    return cache.den.probs_given_neighbours(*_query(cache, neighbours, b, p))


def _kl_at(cache, b: torch.Tensor, p: torch.Tensor, previous) -> torch.Tensor:
    """:func:`stability_kl` of the current rows at masked (b, p) against ``previous(b, p)`` (float64 rows), in
    chunks of rows (bounded memory)."""
    out = torch.empty(b.shape, dtype=torch.float64, device=b.device)
    for sl in row_chunks(b.numel(), cache.den.vocab_size, b.device):
        out[sl] = stability_kl(cache.posterior(b[sl], p[sl]).to(torch.float64), previous(b[sl], p[sl]))
    return out
