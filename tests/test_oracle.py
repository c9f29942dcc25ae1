"""The oracle denoiser against brute-force enumeration and the float64 forward-backward reference.

Tolerance: max abs error <= 1e-6 in probability (float32 cache), <= 1e-10 with the float64 cache.
"""
from __future__ import annotations

import pytest
import torch

from conftest import all_sequences
from dllm_lit.denoisers import OracleDenoiser, forward_backward_posterior, nearest_revealed
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.sources import english_char_chain

TOL = 1e-6


def brute_force_posterior(chain: MarkovChain, z: torch.Tensor) -> torch.Tensor:
    """p(x_t = v | z) by enumerating all V^T sequences, weighting by p0 and the masking evidence."""
    V, T = chain.vocab_size, z.shape[1]
    xs = all_sequences(V, T)
    w = chain.log_prob(xs).exp()
    out = torch.empty(z.shape[0], T, V, dtype=torch.float64)
    for b in range(z.shape[0]):
        consistent = ((xs == z[b]) | (z[b] == chain.mask_id)).all(1)
        ww = w * consistent
        assert ww.sum() > 0, "brute force needs evidence of positive probability"
        onehots = torch.nn.functional.one_hot(xs, V).double()  # [S, T, V]
        out[b] = (ww[:, None, None] * onehots).sum(0) / ww.sum()
    return out


def _chains() -> dict[str, MarkovChain]:
    g = torch.Generator().manual_seed(0)
    dense = torch.rand(4, 4, generator=g, dtype=torch.float64) + 0.05
    sparse_zero = torch.tensor([[0.7, 0.3, 0.0, 0.0], [0.0, 0.2, 0.8, 0.0], [0.1, 0.0, 0.0, 0.9], [0.5, 0.0, 0.5, 0.0]], dtype=torch.float64)
    return {
        "dense": MarkovChain.from_kernel(dense / dense.sum(1, keepdim=True)),
        "topk_teleport": synthetic_chain(4, 2, eps=0.05, seed=1),
        "eps0_impossible": MarkovChain.from_kernel(sparse_zero),
    }


def _masks(chain: MarkovChain, T: int, n: int, seed: int) -> torch.Tensor:
    x = chain.sample(n, T, seed=seed)
    g = torch.Generator().manual_seed(seed)
    keep = torch.rand(n, T, generator=g) < torch.linspace(0.0, 1.0, n)[:, None]
    z = torch.where(keep, x, chain.mask_id)
    z[0] = chain.mask_id  # all masked
    z[-1] = x[-1]  # none masked
    return z


@pytest.mark.parametrize("name", ["dense", "topk_teleport", "eps0_impossible"])
@pytest.mark.parametrize("dtype, tol", [(torch.float32, TOL), (torch.float64, 1e-10)])
def test_oracle_matches_brute_force(name: str, dtype: torch.dtype, tol: float) -> None:
    chain = _chains()[name]
    z = _masks(chain, T=6, n=24, seed=3)
    bf = brute_force_posterior(chain, z)
    oracle = OracleDenoiser(chain, dtype=dtype)
    got = oracle(z).exp().double()
    assert (got - bf).abs().max().item() <= tol
    fb = forward_backward_posterior(chain, z)
    assert (fb - bf).abs().max().item() <= 1e-12


def test_unmasked_positions_are_one_hot(tiny_chain: MarkovChain) -> None:
    oracle = OracleDenoiser(tiny_chain)
    z = torch.tensor([[0, 3, 2, 3]])
    lp = oracle(z)
    assert lp[0, 0, 0] == 0 and torch.isinf(lp[0, 0, 1:]).all() and (lp[0, 0, 1:] < 0).all()
    assert lp[0, 2, 2] == 0


def test_probs_at_subset_equals_full(tiny_chain: MarkovChain) -> None:
    oracle = OracleDenoiser(tiny_chain)
    z = _masks(tiny_chain, 12, 5, seed=9)
    b = torch.tensor([0, 1, 2, 4, 3])
    p = torch.tensor([3, 0, 11, 5, 7])
    assert torch.equal(oracle.probs_at(z, b, p), oracle(z).exp()[b, p])


def test_long_sequence_against_float64_reference() -> None:
    """T = 4096 with a sparse mask: no underflow, agreement with float64 forward-backward."""
    chain = english_char_chain()
    T = 4096
    x = chain.sample(1, T, seed=1)
    g = torch.Generator().manual_seed(0)
    keep = torch.rand(1, T, generator=g) < 0.02
    keep[0, 2000:2600] = False  # one very long gap
    z = torch.where(keep, x, chain.mask_id)
    ref = forward_backward_posterior(chain, z)
    got = OracleDenoiser(chain)(z).exp().double()
    assert torch.isfinite(got).all()
    assert (got - ref).abs().max().item() <= TOL


def test_zero_probability_evidence_uses_left_only_law() -> None:
    """x_a = 0 then x_{a+2} = 3 is impossible (0 -> {0,1} -> {0,1,2}); no NaN, left-only posterior."""
    chain = _chains()["eps0_impossible"]
    M = chain.mask_id
    z = torch.tensor([[0, M, 3, M, M]])
    for oracle_out in (OracleDenoiser(chain)(z).exp().double(), forward_backward_posterior(chain, z)):
        assert torch.isfinite(oracle_out).all()
        assert torch.allclose(oracle_out[0, 1], chain.kernel[0], atol=TOL)
        # positions after the impossible token condition on it as a fresh left neighbour
        assert torch.allclose(oracle_out[0, 3], chain.kernel[3], atol=TOL)
        assert torch.allclose(oracle_out[0, 4], chain.kernel[3] @ chain.kernel, atol=TOL)


def test_uncertified_cache_falls_back_exactly() -> None:
    """A tiny memory budget keeps depth 1: longer distances by repeated multiplication, still exact."""
    chain = synthetic_chain(6, 3, eps=0.01, seed=5)
    small = OracleDenoiser(chain, max_cache_bytes=2 * 2 * 6 * 6 * 4)
    assert small.depth == 1 and not small.certified
    z = torch.full((2, 40), chain.mask_id)
    z[0, 0], z[0, 25], z[1, 39] = 1, 4, 2
    ref = forward_backward_posterior(chain, z)
    assert (small(z).exp().double() - ref).abs().max().item() <= TOL


def test_certified_depth_and_periodic_chain() -> None:
    oracle = OracleDenoiser(english_char_chain())
    assert oracle.certified and oracle.mixing_residual <= 1e-8
    periodic = MarkovChain.from_kernel(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
    o = OracleDenoiser(periodic, max_cache_bytes=4096)
    assert not o.certified
    z = torch.tensor([[0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]])
    post = o(z).exp()
    assert torch.allclose(post[0, 1:, 0], torch.tensor([0.0, 1.0] * 5))


def test_nearest_revealed() -> None:
    z = torch.tensor([[5, 9, 9, 3, 9], [9, 9, 9, 9, 9]])
    left, right = nearest_revealed(z, 9)
    assert left.tolist() == [[-1, 0, 0, 0, 3], [-1, -1, -1, -1, -1]]
    assert right.tolist() == [[3, 3, 3, 5, 5], [5, 5, 5, 5, 5]]


def test_rejects_bad_input(tiny_chain: MarkovChain) -> None:
    oracle = OracleDenoiser(tiny_chain)
    with pytest.raises(ValueError, match="shape"):
        oracle(torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        oracle(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="mixing_tol"):
        OracleDenoiser(tiny_chain, mixing_tol=0)
