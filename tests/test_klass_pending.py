"""KLASS's KL-on-demand path (no key memo: the OWT-sized chain) gives the draws and NFE of the direct step and of
the key-memo path, with ready commits, exact ties and every history length."""
from __future__ import annotations

import functools

import pytest
import torch

from conftest import counted_calls
from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.samplers import KLASS, klass
from dllm_lit.decoding.neighbourhood_rows import NeighbourhoodRows
from test_perf_paths import _chains


@functools.lru_cache(maxsize=None)
def _oracle(name: str) -> tuple[MarkovChain, OracleDenoiser]:
    """Test chains; "iid": identical kernel rows, so every masked position has the same posterior at every step
    (confidences tie exactly, every KL between two calls is exactly 0)."""
    if name == "iid":
        pi = torch.tensor([0.7, 0.2, 0.1])
        chain = MarkovChain.from_kernel(pi.expand(3, 3).clone())
    elif name == "v256":
        chain = synthetic_chain(256, 8, eps=0.05, seed=4)
    else:
        chain = _chains()[name]
    return chain, OracleDenoiser(chain)


def _draws(sampler: KLASS, steps: int, no_memo: bool, monkeypatch) -> tuple[torch.Tensor, torch.Tensor]:
    with monkeypatch.context() as m:
        if no_memo:  # as at V = 4096: no rows by neighbourhood key
            m.setattr(NeighbourhoodRows, "key_count", staticmethod(lambda den: None))
        x, st = sampler.generate_with_stats(torch.arange(6), 16, steps, 7)
    return x, st["nfe"]


@pytest.mark.usefixtures("single_thread")
@pytest.mark.parametrize("name", ["dense", "sparse_teleport", "eps0", "v256", "iid"])
@pytest.mark.parametrize("history, block_length, conf, kl", [
    (1, None, 0.3, 0.05), (2, None, 0.3, 0.05), (3, 8, 0.3, 0.05), (2, 8, 0.5, 0.01), (2, None, 0.3, 0.0),
    (1, None, 0.3, 0.5), (2, None, 0.2, 1.0), (2, 8, 0.2, 1.0)])  # the last three: ready commits on "eps0"
def test_kl_on_demand_equals_the_direct_step(name, history, block_length, conf, kl, monkeypatch) -> None:
    """Direct step (every row, every KL) = key memo = no memo (KL only where a ready test reads it; kl = 0: every
    changed position's KL), at step counts below, at and above T = 16."""
    chain, oracle = _oracle(name)
    s = KLASS(oracle, conf_threshold=conf, kl_threshold=kl, history=history, block_length=block_length)
    s.connect(chain)
    for steps in (4, 16, 24):
        s.use_cache = False
        x0, st0 = s.generate_with_stats(torch.arange(6), 16, steps, 7)
        s.use_cache = True
        for no_memo in (False, True):
            x1, n1 = _draws(s, steps, no_memo, monkeypatch)
            assert torch.equal(x0, x1) and torch.equal(st0["nfe"], n1), (name, steps, no_memo)


@pytest.mark.usefixtures("single_thread")
def test_kl_on_demand_computes_kl_and_commits_ready_positions(monkeypatch) -> None:
    """The path is exercised: ready commits happen (fewer calls than steps) and KL values are computed, and fewer
    of them than the eager path (kl_threshold = 0 computes one per changed position)."""
    chain, oracle = _oracle("eps0")
    counts = []
    for kl in (0.5, 0.0):
        calls = counted_calls(monkeypatch, klass, "stability_kl")
        s = KLASS(oracle, conf_threshold=0.3, kl_threshold=kl, history=1)
        s.connect(chain)
        _, nfe = _draws(s, 16, True, monkeypatch)
        counts.append(len(calls))
        if kl > 0:
            assert float(nfe.max()) < 16
    assert 0 < counts[0] < counts[1]


@pytest.mark.usefixtures("single_thread")
def test_kl_on_demand_exact_ties(monkeypatch) -> None:
    """iid chain: all confidences tie exactly and every KL after the first call is exactly 0; with the confidence
    threshold below the common maximum every position is ready once the first call's KL (against zeros) has left
    the window of H = 2, at step 2; above it, never (the fallback takes the lowest positions, the declared tie
    rule) - on both paths."""
    chain, oracle = _oracle("iid")
    for conf, nfe_expected in ((0.6, 3.0), (0.8, 8.0)):
        s = KLASS(oracle, conf_threshold=conf, kl_threshold=0.01, history=2)
        s.connect(chain)
        (x0, n0), (x1, n1) = (_draws(s, 8, no_memo, monkeypatch) for no_memo in (False, True))
        assert torch.equal(x0, x1) and torch.equal(n0, n1)
        assert torch.all(n1 == nfe_expected)
        assert torch.all(x1 == 0)  # the argmax of every posterior
