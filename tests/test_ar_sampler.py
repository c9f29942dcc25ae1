"""AR sampler: exact chain sampling draw for draw at beta = 1; exact law of the sharpened chain."""
from __future__ import annotations

import itertools

import pytest
import torch

from dllm_lit.engine import RunPlan

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.markov import MarkovChain
from dllm_lit.samplers.ar import AR, sharpened_rows
from dllm_lit.exact import chain_law

V, T, N = 3, 4, 20000
ALPHA = 0.01


def sharpened_law(chain: MarkovChain, T: int, beta: float) -> torch.Tensor:
    """pi(x_0) prod_t P_beta(x_t | x_{t-1}), P_beta = (1 - eps) normalise(P_topK^beta) + eps nu (dense)."""
    Vc = chain.vocab_size
    top = torch.zeros(Vc, Vc, dtype=torch.float64)
    top.scatter_(1, chain.nbr_idx, chain.nbr_prob)
    top = top**beta
    Pb = (1 - chain.eps) * top / top.sum(1, keepdim=True) + chain.eps * chain.nu[None]
    pi = chain.stationary
    out = torch.zeros(Vc**T, dtype=torch.float64)
    for code, seq in enumerate(itertools.product(range(Vc), repeat=T)):
        p = pi[seq[0]]
        for a, b in zip(seq, seq[1:]):
            p = p * Pb[a, b]
        out[code] = p
    return out


@pytest.fixture(scope="module")
def dense_chain() -> MarkovChain:
    P = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.0, 0.8], [0.5, 0.25, 0.25]], dtype=torch.float64)
    return MarkovChain.from_kernel(P)


@pytest.fixture(scope="module")
def teleport_chain() -> MarkovChain:
    """K = 2 < V = 3 with a teleport eps = 0.1: both branches of the draw are exercised."""
    idx = torch.tensor([[1, 0], [2, 0], [0, 1]])
    prob = torch.tensor([[0.7, 0.3], [0.9, 0.1], [0.6, 0.4]], dtype=torch.float64)
    return MarkovChain(idx, prob, eps=0.1, nu=torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64))


@pytest.mark.parametrize("which", ["dense_chain", "teleport_chain"])
def test_beta_one_equals_chain_sample_draw_for_draw(which, request) -> None:
    chain = request.getfixturevalue(which)
    s = AR(chain=chain)
    assert torch.equal(s.sample(200, 37, seed=7), chain.sample(200, 37, seed=7))
    assert torch.equal(s.sample(50, 37, seed=7, start_index=100), chain.sample(50, 37, seed=7, start_index=100))
    assert torch.equal(AR().connect(chain).sample(20, 9, seed=1), chain.sample(20, 9, seed=1))


def test_english_chain_draw_for_draw() -> None:
    from dllm_lit.sources import english_char_chain

    chain = english_char_chain(top_k=10, eps=1e-3)
    assert torch.equal(AR(chain=chain).sample(64, 200, seed=123), chain.sample(64, 200, seed=123))


@pytest.mark.parametrize("which, beta", [("dense_chain", 2.0), ("dense_chain", 0.5), ("teleport_chain", 3.0), ("teleport_chain", 1.0)])
def test_law_of_sharpened_chain(which, beta, request) -> None:
    chain = request.getfixturevalue(which)
    law = sharpened_law(chain, T, beta)
    if beta == 1:
        assert torch.allclose(law, chain_law(chain, T), atol=1e-12)
    x = AR(chain=chain, beta=beta).sample(N, T, seed=int(10 * beta))
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_sharpening_is_visible(dense_chain) -> None:
    """Power: beta = 2 samples are rejected against the chain's own law."""
    x = AR(chain=dense_chain, beta=2.0).sample(N, T, seed=3)
    assert chi_square_pvalue(sequence_counts(x, V), chain_law(dense_chain, T)) < ALPHA


def test_sharpened_rows(teleport_chain) -> None:
    rows = sharpened_rows(teleport_chain, 2.0)
    assert torch.allclose(rows.sum(1), torch.ones(3, dtype=torch.float64))
    assert torch.allclose(rows[0], torch.tensor([0.49, 0.09], dtype=torch.float64) / 0.58)
    assert sharpened_rows(teleport_chain, 1.0) is teleport_chain.nbr_prob


def test_rows_and_predict_routing(dense_chain) -> None:
    exact = AR(chain=dense_chain)
    assert exact.name == "ar" and [(r.name, r.steps, r.reference) for r in exact.rows()] == [("ar", None, True)]
    # the exact AR row is the reference row: a plan with a reference adds no second one
    assert [r.key for r in RunPlan.build(exact, 6, 12, 4, reference=AR(chain=dense_chain)).rows] == ["ar@ar"]
    sharp = AR(chain=dense_chain, beta=2.0)
    assert sharp.name == "ar_beta2" and [(r.name, r.steps, r.reference) for r in sharp.rows()] == [("ar_beta2", None, False)]
    plan = RunPlan.build(sharp, 6, 12, 4, reference=AR(chain=dense_chain))  # the reference row's sampler, as connect supplies it
    assert [(r.name, r.steps) for r in plan.rows] == [("ar", None), ("ar_beta2", None)]
    assert [(r.name, r.steps) for r in RunPlan.build(sharp, 6, 12, 4, reference=False).rows] == [("ar_beta2", None)]
    sharp.use_plan(plan)
    batch = {"index": torch.arange(3, 9), "seq_len": 12, "seed": 4}
    base = sharp.predict_step({**batch, "row": 0}, 0)
    assert torch.equal(base["samples"].long(), dense_chain.sample(6, 12, seed=4, start_index=3))
    out = sharp.predict_step({**batch, "row": 1}, 0)
    assert torch.equal(out["samples"].long(), sharp.sample(6, 12, seed=4, start_index=3))
    assert out["samples"].dtype == torch.uint8 and out["row"] == 1 and plan.rows[out["row"]].steps is None


def test_ids_in_range_and_steps_ignored(teleport_chain) -> None:
    """Chunking invariance: tests/test_sampler_contract.py (variant:ar_beta)."""
    s = AR(chain=teleport_chain, beta=2.5)
    full = s.sample(12, 30, seed=5)
    assert full.min() >= 0 and full.max() < V
    assert torch.equal(s.sample(4, 30, steps=8, seed=5), s.sample(4, 30, steps=64, seed=5))  # steps ignored
