"""Decoding by a cut: a rule that declares ``remasked`` (MaskGIT) proposes at every masked position, scores each
proposal, and keeps masked the positions scoring strictly below a cut.

At step t < S - 1 of S, over the m masked positions of a sequence (n masked at the start):

    x̂_l ~ rule.propose(p_l)                          Stream.TOKEN uniforms at (t, l) (None: the argmax)
    s_l = rule.confidence_score(p_l(x̂_l)) + c_t G_l   c_t = rule.gumbel_scale(t, S), G_l = -log(-log u), u of
                                                      Stream.ORDER at (t, l); no noise where c_t = 0
    keep = rule.remasked(n, t, S, m)                  >= 1 while m > 1
    commit every x̂_l with s_l >= the (keep + 1)-th smallest score (equal scores at the cut all commit)

and step S - 1 commits every proposal.  ``confidence_score`` must be non-decreasing, so that with a denoiser
bounding max_v p without rows, confidence_score(bound) + c_t G_l bounds a score before its proposal is drawn:
proposals are then drawn only where a score can reach the cut (:func:`_bounded`), and while no cut ties every
sequence commits the same number of tokens, so the steps run over compact columns (:func:`_compact`).  Proposals
and noise are keyed by (step, position), so every path commits the same tokens (tested against the dense loop).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from dllm_lit import rng
from dllm_lit.decoding.compact_decoding import CompactBlock, compact_applies
from dllm_lit.decoding.confidence_decoding import (ROUNDS_MIN_VOCAB, BlockPosteriors, cache_width, confidence,
                                                   first_draws, has_max_prob_bound, sub_batches)
from dllm_lit.decoding.posterior_cache import CachedFeatures
from dllm_lit.decoding.step_view import StepView
from dllm_lit.samplers.draws import StepUniforms, categorical
from dllm_lit.samplers.selection import topk_stable_mask
from dllm_lit.util.indices import flat_nonzero, nonzero_pairs

if TYPE_CHECKING:
    from dllm_lit.samplers.rule import RuleSampler

__all__ = ["decode_cuts"]


@torch.no_grad()
def decode_cuts(rule: RuleSampler, x: torch.Tensor, indices: torch.Tensor, steps: int, seed: int) -> None:
    """Decode the all-MASK x [B, T] in place by the cut rule ``rule`` (module docstring), in sub-batches that fit
    the posterior cache (identical draws)."""
    den = rule.denoiser
    B, T, V = x.shape[0], x.shape[1], den.vocab_size
    greedy = rule.propose(torch.full((1, V), 1.0 / V, device=x.device)) is None
    bounded = not greedy and rule.use_cache and has_max_prob_bound(den)
    # what the path stores per position: the bounded path's cache the bound (no [V] rows), the dense one rows + cdf
    width = cache_width(den, _widths(V, greedy, bounded), ("probs",)) if bounded else 2 * V + 2
    for sl in sub_batches(B, width, T, rule.use_cache):
        _decode(rule, den, x[sl], indices[sl], steps, seed, greedy, bounded)


def _widths(V: int, greedy: bool, bounded: bool) -> dict:
    w = {"probs": ((V,), None), "argmax": ((), torch.int64)}
    if bounded:
        w["pmax"] = ((), None)
    elif not greedy:
        w["cdf"] = ((V,), torch.float64)
    return w


def _decode(rule: RuleSampler, den, x: torch.Tensor, indices: torch.Tensor, steps: int, seed: int, greedy: bool,
            bounded: bool) -> None:
    B, T, V, dev = x.shape[0], x.shape[1], den.vocab_size, x.device
    M = den.mask_id
    tok_u = StepUniforms(seed, indices, steps)
    gum_u = StepUniforms(seed, indices, steps, stream=rng.Stream.ORDER)

    def features(probs: torch.Tensor) -> dict[str, torch.Tensor]:
        out = {"probs": probs, "argmax": probs.argmax(-1)}
        if bounded:
            out["pmax"] = probs.amax(-1)
        elif not greedy:
            out["cdf"] = rule.propose(probs).to(torch.float64).cumsum(-1)
        return out

    def propose(view: StepView) -> torch.Tensor:
        """Proposals at the view's positions: the argmax, or the inverse-CDF draw of the rule's law (stored cdf,
        the cache's law draw, or the law of the view's rows: the same numbers)."""
        if greedy:
            return view.get("argmax")
        u = view.uniforms(tok_u)
        if "cdf" in view.post.names:
            return view.post.draw(u, "cdf", view.rows, view.p, view.sel)
        if view.post.draws_law:
            tok, view.tok_prob = view.post.draw_law(view, u)
            return tok
        return categorical(rule.propose(view.get("probs")), u)

    run = _Run(rule, x, steps, propose, gum_u)
    if bounded:  # proposals drawn only where they can commit
        spec = CachedFeatures(features, _widths(V, greedy, True), fresh=("probs",), law=rule.propose, bound="pmax")
        post = BlockPosteriors(den, B, 0, T, spec, dev, rule.use_cache)
        if post.cache is not None and post.cache.bound is not None:
            start = run.compact(den)
            if start < steps:
                run.bounded(post, start)
            return
    post = BlockPosteriors(den, B, 0, T, CachedFeatures(features, _widths(V, greedy, False), width=2 * V + 2), dev,
                           rule.use_cache)
    for t in range(steps):
        masked = x == M
        b, p = nonzero_pairs(masked)
        if b.numel() == 0:
            break
        post.load(x, b, p)
        view = StepView(post, b, p, t, 0, T)
        view.tok = tok = propose(view)
        if t == steps - 1:
            x[b, p] = tok
            break
        score = torch.full((B, T), math.inf, dtype=torch.float64, device=dev)
        score[b, p] = run.score(view, t)
        keep = rule.remasked(T, t, steps, masked.sum(1))  # [B], >= 1
        cut = score.sort(1).values.gather(1, keep[:, None])  # (keep + 1)-th smallest
        commit = ~(score[b, p] < cut[b, 0])
        x[b[commit], p[commit]] = tok[commit]


class _Run:
    """The bounded steps of one sub-batch: compact columns while no cut ties, then the [B, T] loop."""

    def __init__(self, rule: RuleSampler, x: torch.Tensor, steps: int, propose, gum_u: StepUniforms) -> None:
        self.rule, self.x, self.steps, self.propose, self.gum_u = rule, x, steps, propose, gum_u

    def score(self, view: StepView, t: int, gumbel: torch.Tensor | None = None) -> torch.Tensor:
        """confidence_score(p(x̂)) plus the step's noise (``gumbel``: its values at the view, else drawn here)."""
        s = self.rule.confidence_score(confidence(view))
        noise = self.rule.gumbel_scale(t, self.steps)
        if gumbel is not None:
            return s + gumbel
        return s - noise * torch.log(-torch.log(self.gum_u.at(t, view.b, view.p))) if noise > 0 else s

    def noise(self, t: int, b, p) -> torch.Tensor | None:
        """+ c_t G at (b, p), None where c_t = 0 or at the last step (which commits everything)."""
        noise = self.rule.gumbel_scale(t, self.steps)
        if noise > 0 and t < self.steps - 1:
            return -(noise * torch.log(-torch.log(self.gum_u.at(t, b, p))))
        return None

    def compact(self, den) -> int:
        """The bounded steps from step 0 over the masked positions only (:class:`CompactBlock`): while every
        sequence commits the same number k of tokens - always, unless scores tie at a cut - every sequence holds
        the same number n of masked positions, so bounds, noise, the first guess and the cut cost O(B n).
        Returns the step from which :meth:`bounded` goes on (``steps`` when done): a step whose cut ties in some
        sequence commits nothing here.  Same proposals, noise and cut as :meth:`bounded`, so the same commits."""
        rule, x, steps = self.rule, self.x, self.steps
        B, T, V = x.shape[0], x.shape[1], den.vocab_size
        n, counts = T, []
        for t in range(steps):  # the commits per step while no cut ties (the last step commits the rest)
            k = n if t == steps - 1 else n - rule.remasked(T, t, steps, n)
            counts.append(k)
            n -= k
        if not compact_applies(den, x, 0, T, counts):
            return 0
        block = CompactBlock(den, x, 0, T, rule.propose, exact_bounds=V < ROUNDS_MIN_VOCAB)
        rows = torch.arange(B, device=x.device)
        for t, k in enumerate(counts):
            n = block.n
            if n == 0:
                return steps
            if k == 0:
                continue
            scores = torch.full((B, n), -math.inf, dtype=torch.float64, device=x.device)
            proposal = torch.zeros((B, n), dtype=torch.long, device=x.device)
            gumbel = self.noise(t, rows[:, None], block.pos)  # keyed by (step, position), as bounded()'s

            def fill(sel: torch.Tensor) -> None:
                view = StepView(block, torch.div(sel, n, rounding_mode="floor"),
                                block.pos.view(-1).index_select(0, sel), t, 0, T, sel)
                view.tok = self.propose(view)
                scores.view(-1)[sel] = self.score(view, t, None if gumbel is None else
                                                  gumbel.view(-1).index_select(0, sel))
                proposal.view(-1)[sel] = view.tok

            if t == steps - 1:  # every proposal commits
                fill(torch.arange(B * n, device=x.device))
                x.view(-1)[(rows[:, None] * T + block.pos).view(-1)] = proposal.view(-1)
                return steps
            ub = rule.confidence_score(block.bound)
            ub = ub if gumbel is None else ub + gumbel
            drawn = torch.zeros((B, n), dtype=torch.bool, device=x.device)
            size = min(n, first_draws(k, V))
            first = torch.topk(ub, size, dim=1, sorted=False).indices
            drawn.scatter_(1, first, True)
            fill((first + (rows * n)[:, None]).view(-1))
            while True:  # draw wherever the bound reaches the k-th score found so far
                kth = torch.topk(scores, k, dim=1).values[:, -1:]
                cand = (ub >= kth - 1e-12 * (1.0 + kth.abs())) & ~drawn
                if not bool(cand.any()):
                    break
                # large vocabularies (rows dear): rounds of 4x growing size, best bounds first, so that the k-th
                # score rises between rounds and prunes the rest (the loop ends only when no bound reaches it)
                size *= 4
                if size < n and V >= ROUNDS_MIN_VOCAB:
                    cand &= topk_stable_mask(torch.where(cand, ub, -math.inf), size)
                fill(flat_nonzero(cand))
                drawn |= cand
            commit = scores >= kth
            if not bool((commit.sum(1) == k).all()):  # a tie at the cut: more than k commit in a sequence
                return t
            cols = nonzero_pairs(commit)[1].view(B, k)
            block.commit(cols, proposal.gather(1, cols))
        return steps

    def bounded(self, post: BlockPosteriors, start: int = 0) -> None:
        """The dense loop with proposals drawn only where they can commit (same commits).

        The cut is the (keep + 1)-th smallest score among the m masked positions, i.e. the k-th largest with
        k = m - keep.  With b_l >= p_l(x̂_l) the cache's row-free bound, the score is at most
        confidence_score(b_l) + c_t G_l (G_l needs no proposal).  Proposals are drawn first at the positions of
        largest such bound, then wherever the bound reaches the k-th largest score drawn so far (a lower bound of
        the cut); every other position scores strictly below the cut, so it stays masked whatever its proposal."""
        rule, x, steps = self.rule, self.x, self.steps
        B, T, dev, V = x.shape[0], x.shape[1], x.device, post.den.vocab_size
        M = post.den.mask_id
        for t in range(start, steps):
            masked = x == M
            m = masked.sum(1)
            if not bool(m.any()):
                break
            if t == steps - 1:
                b, p = nonzero_pairs(masked)
                post.load(x, b, p)
                x[b, p] = self.propose(StepView(post, b, p, t, 0, T))
                break
            k = m - rule.remasked(T, t, steps, m)  # [B]; 0 where one position is left
            kmax = int(k.max())
            if kmax == 0:
                continue
            post.load(x, None, None)
            noise = rule.gumbel_scale(t, steps)
            # the noise at every position (uniforms keyed by position), read only where masked
            ub_gumbel = -(noise * torch.log(-torch.log(self.gum_u.grid(t, T)))) if noise > 0 else \
                torch.zeros((B, T), dtype=torch.float64, device=dev)
            ub = torch.where(masked, rule.confidence_score(post.cache.column("pmax")) + ub_gumbel, -math.inf)
            score = torch.full((B, T), -math.inf, dtype=torch.float64, device=dev)
            proposal = torch.zeros((B, T), dtype=torch.long, device=dev)

            def fill(where: torch.Tensor) -> None:
                rb, q = nonzero_pairs(where)
                view = StepView(post, rb, q, t, 0, T)
                view.tok = self.propose(view)
                score[rb, q] = self.score(view, t, ub_gumbel[rb, q] if noise > 0 else None)
                proposal[rb, q] = view.tok

            # a first guess only (the rounds below make the commits independent of it): a plain partial selection
            first = torch.topk(ub, min(T, first_draws(kmax, V)), dim=1, sorted=False).indices
            drawn = torch.zeros_like(masked).scatter_(1, first, True) & masked
            fill(drawn)
            while True:
                kth = torch.topk(score, kmax, dim=1).values.gather(1, (k - 1).clamp(min=0)[:, None])  # <= the cut
                kth = torch.where(k[:, None] > 0, kth, math.inf)
                # below the cut by an ulp's worth: log evaluated in another array may round the other way
                lower = torch.where(k[:, None] > 0, kth - 1e-12 * (1.0 + kth.abs()), math.inf)
                cand = (ub >= lower) & masked & ~drawn
                if not bool(cand.any()):
                    break
                fill(cand)
                drawn |= cand
            commit = drawn & (score >= kth)
            x[commit] = proposal[commit]
