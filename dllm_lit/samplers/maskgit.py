"""MaskGIT iterative decoding with a mask schedule and choice temperature; see ``docs/samplers/maskgit.md``.

Chang et al., "MaskGIT: Masked Generative Image Transformer" (arXiv:2202.04200); followed in
google-research/maskgit ``maskgit/libml/parallel_decode.py`` (``decode``, ``mask_by_random_topk``)
and ``maskgit/libml/mask_schedule.py`` (the yair-schiff/maskgit copy, strategy ``"maskgit"``).

With N = T masked positions at the start and S = steps, step t = 0..S-1 does:

1. at every masked position l, a proposal x̂_l ~ p_l^(1/tau) (upstream: tau = 1, ``categorical``
   on the logits) with confidence log p_l(x̂_l) (untempered);
2. if t = S - 1: every proposal is committed (upstream returns the last step's proposals,
   recorded before its re-masking);
3. otherwise, with r = (t + 1) / S and gamma(r) = cos(pi r / 2) ("cosine") or 1 - r ("linear",
   upstream's "uniform") clipped to [1e-6, 1],

       n_t = max(1, min(#masked - 1, floor(N gamma(r))))

   positions stay masked: those whose score  log p_l(x̂_l) + c (1 - r) G_l  (G_l ~ Gumbel(0, 1),
   c = ``choice_temperature``) is strictly below the (n_t + 1)-th smallest score among the masked
   positions (committed tokens score +inf and never change).  Every other proposal is committed.

At c (1 - r) = 0 equal confidences tie and upstream's strict "<" keeps all tied positions at the
cut-off committed (so fewer than n_t may stay masked); at c > 0 ties have probability zero and
exactly n_t stay masked.  The committed set is then the Gumbel top-(#masked - n_t) of
log p(x̂) / (c (1 - r)), i.e. a Plackett-Luce draw with weights p(x̂)^(1 / (c (1 - r))).

Every step calls the model (upstream has no cache): NFE = S.  With S > T some steps commit nothing
(one position stays masked until the last step); upstream spends those calls too.

Implementation: proposals and confidences come from the confidence-decoding engine
(:func:`~dllm_lit.decoding.confidence_decoding.propose_step`, LLaDA's proposals, with a
:class:`PosteriorCache` refreshed only where a nearest revealed neighbour changed, run in sub-batches
that fit its memory budget); uniforms are counter-based: proposals Stream.TOKEN, Gumbel noise Stream.ORDER, both at (step t, position).
The schedule is computed in float64 (upstream: float32, which can round floor(N gamma) down by
one at exact products such as cos(pi / 3) N).
"""
from __future__ import annotations

import math

import torch

from dllm_lit import checks, rng
from dllm_lit.decoding import (BlockPosteriors, CompactBlock, ROUNDS_MIN_VOCAB, StepView, cache_width, compact_applies,
                               confidence, first_draws, has_max_prob_bound, in_sub_batches, proposal_features,
                               proposal_widths, propose_step, propose_tokens)
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.util.indices import flat_nonzero, nonzero_pairs
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.draws import StepUniforms, tempered_law
from dllm_lit.samplers.selection import topk_stable_mask

__all__ = ["MaskGIT", "SCHEDULES", "mask_ratio", "num_masked_next"]

SCHEDULES = ("cosine", "linear")


def mask_ratio(r: float, schedule: str = "cosine") -> float:
    """gamma(r) clipped to [1e-6, 1] (upstream ``mask_schedule.schedule``: "cosine" or "uniform" = linear)."""
    g = math.cos(math.pi / 2.0 * r) if schedule == "cosine" else 1.0 - r
    return min(max(g, 1e-6), 1.0)


def num_masked_next(N: int, t: int, S: int, unknown: torch.Tensor | int, schedule: str = "cosine"):
    """n_t = max(1, min(unknown - 1, floor(N gamma((t + 1) / S)))): positions left masked after step t < S - 1."""
    n = math.floor(N * mask_ratio((t + 1) / S, schedule))
    if isinstance(unknown, int):
        return max(1, min(unknown - 1, n))
    return (unknown - 1).clamp(max=n).clamp(min=1)


class MaskGIT(Sampler):
    """MaskGIT decoding (see module docstring).

    Args:
        denoiser: frozen denoiser (None: the chain's exact oracle).
        steps: decoding iterations S (or a grid).
        choice_temperature: c >= 0, scale of the Gumbel noise on the confidences, annealed by
            (1 - (t + 1) / S) (upstream default 4.5; 0 = deterministic low-confidence re-masking).
        schedule: "cosine" (upstream default) or "linear" (upstream's "uniform").
        temperature: tau >= 0 of the proposal draw p^(1/tau) (upstream 1; 0 = argmax).
    """

    sampler_name = "maskgit"
    no_log_q_reason = "positions are committed by the confidence of the drawn proposals, so the order depends on the tokens"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128,
                 choice_temperature: float = 4.5, schedule: str = "cosine", temperature: float = 1.0) -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.choice_temperature = checks.real("choice_temperature", choice_temperature, 0.0)
        self.schedule = checks.choice("schedule", schedule, SCHEDULES)
        self.temperature = checks.real("temperature", temperature, 0.0)
        #: reuse posterior features between steps (exact; see dllm_lit.decoding.posterior_cache)
        self.use_cache = True

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        M, T, V, tau = self.mask_id, seq_len, self.vocab_size, self.temperature
        bounded = tau > 0 and self.use_cache and has_max_prob_bound(self.denoiser)
        # sub-batches sized by what the path run below stores per position: the bounded path's cache keeps the
        # bound (and no [V] rows), the dense path's the rows and their cdf
        width = cache_width(self.denoiser, proposal_widths(V, tau, cdf=False), ("probs",)) if bounded else 2 * V + 2
        out = in_sub_batches(lambda ix: self.generate(ix, seq_len, steps, seed), indices, width, T, self.use_cache)
        if out is not None:
            return out
        B, dev = indices.numel(), indices.device
        x = torch.full((B, T), M, dtype=torch.long, device=dev)
        tok_u = StepUniforms(seed, indices, steps)
        gum_u = StepUniforms(seed, indices, steps, stream=rng.Stream.ORDER)
        if bounded:  # bounded path: proposals drawn only where they can commit
            post = BlockPosteriors(self.denoiser, B, 0, T, lambda probs: proposal_features(probs, tau, cdf=False),
                                   proposal_widths(V, tau, cdf=False), dev, self.use_cache, fresh=("probs",),
                                   law=lambda probs: tempered_law(probs, tau), bound="pmax")
            if post.cache is not None and post.cache.bound is not None:
                start = self._compact(x, steps, tok_u, gum_u)
                return x if start == steps else self._bounded(x, post, steps, tok_u, gum_u, start)
        post = BlockPosteriors(self.denoiser, B, 0, T, lambda probs: proposal_features(probs, tau),
                               proposal_widths(V, tau), dev, self.use_cache, 2 * V + 2)
        N = T
        for t in range(steps):
            masked = x == M
            b, p = nonzero_pairs(masked)
            if b.numel() == 0:
                break
            view = propose_step(post, x, b, p, t, tau, tok_u)
            tok, conf = view.tok, confidence(view)
            if t == steps - 1:
                x[b, p] = tok
                break
            noise = self.choice_temperature * (1.0 - (t + 1) / steps)
            score = torch.full((B, T), math.inf, dtype=torch.float64, device=dev)
            s = conf.log()
            if noise > 0:
                s = s - noise * torch.log(-torch.log(gum_u.at(t, b, p)))  # + noise * Gumbel(0, 1)
            score[b, p] = s
            keep = num_masked_next(N, t, steps, masked.sum(1), self.schedule)  # [B], >= 1
            cut = score.sort(1).values.gather(1, keep[:, None])  # (keep + 1)-th smallest
            commit = ~(score[b, p] < cut[b, 0])
            x[b[commit], p[commit]] = tok[commit]
        return x

    def _compact(self, x: torch.Tensor, steps: int, tok_u: StepUniforms, gum_u: StepUniforms) -> int:
        """The steps of :meth:`_bounded` from step 0 over the masked positions only (compact columns,
        :class:`~dllm_lit.decoding.compact_decoding.CompactBlock`): while every sequence commits the same number k
        of tokens - always, unless scores tie at a cut - every sequence holds the same number n of masked positions,
        so bounds, Gumbel noise, the first guess and the cut cost O(B n) instead of O(B T).  Returns the step from
        which :meth:`_bounded` goes on (``steps`` when done): a step whose cut ties in some sequence commits nothing
        here.  Same proposals, noise and cut as :meth:`_bounded` (keyed by step and position), so the same commits."""
        B, T, V, tau = x.shape[0], x.shape[1], self.vocab_size, self.temperature
        n, counts = T, []
        for t in range(steps):  # the commits per step while no cut ties (the last step commits the rest)
            k = n if t == steps - 1 else n - num_masked_next(T, t, steps, n, self.schedule)
            counts.append(k)
            n -= k
        if not compact_applies(self.denoiser, x, 0, T, counts):
            return 0
        block = CompactBlock(self.denoiser, x, 0, T, lambda probs: tempered_law(probs, tau),
                             exact_bounds=V < ROUNDS_MIN_VOCAB)
        rows = torch.arange(B, device=x.device)
        for t, k in enumerate(counts):
            n = block.n
            if n == 0:
                return steps
            if k == 0:
                continue
            scores = torch.full((B, n), -math.inf, dtype=torch.float64, device=x.device)
            proposal = torch.zeros((B, n), dtype=torch.long, device=x.device)
            noise = self.choice_temperature * (1.0 - (t + 1) / steps)
            # _bounded's numbers at the masked positions: the uniforms are keyed by (step, position)
            gumbel = -(noise * torch.log(-torch.log(gum_u.at(t, rows[:, None], block.pos)))) if noise > 0 and \
                t < steps - 1 else None

            def fill(sel: torch.Tensor) -> None:
                view = StepView(block, torch.div(sel, n, rounding_mode="floor"), block.pos.view(-1).index_select(0, sel),
                                t, 0, T, sel)
                view.tok = propose_tokens(view, tau, tok_u)
                sc = confidence(view).log()
                scores.view(-1)[sel] = sc if gumbel is None else sc + gumbel.view(-1).index_select(0, sel)
                proposal.view(-1)[sel] = view.tok

            if t == steps - 1:  # every proposal commits
                fill(torch.arange(B * n, device=x.device))
                x.view(-1)[(rows[:, None] * T + block.pos).view(-1)] = proposal.view(-1)
                return steps
            ub = block.bound.log() if gumbel is None else block.bound.log() + gumbel
            drawn = torch.zeros((B, n), dtype=torch.bool, device=x.device)
            size = min(n, first_draws(k, V))
            first = torch.topk(ub, size, dim=1, sorted=False).indices
            drawn.scatter_(1, first, True)
            fill((first + (rows * n)[:, None]).view(-1))
            while True:  # as _bounded: draw wherever the bound reaches the k-th score found so far
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

    def _bounded(self, x: torch.Tensor, post: BlockPosteriors, steps: int, tok_u: StepUniforms,
                 gum_u: StepUniforms, start: int = 0) -> torch.Tensor:
        """The loop of :meth:`generate` with proposals drawn only where they can commit (same commits).

        The cut is the (keep + 1)-th smallest score among the m masked positions, i.e. the k-th largest with
        k = m - keep.  With b_l >= p_l(x̂_l) the cache's row-free bound of the posterior maximum, the score is at
        most log b_l + noise G_l (G_l needs no proposal).  Proposals are drawn first at the positions of largest
        such bound, then wherever the bound reaches the k-th largest score drawn so far (a lower bound of the
        cut); every other position scores strictly below the cut, so it stays masked whatever its proposal, and
        the k-th largest score over the drawn positions is the cut itself.  Proposals and Gumbel noise are keyed
        by (step, position), so the commits are identical (ties at the cut included).
        """
        B, T, dev = x.shape[0], x.shape[1], x.device
        M, tau = self.mask_id, self.temperature
        for t in range(start, steps):
            masked = x == M
            m = masked.sum(1)
            if not bool(m.any()):
                break
            if t == steps - 1:
                b, p = nonzero_pairs(masked)
                post.load(x, b, p)
                view = StepView(post, b, p, t, 0, T)
                x[b, p] = propose_tokens(view, tau, tok_u)
                break
            k = m - num_masked_next(T, t, steps, m, self.schedule)  # [B]; 0 where one position is left
            kmax = int(k.max())
            if kmax == 0:
                continue
            post.load(x, None, None)
            noise = self.choice_temperature * (1.0 - (t + 1) / steps)
            # the same numbers as generate's - noise log(-log u) at the masked positions (uniforms keyed by
            # position: the grid holds them at every position, read only where masked)
            ub_gumbel = -(noise * torch.log(-torch.log(gum_u.grid(t, T)))) if noise > 0 else \
                torch.zeros((B, T), dtype=torch.float64, device=dev)
            ub = torch.where(masked, post.cache.column("pmax").log() + ub_gumbel, -math.inf)
            score = torch.full((B, T), -math.inf, dtype=torch.float64, device=dev)
            proposal = torch.zeros((B, T), dtype=torch.long, device=dev)

            def fill(where: torch.Tensor) -> None:
                rb, q = nonzero_pairs(where)
                view = StepView(post, rb, q, t, 0, T)
                view.tok = propose_tokens(view, tau, tok_u)
                s = confidence(view).log()
                if noise > 0:
                    s = s + ub_gumbel[rb, q]
                score[rb, q] = s
                proposal[rb, q] = view.tok

            # a first guess only (the rounds below make the commits independent of it): a plain partial selection
            first = torch.topk(ub, min(T, first_draws(kmax, self.vocab_size)), dim=1, sorted=False).indices
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
        return x
