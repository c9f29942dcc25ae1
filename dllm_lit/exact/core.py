"""Dynamic programming over partially masked states: the shared pieces (posteriors, parallel steps, law vectors).

For a tiny chain (V^T small) the distribution over the (V+1)^T partially masked states is propagated step by
step with the exact oracle posterior (float64 forward-backward), giving the exact law of a sampler's output.
"""
from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable

import torch

from dllm_lit.denoisers.forward_backward import forward_backward_posterior
from dllm_lit.markov import HMMWorld, MarkovChain

__all__ = ["State", "PosteriorCache", "product_step", "law_vector", "argmax_fill_law", "all_sequences", "chain_law"]

State = tuple[int, ...]


class PosteriorCache:
    def __init__(self, chain: MarkovChain | HMMWorld) -> None:
        self.chain = chain
        self._cache: dict[State, torch.Tensor] = {}

    def __call__(self, z: State) -> torch.Tensor:
        if z not in self._cache:
            if isinstance(self.chain, HMMWorld):  # beyond first order: the HMM forward-backward (float64)
                from dllm_lit.denoisers.hmm_posterior import hmm_posterior
                self._cache[z] = hmm_posterior(self.chain, torch.tensor([z]))[0]
            elif not isinstance(self.chain, MarkovChain):  # an ExactWorld (dllm_lit.markov.world_api): its posterior
                self._cache[z] = self.chain.posterior(torch.tensor([z]))[0]
            else:
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


def all_sequences(V: int, T: int) -> torch.Tensor:
    """Every sequence of T tokens over V ids, in lexicographic order: LongTensor [V^T, T]."""
    return torch.tensor(list(itertools.product(range(V), repeat=T)), dtype=torch.long).view(-1, T)


def chain_law(chain: MarkovChain, T: int) -> torch.Tensor:
    """The chain's own law over V^T sequences (what an exact sampler, e.g. AR or FHS, produces)."""
    return chain.log_prob(all_sequences(chain.vocab_size, T)).exp()
