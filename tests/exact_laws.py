"""Exact laws of sampler algorithms by dynamic programming over partially masked states.

For a tiny chain (V^T small) the distribution over the (V+1)^T partially masked states is
propagated step by step with the exact oracle posterior (float64 forward-backward), giving the
exact law of a sampler's output - the reference its samples are tested against.
"""
from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable

import torch

from dllm_lit.denoisers import forward_backward_posterior
from dllm_lit.markov import MarkovChain

State = tuple[int, ...]


class PosteriorCache:
    def __init__(self, chain: MarkovChain) -> None:
        self.chain = chain
        self._cache: dict[State, torch.Tensor] = {}

    def __call__(self, z: State) -> torch.Tensor:
        if z not in self._cache:
            self._cache[z] = forward_backward_posterior(self.chain, torch.tensor([z]))[0]
        return self._cache[z]


def product_step(dist: dict[State, float], options: Callable[[State], list[list[tuple[int, float]]]]) -> dict[State, float]:
    """One parallel step: each position independently takes one of its (value, prob) options."""
    new: dict[State, float] = defaultdict(float)
    for z, pz in dist.items():
        for combo in itertools.product(*options(z)):
            p = pz
            for _, q in combo:
                p *= q
            if p > 0:
                new[tuple(v for v, _ in combo)] += p
    return new


def law_vector(dist: dict[State, float], V: int, T: int) -> torch.Tensor:
    """Probability vector over V^T complete sequences (lexicographic index)."""
    out = torch.zeros(V**T, dtype=torch.float64)
    for z, p in dist.items():
        assert all(v < V for v in z), "a MASK was left"
        code = 0
        for v in z:
            code = code * V + v
        out[code] += p
    return out


def argmax_fill_law(dist: dict[State, float], post: PosteriorCache) -> dict[State, float]:
    M = post.chain.mask_id
    out: dict[State, float] = defaultdict(float)
    for z, p in dist.items():
        if M in z:
            g = post(z)
            z = tuple(int(g[i].argmax()) if v == M else v for i, v in enumerate(z))
        out[z] += p
    return out


def mdlm_law(chain: MarkovChain, T: int, steps: int) -> torch.Tensor:
    """Exact output law of MDLM ddpm_cache + argmax fill (upstream-samplers.md Sec. 1)."""
    from dllm_lit.samplers.schedules import time_grid

    M, V = chain.mask_id, chain.vocab_size
    post = PosteriorCache(chain)
    ts = time_grid(steps).tolist()
    dist: dict[State, float] = {(M,) * T: 1.0}
    for j in range(steps):
        t, s = ts[j], ts[j + 1]

        def options(z: State) -> list[list[tuple[int, float]]]:
            g = post(z)
            out = []
            for i, v in enumerate(z):
                if v != M:
                    out.append([(v, 1.0)])
                else:
                    out.append([(M, s / t)] + [(w, float(g[i, w]) * (t - s) / t) for w in range(V) if g[i, w] > 0])
            return out

        dist = product_step(dist, options)
    return law_vector(argmax_fill_law(dist, post), V, T)


def chain_law(chain: MarkovChain, T: int) -> torch.Tensor:
    from conftest import all_sequences

    return chain.log_prob(all_sequences(chain.vocab_size, T)).exp()


# ---------------------------------------------------------------------------------------------
# Score-and-select rules (LLaDA low-confidence, Fast-dLLM, Dream's alg family, EB, PC-sampler)
# ---------------------------------------------------------------------------------------------

#: scores equal to this many decimals are ties (the samplers' ties are exact ties of the float output)
TIE_DECIMALS = 9

Selection = list[tuple[tuple[int, ...], float]]


def tempered_options(q: torch.Tensor, temperature: float) -> list[tuple[int, float]]:
    """(token, prob) options of a proposal from the law q [V]: argmax (lowest id) at 0, else q^(1/tau) normalised."""
    V = q.numel()
    if temperature == 0:
        top = float(q.max())
        return [(next(v for v in range(V) if float(q[v]) >= top - 1e-12), 1.0)]
    w = q.clamp_min(0) ** (1.0 / temperature)
    w = w / w.sum()
    return [(v, float(w[v])) for v in range(V) if w[v] > 0]


def ranked_choice(positions: list[int], scores: list[float], n: int, tie_rule: str) -> Selection:
    """The n best positions by score (ties to TIE_DECIMALS) under ``tie_rule``: (chosen set, prob) pairs.

    "lowest" / "highest": one set; "random": every subset of the boundary tie group equally likely.
    """
    import math

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
