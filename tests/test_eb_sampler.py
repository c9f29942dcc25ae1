"""EB-sampler: exact at gamma = 0 (chain law), exact law of its rule (DP) for gamma > 0, adaptive NFE, settings."""
from __future__ import annotations

import pytest
import torch

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.samplers import EBSampler
from dllm_lit.exact import chain_law, ranked_choice, score_select_law, tempered_options

V, N = 3, 20000
ALPHA = 0.01


def entropy(g_row: torch.Tensor) -> float:
    return float(-torch.special.xlogy(g_row, g_row).sum())


def eb_law(chain, T: int, gamma: float, temperature: float, tie_rule: str = "lowest") -> torch.Tensor:
    def select(j, masked, scores):  # scores = -H
        H = sorted(-s for s in scores)
        acc, n = 0.0, 0
        for k, h in enumerate(H):
            acc += h
            assert abs(acc - h - gamma) > 1e-6, "an entropy sum sits on gamma"
            n += acc - h <= gamma  # the sorted prefix's sum minus its maximum
        return ranked_choice(masked, scores, max(1, n), tie_rule)

    return score_select_law(chain, T, [(0, T)], lambda g: tempered_options(g, temperature),
                            lambda i, v, g, lo: -entropy(g[i]), select)


@pytest.mark.parametrize("T", [4, 6])
def test_gamma_zero_samples_the_chain(chain, den, T) -> None:
    """gamma = 0: one position per step (chosen from entropies only), token from its exact conditional."""
    x, nfe = EBSampler(den, gamma=0.0, temperature=1.0).generate_with_nfe(torch.arange(N), T, T, 11)
    assert chi_square_pvalue(sequence_counts(x, V), chain_law(chain, T)) > ALPHA
    assert (nfe == T).all()  # no zero-entropy posterior on this chain: one token per step


@pytest.mark.parametrize("T, gamma, temperature, tie_rule", [
    (4, 0.8, 1.0, "lowest"), (4, 1.5, 1.0, "random"), (4, 0.8, 0.5, "highest"), (6, 1.2, 1.0, "lowest")])
def test_law_matches_dynamic_programming(chain, den, T, gamma, temperature, tie_rule) -> None:
    law = eb_law(chain, T, gamma, temperature, tie_rule)
    x = EBSampler(den, gamma=gamma, temperature=temperature, tie_rule=tie_rule).sample(N, T, T, seed=3)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_large_gamma_is_visibly_biased(chain, den) -> None:
    """Power: at gamma = 1.5 the law differs from the chain and exact chain samples are rejected."""
    law = eb_law(chain, 4, 1.5, 1.0)
    assert 0.5 * (law - chain_law(chain, 4)).abs().sum() > 0.05
    assert chi_square_pvalue(sequence_counts(chain.sample(N, 4, seed=2), V), law) < ALPHA


def test_count_rule() -> None:
    from dllm_lit.samplers.eb_sampler import entropy_bound_count

    inf = float("-inf")
    negH = -torch.tensor([[0.1, 0.2, 0.3, 5.0], [2.0, 2.0, 2.0, 2.0], [0.0, 0.0, 1.0, 1.0]], dtype=torch.float64)
    negH[0, 3] = inf  # three masked positions only
    # sums minus maxima: [0, 0.1, 0.3], [0, 2, 4, 6], [0, 0, 0, 1]
    assert entropy_bound_count(negH, 0.25).tolist() == [2, 1, 3]
    assert entropy_bound_count(negH, 0.0).tolist() == [1, 1, 3]


def test_adaptive_nfe(den) -> None:
    """Chunking invariance of samples and NFE: tests/test_sampler_contract.py (variant:eb_gamma1)."""
    s = EBSampler(den, gamma=1.0, temperature=1.0)
    x, nfe = s.generate_with_nfe(torch.arange(30), 24, 8, 5)
    assert (x != den.mask_id).all() and (nfe < 24).all() and nfe.unique().numel() > 1


def test_cache_gives_identical_draws() -> None:
    from dllm_lit.denoisers import OracleDenoiser
    from dllm_lit.sources import english_char_chain

    oracle = OracleDenoiser(english_char_chain())
    for kw in ({"gamma": 0.5, "temperature": 1.0}, {"gamma": 2.0, "temperature": 0.0, "tie_rule": "random"}):
        s = EBSampler(oracle, **kw)
        cached = s.generate_with_nfe(torch.arange(6), 48, 8, 3)
        s.use_cache = False
        direct = s.generate_with_nfe(torch.arange(6), 48, 8, 3)
        assert torch.equal(cached[0], direct[0]) and torch.equal(cached[1], direct[1])
