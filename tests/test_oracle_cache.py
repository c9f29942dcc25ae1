"""The oracle's power table: on disk the same as in memory, verified, built once; the sparse product for
sparse chains equals the dense one to float64 rounding."""
from __future__ import annotations

import json
import math
import threading

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.denoisers import oracle_cache
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.sources import english_char_chain


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


# ---------------------------------------------------------------- sparse products for sparse chains
#
# All terms of P'^(d+1) = P' P'^d are nonnegative, so each entry's float64 rounding error is at most
# ~(n + 2) u relative for a sum of n <= V terms (u = 2^-53), accumulating linearly over the depth: at
# V = 256, d <= 30 both builds (and matrix_power) lie within 30 * 258 * 1.1e-16 < 9e-13 of the exact
# powers, hence within rtol 2e-12 of each other.  Zeros (eps = 0) are exact zeros in both.
SPARSE_RTOL = 2e-12


def _transient_chain() -> MarkovChain:
    """eps = 0, V = 256, K = 16: states 128.. are transient (pi = 0 there), so nothing is certified."""
    g = torch.Generator().manual_seed(7)
    V, K = 256, 16
    idx = torch.stack([torch.randperm(128, generator=g)[:K] if i < 128 else torch.randperm(V, generator=g)[:K]
                       for i in range(V)])
    prob = torch.rand(V, K, generator=g, dtype=torch.float64) + 0.01
    prob = prob / prob.sum(1, keepdim=True)
    pi = torch.cat([MarkovChain(idx[:128], prob[:128]).stationary, torch.zeros(128, dtype=torch.float64)])
    return MarkovChain(idx, prob, stationary=pi)


def _sparse_chains() -> dict[str, MarkovChain]:
    return {"teleport": synthetic_chain(256, 16, eps=1e-3, seed=0),  # Zipf teleport law: not uniform
            "eps0": synthetic_chain(256, 16, eps=0.0, seed=1),
            "transient": _transient_chain()}


def _dense(strips: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(strips, 1)


@pytest.mark.parametrize("name", ["teleport", "eps0", "transient"])
def test_sparse_powers_equal_dense_powers(name):
    chain = _sparse_chains()[name]
    sk = oracle_cache._sparse_kernel(chain, force=True)
    assert sk is not None and (sk.eps_nu is None) == (chain.eps == 0)
    max_depth = 30
    dense = [(d, _dense(p), r, c) for d, p, r, c in oracle_cache._powers(chain, 1e-8, max_depth, None)]
    sparse = [(d, _dense(p), r, c) for d, p, r, c in oracle_cache._powers(chain, 1e-8, max_depth, sk)]
    assert [(d, c) for d, _, _, c in sparse] == [(d, c) for d, _, _, c in dense]
    if name == "transient":
        assert len(sparse) == max_depth and all(math.isinf(r) for _, _, r, _ in sparse)
    else:
        assert sparse[-1][3] and len(sparse) < max_depth  # certified before the budget
    for (d, ps, rs, _), (_, pd, rd, _) in zip(sparse, dense):
        torch.testing.assert_close(ps, pd, rtol=SPARSE_RTOL, atol=0.0, msg=f"P'^{d}")
        torch.testing.assert_close(ps, torch.linalg.matrix_power(chain.kernel, d), rtol=SPARSE_RTOL, atol=0.0)
        assert torch.equal(ps == 0, pd == 0)
        if math.isfinite(rd):
            assert abs(rs - rd) <= SPARSE_RTOL * (1 + rd)  # r = max |P'^d / pi - 1|


@pytest.mark.parametrize("name", ["teleport", "eps0"])
def test_sparse_table_through_the_oracle(tmp_path, always_disk, monkeypatch, name):
    """With the size thresholds lowered, the oracle picks the sparse product itself, in memory and on disk."""
    chain = _sparse_chains()[name]
    dense = OracleDenoiser(chain)
    monkeypatch.setattr(oracle_cache, "SPARSE_MIN_VOCAB", 0)
    assert oracle_cache._sparse_kernel(chain) is not None  # K = V / 16
    mem = OracleDenoiser(chain)
    disk = OracleDenoiser(chain, cache_dir=tmp_path)
    assert torch.equal(mem.table, disk.table)
    (meta,) = (tmp_path / "oracle").glob("*.json")
    assert json.loads(meta.read_text())["product"] == "sparse"
    assert (mem.depth, mem.certified, mem.strictly_positive) == (dense.depth, dense.certified, dense.strictly_positive)
    torch.testing.assert_close(mem.table, dense.table, rtol=2 ** -23, atol=0.0)  # at most one float32 ulp
    f64 = OracleDenoiser(chain, dtype=torch.float64)
    assert torch.equal(f64.table, OracleDenoiser(chain, dtype=torch.float64).table)  # deterministic
    monkeypatch.setattr(oracle_cache, "SPARSE_MIN_VOCAB", 2**62)
    torch.testing.assert_close(f64.table, OracleDenoiser(chain, dtype=torch.float64).table, rtol=SPARSE_RTOL, atol=0.0)


def test_dense_and_small_chains_take_the_dense_product():
    assert oracle_cache._sparse_kernel(english_char_chain()) is None  # V = 27, K = V
    g = torch.Generator().manual_seed(0)
    P = torch.rand(1100, 1100, generator=g, dtype=torch.float64)
    assert oracle_cache._sparse_kernel(MarkovChain.from_kernel(P / P.sum(1, keepdim=True))) is None  # K = V
    assert oracle_cache._sparse_kernel(synthetic_chain(1024, 200, eps=1e-3, seed=0)) is None  # K > V / 8
    assert oracle_cache._sparse_kernel(synthetic_chain(512, 16, eps=1e-3, seed=0)) is None  # V below the threshold
    assert oracle_cache._sparse_kernel(synthetic_chain(1024, 128, eps=1e-3, seed=0)) is not None  # K = V / 8


def test_kernel_that_is_not_sparse_plus_rank_one_takes_the_dense_product(caplog, monkeypatch):
    """The factors are checked against chain.kernel: a kernel they do not reproduce gets dense products."""
    monkeypatch.setattr(oracle_cache, "SPARSE_MIN_VOCAB", 0)
    chain = synthetic_chain(256, 16, eps=1e-3, seed=0)
    assert oracle_cache._sparse_kernel(chain) is not None
    kernel = chain.kernel.clone()
    kernel[0] = kernel[0].roll(1)  # still stochastic, no longer (1 - eps) P_topK + eps 1 nu^T
    chain._kernel = kernel
    assert oracle_cache._sparse_kernel(chain, force=True) is None
    assert "not (1 - eps) P_topK" in caplog.text
    (d, strips, _, _), *_ = oracle_cache._powers(chain, 1e-8, 2)
    assert len(strips) == 1 and torch.equal(strips[0], kernel)


def test_residual_and_block_are_the_elementwise_formulas():
    chain = synthetic_chain(300, 7, eps=1e-3, seed=2)  # V not a multiple of the strip width
    sk = oracle_cache._sparse_kernel(chain, force=True)
    pi = chain.stationary
    (_, strips, _, _), (_, strips2, r2, _), *_ = oracle_cache._powers(chain, 1e-8, 3, sk)
    assert len(strips2) == 3 and [s.shape[1] for s in strips2] == [128, 128, 44]
    P2 = torch.cat(strips2, 1)
    assert r2 == (P2 / pi[None, :] - 1.0).abs().max().item()  # bit for bit
    for dtype in (torch.float32, torch.float64):
        p = P2.to(dtype)
        assert torch.equal(oracle_cache._block(strips2, dtype), torch.cat([p, p.T]))
        buf = torch.full((600, 300), float("nan"), dtype=dtype)
        assert oracle_cache._block(strips2, dtype, out=buf) is buf and torch.equal(buf, torch.cat([p, p.T]))


def test_sparse_build_does_not_depend_on_the_thread_count():
    """Strips go to a pool of Python threads, each product on one intra-op thread: the same bits as serial,
    and torch's thread count is restored afterwards."""
    chain = synthetic_chain(300, 12, eps=1e-3, seed=4)
    sk = oracle_cache._sparse_kernel(chain, force=True)
    serial = [torch.cat(p, 1) for _, p, _, _ in oracle_cache._powers(chain, 1e-8, 6, sk)]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        with oracle_cache._strip_threads(sk) as pool:
            assert pool is not None and torch.get_num_threads() == 1
            pooled = [torch.cat(p, 1) for _, p, _, _ in oracle_cache._powers(chain, 1e-8, 6, sk, pool)]
        assert torch.get_num_threads() == 3
        with oracle_cache._strip_threads(None) as pool:  # dense builds keep BLAS's threads
            assert pool is None and torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
    assert len(pooled) == len(serial) == 6
    assert all(torch.equal(a, b) for a, b in zip(pooled, serial))
