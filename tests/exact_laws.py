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
