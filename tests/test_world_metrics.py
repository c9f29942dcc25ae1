"""The every-world metrics: values against direct computations, pairing with the reference row, intervals,
and the registry enabling them only in HMM worlds."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from dllm_lit.markov.hmm_exact import dependence_profile, ngram_marginals
from dllm_lit.metrics.bootstrap import SequenceBootstrapper
from dllm_lit.metrics.dependence import DependenceProfile, empirical_profile
from dllm_lit.metrics.functional.world import DEP_DISTANCES
from dllm_lit.metrics.ngram_kl import NgramKL
from dllm_lit.metrics.sequence_kl import SequenceKL
from dllm_lit.metrics.world_nll import WorldNLL
from dllm_lit.results import registry
from dllm_lit.sources import SwitchingChains, english_char_chain

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def world():
    return SwitchingChains(num_chains=2, rho=0.9).build()


def _stats(n: int, start: int = 0) -> dict:
    return {"index": torch.arange(start, start + n)}


def test_world_nll_is_the_forward_algorithm(world) -> None:
    x = world.sample(40, 30, seed=1)
    m = WorldNLL(world)
    m.update(x[:15], _stats(15))
    m.update(x[15:], _stats(25, 15))
    assert math.isclose(m.compute()["world_nll"], float((-world.log_prob(x) / 30).mean()), rel_tol=1e-12)


def test_ngram_kl_values_and_floor(world) -> None:
    x = world.sample(200, 64, seed=2)
    y = world.sample(200, 64, seed=3)
    ref, row = NgramKL(world), NgramKL(world)
    ref.update(x, _stats(200))
    row.update(y, _stats(200))
    ref.pair_with(ref)
    row.pair_with(ref)
    own = ref.compute()
    assert own["ngram_kl2_excess"] == 0.0
    v = row.compute()
    # direct: KL of the empirical 2-gram law of y to the exact marginal
    J = ngram_marginals(world, 2)
    C = torch.zeros(27, 27, dtype=torch.float64)
    C.index_put_((y[:, :-1].reshape(-1), y[:, 1:].reshape(-1)), torch.ones(200 * 63, dtype=torch.float64), accumulate=True)
    p = C / C.sum()
    direct = float((p[p > 0] * (p[p > 0] / J[p > 0]).log()).sum())
    assert math.isclose(v["ngram_kl2"], direct, rel_tol=1e-10)
    assert math.isclose(v["ngram_kl2_excess"], direct - own["ngram_kl2"], rel_tol=1e-9, abs_tol=1e-12)
    boot = SequenceBootstrapper(row, num_resamples=20, seed=0)
    boot.indices.append(torch.arange(200))
    ci = boot.interval()
    lo, hi = ci["ngram_kl3_excess"]
    assert lo <= v["ngram_kl3_excess"] <= hi


def test_dependence_profile_estimates_and_excess(world) -> None:
    x = world.sample(400, 80, seed=4)
    lone = DependenceProfile(world)
    lone.update(x, _stats(400))
    assert lone.compute() == {"dep_excess": None, "dep_excess_far": None}
    m = DependenceProfile(world)
    m.update(x, _stats(400))
    m.pair_with(m)
    assert m.compute()["dep_excess"] == 0.0
    est = empirical_profile(x, 27)
    exact = dependence_profile(world, 64)
    bias = 26 * 26 / (2 * 400 * 16)  # plug-in MI bias ~ (V-1)^2 / (2M) at the farthest distance
    for j, d in enumerate(DEP_DISTANCES):
        if d < 80:
            assert abs(float(est[j]) - float(exact[d - 1])) < 0.05 + 3 * bias


def test_sequence_kl_in_an_hmm_world_uses_the_world_law(world) -> None:
    x = world.sample(50, 32, seed=5)
    m = SequenceKL(world.bigram_chain, world=world)
    m.update(x, {"index": torch.arange(50), "log_q": world.log_prob(x)})
    m.pair_with(m)
    out = m.compute()
    assert out["seq_kl_upper"] == 0.0 and out["seq_kl_lower"] is None and out["kl_excess"] == 0.0


def test_registry_enables_world_metrics_only_in_hmm_worlds(world) -> None:
    keys = lambda chain: [k for s in registry.enabled_specs(SimpleNamespace(chain=chain, genppl_model=None,
                                                                               mauve_featurizer=None)) for k in s.keys]
    assert "world_nll" in keys(world) and "dep_excess" in keys(world)
    first = keys(english_char_chain())
    assert "world_nll" not in first and "ngram_kl2" not in first and "kl" in first
    assert registry.first_order(world) is world.bigram_chain


def test_dependence_bootstrap_without_far_distances(world) -> None:
    """T = 8 (any T <= 16) leaves no distance d >= 16: dep_excess_far is None and gets no interval (was: a
    TypeError in the bootstrap statistic); dep_excess keeps its interval."""
    x, y = world.sample(40, 8, seed=6), world.sample(40, 8, seed=7)
    ref, row = DependenceProfile(world), DependenceProfile(world)
    ref.update(x, _stats(40))
    row.update(y, _stats(40))
    row.pair_with(ref)
    v = row.compute()
    assert v["dep_excess_far"] is None and v["dep_excess"] is not None
    boot = SequenceBootstrapper(row, num_resamples=20, seed=0)
    boot.indices.append(torch.arange(40))
    ci = boot.interval()
    assert ci.get("dep_excess_far") is None
    lo, hi = ci["dep_excess"]
    assert lo <= v["dep_excess"] <= hi
