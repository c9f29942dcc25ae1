"""PC-sampler: exact law of its rule (DP), score formula, cache, settings."""
from __future__ import annotations

import pytest
import torch

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.samplers import PCSampler
from dllm_lit.exact import pc_law

V, N = 3, 20000
ALPHA = 0.01


@pytest.mark.parametrize("T, steps, lambd, alpha, block_length, temperature, tie_rule", [
    (4, 2, 0.25, 10.0, None, 1.0, "lowest"),
    (4, 2, 0.0, 0.3, None, 1.0, "random"),   # alpha clips: many ties
    (4, 4, 1.0, 10.0, 2, 0.5, "lowest"),
    (6, 3, 0.25, 10.0, None, 1.0, "highest"),
])
def test_law_matches_dynamic_programming(chain, den, T, steps, lambd, alpha, block_length, temperature, tie_rule) -> None:
    law = pc_law(chain, T, steps, lambd, alpha, block_length, temperature, tie_rule)
    s = PCSampler(den, lambd=lambd, alpha=alpha, block_length=block_length, temperature=temperature, tie_rule=tie_rule)
    s.connect(chain)
    x = s.sample(N, T, steps, seed=steps)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_calibration_changes_the_law(chain, den) -> None:
    """Power: PC-sampler's law differs from LLaDA's (lambda = 0, no clipping = background-weighted confidence)."""
    from test_llada import llada_law

    pc = pc_law(chain, 4, 2, 0.0, 10.0, None, 1.0)
    assert 0.5 * (pc - llada_law(chain, 4, 2, "low_confidence", 1.0)).abs().sum() > 0.02


def test_cache_gives_identical_draws() -> None:
    from dllm_lit.denoisers import OracleDenoiser
    from dllm_lit.sources import english_char_chain

    chain = english_char_chain()
    oracle = OracleDenoiser(chain)
    for kw in ({"temperature": 1.0}, {"temperature": 0.5, "block_length": 16, "lambd": 0.0, "alpha": 0.5,
                                      "tie_rule": "random"}):
        s = PCSampler(oracle, **kw).connect(chain)
        cached = s.sample(8, 64, 16, seed=3)
        s.use_cache = False
        assert torch.equal(cached, s.sample(8, 64, 16, seed=3))


def test_no_mask_left(chain, den) -> None:
    """Chunking invariance: tests/test_sampler_contract.py (variant:pc_blocks)."""
    s = PCSampler(den, temperature=1.0, block_length=10).connect(chain)
    full = s.sample(12, 30, steps=6, seed=5)
    assert full.min() >= 0 and full.max() < V
