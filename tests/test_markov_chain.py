"""MarkovChain construction, validation, stationary law, sampling and artifacts."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from conftest import all_sequences, chi_square_pvalue, sequence_counts
from dllm_lit.markov import ChainError, MarkovChain, load_chain, save_chain, synthetic_chain
from dllm_lit.markov.io import ARTIFACT_VERSION

DATA = Path(__file__).resolve().parent / "data"


def test_kernel_roundtrip_and_stationary(tiny_chain: MarkovChain) -> None:
    P = tiny_chain.kernel
    assert torch.allclose(P.sum(1), torch.ones(3, dtype=torch.float64))
    pi = tiny_chain.stationary
    assert (pi @ P - pi).abs().sum() < 1e-11
    assert tiny_chain.mask_id == 3 and tiny_chain.vocab_size == 3


@pytest.mark.parametrize(
    "P, field",
    [
        (torch.tensor([[0.5, 0.4], [0.5, 0.5]]), "sums to"),
        (torch.tensor([[1.5, -0.5], [0.5, 0.5]]), "negative"),
        (torch.tensor([[float("nan"), 1.0], [0.5, 0.5]]), "NaN"),
        (torch.ones(2, 3) / 3, "square"),
    ],
)
def test_from_kernel_rejects_bad_input(P: torch.Tensor, field: str) -> None:
    with pytest.raises(ChainError, match=field):
        MarkovChain.from_kernel(P)


def test_constructor_errors() -> None:
    idx = torch.tensor([[0, 1], [1, 0]])
    prob = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    with pytest.raises(ChainError, match="eps"):
        MarkovChain(idx, prob, eps=1.0, nu=torch.tensor([0.5, 0.5]))
    with pytest.raises(ChainError, match="eps"):
        MarkovChain(idx, prob, eps=-0.1, nu=torch.tensor([0.5, 0.5]))
    with pytest.raises(ChainError, match="K=3 exceeds"):
        MarkovChain(torch.tensor([[0, 1, 0], [1, 0, 1]]), torch.ones(2, 3) / 3)
    with pytest.raises(ChainError, match="nu"):
        MarkovChain(idx, prob, eps=0.1, nu=torch.tensor([0.5, 0.5, 0.0]))
    with pytest.raises(ChainError, match="repeated"):
        MarkovChain(torch.tensor([[0, 0], [1, 0]]), prob)
    with pytest.raises(ChainError, match="top_k"):
        MarkovChain.from_counts(torch.ones(3, 3), top_k=4)
    with pytest.raises(ChainError, match="all zero"):
        MarkovChain.from_counts(torch.zeros(3, 3))


def test_from_counts_paper_rule() -> None:
    g = torch.Generator().manual_seed(1)
    counts = torch.randint(0, 50, (20, 20), generator=g).double() ** 3
    counts[5] = 0  # a state never followed by anything -> unigram row
    ch = MarkovChain.from_counts(counts, target_mass=0.99, k_percentile=90, eps=1e-3)
    # K by hand: per-row K*_i at 99% mass, floor of the linear-interpolated 90th percentile
    C = counts.clone()
    uni = 0.5 * (C.sum(0) + C.sum(1))
    C[5] = uni
    P = (C + 1e-8) / (C + 1e-8).sum(1, keepdim=True)
    kstar = ((P.sort(1, descending=True).values.cumsum(1) < 0.99 - 1e-12).sum(1) + 1).double()
    K = math.floor(torch.quantile(kstar, 0.9).item())
    assert ch.top_k == K
    assert ch.metadata["k_rule"] == "mass_percentile"
    # each top-K row renormalised, teleport added
    Pk = P.sort(1, descending=True).values[:, :K]
    Pk = Pk / Pk.sum(1, keepdim=True)
    dense = ch.kernel
    got = dense.sort(1, descending=True).values[:, :K] - 1e-3 * 0  # top-K entries dominate teleport here
    assert torch.allclose(dense.sum(1), torch.ones(20, dtype=torch.float64))
    assert torch.allclose(ch.nu, uni / uni.sum())
    row = 3
    expect = (1 - 1e-3) * torch.zeros(20, dtype=torch.float64).scatter(0, P[row].sort(descending=True).indices[:K], Pk[row]) + 1e-3 * ch.nu
    assert torch.allclose(dense[row], expect, atol=1e-12)
    assert got.shape == (20, K)


def test_sample_matches_joint_law(tiny_chain: MarkovChain) -> None:
    V, T = 3, 4
    xs = all_sequences(V, T)
    law = tiny_chain.log_prob(xs).exp()
    assert abs(law.sum().item() - 1) < 1e-12
    s = tiny_chain.sample(20000, T, seed=7)
    assert chi_square_pvalue(sequence_counts(s, V), law) > 0.01


def test_sample_teleport_chain_law() -> None:
    ch = synthetic_chain(5, 2, eps=0.2, seed=3)
    xs = all_sequences(5, 3)
    law = ch.log_prob(xs).exp()
    s = ch.sample(30000, 3, seed=11)
    assert chi_square_pvalue(sequence_counts(s, 5), law) > 0.01


def test_sample_is_batch_invariant(tiny_chain: MarkovChain) -> None:
    full = tiny_chain.sample(10, 16, seed=5)
    part = tiny_chain.sample(4, 16, seed=5, start_index=6)
    assert torch.equal(full[6:], part)
    assert not torch.equal(full, tiny_chain.sample(10, 16, seed=6))
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(tiny_chain.sample(3, 8, g1), tiny_chain.sample(3, 8, g2))


def test_sample_bad_args(tiny_chain: MarkovChain) -> None:
    with pytest.raises(ChainError, match="num_sequences"):
        tiny_chain.sample(0, 5)
    with pytest.raises(ChainError, match="length"):
        tiny_chain.sample(2, 0)


def test_stationary_of_periodic_chain_converges() -> None:
    P = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    ch = MarkovChain.from_kernel(P)
    assert torch.allclose(ch.stationary, torch.tensor([0.5, 0.5], dtype=torch.float64))


def test_artifact_roundtrip_and_checksum(tmp_path) -> None:
    ch = synthetic_chain(50, 7, eps=1e-3, seed=2)
    path = tmp_path / "chain.pt"
    save_chain(ch, path)
    back = load_chain(path)
    assert torch.equal(back.nbr_idx, ch.nbr_idx) and torch.allclose(back.kernel, ch.kernel)
    assert back.metadata["source"] == "synthetic"
    d = torch.load(path, weights_only=True)
    d["nbr_prob"][0, 0] += 1e-3
    torch.save(d, path)
    with pytest.raises(ChainError, match="checksum"):
        load_chain(path)
    path.write_bytes(b"garbage")
    with pytest.raises(ChainError, match="cannot read"):
        load_chain(path)


def test_artifact_version_1_still_loads(tmp_path) -> None:
    """tests/data/chain_v1.pt was written by save_chain before version 2 (synthetic_chain(6, 3, eps=0.01,
    seed=5)): its checksum still verifies, and a tampered copy is still refused."""
    v1 = DATA / "chain_v1.pt"
    assert torch.load(v1, weights_only=True)["version"] == 1
    loaded = load_chain(v1)
    ref = synthetic_chain(6, 3, eps=0.01, seed=5)
    assert torch.equal(loaded.nbr_idx, ref.nbr_idx) and torch.allclose(loaded.kernel, ref.kernel, atol=1e-15, rtol=0)
    assert loaded.eps == 0.01 and loaded.metadata["seed"] == 5
    d = torch.load(v1, weights_only=True)
    d["nu"][0] += 1e-6
    torch.save(d, tmp_path / "edited.pt")
    with pytest.raises(ChainError, match="checksum"):
        load_chain(tmp_path / "edited.pt")
    # new files are version 2; an unknown version is refused with the versions that are read
    save_chain(loaded, tmp_path / "v2.pt")
    d = torch.load(tmp_path / "v2.pt", weights_only=True)
    assert d["version"] == ARTIFACT_VERSION == 2 and d["sha256"] != torch.load(v1, weights_only=True)["sha256"]
    assert torch.equal(load_chain(tmp_path / "v2.pt").nbr_idx, ref.nbr_idx)
    d["version"] = 3
    torch.save(d, tmp_path / "v3.pt")
    with pytest.raises(ChainError, match="version 3 is not supported"):
        load_chain(tmp_path / "v3.pt")


def test_from_counts_with_corpus_unigram() -> None:
    """Empty rows take the given corpus unigram (the paper's OWT rule), which is also the default nu."""
    counts = torch.tensor([[0.0, 3.0, 1.0], [0.0, 0.0, 0.0], [2.0, 2.0, 0.0]])
    uni = torch.tensor([5.0, 1.0, 4.0])
    ch = MarkovChain.from_counts(counts, eps=0.1, unigram=uni, pseudocount=0.0)
    expect = 0.9 * uni / uni.sum() + 0.1 * uni / uni.sum()
    assert torch.allclose(ch.kernel[1], expect.double())
    assert torch.allclose(ch.nu, (uni / uni.sum()).double())
    with pytest.raises(ChainError, match="unigram must have 3"):
        MarkovChain.from_counts(counts, unigram=torch.ones(4))


def test_fingerprint_identifies_the_law() -> None:
    """Identical chains share a fingerprint; any change of a probability, a neighbour, nu or eps changes it;
    metadata does not enter it."""
    syn = synthetic_chain(40, 6, eps=1e-3, seed=2)
    assert synthetic_chain(40, 6, eps=1e-3, seed=2).fingerprint == syn.fingerprint
    idx, prob, nu = syn.nbr_idx, syn.nbr_prob, syn.nu
    ch = MarkovChain(idx, prob, eps=1e-3, nu=nu, metadata={"source": "a"})
    fp = ch.fingerprint
    assert len(fp) == 64 and int(fp, 16) >= 0 and ch.fingerprint == fp
    same = MarkovChain(idx.clone(), prob.clone(), eps=1e-3, nu=nu.clone(), metadata={"source": "b", "x": 1})
    assert same.fingerprint == fp
    moved = prob.clone()
    moved[3, 0] -= 1e-9
    moved[3, 1] += 1e-9
    assert MarkovChain(idx, moved, eps=1e-3, nu=nu).fingerprint != fp
    assert MarkovChain(idx, prob, eps=2e-3, nu=nu).fingerprint != fp
    swapped = nu.clone()
    swapped[0], swapped[1] = nu[1], nu[0]
    assert MarkovChain(idx, prob, eps=1e-3, nu=swapped).fingerprint != fp
    assert synthetic_chain(40, 6, eps=1e-3, seed=3).fingerprint != syn.fingerprint
    counts = torch.arange(1.0, 17.0).reshape(4, 4)
    assert MarkovChain.from_counts(counts).fingerprint == MarkovChain.from_counts(counts.clone()).fingerprint
    assert MarkovChain.from_counts(counts).fingerprint != MarkovChain.from_counts(counts, eps=1e-6).fingerprint
