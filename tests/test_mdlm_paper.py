"""The paper's "MDLM" (LLaDA generate, random remasking, temperature 1): exact law by DP, and
exact chain samples with one position per step."""
from __future__ import annotations

import pytest
import torch

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.markov import MarkovChain
from dllm_lit.samplers.llada import LLaDA
from dllm_lit.samplers.mdlm_paper import MDLMPaper
from dllm_lit.exact import chain_law, mdlm_paper_law

V, T, N = 3, 4, 20000
ALPHA = 0.01


@pytest.fixture(scope="module")
def sampler() -> MDLMPaper:
    P = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.0, 0.8], [0.5, 0.25, 0.25]], dtype=torch.float64)
    return MDLMPaper(OracleDenoiser(MarkovChain.from_kernel(P)))


@pytest.mark.parametrize("steps", [1, 2, 3])
def test_law_matches_dynamic_programming(sampler: MDLMPaper, steps: int) -> None:
    law = mdlm_paper_law(sampler.chain, T, steps)
    x = sampler.sample(N, T, steps, seed=steps)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


@pytest.mark.parametrize("steps", [T, 2 * T])
def test_one_position_per_step_draws_exact_chain_samples(sampler: MDLMPaper, steps: int) -> None:
    target = chain_law(sampler.chain, T)
    assert torch.allclose(mdlm_paper_law(sampler.chain, T, steps), target, atol=1e-12)
    x = sampler.sample(N, T, steps, seed=steps)
    assert chi_square_pvalue(sequence_counts(x, V), target) > ALPHA


def test_few_steps_is_visibly_biased(sampler: MDLMPaper) -> None:
    """Power: exact chain samples are rejected against the 1- and 2-step laws."""
    x = sampler.chain.sample(N, T, seed=3)
    for steps in (1, 2):
        assert chi_square_pvalue(sequence_counts(x, V), mdlm_paper_law(sampler.chain, T, steps)) < ALPHA


def test_is_llada_random_temperature_one(sampler: MDLMPaper) -> None:
    llada = LLaDA(sampler.denoiser, remasking="random", temperature=1.0)
    for steps in (3, 30):
        assert torch.equal(sampler.sample(20, 30, steps, seed=9), llada.sample(20, 30, steps, seed=9))
    assert sampler.name == "mdlm_paper"


def test_no_mask_left_and_generator_seeding(sampler: MDLMPaper) -> None:
    """Chunking invariance: tests/test_sampler_contract.py (config:mdlm_paper)."""
    full = sampler.sample(12, 30, steps=7, seed=5)
    assert full.min() >= 0 and full.max() < V
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    assert torch.equal(sampler.sample(3, 10, 4, g1), sampler.sample(3, 10, 4, g2))


@pytest.mark.parametrize("schedule", [[1, 3], [3, 0, 1], "optimal"])
def test_schedule_law_matches_dynamic_programming(sampler: MDLMPaper, schedule) -> None:
    """The schedule option: the same DP with the schedule's round sizes (an explicit list, or the optimal one)."""
    s = MDLMPaper(sampler.denoiser, schedule=schedule).connect(sampler.chain)
    steps = 3 if schedule == "optimal" else len(schedule)
    counts = s.counts(T, steps)
    assert sum(counts) == T and (schedule == "optimal" or counts == schedule)
    x = s.sample(N, T, steps, seed=steps)
    assert chi_square_pvalue(sequence_counts(x, V), mdlm_paper_law(sampler.chain, T, steps, counts)) > ALPHA
