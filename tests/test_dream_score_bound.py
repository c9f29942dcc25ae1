"""Dream entropy / top-k margin with score bounds (large key ranges): the same draws as the dense ranking.

The bounded path serves oracles whose neighbourhood keys are too many to memoise (the OWT-sized chain); here the
memo is switched off (``MAX_KEYS`` = 0) so that small chains take it.  Reference: the same sampler with
``use_score_bound`` off (every masked position scored from its row).  Chains with exact ties (a uniform kernel:
every posterior row is the same numbers; sparse rows with equal entries) check that the tie rule, not the pruning,
decides between equal scores.
"""
from __future__ import annotations

import pytest
import torch

from conftest import TINY_KERNEL, counted_calls
from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.samplers import Dream
from dllm_lit.decoding import confidence_decoding, neighbourhood_rows
from dllm_lit.sources import english_char_chain

pytestmark = pytest.mark.usefixtures("single_thread")


def _chains() -> dict[str, MarkovChain]:
    return {"uniform": MarkovChain.from_kernel(torch.full((5, 5), 0.2, dtype=torch.float64)),
            "tiny": MarkovChain.from_kernel(torch.tensor(TINY_KERNEL, dtype=torch.float64)),
            "sparse": synthetic_chain(40, 4, eps=0.01, seed=1), "english": english_char_chain()}


@pytest.fixture
def no_key_memo(monkeypatch):
    """Keys never memoised (as at V = 4096), and a count of the bounded steps."""
    monkeypatch.setattr(neighbourhood_rows, "MAX_KEYS", 0)
    return counted_calls(monkeypatch, confidence_decoding, "_score_bounded")


@pytest.mark.parametrize("name", ["uniform", "tiny", "sparse", "english"])
@pytest.mark.parametrize("alg", ["entropy", "topk_margin"])
@pytest.mark.parametrize("tie_rule", ["lowest", "highest", "random"])
def test_bounded_ranking_draws_the_dense_ranking(no_key_memo, name, alg, tie_rule) -> None:
    den = OracleDenoiser(_chains()[name])
    for T, steps in ((40, 3), (40, 40)):
        bounded = Dream(den, alg=alg, temperature=1.0, tie_rule=tie_rule)
        dense = Dream(den, alg=alg, temperature=1.0, tie_rule=tie_rule)
        dense.use_score_bound = False
        n_before = len(no_key_memo)
        got = bounded.generate_with_stats(torch.arange(12), T, steps, 7)
        assert len(no_key_memo) > n_before  # the bounded path ran
        n_before = len(no_key_memo)
        want = dense.generate_with_stats(torch.arange(12), T, steps, 7)
        assert len(no_key_memo) == n_before  # the reference did not
        assert torch.equal(got[0], want[0]) and torch.equal(got[1]["nfe"], want[1]["nfe"])


@pytest.mark.parametrize("name", ["tiny", "sparse", "english"])
def test_score_bounds_hold_at_every_neighbourhood(name) -> None:
    """sum q log(q + 1e-10) and q_(1) - q_(2) never exceed the bounds built from the oracle's row-free max-p bound."""
    from dllm_lit.samplers.dream import NEGENT_BOUND_SLACK, dream_law

    chain = _chains()[name]
    den = OracleDenoiser(chain)
    V = den.vocab_size
    g = torch.Generator().manual_seed(0)
    n = 4000
    xl, xr = torch.randint(0, V, (n,), generator=g), torch.randint(0, V, (n,), generator=g)
    d1, d2 = torch.randint(0, 30, (n,), generator=g), torch.randint(0, 30, (n,), generator=g)
    rows = den.probs_given_neighbours(xl, d1, xr, d2)
    u = den.max_prob_bound(xl, d1, xr, d2).to(torch.float64)
    q = dream_law(rows, 1.0, None, None)
    q_max = (u * (1.0 + 4 * V * 2.0**-24)).clamp(max=1.0)
    negent = (q * torch.log(q + 1e-10)).sum(-1)
    top = torch.topk(q, min(2, V), dim=-1).values
    margin = top[:, 0] - top[:, 1]
    assert bool((negent <= torch.log(q_max + 1e-10) + NEGENT_BOUND_SLACK).all())
    assert bool((margin <= q_max).all())
