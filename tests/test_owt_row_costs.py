"""Cheaper paths for the OWT-sized grid give the numbers of the direct ones, exact ties included:

* the oracle reads power-table rows with ``index_select`` (the rows of ``table[idx]``, bit for bit);
* KLASS's greedy one-block path runs the whole batch at once (its cache keeps row-free features only), with the
  draws and NFE of the direct step and of sub-batches."""
from __future__ import annotations

import pytest
import torch

from conftest import counted_calls
from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.samplers import KLASS, MaskGIT
from dllm_lit.decoding import posterior_cache, stability_decoding
from dllm_lit.decoding.neighbourhood_rows import NeighbourhoodRows

pytestmark = pytest.mark.usefixtures("single_thread")


def _iid() -> MarkovChain:
    """Identical kernel rows: every posterior is the same row, so confidences tie exactly."""
    return MarkovChain.from_kernel(torch.tensor([0.7, 0.2, 0.1]).expand(3, 3).clone())


def _queries(V: int, n: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Neighbour queries with every case: both sides (d_left < / = / > d_right: the mirror normaliser), left only,
    right only, none; equal left and right tokens (the mirror's a = b entry)."""
    g = torch.Generator().manual_seed(seed)
    xl, xr = torch.randint(0, V, (n,), generator=g), torch.randint(0, V, (n,), generator=g)
    xr[: n // 4] = xl[: n // 4]
    dl, dr = torch.randint(0, 12, (n,), generator=g), torch.randint(0, 12, (n,), generator=g)
    return xl, dl, xr, dr


@pytest.mark.parametrize("chain", [synthetic_chain(256, 8, eps=0.05, seed=4), _iid()], ids=["v256", "iid"])
def test_oracle_rows_by_index_select_are_the_indexed_rows(chain, monkeypatch) -> None:
    """probs_given_neighbours (flat and [2, n] queries) and the rows themselves equal the advanced-indexing path
    with torch.equal (tolerance: none)."""
    oracle = OracleDenoiser(chain)
    V = chain.vocab_size
    q = _queries(V, 400, 3)
    idx = torch.randint(0, oracle.table.shape[0], (3, 5))
    assert torch.equal(oracle._rows(idx), oracle.table[idx])
    fast = oracle.probs_given_neighbours(*q)
    fast2 = oracle.probs_given_neighbours(*(t.view(2, -1) for t in q))
    monkeypatch.setattr(OracleDenoiser, "_rows", lambda self, i: self.table[i])
    direct = oracle.probs_given_neighbours(*q)
    assert torch.equal(fast, direct) and torch.equal(fast2, direct.view(2, -1, V))


def _no_memo(monkeypatch) -> None:
    """As at V = 4096: no rows memoised by neighbourhood key."""
    monkeypatch.setattr(NeighbourhoodRows, "key_count", staticmethod(lambda den: None))
    monkeypatch.setattr(NeighbourhoodRows, "applies", classmethod(lambda cls, den: False))


def _budget(monkeypatch, elements: int) -> None:
    """A cache budget of ``elements`` numbers (sub-batches of the sequences that fit it)."""
    monkeypatch.setattr(posterior_cache.PosteriorCache, "max_batch",
                        staticmethod(lambda w, budget=elements, length=1: budget // max(1, length * w)))
    monkeypatch.setattr(posterior_cache.PosteriorCache, "fits",
                        staticmethod(lambda B, w, budget=elements, length=1: B * length * w <= budget))


@pytest.mark.parametrize("chain", [synthetic_chain(256, 8, eps=0.05, seed=4), _iid()], ids=["v256", "iid"])
@pytest.mark.parametrize("conf,kl", [(0.9, 0.01), (0.3, 0.5), (0.6, 0.01)])
def test_klass_whole_batch_equals_direct_and_sub_batches(chain, conf, kl, monkeypatch) -> None:
    """A budget that the old sizing (2V + 2 numbers per position) splits into sub-batches of 2 now runs the batch of
    7 in one call, with the draws and NFE of the direct step (no cache) and of sub-batches of 2."""
    _no_memo(monkeypatch)
    T, V = 16, chain.vocab_size
    s = KLASS(OracleDenoiser(chain), conf_threshold=conf, kl_threshold=kl, history=2)
    s.connect(chain)
    for steps in (4, 16, 24):
        s.use_cache = False
        x0, st0 = s.generate_with_stats(torch.arange(7), T, steps, 7)
        s.use_cache = True
        with monkeypatch.context() as m:
            _budget(m, 2 * T * (2 * V + 2))
            calls = counted_calls(m, stability_decoding, "_decode_batch")
            x1, st1 = s.generate_with_stats(torch.arange(7), T, steps, 7)
            assert len(calls) == 1  # one batch
        with monkeypatch.context() as m:
            _budget(m, 2 * T * 2)  # the row-free features of 2 sequences
            calls = counted_calls(m, stability_decoding, "_decode_batch")
            x2, st2 = s.generate_with_stats(torch.arange(7), T, steps, 7)
            assert len(calls) == 4  # sub-batches 2, 2, 2, 1
        for x, st in ((x1, st1), (x2, st2)):
            assert torch.equal(x0, x) and torch.equal(st0["nfe"], st["nfe"]), (steps, conf, kl)


def test_klass_other_paths_keep_the_row_sizing(monkeypatch) -> None:
    """Temperature > 0 or several blocks store rows: still sub-batched by 2V + 2 numbers per position."""
    chain = synthetic_chain(64, 4, eps=0.05, seed=1)
    V = chain.vocab_size
    for tau, block in ((0.5, None), (0.0, 8)):
        s = KLASS(OracleDenoiser(chain), temperature=tau, block_length=block)
        s.connect(chain)
        direct = s.generate_with_stats(torch.arange(5), 16, 8, 3)[0]
        with monkeypatch.context() as m:
            _budget(m, 2 * (block or 16) * (2 * V + 2))
            calls = counted_calls(m, stability_decoding, "_decode_batch")
            assert torch.equal(s.generate_with_stats(torch.arange(5), 16, 8, 3)[0], direct)
            assert len(calls) == 3


@pytest.mark.parametrize("chain", [synthetic_chain(256, 8, eps=0.05, seed=4), _iid()], ids=["v256", "iid"])
def test_maskgit_compact_rounds_equal_the_direct_path(chain, monkeypatch) -> None:
    """MaskGIT's compact path without a key memo (drawn rows' maxima by amax over the row) draws as the direct
    step (no cache), at step counts below, at and above T; zero choice temperature makes exact ties at the cut."""
    _no_memo(monkeypatch)
    for c in (4.5, 0.0):
        s = MaskGIT(OracleDenoiser(chain), choice_temperature=c)
        s.connect(chain)
        for steps in (4, 16, 24):
            s.use_cache = False
            x0 = s.generate_with_stats(torch.arange(6), 16, steps, 5)[0]
            s.use_cache = True
            assert torch.equal(x0, s.generate_with_stats(torch.arange(6), 16, steps, 5)[0]), (c, steps)
