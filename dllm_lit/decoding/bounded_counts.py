"""Adaptive counts over bounded scores: a step scores the masked positions of its block best bound first, and only
until the rule's count and its committed set are certain - the adaptive twin of the fixed-schedule bounded draws of
:func:`~dllm_lit.decoding.confidence_decoding.decode_blocks` (Fast-dLLM's threshold and factor rules on the exact
oracle, ``docs/samplers/fast_dllm.md``).

Every masked position i has an upper bound u_i of its score known without its posterior row (a rule's ``pmax``
bound: score <= max_v p_i(v) <= the denoiser's row-free bound).  After scoring (proposing and scoring) a set D of
positions, every other score is <= R = max_{i not in D} u_i, so the row's scores sorted descending begin exactly with
the P scores of D that are >= R, and every later one is <= R.  The rule's ``count_decided(top, P, R, m)`` says
whether that fixes its count n (:meth:`~dllm_lit.samplers.rule.RuleSampler.count_decided`).  If it does and the n-th
score is > R, the n best positions lie in D and so does every position tied with the n-th, so the commits are those
of scoring every position, under any tie rule; the proposals of the unscored positions would have been discarded
(they are keyed by (step, position), so no other draw moves).  Otherwise the next round scores more positions,
largest bounds first, in rounds of 4x growing size; once D holds every masked position (R = -inf) the step is the
full computation, so the loop ends.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from dllm_lit.samplers.selection import topk_stable_mask

__all__ = ["score_until_counted", "ScoringRounds"]


@dataclass(frozen=True)
class ScoringRounds:
    """How many positions a step scores per round: ``first`` per sequence, then (with ``rounds``) rounds growing
    ``growth``-fold from there, best bounds first; without ``rounds`` one round takes every candidate.  Any round
    sizes give the same count and commits; they only set how many rows are scored."""

    first: int
    growth: int = 4
    rounds: bool = True


def score_until_counted(ub: torch.Tensor, masked: torch.Tensor, scores: torch.Tensor,
                        fill: Callable[[torch.Tensor], None], count, count_decided, sizes: ScoringRounds) -> torch.Tensor:
    """The count n [B] of one adaptive step (module docstring), scoring by ``fill(where)`` (which writes ``scores``
    [B, L] at the masked positions ``where``; -inf where not scored) only where needed.

    ``ub`` [B, L]: float64 score bounds at the ``masked`` positions (-inf elsewhere); ``count(sorted, n_masked)``
    and ``count_decided(top, known, rest, n_masked)`` the rule's; ``sizes``: the positions scored per round."""
    first, growth, rounds = sizes.first, sizes.growth, sizes.rounds
    B, L = masked.shape
    n_masked = masked.sum(1)
    idle = n_masked == 0
    cols = torch.arange(L, device=ub.device)[None, :]
    drawn = topk_stable_mask(ub, min(first, L)) & masked
    cand, size = drawn, first
    while True:
        if bool(cand.any()):
            fill(cand)
        rest = torch.where(masked & ~drawn, ub, -torch.inf).amax(1)
        ranked = scores.sort(1, descending=True).values
        known = (ranked >= rest[:, None]).sum(1)
        top = torch.where(cols < known[:, None], ranked, -torch.inf)
        every = rest == -torch.inf  # every masked position scored: the full computation
        decided = every | count_decided(top, known, rest, n_masked)
        # undecided rows: any row of real scores (the count is not used there)
        n = count(torch.where(decided[:, None], top, ranked), n_masked).long()
        nth = top.gather(1, (n - 1).clamp(min=0)[:, None])[:, 0]
        certain = decided & (n <= known)
        done = idle | every | (certain & (nth > rest))
        if bool(done.all()):
            return n
        cand = masked & ~drawn & ~done[:, None]
        # with the count certain only the positions that can reach its n-th score are needed
        cand &= ub >= torch.where(certain, nth, -torch.inf)[:, None]
        size *= growth
        if rounds and size < L:
            cand &= topk_stable_mask(torch.where(cand, ub, -torch.inf), size)
        drawn |= cand
