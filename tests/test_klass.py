"""KLASS: output law equals the exact law of its algorithm (DP over the state and the last H call
states), identity with LLaDA when nothing can be ready, adaptive NFE, cache, settings."""
from __future__ import annotations

import pytest
import torch

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.samplers import KLASS, LLaDA
from dllm_lit.samplers.klass import stability_kl
from dllm_lit.exact import klass_law
from test_llada import llada_law

V, N = 3, 20000
ALPHA = 0.01


# conf_threshold 0.35 / 0.45: on the V = 3 chain most proposals clear it, so the KL rule decides which commit
@pytest.mark.parametrize("T, steps, conf, kl, history, block_length, temperature", [
    (4, 4, 0.35, 0.01, 1, None, 1.0),
    (4, 4, 0.45, 0.05, 2, None, 1.0),
    (4, 4, 0.35, 0.01, 1, 2, 1.0),
    (4, 2, 0.35, 0.01, 1, None, 0.7),
    (6, 6, 0.35, 0.01, 1, 3, 1.0),
])
def test_law_matches_dynamic_programming(den, T, steps, conf, kl, history, block_length, temperature) -> None:
    law = klass_law(den.chain, T, steps, conf, kl, history, block_length, temperature)
    s = KLASS(den, conf_threshold=conf, kl_threshold=kl, history=history, block_length=block_length,
              temperature=temperature)
    x = s.sample(N, T, steps, seed=T + steps + history)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_power_the_ready_rule_changes_the_law(den) -> None:
    """LLaDA samples (same schedule, no ready commits) are rejected against the KLASS law."""
    law = klass_law(den.chain, 4, 4, 0.35, 0.01, 1, None, 1.0)
    assert float((law - llada_law(den.chain, 4, 4, "low_confidence", 1.0)).abs().sum()) / 2 > 0.1
    x = LLaDA(den, temperature=1.0).sample(N, 4, 4, seed=1)
    assert chi_square_pvalue(sequence_counts(x, V), law) < ALPHA


@pytest.mark.parametrize("temperature, block_length, steps", [(0.0, None, 8), (1.0, 10, 12), (0.6, 5, 24)])
def test_never_ready_is_llada_draw_for_draw(den, temperature, block_length, steps) -> None:
    """conf_threshold = 1 (p > 1 never holds): every step falls back to LLaDA's top-k, same uniforms."""
    s = KLASS(den, conf_threshold=1.0, temperature=temperature, block_length=block_length)
    ref = LLaDA(den, temperature=temperature, block_length=block_length)
    x, nfe = s.generate_with_nfe(torch.arange(20), 30, steps, 7)
    assert torch.equal(x, ref.sample(20, 30, steps, seed=7))
    assert torch.equal(nfe, torch.full((20,), ref.nfe(30, steps), dtype=torch.float64))


def test_adaptive_nfe_and_temperature_zero(den) -> None:
    s = KLASS(den, conf_threshold=0.35, kl_threshold=0.01, history=1)
    x, nfe = s.generate_with_nfe(torch.arange(30), 40, 40, 3)
    assert (nfe < 40).all()  # ready steps commit several tokens: blocks finish early
    law = klass_law(den.chain, 6, 6, 0.35, 0.01, 2, None, 0.0)
    x6 = KLASS(den, conf_threshold=0.35, kl_threshold=0.01, history=2).sample(20, 6, 6, seed=1)
    assert (x6 == x6[0]).all() and law[int((x6[0] * V ** torch.arange(5, -1, -1)).sum())] == pytest.approx(1.0)


def test_stability_kl_is_upstreams_formula() -> None:
    p = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64)
    assert float(stability_kl(p, p)) == 0.0
    q = torch.zeros_like(p)
    assert float(stability_kl(p, q)) == pytest.approx(float((p[p > 0] * (torch.log(p[p > 0] + 1e-12) + 27.631021115928547)).sum()))


def test_cache_gives_identical_draws(den) -> None:
    for kw in ({}, {"conf_threshold": 0.35, "history": 1, "temperature": 1.0, "block_length": 16},
               {"conf_threshold": 0.5, "kl_threshold": 0.1, "temperature": 0.5}):
        s = KLASS(den, **kw)
        cached = s.generate_with_nfe(torch.arange(8), 64, 16, 3)
        s.use_cache = False
        direct = s.generate_with_nfe(torch.arange(8), 64, 16, 3)
        assert torch.equal(cached[0], direct[0]) and torch.equal(cached[1], direct[1]), kw


def test_zero_kl_threshold_is_never_ready(den) -> None:
    """KL values never computed by the cached greedy path are 0, which is not below a threshold of 0: nothing is ever
    ready (LLaDA's greedy top k), as on the direct path that computes every KL."""
    s = KLASS(den, conf_threshold=0.2, kl_threshold=0.0, history=1, temperature=0.0)
    cached = s.generate_with_nfe(torch.arange(8), 64, 16, 3)
    s.use_cache = False
    direct = s.generate_with_nfe(torch.arange(8), 64, 16, 3)
    assert torch.equal(cached[0], direct[0]) and torch.equal(cached[1], direct[1])
    assert torch.equal(cached[0], KLASS(den, conf_threshold=1.0, temperature=0.0).generate_with_nfe(
        torch.arange(8), 64, 16, 3)[0])


def test_no_mask_left(den) -> None:
    """Chunking invariance of samples and NFE: tests/test_sampler_contract.py (config:klass,
    variant:klass_sampled_blocks)."""
    for kw in ({}, {"conf_threshold": 0.35, "history": 1, "temperature": 1.0, "block_length": 10}):
        s = KLASS(den, **kw)
        full, _ = s.generate_with_nfe(torch.arange(12), 30, 6, 5)
        assert full.min() >= 0 and full.max() < V
    assert KLASS(den).name == "klass"
