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


def test_step_uniform_grids_equal_rng_uniform() -> None:
    """The in-place grids of StepUniforms (block, grid_where) are rng.uniform's numbers."""
    from dllm_lit import rng
    from dllm_lit.samplers.draws import StepUniforms

    idx = torch.arange(5, 40)
    g = torch.Generator().manual_seed(3)
    for steps in (1, 64):
        a = StepUniforms(11, idx, steps)
        r = StepUniforms(11, idx, steps, stream=rng.Stream.REMASK)
        pos = torch.arange(3, 61)[None, :]
        for j in (0, steps - 1):
            for slot in (0, 1, 15):
                assert torch.equal(a.block(j, 3, 61, slot), rng.uniform(a.keys[:, None], j, pos, slot))
                which = torch.rand(35, 58, generator=g) < 0.4
                ref = torch.where(which, a.grid(j, 58, slot), rng.uniform(r.keys[:, None], j, torch.arange(58)[None, :], slot))
                assert torch.equal(a.grid_where(r, which, j, slot), ref)
        per_row = torch.randint(0, 9, (35,), generator=g)
        assert torch.equal(a.block(per_row, 3, 61), rng.uniform(a.keys[:, None], per_row[:, None], pos))


@pytest.mark.parametrize("name", ["dense", "sparse_teleport", "eps0"])
def test_confidence_engine_sub_batches_are_exact(name, monkeypatch) -> None:
    """Every confidence-ranked sampler: direct (no cache) = cached = cached in sub-batches of 3, 3, 1 sequences,
    at temperatures 0, 1 and 0.7, with blocks where the sampler has them."""
    from dllm_lit.samplers import KLASS, MaskGIT, Dream, EBSampler, FastDLLM, PCSampler

    chain = _chains()[name]
    oracle = OracleDenoiser(chain)
    T, steps = 16, 8
    makers = [lambda tau: MaskGIT(oracle, temperature=tau),
              lambda tau: KLASS(oracle, temperature=tau, block_length=8, conf_threshold=0.3, kl_threshold=0.05),
              lambda tau: FastDLLM(oracle, temperature=tau, block_length=8, threshold=0.5),
              lambda tau: Dream(oracle, alg="entropy", temperature=tau),
              lambda tau: EBSampler(oracle, temperature=tau, gamma=0.2),
              lambda tau: PCSampler(oracle, temperature=tau, block_length=8),
              lambda tau: LLaDA(oracle, temperature=tau, block_length=8, tie_rule="highest"),
              lambda tau: LLaDA(oracle, temperature=tau, tie_rule="random")]
    out = {}
    for budget in (None, 3):
        if budget is not None:  # room for 3 sequences of the widest cache: sub-batches of 3, 3, 1
            elements = 3 * T * (2 * chain.vocab_size + 3)
            monkeypatch.setattr(posterior_cache.PosteriorCache, "max_batch",
                                staticmethod(lambda w, budget=elements, length=1: 3))
            monkeypatch.setattr(posterior_cache.PosteriorCache, "fits",
                                staticmethod(lambda B, w, budget=elements, length=1: B <= 3))
        for i, make in enumerate(makers):
            for tau in (0.0, 1.0, 0.7):
                s = make(tau)
                s.connect(chain)
                for use_cache in (False, True):
                    s.use_cache = use_cache
                    x = s.sample(7, T, steps, seed=4)
                    out.setdefault((i, tau), x)
                    assert torch.equal(out[(i, tau)], x), (i, tau, budget, use_cache)


@pytest.mark.parametrize("name", ["dense", "sparse_teleport", "eps0"])
def test_max_prob_bound_bounds_every_row(name) -> None:
    """OracleDenoiser.max_prob_bound >= max_v of the computed posterior row, at every distance (beyond the
    certified depth too), with and without neighbours, also where transitions are impossible (eps = 0)."""
    chain = _chains()[name]
    oracle = OracleDenoiser(chain)
    V, D = chain.vocab_size, oracle.depth
    g = torch.Generator().manual_seed(2)
    n = 3000
    xl, xr = torch.randint(V, (n,), generator=g), torch.randint(V, (n,), generator=g)
    dl, dr = torch.randint(0, D + 6, (n,), generator=g), torch.randint(0, D + 6, (n,), generator=g)
    bound = oracle.max_prob_bound(xl, dl, xr, dr)
    assert bound is not None and oracle.certified
    pmax = oracle.probs_given_neighbours(xl, dl, xr, dr).amax(-1).to(torch.float64)
    assert bound.dtype == torch.float64 and bool((bound <= 1.0).all())
    assert bool((pmax <= bound).all()), float((pmax - bound).max())
    # and it is informative: far from 1 where the posterior is flat (both neighbours beyond the depth)
    far = (dl > D) & (dr > D)
    assert bool((bound[far] < 0.5).all())


def test_llada_uses_row_free_bounds_with_the_oracle() -> None:
    """At temperature > 0 the LLaDA cache refreshes bounds from the neighbours alone (no row features)."""
    from dllm_lit.samplers.confidence_decoding import BlockPosteriors, has_max_prob_bound

    chain = _chains()["sparse_teleport"]
    oracle = OracleDenoiser(chain)
    assert has_max_prob_bound(oracle) and not has_max_prob_bound(OracleDenoiser(chain, max_cache_bytes=1))
    post = BlockPosteriors(oracle, 2, 0, 8, lambda p: {"pmax": p.amax(-1)}, {"probs": ((chain.vocab_size,), None),
                           "pmax": ((), None)}, torch.device("cpu"), fresh=("probs",), law=lambda p: p, bound="pmax")
    assert post.cache.features is None and post.cache.store["pmax"].dtype == torch.float64


@pytest.mark.parametrize("name", ["dense", "eps0"])
@pytest.mark.parametrize("lo,hi", [(0, 40), (3, 29)])
def test_compact_block_keeps_the_nearest_revealed_neighbours(name, lo, hi) -> None:
    """CompactBlock's incremental neighbours and bounds after every commit equal nearest_revealed and the
    posterior row maxima of the new state (revealed tokens before the block, masks and tokens after it)."""
    from dllm_lit.denoisers.local import nearest_revealed, neighbour_distances
    from dllm_lit.samplers.compact_decoding import CompactBlock
    chain = _chains()[name]
    oracle = OracleDenoiser(chain)
    g = torch.Generator().manual_seed(3)
    B, T, M, V = 6, 40, oracle.mask_id, chain.vocab_size
    x = torch.randint(V, (B, T), generator=g)
    x[:, lo:hi] = M
    x[:, hi:][torch.rand(B, T - hi, generator=g) < 0.5] = M
    block = CompactBlock(oracle, x, lo, hi, law=lambda p: p)
    while block.n:
        k = int(torch.randint(1, min(4, block.n) + 1, (1,), generator=g))
        cols = torch.rand(B, block.n, generator=g).argsort(1)[:, :k].sort(1).values
        block.commit(cols, torch.randint(V, (B, k), generator=g))
        left, right = nearest_revealed(x, M)
        rows = torch.arange(B)[:, None].expand_as(block.pos)
        assert torch.equal(x[:, lo:hi] == M, torch.zeros_like(x[:, lo:hi], dtype=torch.bool).scatter(
            1, block.pos - lo, True) if block.n else torch.zeros_like(x[:, lo:hi], dtype=torch.bool))
        assert torch.equal(block.left, left[rows, block.pos].long())
        assert torch.equal(block.right, right[rows, block.pos].long())
        d1, d2 = neighbour_distances(block.pos, block.left, block.right, T)
        xl, xr = x[rows, block.left.clamp(min=0)], x[rows, block.right.clamp(max=T - 1)]
        ref = oracle.probs_given_neighbours(xl, d1, xr, d2)
        assert torch.equal(block.bound, ref.amax(-1).to(torch.float64))  # few distinct rows: exact maxima


def test_revealed_neighbours_at_equals_nearest_revealed() -> None:
    """The binary-search lookup at listed positions equals the full nearest_revealed scans (any position,
    revealed or masked, rows without any revealed token, fully revealed rows)."""
    from dllm_lit.denoisers.local import nearest_revealed, revealed_neighbours_at
    g = torch.Generator().manual_seed(7)
    M = 5
    for frac in (0.0, 0.3, 0.9, 1.0):
        z = torch.randint(M, (9, 33), generator=g)
        z[torch.rand(z.shape, generator=g) < frac] = M
        z[2] = M
        left, right = nearest_revealed(z, M)
        b, p = torch.randint(9, (200,), generator=g), torch.randint(33, (200,), generator=g)
        a, c = revealed_neighbours_at(z, M, b, p)
        assert torch.equal(a, left[b, p].long()) and torch.equal(c, right[b, p].long())


def test_chunked_grid_hash_equals_one_pass(monkeypatch) -> None:
    """uniform_from_hash on a full [B, T] hash grid gives the same uniforms in row chunks as in one pass."""
    from dllm_lit import rng
    from dllm_lit.samplers.draws import StepUniforms
    uni = StepUniforms(11, torch.arange(37), 64)
    rem = StepUniforms(11, torch.arange(37), 64, stream=rng.Stream.REMASK)
    which = torch.rand(37, 301, generator=torch.Generator().manual_seed(2)) < 0.5
    monkeypatch.setattr(rng, "HASH_CHUNK_ELEMENTS", 1000)  # chunks of 3 rows, a short last one
    chunked = uni.grid_where(rem, which, 5, slot=1)
    monkeypatch.setattr(rng, "HASH_CHUNK_ELEMENTS", 2**40)
    assert torch.equal(chunked, uni.grid_where(rem, which, 5, slot=1))
    pos = torch.arange(301)[None, :]
    assert torch.equal(chunked, torch.where(which, rng.uniform(uni.keys[:, None], 5, pos, 1),
                                            rng.uniform(rem.keys[:, None], 5, pos, 1)))
