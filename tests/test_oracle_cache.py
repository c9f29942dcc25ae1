"""The oracle's on-disk power table: same table and posteriors as the in-memory build, verified, built once."""
from __future__ import annotations

import threading

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.denoisers import oracle_cache
from dllm_lit.markov import MarkovChain, synthetic_chain


@pytest.fixture
def always_disk(monkeypatch):
    monkeypatch.setattr(oracle_cache, "DISK_CACHE_MIN_BYTES", 0)


def _chains():
    g = torch.Generator().manual_seed(1)
    dense = torch.rand(7, 7, generator=g) + 0.05
    dense = MarkovChain.from_kernel(dense / dense.sum(1, keepdim=True))
    zero = torch.rand(6, 6, generator=g)
    zero[zero < 0.5] = 0.0  # eps = 0 with zero-probability transitions
    zero[:, 0] += 0.1
    zero[0] += 0.1
    zero = zero / zero.sum(1, keepdim=True)
    return [dense, synthetic_chain(40, 5, eps=1e-3, seed=3), MarkovChain.from_kernel(zero)]


def _direct_power_rows(chain: MarkovChain, d: int) -> torch.Tensor:
    return torch.linalg.matrix_power(chain.kernel, d)


@pytest.mark.parametrize("ci", range(3))
def test_disk_table_equals_memory_table(tmp_path, always_disk, ci):
    chain = _chains()[ci]
    mem = OracleDenoiser(chain)
    disk = OracleDenoiser(chain, cache_dir=tmp_path)
    again = OracleDenoiser(chain, cache_dir=tmp_path)
    assert torch.equal(mem.table, disk.table) and torch.equal(mem.table, again.table)
    assert (mem.depth, mem.certified, mem.strictly_positive) == (again.depth, again.certified, again.strictly_positive)
    V, D = chain.vocab_size, mem.depth
    for d in range(1, D + 1):  # layout: rows of P'^d, then its columns
        P = _direct_power_rows(chain, d).float()
        torch.testing.assert_close(mem.table[2 * (d - 1) * V:(2 * d - 1) * V], P, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(mem.table[(2 * d - 1) * V:2 * d * V], P.T, rtol=1e-5, atol=1e-7)
    # identical posteriors from both
    n = 50
    g = torch.Generator().manual_seed(0)
    xl, xr = torch.randint(V, (n,), generator=g), torch.randint(V, (n,), generator=g)
    dl, dr = torch.randint(0, D + 3, (n,), generator=g), torch.randint(0, D + 3, (n,), generator=g)
    assert torch.equal(mem.probs_given_neighbours(xl, dl, xr, dr), again.probs_given_neighbours(xl, dl, xr, dr))


def test_second_load_does_not_rebuild(tmp_path, always_disk, monkeypatch):
    chain = synthetic_chain(30, 4, eps=1e-3, seed=0)
    first = OracleDenoiser(chain, cache_dir=tmp_path)

    def boom(*a, **k):
        raise AssertionError("rebuilt although a valid cache entry exists")

    monkeypatch.setattr(oracle_cache, "_powers", boom)
    assert torch.equal(OracleDenoiser(chain, cache_dir=tmp_path).table, first.table)
    # other settings are another entry (and would need a build)
    with pytest.raises(AssertionError, match="rebuilt"):
        OracleDenoiser(chain, mixing_tol=1e-6, cache_dir=tmp_path)


def test_corrupted_entry_is_rebuilt(tmp_path, always_disk):
    chain = synthetic_chain(30, 4, eps=1e-3, seed=0)
    ref = OracleDenoiser(chain, cache_dir=tmp_path).table.clone()
    (data,) = (tmp_path / "oracle").glob("*.bin")
    raw = bytearray(data.read_bytes())
    raw[100] ^= 0xFF
    data.write_bytes(bytes(raw))
    assert torch.equal(OracleDenoiser(chain, cache_dir=tmp_path).table, ref)
    data.write_bytes(bytes(raw[:-4]))  # truncated
    assert torch.equal(OracleDenoiser(chain, cache_dir=tmp_path).table, ref)


def test_concurrent_loaders_build_once(tmp_path, always_disk, monkeypatch):
    chain = synthetic_chain(30, 4, eps=1e-3, seed=0)
    builds = []
    real = oracle_cache._powers

    def counted(*a, **k):
        builds.append(1)
        yield from real(*a, **k)

    monkeypatch.setattr(oracle_cache, "_powers", counted)
    out = []
    threads = [threading.Thread(target=lambda: out.append(OracleDenoiser(chain, cache_dir=tmp_path).table)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(builds) == 1 and len(out) == 3
    assert all(torch.equal(t, out[0]) for t in out)


def test_fingerprint_tracks_the_chain():
    a, b = synthetic_chain(30, 4, eps=1e-3, seed=0), synthetic_chain(30, 4, eps=1e-3, seed=1)
    assert oracle_cache.chain_fingerprint(a) == oracle_cache.chain_fingerprint(synthetic_chain(30, 4, eps=1e-3, seed=0))
    assert oracle_cache.chain_fingerprint(a) != oracle_cache.chain_fingerprint(b)
    assert oracle_cache.chain_fingerprint(a) != oracle_cache.chain_fingerprint(synthetic_chain(30, 4, eps=2e-3, seed=0))
