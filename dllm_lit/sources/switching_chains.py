"""C character chains with a hidden topic that persists with probability rho per token.

Chain 0 is the bundled English chain P_0 (``sparsity`` as :class:`~dllm_lit.sources.EnglishChars`); chain c > 0
is P_0 with the 26 letters relabelled by a fixed random permutation (space kept; seeded).  The hidden state is
(topic c, last token v); at each token the topic stays with probability rho and is otherwise redrawn from
``weights`` (default uniform), and the token follows the new topic's chain:

    A((c, v), (c', w)) = (rho 1[c' = c] + (1 - rho) weights(c')) P_c'(v, w),     B((c, v), .) = delta_v.

rho = 0: the first-order chain with kernel sum_c weights(c) P_c (the topic carries nothing forward);
rho = 1: a mixture of chains (the topic is drawn once, mu(c, v) = weights(c) pi_c(v), and every revealed
token carries evidence about the whole sequence).  rho must lie in [0, 1].
"""
from __future__ import annotations

from pathlib import Path

import torch

from dllm_lit import checks
from dllm_lit.markov.hmm import HMMWorld
from dllm_lit.sources.base import ChainSource, TextDecoder
from dllm_lit.sources.options import SparsityOptions

__all__ = ["SwitchingChains", "relabelled_kernels"]


def relabelled_kernels(P: torch.Tensor, num_chains: int, seed: int) -> list[torch.Tensor]:
    """[P, and num_chains - 1 copies with the first V - 1 symbols permuted (the last, space, fixed)]."""
    V = P.shape[0]
    g = torch.Generator().manual_seed(int(seed))
    out = [P]
    for _ in range(num_chains - 1):
        perm = torch.cat([torch.randperm(V - 1, generator=g), torch.tensor([V - 1])])
        out.append(P[perm][:, perm])
    return out


class SwitchingChains(ChainSource):
    """Switching-chains world (see module docstring).

    Args:
        num_chains: C >= 1.
        rho: topic persistence in [0, 1].
        weights: topic law (C entries summing to one; None: uniform).
        seed: relabelling permutations.
        sparsity: K rule and teleport of the base English chain.
    """

    def __init__(self, num_chains: int = 2, rho: float = 0.99, weights: list[float] | None = None, seed: int = 0,
                 sparsity: SparsityOptions = SparsityOptions()) -> None:
        self.num_chains = checks.integer("num_chains", num_chains, 1)
        self.rho = checks.real("rho (topic persistence)", rho, 0.0, 1.0)
        if weights is not None:
            w = torch.as_tensor(weights, dtype=torch.float64)
            if w.numel() != self.num_chains or (w < 0).any() or abs(float(w.sum()) - 1.0) > 1e-9:
                raise ValueError(f"weights must be {self.num_chains} numbers >= 0 summing to 1, got {weights!r}")
        self.weights, self.seed = weights, checks.integer("seed", seed, 0)
        self.sparsity = SparsityOptions.coerce(sparsity)

    def build(self, cache_dir: Path | None = None) -> HMMWorld:
        from dllm_lit.sources.english import english_char_chain

        base = english_char_chain(self.sparsity)
        kernels = relabelled_kernels(base.kernel, self.num_chains, self.seed)
        C, V = self.num_chains, base.vocab_size
        w = (torch.full((C,), 1.0 / C, dtype=torch.float64) if self.weights is None
             else torch.as_tensor(self.weights, dtype=torch.float64))
        topic = self.rho * torch.eye(C, dtype=torch.float64) + (1.0 - self.rho) * w[None, :]  # [c, c']
        A = torch.einsum("ab,bvw->avbw", topic, torch.stack(kernels)).reshape(C * V, C * V)
        B = torch.eye(V, dtype=torch.float64).repeat(C, 1)
        initial = None
        if self.rho == 1.0:  # reducible: the mixture of the chains' stationary laws is the stationary start
            pis = torch.stack([_stationary(k) for k in kernels])
            initial = (w[:, None] * pis).reshape(-1)
        self._chain = HMMWorld(emission=B, transition=A, initial=initial, metadata={
            "source": "switching_chains", "num_chains": C, "rho": self.rho, "weights": self.weights,
            "seed": self.seed, **self.sparsity.as_dict()})
        return self._chain

    def decoder(self) -> TextDecoder:
        from dllm_lit.corpus.charlevel import CharDecoder

        return CharDecoder()


def _stationary(P: torch.Tensor) -> torch.Tensor:
    from dllm_lit.markov import MarkovChain

    return MarkovChain.from_kernel(P).stationary
