"""Exact output law (and NFE law) of DiffusionGemma-style entropy-bounded renoising on a tiny world, by dynamic
programming over the sampler's states (canvas z in V^T, accepted count m, the last argmax canvases).

Written from the rule (``docs/samplers/diffusion_gemma.md``), independently of the sampler's code: per call,
q_i = p(x_i | z_{-i}) under UniformNoise(m / T) (float64 forward-backward), p_i = q_i^(1/tau) normalised,
H_i its entropy rounded to 9 decimals; positions sorted by H ascending (ties by the tie rule; "random" makes
every subset of the tied positions at the cut equally likely) and the j-th accepted iff the entropies before it
sum to at most the bound.  Accepted positions draw from p_i, the others a uniform token.  Output "argmax": the
last argmax canvas; "canvas": the argmax canvas of a stopped sequence, else the last canvas (diffusers 0.42).  Ill-posed cases (an
entropy sum or mean within 1e-9 of a threshold, an entropy within 1e-14 of a rounding boundary, a near-tie for an argmax) raise ValueError.
"""
from __future__ import annotations

import itertools
import math
from collections import defaultdict

import torch

from dllm_lit.denoisers.channels import UniformNoise
from dllm_lit.denoisers.hmm_posterior import hmm_posterior
from dllm_lit.exact.core import State, law_vector
from dllm_lit.markov import HMMWorld, MarkovChain

__all__ = ["diffusion_gemma_law"]

_GUARD = 1e-9


def _entropy_rounded(p: list[float]) -> float:
    h = -sum(x * math.log(x) for x in p if x > 0)
    frac = h * 1e9 - math.floor(h * 1e9)
    if abs(frac - 0.5) < 1e-5:  # within 1e-14 of the boundary
        raise ValueError(f"an entropy {h!r} lies at a rounding boundary of 9 decimals: ill-posed")
    return round(h, 9), h


def _accepted_sets(H: list[float], bound: float, tie_rule: str) -> list[tuple[frozenset[int], float]]:
    """(accepted positions, probability) for rounded entropies H."""
    vals = sorted(H)
    n, acc = 0, 0.0
    for h in vals:
        if abs(acc - bound) < _GUARD:
            raise ValueError(f"an entropy sum lies within {_GUARD} of the bound {bound}: ill-posed")
        n += acc <= bound
        acc += h
    n = max(n, 1)
    cut = vals[n - 1]
    below = [i for i, h in enumerate(H) if h < cut]
    tied = [i for i, h in enumerate(H) if h == cut]
    need = n - len(below)
    if tie_rule == "lowest":
        return [(frozenset(below + tied[:need]), 1.0)]
    if tie_rule == "highest":
        return [(frozenset(below + tied[len(tied) - need:]), 1.0)]
    subsets = list(itertools.combinations(tied, need))
    return [(frozenset(below + list(c)), 1.0 / len(subsets)) for c in subsets]


def _argmax(p: list[float]) -> int:
    top = max(p)
    best = [v for v, x in enumerate(p) if x >= top - _GUARD]
    if len(best) > 1:
        raise ValueError("an argmax is within 1e-9 of a second value: ill-posed")
    return best[0]


def diffusion_gemma_law(world: MarkovChain | HMMWorld, T: int, steps: int, entropy_bound: float = 0.1,
                        t_max: float = 0.8, t_min: float = 0.4, entropy_threshold: float = 0.005,
                        stability_threshold: int = 1, output: str = "argmax",
                        tie_rule: str = "lowest") -> tuple[torch.Tensor, torch.Tensor]:
    """(law over V^T sequences in lexicographic order, law of the NFE over 1..steps as a [steps] vector)."""
    world = world if isinstance(world, HMMWorld) else HMMWorld.from_chain(world)
    V = world.vocab_size
    loo_cache: dict = {}

    def loo(z: State, m: int) -> list[list[float]]:
        if (z, m) not in loo_cache:
            rows = hmm_posterior(world, torch.tensor([z]), UniformNoise(m / T), leave_one_out=True)[0]
            loo_cache[z, m] = rows.tolist()
        return loo_cache[z, m]

    none = (None,) * stability_threshold
    dist: dict = {(z, 0, none): V ** -T for z in itertools.product(range(V), repeat=T)}
    out: dict[State, float] = defaultdict(float)
    nfe = torch.zeros(steps, dtype=torch.float64)
    for k in range(steps):
        tau = t_min + (t_max - t_min) * (steps - k) / steps
        new: dict = defaultdict(float)
        for (z, m, hist), pz in dist.items():
            laws = []
            for q in loo(z, m):
                w = [x ** (1.0 / tau) for x in q]
                laws.append([x / sum(w) for x in w])
            ents = [_entropy_rounded(p) for p in laws]
            arg = tuple(_argmax(p) for p in laws)
            mean_h = sum(h for _, h in ents) / T
            if entropy_threshold > 0 and abs(mean_h - entropy_threshold) < _GUARD:
                raise ValueError(f"a mean entropy lies within {_GUARD} of entropy_threshold: ill-posed")
            stop = all(a == arg for a in hist) and mean_h < entropy_threshold
            last = k == steps - 1
            for acc, pa in _accepted_sets([h for h, _ in ents], entropy_bound, tie_rule):
                opts = [[(v, p) for v, p in enumerate(laws[i]) if p > 0] if i in acc else [(v, 1.0 / V) for v in range(V)]
                        for i in range(T)]
                for combo in itertools.product(*opts):
                    p = pz * pa * math.prod(w for _, w in combo)
                    z2 = tuple(v for v, _ in combo)
                    if stop or last:
                        out[arg if output == "argmax" or stop else z2] += p
                        nfe[k] += p
                    else:
                        new[z2, len(acc), (hist + (arg,))[1:] if stability_threshold else ()] += p
        dist = new
    return law_vector(out, V, T), nfe
