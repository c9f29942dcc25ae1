"""DUS (dilated unmasking): the upstream level pattern, the block length chosen by the call budget, and the output
law against its exact law by enumeration (fixed order: the law is a product of tempered conditionals)."""
from __future__ import annotations

import pytest
import torch

from conftest import CountingDenoiser, all_sequences, chi_square_pvalue, sequence_counts
from dllm_lit.samplers import DUS
from dllm_lit.samplers.dus import dilated_levels, dus_block_length, dus_decode_steps
from dllm_lit.exact import chain_law

pytestmark = pytest.mark.usefixtures("single_thread")
V, N = 3, 20000
#: goodness-of-fit level: a correct sampler fails one such test in 100
ALPHA = 0.01


def fixed_order_law(den, decode_step: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Exact law of decoding positions at ``decode_step`` [T] (equal steps in parallel) from tempered marginals:
    p(x) = prod_j prod_{i: step_i = j} p~(x_i | x_{step < j}), by enumeration over all V^T sequences."""
    T = decode_step.numel()
    xs = all_sequences(V, T)
    law = torch.ones(xs.shape[0], dtype=torch.float64)
    for j in range(int(decode_step.max()) + 1):
        z = torch.where(decode_step[None, :] < j, xs, V)
        probs = den(z).exp().double()
        if temperature != 1.0:
            probs = probs ** (1.0 / temperature)
            probs = probs / probs.sum(-1, keepdim=True)
        for i in torch.nonzero(decode_step == j).flatten().tolist():
            law *= probs[torch.arange(xs.shape[0]), i, xs[:, i]]
    return law


def test_levels_follow_the_upstream_pattern() -> None:
    assert dilated_levels(8) == [[0, 4], [2, 6], [1, 3, 5, 7]]
    assert dilated_levels(4) == [[0, 2], [1, 3]]
    assert dilated_levels(2) == [[0, 1]]
    assert dilated_levels(6) == [[0, 3], [1, 2, 4, 5]]  # stride 3, then 1
    assert dilated_levels(5) == [[0, 2, 4, 1, 3]]  # {1, 3} is smaller than {0, 2, 4}: merged into it
    assert dilated_levels(9, base=3) == [[0, 3, 6], [1, 2, 4, 5, 7, 8]]
    assert len(dilated_levels(1024)) == 10
    for L in (5, 7, 12, 100):
        assert sorted(sum(dilated_levels(L), [])) == list(range(L))


def test_block_length_from_the_call_budget() -> None:
    """NFE (T / L) * levels(L) as large as the budget allows: T = 1024 gives 10 calls at L = T, 512 at L = 4
    (ties between L = 2 and 4: the longer block), 1024 at L = 1."""
    T = 1024
    assert dus_block_length(T, 8) == T and dus_block_length(T, 10) == T
    assert dus_block_length(T, 1024) == 1 and dus_block_length(T, 512) == 4  # L = 1: left to right, one per call
    for steps in (16, 32, 64, 128, 256):
        L = dus_block_length(T, steps)
        assert (T // L) * len(dilated_levels(L)) <= steps
    step, n = dus_decode_steps(16, 8)
    assert n == 6 and step.tolist()[:8] == [0, 2, 1, 2, 0, 2, 1, 2] and step.tolist()[8:] == [3, 5, 4, 5, 3, 5, 4, 5]


@pytest.mark.parametrize("T, steps, temperature", [(4, 2, 1.0), (6, 2, 1.0), (6, 2, 0.7), (6, 3, 1.0)])
def test_law_matches_enumeration(den, T: int, steps: int, temperature: float) -> None:
    s = DUS(den, temperature=temperature)
    order, _ = dus_decode_steps(T, s.block_length(T, steps))
    law = fixed_order_law(den, order, temperature)
    assert abs(float(law.sum()) - 1.0) < 1e-6
    x = s.sample(N, T, steps, seed=3 * T + steps)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_power_and_bias(den) -> None:
    """DUS at 2 levels is not the chain's law (parallel neighbours at distance 2), and the test sees it."""
    x = DUS(den).sample(N, 4, 2, seed=1)
    assert chi_square_pvalue(sequence_counts(x, V), chain_law(den.chain, 4)) < ALPHA


def test_nfe_log_q_and_determinism(den) -> None:
    s = DUS(den)
    s.connect(den.chain)
    _, st = s.generate_with_stats(torch.arange(8), 64, 16, 5)
    assert (st["nfe"] == s.nfe(64, 16)).all() and s.nfe(64, 16) <= 16
    counting = CountingDenoiser(den)
    DUS(counting).connect(den.chain).sample(1, 64, 16, seed=5)
    assert len(counting.calls) == s.nfe(64, 16)
    order, _ = dus_decode_steps(64, s.block_length(64, 16))
    assert torch.isfinite(st["log_q"]).all() and (st["log_q"] < 0).all()
    # chunking invariance: tests/test_sampler_contract.py (config:dus)
