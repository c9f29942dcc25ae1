"""Fast paths give draws identical to the straightforward computation (dense, sparse + teleport, eps = 0 chains)."""
from __future__ import annotations

import functools

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.samplers import LLaDA
from dllm_lit.decoding import posterior_cache
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
    # compact columns without the per-run rows memoised by neighbourhood key (rows once per distinct key per step)
    from dllm_lit.decoding.neighbourhood_rows import NeighbourhoodRows
    monkeypatch.setattr(NeighbourhoodRows, "applies", classmethod(lambda cls, den: False))
    assert torch.equal(direct, s.sample(7, T, steps, seed=4))


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
    from dllm_lit.decoding.confidence_decoding import BlockPosteriors, has_max_prob_bound
    from dllm_lit.decoding.posterior_cache import CachedFeatures

    chain = _chains()["sparse_teleport"]
    oracle = OracleDenoiser(chain)
    assert has_max_prob_bound(oracle) and not has_max_prob_bound(OracleDenoiser(chain, max_cache_bytes=1))
    spec = CachedFeatures(lambda p: {"pmax": p.amax(-1)}, {"probs": ((chain.vocab_size,), None), "pmax": ((), None)},
                          fresh=("probs",), law=lambda p: p, bound="pmax")
    post = BlockPosteriors(oracle, 2, 0, 8, spec, torch.device("cpu"))
    assert post.cache.features is None and post.cache.store["pmax"].dtype == torch.float64


@pytest.mark.parametrize("name", ["dense", "eps0"])
@pytest.mark.parametrize("lo,hi", [(0, 40), (3, 29)])
def test_compact_block_keeps_the_nearest_revealed_neighbours(name, lo, hi) -> None:
    """CompactBlock's incremental neighbours and bounds after every commit equal nearest_revealed and the
    posterior row maxima of the new state (revealed tokens before the block, masks and tokens after it)."""
    from dllm_lit.denoisers.local import nearest_revealed, neighbour_distances
    from dllm_lit.decoding.compact_decoding import CompactBlock
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


def test_nonzero_helpers_equal_torch_nonzero() -> None:
    """flat_nonzero / nonzero_pairs (numpy on the CPU) list the same indices in the same order as torch.nonzero,
    for empty, full, sparse, non-contiguous and zero-row masks."""
    from dllm_lit.util.indices import flat_nonzero, nonzero_pairs
    g = torch.Generator().manual_seed(3)
    masks = [torch.rand(7, 13, generator=g) < f for f in (0.0, 0.01, 0.5, 1.0)]
    masks += [(torch.rand(13, 7, generator=g) < 0.4).t(), torch.zeros(0, 5, dtype=torch.bool),
              torch.rand(1, 1, generator=g) < 2]
    for m in masks:
        ref_b, ref_p = m.nonzero(as_tuple=True)
        b, p = nonzero_pairs(m)
        assert b.dtype == p.dtype == torch.int64
        assert torch.equal(b, ref_b) and torch.equal(p, ref_p)
        assert torch.equal(flat_nonzero(m), m.reshape(-1).nonzero().squeeze(1))
    with pytest.raises(ValueError, match="2-D"):
        nonzero_pairs(torch.ones(3, dtype=torch.bool))


def test_uniform_count_below_is_exact() -> None:
    """u(n) < thr <=> n < uniform_count_below(thr), checked at the boundary for thresholds at, between and around
    representable uniforms (including n >= 2^52, where n + 0.5 rounds to even), 0, negatives, NaN, 1 and beyond."""
    from dllm_lit import rng
    top = 1 << 53
    exact = rng._bits_to_uniform(torch.tensor([0, 1, 2, 3, 5, 2**51, 2**52 - 1, 2**52, 2**52 + 1, 2**52 + 2,
                                               top - 3, top - 2, top - 1]))
    g = torch.Generator().manual_seed(1)
    special = torch.tensor([0.0, -0.5, float("nan"), 1e-300, 2.0**-54, 2.0**-53, 1.5 * 2.0**-53, 0.5, 1.0 - 2.0**-53,
                            1.0 - 2.0**-54, 1.0, 1.5, float("inf"), float("-inf")])
    thr = torch.cat([exact, torch.nextafter(exact, torch.zeros_like(exact)), torch.nextafter(exact, torch.ones_like(exact)),
                     special, torch.rand(2000, dtype=torch.float64, generator=g),
                     torch.rand(200, dtype=torch.float64, generator=g) * 1e-12])
    count = rng.uniform_count_below(thr)
    assert count.dtype == torch.int64 and bool(((count >= 0) & (count <= top)).all())
    below = rng._bits_to_uniform((count - 1).clamp(min=0)) < thr
    at = rng._bits_to_uniform(count.clamp(max=top - 1)) < thr
    assert bool(((count == 0) | below).all()), "u(N - 1) must be below the threshold"
    assert bool(((count == top) | ~at).all()), "u(N) must not be below the threshold"
    assert int(rng.uniform_count_below(torch.tensor(float("nan"), dtype=torch.float64))) == 0


@pytest.mark.parametrize("chunk", [1000, 2**40])
def test_bits_below_where_equals_float_comparison(chunk: int, monkeypatch) -> None:
    """StepUniforms.below_where decides grid_where(...) < where(which, thr, thr_other) on the integer bits, identically
    (in row chunks and in one pass), also for thresholds equal to the uniforms themselves (strict comparison)."""
    from dllm_lit import rng
    from dllm_lit.samplers.draws import StepUniforms
    monkeypatch.setattr(rng, "HASH_CHUNK_ELEMENTS", chunk)
    B, T = 37, 301
    uni = StepUniforms(11, torch.arange(B), 64)
    rem = StepUniforms(11, torch.arange(B), 64, stream=rng.Stream.REMASK)
    g = torch.Generator().manual_seed(2)
    which = torch.rand(B, T, generator=g) < 0.5
    u = uni.grid_where(rem, which, 5)
    col = torch.rand(B, 1, dtype=torch.float64, generator=g) * 0.1
    col[::3, 0] = u[::3, 7]  # exactly a uniform of the row: that position must not fire
    for thr, other in ((0.3, 0.02), (u[0, 0].item(), col), (0.0, 1.0), (1.0, 0.0), (0.7, col)):
        other_t = other if isinstance(other, torch.Tensor) else torch.full((B, 1), other, dtype=torch.float64)
        ref = u < torch.where(which, torch.tensor(thr, dtype=torch.float64), other_t)
        assert torch.equal(uni.below_where(rem, which, 5, thr, other), ref)


def _remdm_direct(sampler, indices: torch.Tensor, T: int, steps: int, seed: int) -> torch.Tensor:
    """ReMDM's step written out directly (float64 uniform grids, full masks, the denoiser's general probs_at
    query, one categorical per position): the reference of the sampler's fast step."""
    from dllm_lit import rng
    from dllm_lit.samplers.draws import StepUniforms, argmax_fill, categorical
    from dllm_lit.decoding.nucleus import top_p_filter
    from dllm_lit.samplers.schedules import time_grid
    B, M, den = indices.numel(), sampler.mask_id, sampler.denoiser
    conf = sampler.variant == "conf"
    z = torch.full((B, T), M, dtype=torch.long)
    uni = StepUniforms(seed, indices, steps)
    rem = StepUniforms(seed, indices, steps, stream=rng.Stream.REMASK)
    weight = torch.zeros((B, T), dtype=torch.float64)
    ts = time_grid(steps, sampler.t_min).tolist()
    for j in range(steps):
        m_t, m_s, sig = sampler.step_rates(ts[j], ts[j + 1])
        masked = z == M
        u = uni.grid_where(rem, masked, j)
        move = masked & (u < (m_t - m_s + (0.0 if conf else sig) * (1.0 - m_t)) / m_t)
        remask = torch.zeros_like(masked)
        if sig > 0.0:
            thr = weight * (sig / weight.sum(-1, keepdim=True).clamp_min(1e-300)) if conf else sig
            remask = ~masked & (u < thr)
        b, p = move.nonzero(as_tuple=True)
        probs = den.probs_at(z, b, p)
        if sampler.top_p < 1.0:
            probs = top_p_filter(probs, sampler.top_p)
        tok = categorical(probs, uni.at(j, b, p, slot=1))
        q = probs.to(torch.float64)
        psi = q.gather(1, tok[:, None]).squeeze(1) / q.sum(-1)
        z[remask] = M
        weight[remask] = 0.0
        z[b, p] = tok
        weight[b, p] = torch.exp(-psi)
    return argmax_fill(den, z)


@pytest.mark.parametrize("name", ["dense", "sparse_teleport", "eps0"])
@pytest.mark.parametrize("kwargs", [dict(variant="conf", top_p=0.9), dict(variant="conf", top_p=1.0, eta_cap=0.05),
                                    dict(variant="loop", eta=0.2, top_p=0.8), dict(variant="cap", eta=0.1),
                                    dict(variant="rescale", eta=0.3, top_p=0.9)])
def test_remdm_fast_step_equals_direct_step(name: str, kwargs: dict, monkeypatch) -> None:
    """ReMDM's step (integer-bit decisions, conf remask candidates, rows memoised by neighbourhood key) draws exactly
    what the direct step draws; so it does with rows computed once per distinct key per step instead, and per
    position."""
    from dllm_lit.denoisers.local import LocalDenoiser
    from dllm_lit.samplers import ReMDM
    from dllm_lit.decoding.neighbourhood_rows import NeighbourhoodRows
    chain = _chains()[name]
    sampler = ReMDM(OracleDenoiser(chain), **kwargs)
    sampler.connect(chain)
    idx = torch.arange(8) + 3
    refs = {(T, steps): _remdm_direct(sampler, idx, T, steps, 9) for T, steps in ((40, 8), (64, 64), (30, 40))}
    calls = {"memo": 0, "distinct": 0}
    slots, distinct_rows = NeighbourhoodRows.slots, LocalDenoiser.distinct_rows

    def spy_slots(self, query):
        calls["memo"] += 1
        return slots(self, query)

    def spy_distinct(self, query, max_rows=None):
        out = distinct_rows(self, query, max_rows)
        calls["distinct"] += out is not None
        return out

    monkeypatch.setattr(NeighbourhoodRows, "slots", spy_slots)
    monkeypatch.setattr(LocalDenoiser, "distinct_rows", spy_distinct)
    for (T, steps), ref in refs.items():
        assert torch.equal(sampler.generate(idx, T, steps, 9), ref)
    if NeighbourhoodRows.applies(sampler.denoiser):  # a small key range (dense, eps0; not the sparse chain's)
        assert calls["memo"] and not calls["distinct"]
    monkeypatch.setattr(NeighbourhoodRows, "applies", classmethod(lambda cls, den: False))
    for (T, steps), ref in refs.items():
        assert torch.equal(sampler.generate(idx, T, steps, 9), ref)
    assert calls["distinct"], "the distinct-row path was never taken"
    monkeypatch.setattr(LocalDenoiser, "distinct_rows", lambda self, query, max_rows=None: None)
    assert torch.equal(sampler.generate(idx, 64, 64, 9), refs[(64, 64)])


def test_neighbourhood_rows_are_the_direct_rows(monkeypatch) -> None:
    """NeighbourhoodRows answers queries met over several calls (new keys, known keys, growing tables) with the rows
    and derived features of direct probs_given_neighbours calls; it refuses denoisers without a small key range."""
    from dllm_lit.decoding.neighbourhood_rows import NeighbourhoodRows
    chain = _chains()["dense"]
    den = OracleDenoiser(chain)
    assert NeighbourhoodRows.applies(den) and not NeighbourhoodRows.applies(object())
    from dllm_lit.decoding import neighbourhood_rows
    with monkeypatch.context() as m:
        m.setattr(neighbourhood_rows, "MAX_KEYS", den.neighbour_key_count() - 1)  # a key range too large to map
        assert not NeighbourhoodRows.applies(den)
    memo = NeighbourhoodRows(den, lambda rows: {"rows": rows, "cdf": rows.to(torch.float64).cumsum(-1)})
    g = torch.Generator().manual_seed(8)
    V = den.vocab_size
    for n in (5, 300, 1, 2000):
        query = (torch.randint(V, (n,), generator=g), torch.randint(0, 30, (n,), generator=g),
                 torch.randint(V, (n,), generator=g), torch.randint(0, 30, (n,), generator=g))
        slot = memo.slots(query)
        ref = den.probs_given_neighbours(*query)
        assert torch.equal(memo.features["rows"].index_select(0, slot), ref)
        assert torch.equal(memo.features["cdf"].index_select(0, slot), ref.to(torch.float64).cumsum(-1))
    assert memo.size == int(torch.unique(memo.slot_of[memo.slot_of >= 0]).numel())
    with pytest.raises(ValueError, match="neighbour_key_count"):
        NeighbourhoodRows(object(), lambda rows: {})


@pytest.mark.parametrize("tie_rule", ["lowest", "highest"])
def test_commits_equal_the_stable_topk(tie_rule: str) -> None:
    """The commits of a compact LLaDA step (argmax rounds for small k, topk with a tie pass above) are the stable
    top-k columns under the tie rule, also with many ties and with rows holding fewer than k finite scores."""
    from dllm_lit.decoding.confidence_decoding import _commits
    from dllm_lit.samplers.selection import topk_mask_by_rule
    g = torch.Generator().manual_seed(4)
    for n in (1, 3, 17):
        for k in range(1, min(n, 7) + 1):
            for _ in range(20):
                scores = torch.randint(0, 3, (5, n), generator=g).to(torch.float64) / 3
                scores[torch.rand(5, n, generator=g) < 0.3] = -torch.inf
                proposal = torch.randint(0, 9, (5, n), generator=g)
                cols, tok = _commits(scores, proposal, k, tie_rule)
                ref = topk_mask_by_rule(scores, k, tie_rule).nonzero()[:, 1].view(5, k)
                assert torch.equal(cols, ref) and torch.equal(tok, proposal.gather(1, ref))


def _modern(oracle, kind: str, tau: float = 1.0):
    """The modern rules whose fast paths skip proposals (entropy, margin, bounded scores, KL only where rows move)."""
    from dllm_lit.samplers import KLASS, Dream, EBSampler, MaskGIT, PCSampler
    return {"maskgit": lambda: MaskGIT(oracle, temperature=tau),
            "maskgit_c0": lambda: MaskGIT(oracle, temperature=tau, choice_temperature=0.0),  # ties at the cut
            "klass": lambda: KLASS(oracle, temperature=0.0, conf_threshold=0.3, kl_threshold=0.05),
            "klass_blocks": lambda: KLASS(oracle, temperature=0.0, block_length=16, conf_threshold=0.3,
                                          kl_threshold=0.05),
            "dream_entropy": lambda: Dream(oracle, alg="entropy", temperature=tau),
            "dream_topk_margin": lambda: Dream(oracle, alg="topk_margin", temperature=tau),
            "dream_maskgit_plus": lambda: Dream(oracle, alg="maskgit_plus", temperature=tau),
            "dream_maskgit_plus_highest": lambda: Dream(oracle, alg="maskgit_plus", temperature=tau,
                                                        tie_rule="highest"),
            "eb_sampler": lambda: EBSampler(oracle, temperature=tau, gamma=0.05),
            "pc_sampler": lambda: PCSampler(oracle, temperature=tau, lambd=0.05, alpha=1.5),
            "pc_sampler_blocks": lambda: PCSampler(oracle, temperature=tau, block_length=16)}[kind]()


@functools.lru_cache(maxsize=None)
def _oracle(name: str) -> tuple[MarkovChain, OracleDenoiser]:
    """A test chain and its oracle, built once per session ("v256": a vocabulary where bounded draws go in rounds)."""
    chain = synthetic_chain(256, 8, eps=0.05, seed=4) if name == "v256" else _chains()[name]
    return chain, OracleDenoiser(chain)


@pytest.mark.usefixtures("single_thread")
@pytest.mark.parametrize("name", ["dense", "sparse_teleport", "eps0", "v256"])
@pytest.mark.parametrize("kind", ["maskgit", "maskgit_c0", "klass", "klass_blocks", "dream_entropy",
                                  "dream_topk_margin", "dream_maskgit_plus", "dream_maskgit_plus_highest",
                                  "eb_sampler", "pc_sampler", "pc_sampler_blocks"])
def test_modern_fast_paths_equal_the_direct_step(name, kind) -> None:
    """The fast paths of the modern rules (use_cache: ranking before drawing, proposals only where a bound reaches
    the cut, compact columns, KL rows only where a neighbour changed) give the draws and NFE of the direct step
    (use_cache False: every proposal drawn, every row recomputed), at step counts below and above T."""
    chain, oracle = _oracle(name)
    T = 32
    for steps in (4, 48):  # below T (several per step) and above it (steps that commit nothing)
        s = _modern(oracle, kind)
        s.connect(chain)
        out = []
        for use_cache in (False, True):
            s.use_cache = use_cache
            out.append(s.generate_with_stats(torch.arange(6), T, steps, 5))
        (x0, st0), (x1, st1) = out
        assert torch.equal(x0, x1), (name, kind, steps)
        assert torch.equal(st0["nfe"], st1["nfe"]), (name, kind, steps)


@pytest.mark.usefixtures("single_thread")
@pytest.mark.parametrize("alg", ["entropy", "topk_margin"])
def test_greedy_row_scores_store_no_rows(monkeypatch, alg) -> None:
    """Dream's entropy and margin at temperature 0 (upstream's default) read only the stored score and argmax: the
    cache keeps no [B, L, V] store of posterior rows (at V = 4096, N = 64 that store was 2 GB, written at every
    step: 64 steps 0.47 -> 24.4 CPU s after the port to rules), and the draws are those of the direct step."""
    from dllm_lit.samplers import Dream
    chain, oracle = _oracle("sparse_teleport")
    stored = set()
    real = posterior_cache.PosteriorCache._write

    def write(self, b, p, values, src=None):
        stored.update(name for name in values if name not in self.fresh)
        return real(self, b, p, values, src)

    monkeypatch.setattr(posterior_cache.PosteriorCache, "_write", write)
    s = Dream(oracle, alg=alg, temperature=0.0)
    s.connect(chain)
    out = []
    for use_cache in (False, True):
        s.use_cache = use_cache
        out.append(s.generate_with_nfe(torch.arange(6), 32, 8, 5))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])
    assert stored and "probs" not in stored, stored


@pytest.mark.parametrize("by_key", [False, True])
def test_posterior_cache_neighbour_updates_equal_full_scans(by_key: bool) -> None:
    """PosteriorCache's neighbours, updated from the newly revealed positions, are those of two full scans at every
    masked position of the block, and its features those of a fresh cache (by key or stored), step after step;
    a position revealed outside the block or masked again falls back to the full scan."""
    from dllm_lit.denoisers.local import nearest_revealed
    from dllm_lit.decoding.confidence_decoding import proposal_features, proposal_widths
    chain, oracle = _oracle("sparse_teleport")
    B, T, lo, hi, M = 5, 40, 8, 32, oracle.mask_id
    g = torch.Generator().manual_seed(3)
    z = torch.full((B, T), M, dtype=torch.long)
    z[:, :3] = torch.randint(0, chain.vocab_size, (B, 3), generator=g)
    feats, widths = (lambda p: proposal_features(p, 1.0, cdf=False)), proposal_widths(chain.vocab_size, 1.0, cdf=False)
    cache = posterior_cache.PosteriorCache(oracle, B, lo, hi, posterior_cache.CachedFeatures(feats, widths), z.device,
                                           by_key=by_key)
    for step in range(14):
        if step == 6:  # outside the block
            z[:, 36] = 1
        elif step == 9:  # masked again
            z[0, (z[0, lo:hi] != M).nonzero()[0, 0] + lo] = M
        else:
            reveal = (torch.rand(B, hi - lo, generator=g) < 0.15) & (z[:, lo:hi] == M)
            z[:, lo:hi] = torch.where(reveal, torch.randint(0, chain.vocab_size, (B, hi - lo), generator=g), z[:, lo:hi])
        cache.refresh(z)
        left, right = nearest_revealed(z, M)
        b, q = (z[:, lo:hi] == M).nonzero(as_tuple=True)
        assert torch.equal(cache.left[b, q], left[b, q + lo]) and torch.equal(cache.right[b, q], right[b, q + lo])
        fresh = posterior_cache.PosteriorCache(oracle, B, lo, hi, posterior_cache.CachedFeatures(feats, widths),
                                               z.device)
        fresh.refresh(z)
        for name in ("argmax", "pmax"):
            assert torch.equal(cache.get(name, b, q + lo), fresh.get(name, b, q + lo)), (step, name)


@pytest.mark.usefixtures("single_thread")
@pytest.mark.parametrize("name", ["dense", "eps0", "v256"])
def test_eb_prefix_count_equals_the_full_sort(name: str, monkeypatch) -> None:
    """EB's step by a topk prefix (count from the first COUNT_PREFIX sorted entropies when they provably decide it,
    commits by the n-th value) gives the draws and NFE of the full stable sort, at budgets from one commit per
    step to many, both deterministic tie rules, argmax and sampled proposals."""
    from dllm_lit.samplers import EBSampler
    from dllm_lit.decoding import confidence_decoding
    chain, oracle = _oracle(name)
    for gamma, tie_rule, tau in ((0.0, "lowest", 1.0), (0.05, "highest", 0.0), (0.5, "lowest", 1.0),
                                 (3.0, "highest", 1.0)):
        out = []
        for prefix in (confidence_decoding.COUNT_PREFIX, 10**9):
            monkeypatch.setattr(confidence_decoding, "COUNT_PREFIX", prefix)
            s = EBSampler(oracle, gamma=gamma, tie_rule=tie_rule, temperature=tau)
            s.connect(chain)
            out.append(s.generate_with_stats(torch.arange(6), 48, 48, 3))
        (x0, st0), (x1, st1) = out
        assert torch.equal(x0, x1) and torch.equal(st0["nfe"], st1["nfe"]), (name, gamma, tie_rule)


@pytest.mark.usefixtures("single_thread")
@pytest.mark.parametrize("name", ["dense", "eps0", "english"])
def test_eb_gap_candidates_equal_the_dense_loop(name: str, monkeypatch) -> None:
    """EB decoded over the gaps between revealed tokens (the first D - 1 + P and last D - 1 positions of each gap, D
    the oracle's key depth; mirrored for "highest") gives the draws and NFE of the dense loop over a posterior cache,
    on sequences long enough that gaps hold positions left out, at budgets from one commit per step to counts the
    8-prefix does not decide (every position of the row then sorted), argmax and sampled proposals."""
    from dllm_lit.samplers import EBSampler
    from dllm_lit.decoding import confidence_decoding
    from dllm_lit.sources import english_char_chain
    if name == "english":
        chain = english_char_chain()
        oracle = OracleDenoiser(chain)
    else:
        chain, oracle = _oracle(name)
    T = 4 * oracle.depth + 40  # a first gap of T: 2 D + 38 positions left out at the first step
    for gamma, tie_rule, tau in ((0.0, "lowest", 1.0), (0.05, "highest", 0.0), (0.5, "lowest", 1.0),
                                 (3.0, "highest", 1.0), (0.01, "lowest", 0.0), (12.0, "lowest", 1.0),
                                 (30.0, "highest", 0.0)):
        out = []
        for gaps in (False, True):
            if not gaps:
                monkeypatch.setattr(confidence_decoding, "gaps_apply", lambda *a: False)
            else:
                monkeypatch.undo()
            s = EBSampler(oracle, gamma=gamma, tie_rule=tie_rule, temperature=tau)
            s.connect(chain)
            out.append(s.generate_with_stats(torch.arange(5), T, 16, 7))
        (x0, st0), (x1, st1) = out
        assert (x1 != oracle.mask_id).all()
        assert torch.equal(x0, x1) and torch.equal(st0["nfe"], st1["nfe"]), (name, gamma, tie_rule, tau)
