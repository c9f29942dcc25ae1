"""Fast paths give draws identical to the straightforward computation (dense, sparse + teleport, eps = 0 chains)."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.samplers import LLaDA
from dllm_lit.samplers import posterior_cache
from dllm_lit.samplers.selection import topk_stable, topk_stable_mask


def _chains():
    g = torch.Generator().manual_seed(5)
    dense = torch.rand(9, 9, generator=g) + 0.02
    zero = torch.rand(8, 8, generator=g)
    zero[zero < 0.55] = 0.0  # eps = 0: zero-probability transitions (unreachable right neighbours)
    zero[:, 1] += 0.2
    zero[1] += 0.2
    return {
        "dense": MarkovChain.from_kernel(dense / dense.sum(1, keepdim=True)),
        "sparse_teleport": synthetic_chain(48, 5, eps=1e-3, seed=2),
        "eps0": MarkovChain.from_kernel(zero / zero.sum(1, keepdim=True)),
    }


def test_topk_stable_mask_is_the_stable_topk_set() -> None:
    g = torch.Generator().manual_seed(0)
    for n in (1, 5, 33):
        for _ in range(30):
            s = torch.randint(0, 4, (6, n), generator=g).to(torch.float64)  # many ties
            s[torch.rand(6, n, generator=g) < 0.3] = -torch.inf
            for k in range(0, n + 1):
                finite = (s > -torch.inf).sum(1).min().item()
                if k > finite:
                    continue
                ref = torch.zeros_like(s, dtype=torch.bool)
                if k:
                    ref.scatter_(1, topk_stable(s, k), True)
                assert torch.equal(topk_stable_mask(s, k), ref)


@pytest.mark.parametrize("name", ["dense", "sparse_teleport", "eps0"])
def test_neighbour_keys_identify_identical_rows(name) -> None:
    chain = _chains()[name]
    oracle = OracleDenoiser(chain)
    V, D = chain.vocab_size, oracle.depth
    g = torch.Generator().manual_seed(1)
    n = 400
    xl, xr = torch.randint(V, (n,), generator=g), torch.randint(V, (n,), generator=g)
    dl, dr = torch.randint(0, D + 4, (n,), generator=g), torch.randint(0, D + 4, (n,), generator=g)
    keys = oracle.neighbour_keys(xl, dl, xr, dr)
    rows = oracle.probs_given_neighbours(xl, dl, xr, dr)
    for i in range(0, n, 7):
        same = keys == keys[i]
        assert torch.equal(rows[same], rows[i].expand(int(same.sum()), V))


@pytest.mark.parametrize("name", ["dense", "sparse_teleport", "eps0"])
@pytest.mark.parametrize("tau,block", [(1.0, None), (0.0, 8), (0.7, 16)])
def test_llada_cache_dedupe_and_sub_batches_are_exact(name, tau, block, monkeypatch) -> None:
    chain = _chains()[name]
    s = LLaDA(OracleDenoiser(chain), temperature=tau, block_length=block)
    s.connect(chain)
    T, steps = 32, 16
    s.use_cache = False
    direct = s.sample(7, T, steps, seed=4)
    s.use_cache = True
    cached = s.sample(7, T, steps, seed=4)
    # a budget of 3 sequences: sub-batches of 3, 3, 1
    width = 2 * chain.vocab_size + 2
    monkeypatch.setattr(posterior_cache, "DEFAULT_CACHE_ELEMENTS", 3 * T * width)
    monkeypatch.setattr(posterior_cache.PosteriorCache, "max_batch",
                        staticmethod(lambda w, budget=3 * T * width, length=1: budget // max(1, length * w)))
    monkeypatch.setattr(posterior_cache.PosteriorCache, "fits",
                        staticmethod(lambda B, w, budget=3 * T * width, length=1: B * length * w <= budget))
    sub = s.sample(7, T, steps, seed=4)
    assert torch.equal(direct, cached) and torch.equal(direct, sub)
