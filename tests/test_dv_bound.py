"""The Donsker-Varadhan lower bound of seq_kl_lower (dllm_lit.metrics.functional.dv_bound).

Exact checks on tiny chains: the normaliser log E_p[e^F] against brute-force enumeration of all
V^T sequences; the bound, for features fitted on samples, against the exact sequence KL of a
sampler's law (dynamic program, dllm_lit/exact/); and the reported lower confidence bound
below the truth and below the upper end on a few seeds.
"""
from __future__ import annotations

import itertools

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.metrics.bootstrap import SequenceBootstrapper
from dllm_lit.metrics.functional import dv_bound
from dllm_lit.metrics.functional.dv_bound import (
    TiltFeatures,
    dv_lower_bound,
    fit_features,
    log_partition,
)
from dllm_lit.metrics.functional.sequence_kl import sequence_kl_values, sequence_log_prob
from dllm_lit.metrics.functional.transition import transition_codes
from dllm_lit.metrics.sequence_kl import SequenceKL
from dllm_lit.samplers import AR, FHS, MDLM, MDLMPaper
from dllm_lit.exact import chain_law, mdlm_law

KERNEL = [[0.6, 0.3, 0.1], [0.2, 0.1, 0.7], [0.5, 0.25, 0.25]]


def _chains() -> list[MarkovChain]:
    return [MarkovChain.from_kernel(torch.tensor(KERNEL, dtype=torch.float64)),
            synthetic_chain(4, 2, eps=0.05, seed=1), synthetic_chain(4, 2, eps=0.0, seed=1)]


def _all(V: int, T: int) -> torch.Tensor:
    return torch.tensor(list(itertools.product(range(V), repeat=T)))


def _F(ft, codes: torch.Tensor, chain: MarkovChain) -> torch.Tensor:
    return ft.values(codes, chain) if isinstance(ft, TiltFeatures) else ft.values(codes, chain.vocab_size)


@pytest.mark.parametrize("dense", [True, False])
@pytest.mark.parametrize("k", range(3))
def test_log_partition_equals_enumeration(k: int, dense: bool, monkeypatch) -> None:
    """log (pi o e^g)^T (P o e^f)^{T-1} 1 = log sum_x p(x) e^{F(x)} over all V^T sequences, to 1e-12,
    for fitted bigram features and tilts, with and without teleport (eps = 0: impossible transitions),
    by the dense and by the sparse transfer product."""
    if not dense:
        monkeypatch.setattr(dv_bound, "_DENSE_TRANSFER", 0)
    chain = _chains()[k]
    V, T = chain.vocab_size, 5
    seqs = _all(V, T)
    logp = chain.stationary.log()[seqs[:, 0]] + chain.kernel.log()[seqs[:, :-1], seqs[:, 1:]].sum(1)
    possible = logp > -float("inf")
    codes = transition_codes(chain.sample(20, T, seed=1), V)
    feats = [fit_features(codes, chain, 1.0, 0.5), fit_features(codes, chain, 4.0, 1.0), TiltFeatures(-0.3),
             TiltFeatures(0.6), TiltFeatures(-0.5, 0.5), TiltFeatures(-1.0, 1.0)]
    got = log_partition(chain, feats, T)
    for ft, value in zip(feats, got.tolist()):
        F = _F(ft, transition_codes(seqs, V), chain)
        assert value == pytest.approx(float(torch.logsumexp(logp[possible] + F[possible], 0)), abs=1e-12)
    assert got[1].item() == pytest.approx(0.0, abs=1e-12)  # lambda = 1: a stochastic kernel, E_p[e^F] = 1



def test_sparse_values_do_not_depend_on_the_batch(monkeypatch) -> None:
    """Sparse path: each feature stops at its own fixed point, and the tilts come from one recorded power iteration
    per (chain, T): cold cache, warm cache, a feature alone and the tilts iterated in the call (TILTS emptied, no
    cache) give the same float64 numbers (torch.equal); the values match the dense path's to 1e-12."""
    monkeypatch.setattr(dv_bound, "_DENSE_TRANSFER", 0)
    chain, T = synthetic_chain(6, 3, eps=0.05, seed=2), 40
    codes = transition_codes(chain.sample(24, T, seed=3), chain.vocab_size)
    tilts = [TiltFeatures(th, g) for th, g in dv_bound.TILTS]
    feats = tilts + [fit_features(codes, chain, 4.0, 0.5), fit_features(codes, chain, 1.0, 1.0)]
    dv_bound._TILT_CACHE.clear()
    cold, warm = log_partition(chain, feats, T), log_partition(chain, feats, T)
    assert torch.equal(warm, cold)
    for k in (3, len(tilts), len(tilts) + 1):
        assert torch.equal(log_partition(chain, [feats[k]], T), cold[k:k + 1])
    assert torch.equal(log_partition(chain, feats[::-1], T), cold.flip(0))
    monkeypatch.setattr(dv_bound, "TILTS", ())
    assert torch.equal(log_partition(chain, tilts, T), cold[:len(tilts)])
    monkeypatch.setattr(dv_bound, "_DENSE_TRANSFER", 1 << 22)
    assert torch.allclose(log_partition(chain, feats, T), cold, rtol=1e-12, atol=1e-12)

def test_block_csr_equals_coalesced_coo() -> None:
    """The sparse path's block-diagonal S^T (one sorted pattern per distinct entry pattern, values summed into it)
    is entry for entry, in the same order, the matrix COO -> coalesce -> CSR gives, and a product with it is the
    same float64 numbers: tilts (top-K pattern only) and bigram features of two folds (top-K plus observed pairs,
    which overlap the lists and so are summed), on a chain with a teleport."""
    import warnings

    chain = synthetic_chain(48, 6, eps=0.01, seed=3)
    V = chain.vocab_size
    codes = transition_codes(chain.sample(40, 30, seed=2), V)
    folds = (codes[0::2], codes[1::2])
    feats = [TiltFeatures(0.3), TiltFeatures(-0.5, 0.5)]
    feats += [fit_features(folds[k], chain, a, 0.5) for a in (1.0, 16.0) for k in (0, 1)]
    tr = [ft.transfer(chain) for ft in feats]
    n = len(tr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ref = torch.sparse_coo_tensor(torch.stack([torch.cat([k * V + t.dst for k, t in enumerate(tr)]),
                                                   torch.cat([k * V + t.src for k, t in enumerate(tr)])]),
                                      torch.cat([t.val for t in tr]), (n * V, n * V)).coalesce().to_sparse_csr()
    got = dv_bound._block_csr_transpose(tr, V)
    assert ref.values().numel() > n * V * 6  # the observed pairs added entries outside the top-K lists
    assert torch.equal(got.crow_indices().long(), ref.crow_indices())
    assert torch.equal(got.col_indices().long(), ref.col_indices())
    assert torch.equal(got.values(), ref.values())
    v = torch.rand(n * V, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(torch.sparse.mm(got, v), torch.sparse.mm(ref, v))

def test_shared_pair_lookup_and_gathered_logs_are_the_direct_values(monkeypatch) -> None:
    """The sparse-table path (V^2 above _DENSE_TABLE; forced here on V = 40): one pair lookup per fold, shared by
    every candidate fitted on it, gives each candidate's F exactly as its own search does, and the tilts' statistics
    (log of the gathered kernel entries) are exactly the gather of the dense log table; dv_lower_bound is the same
    DVBound on both table paths' codes (V = 4096 cost profile: docs/performance.md)."""
    chain = synthetic_chain(40, 5, eps=0.01, seed=4)
    V, T = chain.vocab_size, 30
    codes = transition_codes(chain.sample(24, T, seed=5), V)
    folds = (codes[0::2], codes[1::2])
    dense = dv_lower_bound(codes, chain)
    monkeypatch.setattr(dv_bound, "_DENSE_TABLE", 0)
    for k in (0, 1):
        counts = dv_bound.pair_counts(folds[k], V)
        where = dv_bound.pair_positions(counts[0], folds[1 - k].reshape(-1))
        for a, lam in dv_bound.CANDIDATES:
            ft = fit_features(folds[k], chain, a, lam, counts)
            assert torch.equal(ft.values(folds[1 - k], V, where), ft.values(folds[1 - k], V))
    lp, _ = TiltFeatures.statistics(codes, chain)
    log_pi = chain.stationary.clamp_min(1e-30).log()
    direct = log_pi[codes[:, 0] // V] + chain.kernel.clamp_min(1e-30).log().reshape(-1)[codes.reshape(-1)].view(
        codes.shape).sum(1)
    assert torch.equal(lp, direct)
    sparse = dv_lower_bound(codes, chain)
    assert sparse == dense  # the same float64 numbers on both table paths


def _kl(a: torch.Tensor, b: torch.Tensor) -> float:
    keep = a > 0
    return float((a[keep] * (a[keep] / b[keep]).log()).sum())


def _laws(chain: MarkovChain):
    """name -> (exact law of the sampler over V^T sequences, sampler, T, steps)."""
    T = 5
    mdlm = MDLM(OracleDenoiser(chain, dtype=torch.float64))
    mdlm.connect(chain)
    ar = AR(beta=2.0, chain=chain)
    seqs = _all(chain.vocab_size, T)
    return {"mdlm_T5_s2": (mdlm_law(chain, T, 2), mdlm, T, 2), "ar_beta2": (ar.log_prob(seqs).exp(), ar, T, None)}


def test_bound_below_exact_sequence_kl() -> None:
    """For features fitted on samples, E_{p_s}[F] - log E_p[e^F] (exact, by enumeration) <= KL(p_s || p)
    (Donsker-Varadhan); and on three seeds the reported lower confidence bound of N = 400 sequences is
    <= the exact per-token KL and <= seq_kl_upper's point value."""
    chain = _chains()[0]
    V = chain.vocab_size
    for name, (law, sampler, T, steps) in _laws(chain).items():
        p = chain_law(chain, T)
        truth = _kl(law, p)
        seq_codes = transition_codes(_all(V, T), V)
        for seed in range(3):
            x, stats = sampler.generate_with_stats(torch.arange(400), T, steps, seed)
            codes = transition_codes(x, V)
            feats = [fit_features(codes[:200], chain, a, lam) for a, lam in ((1.0, 0.5), (4.0, 1.0))]
            feats += [TiltFeatures(th, g) for th, g in ((-0.3, 0.0), (0.6, 0.0), (-1.0, 1.0))]
            for ft, lz in zip(feats, log_partition(chain, feats, T).tolist()):
                assert float((law * _F(ft, seq_codes, chain)).sum()) - lz <= truth + 1e-12, name
            bound = dv_lower_bound(codes, chain)
            low, high = bound.interval(0.95)
            u = stats["log_q"] - sequence_log_prob(chain, x)
            upper = sequence_kl_values(codes, u, chain, None, bound)["seq_kl_upper"]
            assert low <= bound.value <= high
            assert low <= truth / T and low <= upper, (name, seed, low, truth / T, upper)


def test_exact_samplers_read_zero_and_few_sequences() -> None:
    """seq_kl_upper of an exact sampler (FHS, paper-MDLM at steps = T; float32 oracle; declared exact) reads 0 with
    interval [0, 0]; the lower bound of exact samples is <= 0 at its low end; with N < 4 the lower
    end is the trivial bound 0."""
    chain = synthetic_chain(27, 5, eps=0.02, seed=1)
    T, N = 32, 40
    for sampler in (FHS(), MDLMPaper()):
        sampler.connect(chain)
        x, stats = sampler.generate_with_stats(torch.arange(N), T, T, 5)
        m = SequenceBootstrapper(SequenceKL(chain), num_resamples=20, seed=1)
        exact = torch.full((N,), float(sampler.law_is_exact(T, T)))  # the engine adds it to the stats
        m.update(x, {"index": torch.arange(N), "log_q": stats["log_q"], "exact_law": exact}, index=torch.arange(N))
        values, intervals = m.compute(), m.interval()
        assert values["seq_kl_upper"] == 0.0 and intervals["seq_kl_upper"] == (0.0, 0.0)
        assert intervals["seq_kl_lower"][0] <= 0.0 <= values["seq_kl_upper"]
    codes = transition_codes(chain.sample(3, T, seed=0), 27)
    assert dv_lower_bound(codes, chain).interval(0.95) == (0.0, 0.0)
