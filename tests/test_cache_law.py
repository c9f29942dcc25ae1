"""Does a cache change the output law?  Exactly (path enumeration, tiny world) and by the permutation law test.

Tolerances: the enumerated laws are checked against the sampler's draws by chi-square goodness of fit (level 1e-3); a
cache refreshed at every call has the no-cache law to 1e-5 in total variation (float32 logits in another order).
"""
from __future__ import annotations

import pytest
import torch

from conftest import TINY_KERNEL
from dllm_lit.exact.conformance import goodness_of_fit
from dllm_lit.experiments.cache_study import law_test
from dllm_lit.exact.path_law import cached_llada_law
from dllm_lit.markov import MarkovChain
from dllm_lit.samplers import LLaDA
from test_posterior_error import ModuleDenoiser, roformer

V, T, STEPS, BLOCK = 3, 4, 4, 2


@pytest.fixture(scope="module")
def world():
    chain = MarkovChain.from_kernel(torch.tensor(TINY_KERNEL, dtype=torch.float64))
    return chain, roformer(vocab=V, positions=T, init=0.5, seed=1)


@pytest.fixture(scope="module")
def binary():
    """V = 2: a quarter of the joint proposals, so the exact laws cost a fraction of a second."""
    chain = MarkovChain.from_kernel(torch.tensor([[0.7, 0.3], [0.4, 0.6]], dtype=torch.float64))
    return chain, roformer(vocab=2, positions=T, init=0.5, seed=1)


def _law(world, **cache) -> torch.Tensor:
    chain, model = world
    return cached_llada_law(lambda: ModuleDenoiser(model, **cache).bind(chain), chain.vocab_size, T, STEPS, BLOCK)


def _samples(world, n: int, start: int = 0, **cache) -> torch.Tensor:
    chain, model = world
    sampler = LLaDA(ModuleDenoiser(model, **cache), steps=STEPS, block_length=BLOCK, temperature=1.0).connect(chain)
    return sampler.sample(n, T, seed=11, start_index=start)


@pytest.mark.slow
def test_enumerated_laws_match_the_sampler(world) -> None:
    for cache in ({}, {"cache": "dual"}, {"cache": "delayed"}):
        law = _law(world, **cache)
        assert abs(float(law.sum()) - 1.0) < 1e-5
        assert goodness_of_fit(_samples(world, 3000, **cache), law / law.sum()).p_value > 1e-3, cache


def test_the_cache_changes_the_law_exactly(binary) -> None:
    plain, dual = _law(binary), _law(binary, cache="dual")
    assert 0.5 * float((_law(binary, cache="dual", refresh_interval=1) - plain).abs().sum()) < 1e-5
    assert 0.5 * float((dual - plain).abs().sum()) > 0.02  # 0.025: the stale keys of the other block move the law


@pytest.mark.slow
def test_exact_law_shifts_on_the_three_token_world(world) -> None:
    """Prints the total-variation distance of each policy's exact law from the no-cache law (docs/kv_caches.md)."""
    plain = _law(world)
    tv = {c: 0.5 * float((_law(world, cache=c) - plain).abs().sum()) for c in ("prefix", "dual", "delayed", "adaptive")}
    print("TV from the no-cache law:", {c: round(v, 4) for c, v in tv.items()})
    assert tv["dual"] > 0.3 and 0.05 < tv["prefix"] < 0.3 and tv["adaptive"] < 0.01


@pytest.mark.slow
def test_the_permutation_law_test_sees_the_change(world) -> None:
    x = _samples(world, 3000)
    y = _samples(world, 3000, start=3000, cache="dual")  # independent of x: other sequence indices
    assert law_test(x, y, V, permutations=199)["p_value"] <= 0.01
    same = law_test(x, _samples(world, 3000, start=3000), V, permutations=199)
    assert same["p_value"] > 0.01 and same["tv"] < 0.05
