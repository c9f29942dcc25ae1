"""Exact laws of score-and-select rules (LLaDA low-confidence, Fast-dLLM, Dream's alg family, EB, PC-sampler)."""
from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable

import torch

from dllm_lit.markov import MarkovChain
from dllm_lit.exact.confidence import TIE_DECIMALS, proposal_options
from dllm_lit.exact.core import PosteriorCache, State, law_vector

__all__ = ["Selection", "tempered_options", "ranked_choice", "plackett_luce_choice", "score_select_law"]

Selection = list[tuple[tuple[int, ...], float]]


def tempered_options(q: torch.Tensor, temperature: float) -> list[tuple[int, float]]:
    """(token, prob) options of a proposal from the law q [V]: argmax (lowest id) at 0, else q^(1/tau) normalised."""
    return proposal_options(q, temperature, tol=1e-12)


def ranked_choice(positions: list[int], scores: list[float], n: int, tie_rule: str) -> Selection:
    """The n best positions by score (ties to TIE_DECIMALS) under ``tie_rule``: (chosen set, prob) pairs.

    "lowest" / "highest": one set; "random": every subset of the boundary tie group equally likely.
    """
    import math

    if tie_rule not in ("lowest", "highest", "random"):
        raise ValueError(f"tie_rule must be one of lowest, highest, random, got {tie_rule!r}")
    if n <= 0:
        return [((), 1.0)]
    key = {i: round(s, TIE_DECIMALS) for i, s in zip(positions, scores)}
    sign = 1 if tie_rule != "highest" else -1
    ranked = sorted(positions, key=lambda i: (-key[i], sign * i))
    if tie_rule != "random":
        return [(tuple(sorted(ranked[:n])), 1.0)]
    cut = key[ranked[n - 1]]
    above = [i for i in positions if key[i] > cut]
    group = [i for i in positions if key[i] == cut]
    need = n - len(above)
    sets = list(itertools.combinations(group, need))
    return [(tuple(sorted(above + list(s))), 1.0 / math.comb(len(group), need)) for s in sets]


def plackett_luce_choice(positions: list[int], weights: list[float], n: int) -> Selection:
    """Law of the set drawn by n successive draws without replacement with probabilities ∝ weights."""
    out: dict[tuple[int, ...], float] = defaultdict(float)

    def rec(chosen: list[int], prob: float) -> None:
        if len(chosen) == n:
            out[tuple(sorted(chosen))] += prob
            return
        rest = [(i, w) for i, w in zip(positions, weights) if i not in chosen]
        total = sum(w for _, w in rest)
        for i, w in rest:
            if w > 0:
                rec(chosen + [i], prob * w / total)

    rec([], 1.0)
    return list(out.items())


def score_select_law(chain: MarkovChain, T: int, blocks: list[tuple[int, int]],
                     propose: Callable[[torch.Tensor], list[tuple[int, float]]],
                     score: Callable[[int, int, torch.Tensor, int], float],
                     select: Callable[[int, list[int], list[float]], Selection],
                     schedule: list[list[int]] | None = None,
                     init: dict[State, float] | None = None) -> torch.Tensor:
    """Exact output law of a score-and-select rule by DP over partially masked states.

    Blocks are decoded left to right.  At a step every masked position i of the block proposes
    from ``propose(g_i)`` (g the float64 forward-backward posterior), independently; for each joint
    proposal the scores ``score(i, v, g, lo)`` and ``select(j, masked, scores)`` give the committed
    sets with their probabilities.  ``schedule[blk]`` lists the steps of a block (a step with j's
    count 0 is skipped by the caller's ``select``); None runs a block until no mask is left.
    """
    M = chain.mask_id
    post = PosteriorCache(chain)
    dist: dict[State, float] = dict(init) if init is not None else {(M,) * T: 1.0}
    j = 0
    for blk, (lo, hi) in enumerate(blocks):
        i = 0
        while True:
            if schedule is not None and i >= len(schedule[blk]):
                break
            if schedule is None and all(M not in z[lo:hi] for z in dist):
                break
            new: dict[State, float] = defaultdict(float)
            for z, pz in dist.items():
                masked = [k for k in range(lo, hi) if z[k] == M]
                if not masked:
                    new[z] += pz
                    continue
                g = post(z)
                for combo in itertools.product(*(propose(g[k]) for k in masked)):
                    pr = pz
                    for _, q in combo:
                        pr *= q
                    toks = [v for v, _ in combo]
                    scores = [score(k, v, g, lo) for k, v in zip(masked, toks)]
                    for chosen, ps in select(j + i, masked, scores):
                        zz = list(z)
                        for k, v in zip(masked, toks):
                            if k in chosen:
                                zz[k] = v
                        new[tuple(zz)] += pr * ps
            dist = new
            i += 1
        j += i
    return law_vector(dist, chain.vocab_size, T)
