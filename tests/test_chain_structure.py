"""Chains whose powers never converge (transient states, periodic, reducible) are recognised when the oracle is
built, which then ends in milliseconds with an exact fallback instead of filling its memory budget."""
from __future__ import annotations

import time

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser, forward_backward_posterior
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.markov.structure import chain_structure
from dllm_lit.samplers import MDLM
from dllm_lit.sources import english_char_chain

TOL = 1e-6  # float32 table: max abs error in probability, as tests/test_oracle.py


def _kernel(rows) -> MarkovChain:
    return MarkovChain.from_kernel(torch.tensor(rows, dtype=torch.float64))


TRANSIENT3 = [[0.5, 0.5, 0.0], [0.3, 0.7, 0.0], [0.2, 0.3, 0.5]]  # state 2: no other state reaches it (eps 0)


@pytest.mark.parametrize("rows, transient, period, reducible", [
    (TRANSIENT3, [2], 1, False),
    ([[1.0, 0.0], [1.0, 0.0]], [1], 1, False),
    ([[0.0, 1.0], [1.0, 0.0]], [], 2, False),
    ([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]], [], 3, False),
    ([[0.0, 0.5, 0.5, 0.0], [0.5, 0.0, 0.0, 0.5], [0.5, 0.0, 0.0, 0.5], [0.0, 0.5, 0.5, 0.0]], [], 2, False),
    ([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5], [0.0, 0.5, 0.5]], None, None, True),
    ([[0.2, 0.8], [0.6, 0.4]], [], 1, False),
])
def test_structure_of_small_kernels(rows, transient, period, reducible) -> None:
    s = chain_structure(_kernel(rows))
    assert s.reducible == reducible
    if not reducible:
        assert s.transient.tolist() == transient and s.period == period
    assert s.ergodic == (not reducible and not transient and period == 1)
    assert (s.problems() == "") == s.ergodic and "\n" not in s.problems()


def test_structure_of_shipped_and_synthetic_chains() -> None:
    assert chain_structure(english_char_chain()).ergodic
    for eps in (0.0, 1e-4):
        started = time.process_time()
        assert chain_structure(synthetic_chain(4096, 206, eps=eps, seed=1)).ergodic
        assert time.process_time() - started < 2.0
    # a teleport law without full support leaves the states that nothing reaches transient
    idx = torch.tensor([[1, 0], [0, 1], [0, 1]])
    prob = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.5, 0.5]], dtype=torch.float64)
    s = chain_structure(MarkovChain(idx, prob, eps=0.1, nu=torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)))
    assert s.transient.tolist() == [2] and s.period == 1


@pytest.mark.parametrize("rows", [TRANSIENT3, [[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [1.0, 0.0]]])
def test_oracle_on_a_non_ergodic_chain_is_fast_and_exact(rows) -> None:
    chain = _kernel(rows)
    started = time.perf_counter()
    with pytest.warns(UserWarning, match="powers never converge") as caught:
        oracle = OracleDenoiser(chain)
    assert time.perf_counter() - started < 5.0
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    assert not oracle.certified and oracle.depth <= 64
    x = chain.sample(3, 150, seed=4)
    z = torch.full_like(x, chain.mask_id)
    z[0, 0], z[0, 140], z[1, 70], z[2, 149] = x[0, 0], x[0, 140], x[1, 70], x[2, 149]  # gaps beyond the depth
    ref = forward_backward_posterior(chain, z)
    assert (oracle(z).exp().double() - ref).abs().max().item() <= TOL


def test_sampling_a_chain_with_a_transient_state() -> None:
    chain = _kernel(TRANSIENT3)
    with pytest.warns(UserWarning, match="transient"):
        sampler = MDLM(steps=8).connect(chain)
    x = sampler.sample(16, 100, seed=0)
    assert x.shape == (16, 100) and not (x == 2).any()  # the transient state has stationary probability 0
