"""A random HMM world with a mixing-time knob and an emission-sparsity knob (offline; deterministic in ``seed``).

    A = stay I + (1 - stay) R,   R(s, .) propto E^(1 / concentration)     (mixing time ~ 1 / ((1 - stay) gap(R)))
    B(s, .) propto E^(1 / concentration) on ``emission_support`` random tokens, 0 elsewhere

with E i.i.d. Exp(1) (concentration 1: Dirichlet(1) rows; below 1: more peaked rows).

``stay`` in [0, 1) sets how long the hidden state persists (its correlation time); ``emission_support`` in
[1, V] how sharply a token identifies its state (1: each state emits one token).  mu is the stationary law of A.
"""
from __future__ import annotations

from pathlib import Path

import torch

from dllm_lit import checks
from dllm_lit.engine.budget import check_memory
from dllm_lit.markov.hmm import HMMWorld
from dllm_lit.sources.base import ChainSource

__all__ = ["HMMSynthetic", "synthetic_hmm"]


def check_hmm_size(num_states: int, vocab_size: int) -> None:
    """One line naming ``num_states`` when the draw would not fit this machine's memory: three S x S float64
    matrices (R, the identity, A) and the S x V emissions with their random ranks (float64, float32, int64)."""
    S, V = float(num_states), float(vocab_size)
    check_memory("num_states", num_states, 24 * S * S + 20 * S * V,
                 "the synthetic HMM's S x S transition matrices and S x V emissions")


def synthetic_hmm(num_states: int, vocab_size: int, stay: float = 0.9, emission_support: int = 3,
                  concentration: float = 1.0, seed: int = 0) -> HMMWorld:
    """The random HMM of the module docstring."""
    S = checks.integer("num_states", num_states, 1)
    V = checks.integer("vocab_size", vocab_size, 1)
    stay = checks.real("stay (state persistence)", stay, 0.0, 1.0, high_open=True)
    k = checks.integer("emission_support", emission_support, 1, V)
    conc = checks.real("concentration", concentration, 0.0, low_open=True)
    check_hmm_size(S, V)
    g = torch.Generator().manual_seed(checks.integer("seed", seed, 0))

    def dirichlet(rows: int, cols: int) -> torch.Tensor:
        x = (-torch.rand(rows, cols, generator=g, dtype=torch.float64).clamp_min(1e-300).log()).pow(1.0 / conc)
        return x / x.sum(1, keepdim=True)

    R = dirichlet(S, S)
    A = stay * torch.eye(S, dtype=torch.float64) + (1.0 - stay) * R
    support = torch.rand(S, V, generator=g).argsort(1)[:, :k]
    B = torch.zeros(S, V, dtype=torch.float64).scatter_(1, support, dirichlet(S, k))
    return HMMWorld(emission=B, transition=A, metadata={
        "source": "hmm_synthetic", "num_states": S, "vocab_size": V, "stay": stay, "emission_support": k,
        "concentration": conc, "seed": seed})


class HMMSynthetic(ChainSource):
    """:func:`synthetic_hmm` as a source; token ids decode as numbers."""

    def __init__(self, num_states: int = 16, vocab_size: int = 27, stay: float = 0.9, emission_support: int = 3,
                 concentration: float = 1.0, seed: int = 0) -> None:
        self.num_states, self.vocab_size, self.stay = num_states, vocab_size, stay
        self.emission_support, self.concentration, self.seed = emission_support, concentration, seed
        checks.integer("num_states", num_states, 1)
        checks.integer("vocab_size", vocab_size, 1)
        checks.real("stay (state persistence)", stay, 0.0, 1.0, high_open=True)
        checks.integer("emission_support", emission_support, 1, vocab_size)
        checks.real("concentration", concentration, 0.0, low_open=True)
        check_hmm_size(num_states, vocab_size)  # before anything is drawn

    def build(self, cache_dir: Path | None = None) -> HMMWorld:
        self._chain = synthetic_hmm(self.num_states, self.vocab_size, self.stay, self.emission_support,
                                    self.concentration, self.seed)
        return self._chain
