"""MDLM's output law equals the exact law of its algorithm (DP over partially masked states)."""
from __future__ import annotations

import pytest
import torch

from conftest import GenericDenoiser, chi_square_pvalue, sequence_counts
from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.samplers import MDLM
from dllm_lit.exact import chain_law, mdlm_law

V, T, N = 3, 4, 20000
ALPHA = 0.01


@pytest.fixture(scope="module")
def sampler(den: OracleDenoiser) -> MDLM:
    return MDLM(den)


@pytest.mark.parametrize("steps", [2, 5])
def test_law_matches_dynamic_programming(sampler: MDLM, steps: int) -> None:
    law = mdlm_law(sampler.chain, T, steps)
    x = sampler.sample(N, T, steps, seed=steps)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_two_steps_is_visibly_biased(sampler: MDLM) -> None:
    """The test has power: exact chain samples are rejected against the 2-step law."""
    law = mdlm_law(sampler.chain, T, 2)
    x = sampler.chain.sample(N, T, seed=3)
    assert chi_square_pvalue(sequence_counts(x, V), law) < ALPHA


def test_law_approaches_chain_as_steps_grow(sampler: MDLM) -> None:
    target = chain_law(sampler.chain, T)
    tv = [0.5 * (mdlm_law(sampler.chain, T, s) - target).abs().sum().item() for s in (2, 8, 64)]
    assert tv[0] > tv[1] > tv[2]
    assert tv[2] < 0.02


def test_no_mask_left_and_generator_seeding(sampler: MDLM) -> None:
    """Chunking invariance: tests/test_sampler_contract.py (config:mdlm)."""
    full = sampler.sample(12, 30, steps=7, seed=5)
    assert full.min() >= 0 and full.max() < V
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    assert torch.equal(sampler.sample(3, 10, 4, g1), sampler.sample(3, 10, 4, g2))


@pytest.mark.parametrize("steps", [2, 5])
def test_stepwise_law_matches_dynamic_programming(sampler: MDLM, steps: int) -> None:
    stepwise = MDLM(sampler.denoiser, decoding="stepwise")
    law = mdlm_law(sampler.chain, T, steps)
    x = stepwise.sample(N, T, steps, seed=steps)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_ordered_fast_path_equals_generic_path(sampler: MDLM) -> None:
    """The neighbour-based O(kV) query gives the same draws as querying probs_at on the full state."""
    fast = sampler.sample(50, 64, steps=9, seed=4)
    slow = MDLM(GenericDenoiser(sampler.denoiser)).sample(50, 64, steps=9, seed=4)
    assert torch.equal(fast, slow)


def test_previous_and_next_smaller() -> None:
    from dllm_lit.decoding.ordered_decoding import next_smaller, previous_smaller

    g = torch.Generator().manual_seed(0)
    s = torch.randint(-1, 6, (30, 37), generator=g)
    prev, nxt = previous_smaller(s), next_smaller(s)
    for b in range(30):
        for i in range(37):
            left = [a for a in range(i) if s[b, a] < s[b, i]]
            right = [c for c in range(i + 1, 37) if s[b, c] < s[b, i]]
            assert prev[b, i] == (left[-1] if left else -1)
            assert nxt[b, i] == (right[0] if right else 37)
