"""First-hitting sampler: its output law is the chain's law exactly (one exact conditional per iteration)."""
from __future__ import annotations

import pytest
import torch

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.samplers import FHS, MDLMPaper
from dllm_lit.exact import chain_law

V, N = 3, 20000
ALPHA = 0.01


@pytest.mark.parametrize("T, block_length", [(4, None), (4, 2), (6, None), (6, 3)])
def test_law_is_the_chain_law(den, T: int, block_length) -> None:
    x = FHS(den, block_length=block_length).sample(N, T, steps=1, seed=T + (block_length or 0))
    assert chi_square_pvalue(sequence_counts(x, V), chain_law(den.chain, T)) > ALPHA


def test_power_against_a_parallel_law(den) -> None:
    """The same test rejects FHS samples against paper-MDLM's 2-step law (the GOF test has power)."""
    from dllm_lit.exact import mdlm_paper_law

    x = FHS(den).sample(N, 4, steps=1, seed=0)
    assert chi_square_pvalue(sequence_counts(x, V), mdlm_paper_law(den.chain, 4, 2)) < ALPHA


def test_steps_are_ignored_and_equal_paper_mdlm_at_T(den) -> None:
    s = FHS(den)
    a = s.sample(20, 30, steps=8, seed=9)
    assert torch.equal(a, s.sample(20, 30, steps=1024, seed=9))
    assert torch.equal(a, MDLMPaper(den).sample(20, 30, steps=30, seed=9))
    assert s.name == "fhs"


def test_no_mask_left(den) -> None:
    """Chunking invariance: tests/test_sampler_contract.py (config:fhs, variant:fhs_blocks)."""
    for s in (FHS(den), FHS(den, block_length=10)):
        full = s.sample(12, 30, steps=4, seed=5)
        assert full.min() >= 0 and full.max() < V
