"""ASSD (any-subset speculative decoding) is exact: its law is the world's law for every draft length, on the tiny
chain and on a tiny HMM world; log q is the world's log-probability; NFE = counted denoiser calls."""
from __future__ import annotations

import pytest
import torch

from conftest import CountingDenoiser, chi_square_pvalue, sequence_counts
from dllm_lit.denoisers import HMMOracleDenoiser
from dllm_lit.samplers import ASSD, FHS
from dllm_lit.exact import chain_law, mdlm_paper_law
from test_hmm_samplers import world  # noqa: F401  (the tiny HMM world fixture)

pytestmark = pytest.mark.usefixtures("single_thread")
V, N = 3, 20000
#: goodness-of-fit level: a correct sampler fails one such test in 100
ALPHA = 0.01


@pytest.mark.parametrize("T, steps", [(4, 1), (4, 2), (5, 1), (5, 2), (5, 3)])
def test_law_is_the_chain_law(den, T: int, steps: int) -> None:
    """Draft length k = ceil(T / steps) in {2, 3, 4, 5}: speculative sampling keeps the exact law."""
    x = ASSD(den).sample(N, T, steps, seed=10 * T + steps)
    assert chi_square_pvalue(sequence_counts(x, V), chain_law(den.chain, T)) > ALPHA


def test_law_in_an_hmm_world(world) -> None:
    """The generic (stacked-state) verify path through the HMM oracle, in a world that is not a first-order chain."""
    s = ASSD().connect(world)
    assert isinstance(s.denoiser, HMMOracleDenoiser)
    x = s.sample(N, 4, 1, seed=3)
    assert chi_square_pvalue(sequence_counts(x, V), chain_law(world, 4)) > ALPHA


def test_power_against_a_parallel_law(den) -> None:
    """The same test rejects ASSD samples against paper-MDLM's 2-step law (the test has power)."""
    x = ASSD(den).sample(N, 4, 1, seed=5)
    assert chi_square_pvalue(sequence_counts(x, V), mdlm_paper_law(den.chain, 4, 2)) < ALPHA


def test_log_q_is_the_world_log_probability(den) -> None:
    """Each committed token is drawn from its exact conditional given the earlier ones in the order, so the
    recorded log q sums to log p(x) under the chain (float32 oracle rows: 1e-4 per sequence of 40)."""
    s = ASSD(den)
    s.connect(den.chain)
    for steps in (1, 4, 40):
        x, st = s.generate_with_stats(torch.arange(200), 40, steps, 3)
        assert torch.allclose(st["log_q"], den.chain.log_prob(x).double(), atol=1e-4)
    assert s.log_q_reason(4) is None


def test_nfe_is_the_count_of_denoiser_calls(den) -> None:
    """Two calls per window of more than one token (draft, verify), one for a single-token window; counted on a
    denoiser seen only through probs_at, one sequence at a time."""
    s_fast = ASSD(den)
    for T, steps in ((30, 3), (30, 30), (7, 2)):
        x, st = s_fast.generate_with_stats(torch.arange(6), T, steps, 1)
        for i in range(6):
            counting = CountingDenoiser(den)
            s = ASSD(counting).connect(den.chain)
            xi, sti = s.generate_with_stats(torch.tensor([i]), T, steps, 1)
            assert len(counting.calls) == int(sti["nfe"][0]) == int(st["nfe"][i])
            assert torch.equal(xi[0], x[i])  # the neighbour fast path and the generic path draw alike


def test_one_token_windows_equal_the_first_hitting_sampler(den) -> None:
    """k = 1 (steps = T): one exact conditional per call in a uniformly random order, FHS draw for draw."""
    T = 25
    x, st = ASSD(den).generate_with_stats(torch.arange(10), T, T, 4)
    assert torch.equal(x, FHS(den).sample(10, T, T, seed=4))
    assert (st["nfe"] == T).all()


def test_fewer_calls_than_tokens(den) -> None:
    """Chunking invariance and oracle = generic-interface draws: tests/test_sampler_contract.py (config:assd)."""
    s = ASSD(den)
    x, st = s.generate_with_stats(torch.arange(12), 60, 6, 2)
    assert x.min() >= 0 and x.max() < V
    assert float(st["nfe"].mean()) < 60
