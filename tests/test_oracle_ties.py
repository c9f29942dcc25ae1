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

What is left between the dtypes is not a tie: distinct confidences closer than float32 resolves (e.g. P'^21(a, a)
and P'^22(a, a), 5e-9 apart relative) collide or swap in float32; see ``docs/exactness.md``.
"""
from __future__ import annotations

import pytest
import torch

from conftest import TINY_KERNEL, chi_square_pvalue, sequence_counts
from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.samplers.draws import StepUniforms, categorical
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.samplers import LLaDA
from dllm_lit.samplers.selection import topk_stable_mask, transfer_schedule
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
        for d1, d2 in ((1, 2), (1, 5), (2, 7), (3, 80)):  # 80: beyond the table (uncertified for V = 40, eps 0)
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


#: float32 resolves confidences to a few ulps (table entries rounded to 2^-24 relative, a product, a sum over V and a
#: division): pairs of distinct values it collides or swaps were measured up to 2.4e-7 apart (relative) on the
#: English chain (480 sequences, T = 64, steps 4 / 16 / 64)
FLOAT32_RESOLUTION = 4e-7


def _llada_confidences(oracle: OracleDenoiser, chain: MarkovChain, n: int, T: int, steps: int, seed: int):
    """Native LLaDA (one block, temperature 1, tie rule lowest) step by step through ``probs_at`` at every masked
    position; yields the state and the proposals' confidences [n, T] (NaN where revealed) at every step."""
    M = chain.mask_id
    u = StepUniforms(seed, torch.arange(n), steps)
    x = torch.full((n, T), M)
    for j, k in enumerate(transfer_schedule(T, steps)):
        b, p = (x == M).nonzero(as_tuple=True)
        probs = oracle.probs_at(x, b, p)
        tok = categorical(probs, u.at(j, b, p))
        conf = torch.full((n, T), float("nan"), dtype=torch.float64)
        conf[b, p] = probs.gather(1, tok[:, None]).squeeze(1).double()
        proposal = torch.zeros_like(x)
        proposal[b, p] = tok
        yield x, b, p, tok, conf
        x = torch.where(topk_stable_mask(torch.nan_to_num(conf, nan=-torch.inf), k), proposal, x)


def test_llada_reference_loop_is_the_sampler() -> None:
    """The step loop the next test inspects draws what LLaDA draws (so its states are the sampler's)."""
    chain = english_char_chain()
    oracle = OracleDenoiser(chain, dtype=torch.float64)
    *_, (x, b, p, tok, conf) = _llada_confidences(oracle, chain, 8, 32, 8, seed=7)
    last = x.clone()
    last[b, p] = tok
    sampled = LLaDA(denoiser=oracle, steps=8, temperature=1.0, tie_rule="lowest").connect(chain).sample(8, 32, 8, seed=7)
    assert torch.equal(last, sampled)


def test_english_chain_ties_are_equal_and_the_rest_are_float32_collisions() -> None:
    """On the English chain (T = 64, LLaDA's float64 trajectories): every pair of confidences of one step that agree
    within 1e-12 (relative) in float64 is bit-equal in float64 and in float32 - no tie family is left unhandled -;
    every pair that float32 orders otherwise than float64 (equal, or swapped) is a pair of distinct numbers closer
    than float32 resolves (:data:`FLOAT32_RESOLUTION`).  Those collisions are why float32 and float64 LLaDA samples
    still differ on this chain (4 and 7 of 48 sequences at 16 and 64 steps); they are not ties."""
    chain = english_char_chain()
    o32, o64 = OracleDenoiser(chain, dtype=torch.float32), OracleDenoiser(chain, dtype=torch.float64)
    T = 64
    upper = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    ties = collisions = 0
    for x, b, p, tok, c64 in _llada_confidences(o64, chain, 24, T, 16, seed=7):
        c32 = torch.full_like(c64, float("nan"))
        c32[b, p] = o32.probs_at(x, b, p).gather(1, tok[:, None]).squeeze(1).double()
        gap = (c64[:, :, None] - c64[:, None, :]).abs() / c64[:, :, None]
        tie = upper & (gap <= 1e-12)
        assert torch.equal(c64[:, :, None].expand(-1, -1, T)[tie], c64[:, None, :].expand(-1, T, -1)[tie])
        assert torch.equal(c32[:, :, None].expand(-1, -1, T)[tie], c32[:, None, :].expand(-1, T, -1)[tie])
        order64 = torch.sign(c64[:, :, None] - c64[:, None, :])
        order32 = torch.sign(c32[:, :, None] - c32[:, None, :])
        other = upper & ~tie & (order64 != order32) & ~gap.isnan()
        assert bool((gap[other] < FLOAT32_RESOLUTION).all()), gap[other].max()
        ties += int(tie.sum())
        collisions += int(other.sum())
    assert ties > 1000 and collisions > 50  # both occur on this chain (measured: 4594 and 196)
