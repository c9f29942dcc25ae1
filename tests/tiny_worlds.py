"""Tiny worlds of every kind (V = 3): a first-order chain, an order-2 context chain, switching chains and a
hidden-state HMM, small enough to enumerate (V^T sequences, S^T hidden paths)."""
from __future__ import annotations

import itertools

import torch

from dllm_lit.markov import HMMWorld, MarkovChain
from dllm_lit.sources.base import ChainSource

V = 3


def _rows(n: int, seed: int, zeros: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    r = torch.rand(n, V, generator=g, dtype=torch.float64) + 0.05
    if zeros:
        r[0, 1] = 0.0
    return r / r.sum(1, keepdim=True)


def first_order(seed: int = 11, zeros: bool = False) -> MarkovChain:
    return MarkovChain.from_kernel(_rows(V, seed, zeros))


def order2(seed: int = 12) -> HMMWorld:
    return HMMWorld(context_rows=_rows(V * V, seed), metadata={"source": "tiny_order2"})


def switching(seed: int = 13, rho: float = 0.8) -> HMMWorld:
    """Two chains over the same V tokens, a hidden topic that stays with probability rho (+ its law)."""
    P = torch.stack([_rows(V, seed), _rows(V, seed + 100)])
    topic = rho * torch.eye(2, dtype=torch.float64) + (1 - rho) * 0.5
    A = torch.einsum("ab,bvw->avbw", topic, P).reshape(2 * V, 2 * V)
    return HMMWorld(emission=torch.eye(V, dtype=torch.float64).repeat(2, 1), transition=A,
                    metadata={"source": "tiny_switching"})


def hidden(seed: int = 14, states: int = 4) -> HMMWorld:
    g = torch.Generator().manual_seed(seed)
    A = torch.rand(states, states, generator=g, dtype=torch.float64) + 0.05
    B = torch.rand(states, V, generator=g, dtype=torch.float64) + 0.05
    return HMMWorld(emission=B / B.sum(1, keepdim=True), transition=A / A.sum(1, keepdim=True),
                    metadata={"source": "tiny_hmm"})


#: name -> world factory
WORLDS = {"chain": first_order, "order2": order2, "switching": switching, "hmm": hidden}


def all_sequences(T: int) -> torch.Tensor:
    return torch.tensor(list(itertools.product(range(V), repeat=T)), dtype=torch.long)


def brute_log_probs(world, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(every sequence [V^T, T] in lexicographic order, its log p by the world's own forward algorithm)."""
    x = all_sequences(T)
    return x, world.log_prob(x)


class TinyWorldSource(ChainSource):
    """A chain source building one of :data:`WORLDS` (for runs through the data module)."""

    def __init__(self, kind: str = "chain") -> None:
        self.kind = kind

    def build(self, cache_dir=None):
        self._chain = WORLDS[self.kind]()
        return self._chain
