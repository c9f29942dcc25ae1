"""Mathematically equal confidences of the exact oracle are equal numbers, so tie rules, not rounding, decide
(issue 19, item 5).

The exact oracle produces exact ties that a learned model never does:

* identical neighbourhoods (the all-mask state: every position's row is pi) - the same computation;
* one-sided rows at the neighbour's own token: p(x_{i-d} = a | x_i = a) = p(x_{i+d} = a | x_i = a) = P'^d(a, a)
  (time reversal of the stationary chain);
* mirror positions in a gap a ... b: P'^(d1)(a, v) P'^(d2)(v, b) / P'^(d1+d2)(a, b) at v = a = b for (d1, d2)
  and (d2, d1) (multiplication commutes).

Before, the two sides of each pair were normalised by differently rounded sums, and which tie won depended on the
dtype: LLaDA's law with a float64 oracle differed from the float32 one (and from its exact law with the tie rule).
"""
from __future__ import annotations

import pytest
import torch

from conftest import TINY_KERNEL, chi_square_pvalue, sequence_counts
from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.samplers import LLaDA
from dllm_lit.sources import english_char_chain
from test_llada import llada_law

pytestmark = pytest.mark.usefixtures("single_thread")

DTYPES = (torch.float32, torch.float64)


def _chains() -> list[MarkovChain]:
    return [english_char_chain(), synthetic_chain(3, 3, eps=0.2, seed=2), synthetic_chain(40, 4, eps=0.0, seed=1),
            MarkovChain.from_kernel(torch.tensor(TINY_KERNEL, dtype=torch.float64))]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_one_sided_rows_tie_at_the_neighbour_token(dtype) -> None:
    for chain in _chains():
        oracle = OracleDenoiser(chain, dtype=dtype)
        a = torch.arange(chain.vocab_size)
        none = torch.zeros_like(a)
        for d in (1, 2, 3, 9, 60):  # 60: beyond the certified depth
            dist = torch.full_like(a, d)
            left_only = oracle.probs_given_neighbours(a, dist, a, none)   # x_{i-d} = a revealed
            right_only = oracle.probs_given_neighbours(a, none, a, dist)  # x_{i+d} = a revealed
            assert torch.equal(left_only[a, a], right_only[a, a]), (chain, d)
            # still the exact posterior: pi(v) P'^d(v, a) / pi(a), rows summing to one (float32: 1e-5, float64: 3e-8,
            # the certified depth's mixing tolerance at d = 60)
            tol = 1e-5 if dtype == torch.float32 else 3e-8
            power = torch.linalg.matrix_power(chain.kernel, d)
            seen = chain.stationary > 0  # a token of probability 0 has no posterior given it
            exact = chain.stationary[:, None] * power[:, seen] / chain.stationary[None, seen]
            assert torch.allclose(right_only[seen].double(), exact.T, atol=tol), (chain, d)
            assert torch.allclose(right_only[seen].double().sum(1), torch.ones(int(seen.sum()), dtype=torch.float64),
                                  atol=tol)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_mirror_positions_in_a_gap_tie(dtype) -> None:
    for chain in _chains():
        oracle = OracleDenoiser(chain, dtype=dtype)
        a = torch.arange(chain.vocab_size)
        # (3, 80): beyond the table; exact ties there only for a certified table (mixed by then). A chain whose
        # powers never converge keeps 64 powers and multiplies further in a fixed order per side, so its mirror
        # rows at d > 64 agree to rounding only (docs/exactness.md, "Ties")
        pairs = ((1, 2), (1, 5), (2, 7)) + (((3, 80),) if oracle.certified else ())
        for d1, d2 in pairs:
            one = oracle.probs_given_neighbours(a, torch.full_like(a, d1), a, torch.full_like(a, d2))
            two = oracle.probs_given_neighbours(a, torch.full_like(a, d2), a, torch.full_like(a, d1))
            ok = chain.kernel.diagonal() > 0  # a reachable from a in every gap length here
            assert torch.equal(one[a, a][ok], two[a, a][ok]), (chain, d1, d2)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ties_equal_through_the_denoiser_interface(dtype) -> None:
    """Through probs_at / forward (the paths the samplers use): [M, a, M] and [a, M, M, a] states."""
    chain = synthetic_chain(3, 3, eps=0.2, seed=2)
    oracle = OracleDenoiser(chain, dtype=dtype)
    M = chain.mask_id
    for a in range(3):
        z = torch.tensor([[M, a, M, M], [a, M, M, a]])
        full = oracle(z).exp()
        assert full[0, 0, a] == full[0, 2, a]
        assert full[1, 1, a] == full[1, 2, a]
        at = oracle.probs_at(z, torch.tensor([0, 0, 1, 1]), torch.tensor([0, 2, 1, 2]))
        assert at[0, a] == at[1, a] and at[2, a] == at[3, a]


@pytest.mark.parametrize("seed", [2, pytest.param(0, marks=pytest.mark.slow), pytest.param(1, marks=pytest.mark.slow)])
def test_llada_law_does_not_depend_on_the_oracle_dtype(seed) -> None:
    """Native LLaDA (temperature 1, tie rule lowest), V = 3, T = 4, 4 steps, on chains with P(a, a) > 0: the float32
    and float64 oracles give the same samples (same uniforms; before: 0.5-3% of sequences differed, p = 3e-12 against
    the exact law for one of them), and both match the exact law of the DP, which breaks ties by the rule."""
    chain = synthetic_chain(3, 3, eps=0.2, seed=seed)
    assert bool((chain.kernel.diagonal() > 0).all())
    samples = [LLaDA(denoiser=OracleDenoiser(chain, dtype=dt), steps=4, temperature=1.0, tie_rule="lowest")
               .connect(chain).sample(20000, 4, 4, seed=5) for dt in DTYPES]
    assert torch.equal(samples[0], samples[1])
    law = llada_law(chain, 4, 4, "low_confidence", 1.0)
    assert chi_square_pvalue(sequence_counts(samples[0], 3), law) > 0.01
