"""Exact laws of MDLM's sampler (ddpm_cache + argmax fill), the paper's "MDLM" (LLaDA random remasking,
temperature 1) and block MDLM (BD3-LM's semi-AR sampler)."""
from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable

import torch

from dllm_lit.markov import MarkovChain
from dllm_lit.exact.core import PosteriorCache, State, argmax_fill_law, law_vector, product_step
from dllm_lit.exact.subsets import random_subset_step

__all__ = ["mdlm_law", "mdlm_paper_law", "nucleus_row", "block_mdlm_law"]


def mdlm_law(chain: MarkovChain, T: int, steps: int) -> torch.Tensor:
    """Exact output law of MDLM ddpm_cache + argmax fill (docs/samplers/mdlm.md)."""
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



def mdlm_paper_law(chain: MarkovChain, T: int, steps: int, counts: list[int] | None = None) -> torch.Tensor:
    """The paper's "MDLM": step i unmasks a uniform k_i-subset of the masked positions (k_i = T // S + [i < T % S],
    or ``counts[i]``), each drawing its token from its exact marginal."""
    M, V = chain.mask_id, chain.vocab_size
    if counts is not None and (len(counts) != steps or sum(counts) != T):
        raise ValueError(f"counts must be {steps} round sizes summing to T {T}, got {counts}")
    post = PosteriorCache(chain)
    dist: dict[State, float] = {(M,) * T: 1.0}
    for i in range(steps):
        k = T // steps + (1 if i < T % steps else 0) if counts is None else counts[i]
        if k == 0:
            continue
        dist = random_subset_step(dist, post, M, k, lambda g, l: [(v, float(g[l, v])) for v in range(V)])
    return law_vector(dist, V, T)

def nucleus_row(q: list[float], p: float) -> tuple[list[float], float]:
    """Strict top-p on one row (cumsum <= p kept, the first always, ties: lower id first), renormalised.

    Returns (filtered row, min |cumsum - p|): a margin near 0 means float32 and float64 posteriors could
    disagree on the keep set, so a test built on it would be ill-posed.
    """
    tot = sum(q)
    q = [x / tot for x in q]
    if p >= 1.0:
        return q, float("inf")
    order = sorted(range(len(q)), key=lambda v: (-q[v], v))
    keep, c, margin = set(), 0.0, float("inf")
    for rank, v in enumerate(order):
        c += q[v]
        margin = min(margin, abs(c - p))
        if rank == 0 or c <= p:
            keep.add(v)
    kept = sum(q[v] for v in keep)
    return [q[v] / kept if v in keep else 0.0 for v in range(len(q))], margin


def block_mdlm_law(chain: MarkovChain, T: int, block_size: int, steps: int, grid: str = "bd3",
                   nucleus_p: float = 1.0, first_hitting: bool = False) -> tuple[torch.Tensor, float]:
    """Exact output law of BD3-LM's semi-AR sampler (block MDLM), ``steps`` steps per block.

    Written from the upstream definition, independently of ``dllm_lit.samplers.block_mdlm``: blocks
    left to right; grid "bd3": t_j = 1 - j/(S-1) (t_0 = 1 when S = 1), s_j = max(t_j - 1/S, 0), a masked
    position of the block moves w.p. (t - s)/t (1 at t = 0) to a token of the nucleus-filtered
    posterior; grid "mdlm": t_j = 1 - j (1 - 1e-5)/S, s_j = t_{j+1}, then the argmax fill of the block.
    First hitting: per step one masked position of the block, uniformly, draws its token.  The posterior
    is the float64 forward-backward one given the whole state (later blocks are all MASK).
    Returns (law over V^T, smallest nucleus margin met).
    """
    if T % block_size:
        raise ValueError(f"block_size {block_size} must divide T {T}")
    M, V = chain.mask_id, chain.vocab_size
    post = PosteriorCache(chain)
    margin = [float("inf")]

    def filt(g_row: torch.Tensor) -> list[float]:
        row, mg = nucleus_row(g_row.tolist(), nucleus_p)
        margin[0] = min(margin[0], mg)
        return row

    S = steps
    if grid == "bd3":
        ts = [1.0] if S == 1 else [1.0 - j / (S - 1) for j in range(S)]
        ss = [max(t - 1.0 / S, 0.0) for t in ts]
    else:
        full = [1.0 - j * (1.0 - 1e-5) / S for j in range(S + 1)]
        ts, ss = full[:-1], full[1:]
    dist: dict[State, float] = {(M,) * T: 1.0}
    for blk in range(T // block_size):
        lo, hi = blk * block_size, (blk + 1) * block_size
        if first_hitting:
            for _ in range(block_size):
                new: dict[State, float] = defaultdict(float)
                for z, pz in dist.items():
                    masked = [i for i in range(lo, hi) if z[i] == M]
                    g = post(z)
                    for i in masked:
                        q = filt(g[i])
                        for w in range(V):
                            if q[w] > 0:
                                new[z[:i] + (w,) + z[i + 1:]] += pz * q[w] / len(masked)
                dist = new
            continue
        for t, s in zip(ts, ss):
            move = (t - s) / t if t > 0 else 1.0

            def options(z: State, lo=lo, hi=hi, move=move) -> list[list[tuple[int, float]]]:
                g = post(z)
                out = []
                for i, v in enumerate(z):
                    if v != M or not lo <= i < hi:
                        out.append([(v, 1.0)])
                        continue
                    q = filt(g[i])
                    stay = [(M, 1.0 - move)] if move < 1.0 else []
                    out.append(stay + [(w, q[w] * move) for w in range(V) if q[w] > 0])
                return out

            dist = product_step(dist, options)
        if grid == "mdlm":
            filled: dict[State, float] = defaultdict(float)
            for z, pz in dist.items():
                g = post(z)
                filled[tuple(int(g[i].argmax()) if (v == M and lo <= i < hi) else v for i, v in enumerate(z))] += pz
            dist = filled
    return law_vector(dist, V, T), margin[0]
