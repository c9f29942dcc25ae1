"""Dream's alg family: exact law (DP), ordered-decoding and cache fast paths, schedule, settings."""
from __future__ import annotations

import pytest
import torch

from conftest import GenericDenoiser, chi_square_pvalue, sequence_counts
from dllm_lit.samplers import Dream
from dllm_lit.exact import dream_counts as schedule
from dllm_lit.exact import dream_law

V, N = 3, 20000
ALPHA = 0.01
EPS = 1e-3


@pytest.mark.parametrize(
    "T, steps, alg, temperature, alg_temp, top_p, top_k, tie_rule",
    [
        (4, 3, "origin", 1.0, 0.0, None, None, "lowest"),
        (4, 2, "origin", 0.8, 0.0, 0.7, None, "lowest"),
        (4, 2, "maskgit_plus", 1.0, 0.0, None, None, "lowest"),
        (4, 3, "topk_margin", 1.0, 0.0, None, None, "random"),
        (4, 2, "entropy", 0.5, 0.0, None, 2, "highest"),
        (4, 2, "maskgit_plus", 1.0, 0.5, None, None, "lowest"),
        (4, 3, "entropy", 1.0, 1.0, 0.85, None, "lowest"),
        (6, 3, "entropy", 1.0, 0.0, None, None, "lowest"),
        pytest.param(6, 3, "origin", 1.0, 0.0, None, None, "lowest", marks=pytest.mark.slow),  # DP ~20 s
    ],
)
def test_law_matches_dynamic_programming(chain, den, T, steps, alg, temperature, alg_temp, top_p, top_k, tie_rule) -> None:
    law = dream_law(chain, T, steps, alg, temperature, alg_temp, top_p, top_k, tie_rule)
    s = Dream(den, alg=alg, temperature=temperature, alg_temp=alg_temp, top_p=top_p, top_k=top_k, tie_rule=tie_rule)
    x = s.sample(N, T, steps, seed=steps)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_alg_temp_changes_the_law(chain, den) -> None:
    """Power: samples with positions sampled (alg_temp = 0.5) are rejected against the top-n law."""
    law = dream_law(chain, 4, 2, "maskgit_plus", 1.0)
    x = Dream(den, alg="maskgit_plus", temperature=1.0, alg_temp=0.5).sample(N, 4, 2, seed=5)
    assert chi_square_pvalue(sequence_counts(x, V), law) < ALPHA


def test_schedule_floor_and_last_step() -> None:
    from dllm_lit.samplers.dream import dream_schedule

    for n, steps in ((4, 2), (64, 7), (1024, 512), (5, 9)):
        k = dream_schedule(n, steps, EPS)
        assert sum(k) == n and len(k) == steps and k == schedule(n, steps)
    assert dream_schedule(4, 2, EPS) == [1, 3]  # int(4 * (1 - 0.5005)) = 1, the rest at the last step


def test_origin_ordered_fast_path_equals_generic_path(den) -> None:
    for kw in ({"temperature": 1.0}, {"temperature": 0.7, "top_p": 0.8}, {"temperature": 0.0}):
        fast = Dream(den, alg="origin", **kw).sample(50, 40, 9, seed=4)
        slow = Dream(GenericDenoiser(den), alg="origin", **kw).sample(50, 40, 9, seed=4)
        assert torch.equal(fast, slow)


def test_cache_gives_identical_draws() -> None:
    from dllm_lit.denoisers import OracleDenoiser
    from dllm_lit.sources import english_char_chain

    oracle = OracleDenoiser(english_char_chain())
    for kw in ({"alg": "maskgit_plus", "temperature": 1.0}, {"alg": "topk_margin", "temperature": 0.5, "top_k": 5},
               {"alg": "entropy", "temperature": 1.0, "alg_temp": 0.2, "top_p": 0.85},
               {"alg": "maskgit_plus", "temperature": 0.0, "tie_rule": "random"}):
        s = Dream(oracle, **kw)
        cached = s.sample(8, 64, 16, seed=3)
        s.use_cache = False
        assert torch.equal(cached, s.sample(8, 64, 16, seed=3)), kw


def test_no_mask_left(den) -> None:
    """Chunking invariance: tests/test_sampler_contract.py (config:dream_origin, dream_maskgit_plus,
    variant:dream_entropy_alg_temp)."""
    for alg in ("origin", "maskgit_plus", "entropy"):
        s = Dream(den, alg=alg, temperature=1.0, alg_temp=0.3 if alg == "entropy" else None)
        full = s.sample(12, 30, steps=6, seed=5)
        assert full.min() >= 0 and full.max() < V
