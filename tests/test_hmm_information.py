"""The information curve beyond the first-order chain (dllm_lit/theory/hmm_information.py): exact Z_j against
brute-force enumeration of I(X_i; X_S) over every (i, S) in tiny HMM, order-2 and first-order worlds; the
Rao-Blackwellised estimate unbiased (against the exact curve) and never wider than today's Monte Carlo."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from dllm_lit.denoisers import HMMOracleDenoiser
from dllm_lit.exact import all_sequences
from dllm_lit.markov import HMMWorld, MarkovChain
from dllm_lit.samplers.reference_scoring import order_log_conditionals
from dllm_lit.theory import information_curve, pair_information
from dllm_lit.theory.hmm_information import exact_information_curve, rao_blackwell_conditionals
from dllm_lit.theory.monte_carlo import information_curve_estimate


def _rand(shape, g, zeros=0.0):
    x = torch.rand(shape, generator=g, dtype=torch.float64) + 0.05
    x = x * (torch.rand(shape, generator=g) >= zeros)
    x[:, 0] += 0.01  # every row keeps some mass
    return x / x.sum(1, keepdim=True)


def tiny_hmm(seed: int = 0) -> HMMWorld:
    g = torch.Generator().manual_seed(seed)
    return HMMWorld(emission=_rand((4, 3), g, 0.3), transition=_rand((4, 4), g, 0.3))


def tiny_order2(seed: int = 1) -> HMMWorld:
    g = torch.Generator().manual_seed(seed)
    return HMMWorld(context_rows=_rand((9, 3), g, 0.2))


def brute_force_curve(world, T: int) -> np.ndarray:
    """Z_j = mean over i and the (j - 1)-subsets S of the others of I(X_i; X_S), from the full joint law."""
    V = world.vocab_size
    P = world.log_prob(all_sequences(V, T)).exp().numpy().reshape((V,) * T)

    def H(keep: tuple[int, ...]) -> float:
        if not keep:
            return 0.0
        m = P.sum(axis=tuple(a for a in range(T) if a not in keep)).ravel()
        m = m[m > 0]
        return float(-(m * np.log(m)).sum())

    Z = np.zeros(T + 1)
    for j in range(1, T + 1):
        vals = [H((i,)) + H(S) - H(tuple(sorted(S + (i,))))
                for i in range(T) for S in itertools.combinations([a for a in range(T) if a != i], j - 1)]
        Z[j] = float(np.mean(vals))
    return Z


@pytest.mark.parametrize("make,T", [(tiny_hmm, 5), (tiny_order2, 5), (tiny_hmm, 4)])
def test_exact_curve_matches_enumeration(make, T):
    world = make()
    assert np.abs(exact_information_curve(world, T) - brute_force_curve(world, T)).max() < 1e-10


def test_exact_curve_of_a_first_order_chain_is_the_closed_form():
    g = torch.Generator().manual_seed(3)
    chain = MarkovChain.from_kernel(_rand((3, 3), g))
    T = 6
    closed = information_curve(pair_information(chain, T), T)
    assert np.abs(exact_information_curve(chain, T) - closed).max() < 1e-10


@pytest.mark.slow
def test_rao_blackwell_estimate_is_unbiased():
    world = tiny_hmm()
    T, N = 5, 6000
    oracle = HMMOracleDenoiser(world, dtype=torch.float64)
    Z_rb, se_rb = information_curve_estimate(rao_blackwell_conditionals(world, oracle, torch.arange(N), T, 7).numpy())
    exact = exact_information_curve(world, T)
    assert (np.abs(Z_rb[2:] - exact[2:]) <= 4 * se_rb[2:]).all()


def test_rao_blackwell_estimate_is_narrower_and_starts_exact():
    world = tiny_hmm()
    T, N = 4, 400
    oracle = HMMOracleDenoiser(world, dtype=torch.float64)
    idx = torch.arange(N)
    rb = rao_blackwell_conditionals(world, oracle, idx, T, seed=7).numpy()
    mc = order_log_conditionals(world, oracle, idx, T, 7).numpy()
    pi = world.stationary.numpy()
    assert np.abs(rb[:, 0] + float(-(pi * np.log(pi)).sum())).max() < 1e-12  # nothing revealed: -H(X_i), exactly
    _, se_rb = information_curve_estimate(rb)
    _, se_mc = information_curve_estimate(mc)
    assert (se_rb[2:] < se_mc[2:]).all()  # the same samples and orders, the next token averaged out


def test_oversized_exact_curve_refused_in_one_line():
    world = tiny_hmm()
    with pytest.raises(ValueError) as err:
        exact_information_curve(world, 40)
    assert "\n" not in str(err.value) and "length=40" in str(err.value)


def test_oversized_rao_blackwell_call_refused_in_one_line():
    world = tiny_hmm()
    with pytest.raises(ValueError) as err:
        rao_blackwell_conditionals(world, HMMOracleDenoiser(world), torch.arange(10**6), 10**4, 0)
    assert "\n" not in str(err.value) and "indices x seq_len" in str(err.value)
