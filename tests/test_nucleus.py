"""top_p_filter keeps exactly the documented set: strict cumsum <= p, first kept, ties by token id."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.decoding.nucleus import top_k_filter, top_p_filter


def kept(probs: list[float], p: float) -> list[int]:
    out = top_p_filter(torch.tensor([probs], dtype=torch.float64), p)[0]
    assert out.dtype == torch.float64
    assert abs(out.sum().item() - 1.0) < 1e-12
    return out.nonzero().squeeze(1).tolist()


@pytest.mark.parametrize(
    "probs, p, expected",
    [
        # the token whose cumulative sum crosses p is dropped (0.5 + 0.3 > 0.7)
        ([0.5, 0.3, 0.2], 0.7, [0]),
        ([0.2, 0.5, 0.3], 0.85, [1, 2]),
        # cumsum exactly equal to p (dyadic, exact in float64) is kept
        ([0.5, 0.25, 0.25], 0.75, [0, 1]),
        ([0.25, 0.25, 0.5], 0.75, [0, 2]),
        ([0.125, 0.5, 0.125, 0.25], 0.875, [1, 3, 0]),
        # a first token above p is always kept, alone
        ([0.1, 0.95 - 0.1, 0.05], 0.5, [1]),
        ([0.05, 0.9, 0.05], 0.3, [1]),
        # ties: the lower token id comes first
        ([0.25, 0.25, 0.25, 0.25], 0.5, [0, 1]),
        ([0.3, 0.2, 0.3, 0.2], 0.6, [0, 2]),
        ([0.2, 0.3, 0.2, 0.3], 0.85, [1, 3, 0]),
        ([0.4, 0.2, 0.2, 0.2], 0.7, [0, 1]),
        # p = 1 keeps everything with positive mass
        ([0.5, 0.3, 0.2], 1.0, [0, 1, 2]),
        ([0.0, 0.7, 0.3], 1.0, [1, 2]),
        # zero-probability tokens are never kept
        ([0.0, 0.6, 0.0, 0.4], 0.99, [1]),
    ],
)
def test_kept_set(probs: list[float], p: float, expected: list[int]) -> None:
    assert sorted(kept(probs, p)) == sorted(expected)


def test_renormalised_values_and_unnormalised_input() -> None:
    x = torch.tensor([[2.0, 5.0, 3.0], [1.0, 1.0, 2.0]])  # unnormalised rows, float32
    out = top_p_filter(x, 0.9)
    # row 0: [0.2, 0.5, 0.3] -> cumsums 0.5, 0.8, 1.0: tokens 1 and 2 kept
    torch.testing.assert_close(out[0], torch.tensor([0.0, 0.625, 0.375], dtype=torch.float64))
    # row 1: [0.25, 0.25, 0.5] -> 0.5, 0.75 (kept), 1.0 (dropped): tokens 2 and 0 (tie: lower id first)
    torch.testing.assert_close(out[1], torch.tensor([1 / 3, 0.0, 2 / 3], dtype=torch.float64))


def test_batched_shapes_and_p_one_identity() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(4, 5, 7, generator=g, dtype=torch.float64)
    out = top_p_filter(x, 1.0)
    torch.testing.assert_close(out, x / x.sum(-1, keepdim=True))
    out = top_p_filter(x, 0.5)
    assert out.shape == x.shape
    # each kept set is a prefix of the descending order whose mass is <= p or a single token
    for row, orig in zip(out.reshape(-1, 7), x.reshape(-1, 7)):
        q = orig / orig.sum()
        k = int((row > 0).sum())
        top = q.sort(descending=True, stable=True)
        assert set(top.indices[:k].tolist()) == set(row.nonzero().squeeze(1).tolist())
        assert k == 1 or top.values[:k].sum() <= 0.5 + 1e-15
        assert top.values[: k + 1].sum() > 0.5


@pytest.mark.parametrize("p", [0.0, -0.1, 1.5, float("nan")])
def test_bad_p(p: float) -> None:
    with pytest.raises(ValueError, match="p"):
        top_p_filter(torch.ones(1, 3), p)


def test_non_strict_top_p_keeps_the_crossing_token() -> None:
    """Dream / Hugging Face top_p_logits: a token is kept while the mass before it is <= p."""
    x = torch.tensor([[0.3, 0.5, 0.2], [0.6, 0.3, 0.1]], dtype=torch.float64)
    out = top_p_filter(x, 0.7, strict=False)
    assert torch.allclose(out[0], torch.tensor([0.375, 0.625, 0.0], dtype=torch.float64))
    assert torch.allclose(out[1], torch.tensor([2 / 3, 1 / 3, 0.0], dtype=torch.float64))
    assert torch.equal(top_p_filter(x, 0.4, strict=False), top_p_filter(x, 0.4))  # only the first token either way


def test_top_k_filter_keeps_ties() -> None:
    x = torch.tensor([[0.4, 0.2, 0.2, 0.2], [0.1, 0.6, 0.3, 0.0]], dtype=torch.float64)
    assert torch.allclose(top_k_filter(x, 2), torch.tensor([[0.4, 0.2, 0.2, 0.2], [0, 2 / 3, 1 / 3, 0]], dtype=torch.float64))
    assert torch.equal(top_k_filter(x, 10), x / x.sum(1, keepdim=True))


# ---------------------------------------------------------------- bit identity with the sort-based reference
def reference_top_p(probs: torch.Tensor, p: float, strict: bool = True) -> torch.Tensor:
    """The previous implementation: stable descending sort with indices, keep mask scattered back."""
    q = probs.to(torch.float64)
    q = q / q.sum(-1, keepdim=True)
    if p >= 1.0:
        return q
    sorted_q, order = torch.sort(q, dim=-1, descending=True, stable=True)
    cum = sorted_q.cumsum(-1)
    keep_sorted = (cum <= p) if strict else (cum - sorted_q <= p)
    keep_sorted[..., 0] = True
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    out = torch.where(keep, q, torch.zeros((), dtype=q.dtype, device=q.device))
    return out / out.sum(-1, keepdim=True)


def reference_top_k(probs: torch.Tensor, k: int) -> torch.Tensor:
    q = probs.to(torch.float64)
    kth = torch.topk(q, min(int(k), q.shape[-1]), dim=-1).values[..., -1:]
    out = torch.where(q >= kth, q, torch.zeros((), dtype=q.dtype, device=q.device))
    return out / out.sum(-1, keepdim=True)


def random_rows(g: torch.Generator, n: int, V: int) -> torch.Tensor:
    """float64 [n, V] non-negative rows with positive mass: smooth, peaked, heavily tied, sparse, one-hot, dyadic."""
    kind = torch.randint(0, 6, (n, 1), generator=g)
    smooth = torch.rand(n, V, generator=g, dtype=torch.float64)
    peaked = torch.rand(n, V, generator=g, dtype=torch.float64) ** 12
    tied = torch.randint(0, 4, (n, V), generator=g).to(torch.float64)  # few distinct values, many ties and zeros
    sparse = smooth * (torch.rand(n, V, generator=g) < 0.1)
    onehot = torch.nn.functional.one_hot(torch.randint(0, V, (n,), generator=g), V).to(torch.float64)
    dyadic = 2.0 ** -torch.randint(1, 6, (n, V), generator=g).to(torch.float64) * (torch.rand(n, V, generator=g) < 0.5)
    rows = torch.stack([smooth, peaked, tied, sparse, onehot, dyadic]).gather(
        0, kind[None].expand(1, n, V)).squeeze(0)
    rows[:, 0] += rows.sum(-1) == 0  # positive mass
    return rows


def exact_p_values(rows: torch.Tensor, strict: bool, g: torch.Generator) -> list[float]:
    """p values equal to a float64 cumulative sum (strict) or mass-before (non-strict) of some row."""
    q = rows / rows.sum(-1, keepdim=True)
    s = q.sort(-1, descending=True).values
    c = s.cumsum(-1) if strict else s.cumsum(-1) - s
    picks = c[torch.arange(len(q)), torch.randint(0, q.shape[-1], (len(q),), generator=g)]
    return sorted({v for v in picks.tolist() if 0.0 < v <= 1.0})


@pytest.mark.parametrize("V", [2, 5, 64, 4096])
@pytest.mark.parametrize("strict", [True, False])
def test_top_p_bit_identical_to_sort_reference(V: int, strict: bool) -> None:
    g = torch.Generator().manual_seed(V + strict)
    rows = random_rows(g, 60 if V < 4096 else 24, V)
    ps = [0.05, 0.3, 0.5, 0.7, 0.9, 0.95, 0.999, 1.0 - 2**-52, 1.0] + exact_p_values(rows, strict, g)
    for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
        x = rows.to(dtype)
        for p in ps:
            got, want = top_p_filter(x, p, strict=strict), reference_top_p(x, p, strict=strict)
            assert got.dtype == torch.float64
            assert torch.equal(got.view(torch.int64), want.view(torch.int64)), (V, strict, dtype, p)


def test_top_p_bit_identical_on_1d_and_3d_shapes() -> None:
    g = torch.Generator().manual_seed(7)
    x3 = random_rows(g, 3 * 4, 33).view(3, 4, 33)
    for p in (0.2, 0.6, 0.9):
        for strict in (True, False):
            assert torch.equal(top_p_filter(x3, p, strict).view(torch.int64), reference_top_p(x3, p, strict).view(torch.int64))
            for row in x3.reshape(-1, 33):
                assert torch.equal(top_p_filter(row, p, strict).view(torch.int64), reference_top_p(row, p, strict).view(torch.int64))


def test_top_p_boundary_inside_a_tie_keeps_lowest_ids() -> None:
    """Three tokens tied at the boundary value, only two fit: the two lowest token ids are kept."""
    x = torch.tensor([0.1, 0.2, 0.1, 0.4, 0.1, 0.1], dtype=torch.float64)  # 0.4, 0.2 then four 0.1s
    for p in (0.65, 0.75, 0.85):
        assert torch.equal(top_p_filter(x, p), reference_top_p(x, p))
    assert top_p_filter(x, 0.85).nonzero().squeeze(1).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("V", [3, 64, 4096])
def test_top_k_bit_identical_to_topk_reference(V: int) -> None:
    g = torch.Generator().manual_seed(V)
    rows = random_rows(g, 40, V)
    for dtype in (torch.float64, torch.float32):
        x = rows.to(dtype)
        for k in (1, 2, 3, 10, V - 1, V, V + 5):
            assert torch.equal(top_k_filter(x, k).view(torch.int64), reference_top_k(x, k).view(torch.int64)), (V, dtype, k)
    x3 = rows[:12].view(3, 4, V)
    assert torch.equal(top_k_filter(x3, 2), reference_top_k(x3, 2))
    assert torch.equal(top_k_filter(x3[0, 0], 2), reference_top_k(x3[0, 0], 2))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the torch.sort / torch.topk path is taken on CUDA only")
def test_cuda_path_bit_identical_to_reference_on_cuda() -> None:
    g = torch.Generator().manual_seed(3)
    x = random_rows(g, 64, 4096).cuda()
    for strict in (True, False):
        for p in (0.3, 0.9) + tuple(exact_p_values(x.cpu(), strict, g)[:5]):
            assert torch.equal(top_p_filter(x, p, strict).view(torch.int64), reference_top_p(x, p, strict).view(torch.int64))
    assert torch.equal(top_k_filter(x, 5), reference_top_k(x, 5))


def test_device_independent_keep_mask_equals_the_cpu_one() -> None:
    """_kept_by_sort (the stable index sort, used off CPU) and _kept_from_values (CPU) give the same mask."""
    from dllm_lit.decoding.nucleus import _kept_by_sort, _kept_from_values

    g = torch.Generator().manual_seed(11)
    for V in (5, 300):
        raw = random_rows(g, 80, V).to(torch.float32)
        total = raw.to(torch.float64).sum(-1, keepdim=True)
        q = raw / total
        for strict in (True, False):
            for p in (0.2, 0.9) + tuple(exact_p_values(raw.double(), strict, g)[:10]):
                assert torch.equal(_kept_by_sort(q, p, strict), _kept_from_values(raw, total, q, p, strict))


# ---------------------------------------------------------------- the CPU bucket cut (rows of >= BUCKET_MIN_V tokens)
def test_bucket_cut_is_taken_and_equals_the_sort_cut() -> None:
    """_cut_by_buckets certifies nearly every smooth or peaked row (heavily tied rows fill their crossing bucket and
    are left to the sort), and where it does its (thr, drop) give the sort's
    first m places: thr = s_m and drop = #{q == thr} - (m - #{q > thr})."""
    from dllm_lit.decoding.nucleus import _cut_by_buckets, _cut_by_sort

    g = torch.Generator().manual_seed(5)
    V = 1024
    rows = torch.cat([torch.rand(40, V, generator=g, dtype=torch.float64),
                      torch.rand(40, V, generator=g, dtype=torch.float64) ** 12,
                      torch.randint(0, 4, (40, V), generator=g).to(torch.float64) + 1e-3])
    q = rows / rows.sum(-1, keepdim=True)
    for strict in (True, False):
        for p in (0.1, 0.5, 0.9, 0.99):
            thr, drop, ok = _cut_by_buckets(q, p, strict)
            assert ok[:80].float().mean() > 0.9, (strict, p)
            m, thr_ref = _cut_by_sort(q, torch.ones(len(q), 1, dtype=torch.float64), p, strict)
            assert torch.equal(thr[ok], thr_ref[ok]), (strict, p)
            above, tied = (q > thr).sum(-1, keepdim=True), (q == thr).sum(-1, keepdim=True)
            assert torch.equal(drop[ok], (tied - (m - above))[ok]), (strict, p)


def test_bucket_cut_at_the_last_token_above_the_crossing_bucket() -> None:
    """m = #tokens above the crossing bucket: thr is the smallest value above it (ties there all kept)."""
    from dllm_lit.decoding.nucleus import _cut_by_buckets

    V = 512
    x = torch.full((V,), 0.15 / (V - 5), dtype=torch.float64)
    x[[3, 7, 100, 400]] = 0.2  # 0.8 in one bucket, then 0.05, then the small rest
    x[9] = 0.05
    for p in (0.81, 0.84):
        thr, drop, ok = _cut_by_buckets((x / x.sum())[None], p, True)
        assert bool(ok[0]) and thr.item() == (x / x.sum())[3].item() and drop.item() == 0
        assert torch.equal(top_p_filter(x, p), reference_top_p(x, p))
        assert top_p_filter(x, p).nonzero().squeeze(1).tolist() == [3, 7, 100, 400]


@pytest.mark.parametrize("force", ["margin", "bucket_size"])
def test_uncertified_rows_fall_back_to_the_sort(force: str, monkeypatch) -> None:
    """Rows the bucket cut cannot certify (margin too small, crossing bucket too full) take the sort: same sets."""
    import dllm_lit.decoding.nucleus as nucleus

    if force == "margin":
        monkeypatch.setattr(nucleus, "_bucket_delta", lambda V: 1.0)
    else:
        monkeypatch.setattr(nucleus, "BUCKET_MAX_FRACTION", 10**9)
    g = torch.Generator().manual_seed(13)
    rows = random_rows(g, 48, 512)
    for strict in (True, False):
        for p in (0.3, 0.9) + tuple(exact_p_values(rows, strict, g)[:6]):
            got, want = top_p_filter(rows, p, strict), reference_top_p(rows, p, strict)
            assert torch.equal(got.view(torch.int64), want.view(torch.int64)), (force, strict, p)


# ---------------------------------------------------------------- the CPU candidate cut (peaked rows, few tokens above tau)
def peaked_rows(g: torch.Generator, n: int, V: int) -> torch.Tensor:
    """Rows as the oracle gives at short distances: a support of a few to a few hundred tokens carrying the mass, a
    1e-8 floor elsewhere, some rows with ties (dyadic values) on the support."""
    rows = torch.full((n, V), 1e-8, dtype=torch.float64)
    for i in range(n):
        k = int(torch.randint(2, 400, (1,), generator=g))
        cols = torch.randperm(V, generator=g)[:k]
        vals = torch.rand(k, generator=g, dtype=torch.float64) ** 4
        if i % 3 == 0:
            vals = 2.0 ** -torch.randint(1, 5, (k,), generator=g).to(torch.float64)
        rows[i, cols] = vals
    return rows


def test_candidate_cut_is_taken_and_equals_the_sort_cut() -> None:
    """_cut_by_candidates certifies peaked rows (the mass on fewer than CANDIDATE_MAX tokens) and gives the sort's
    (m, thr) exactly there, p values equal to a cumulative sum included; the filter equals the sort reference."""
    from dllm_lit.decoding.nucleus import CANDIDATE_MAX, _cut_by_candidates, _cut_by_sort

    g = torch.Generator().manual_seed(17)
    V = 4096
    rows = peaked_rows(g, 30, V)
    q = rows / rows.sum(-1, keepdim=True)
    few = (q >= 0.05 / V).sum(-1) <= CANDIDATE_MAX
    for strict in (True, False):
        for p in (0.5, 0.9, 0.99) + tuple(exact_p_values(rows, strict, g)[:6]):
            m, thr, ok = _cut_by_candidates(q, p, strict)
            if p <= 0.9:
                assert ok[few].float().mean() > 0.8, (strict, p)
            m_ref, thr_ref = _cut_by_sort(q, torch.ones(len(q), 1, dtype=torch.float64), p, strict)
            assert torch.equal(m[ok], m_ref[ok]) and torch.equal(thr[ok], thr_ref[ok]), (strict, p)
            got, want = top_p_filter(rows, p, strict), reference_top_p(rows, p, strict)
            assert torch.equal(got.view(torch.int64), want.view(torch.int64)), (strict, p)


@pytest.mark.parametrize("cap", [0, 10**9])
def test_candidate_cut_cap_changes_nothing(cap: int, monkeypatch) -> None:
    """With the candidate cut off (cap 0: buckets and sort) or taken for every row (no cap) the sets are the same."""
    import dllm_lit.decoding.nucleus as nucleus

    monkeypatch.setattr(nucleus, "CANDIDATE_MAX", cap)
    g = torch.Generator().manual_seed(19)
    rows = torch.cat([peaked_rows(g, 12, 1024), random_rows(g, 24, 1024)])
    for strict in (True, False):
        for p in (0.3, 0.9) + tuple(exact_p_values(rows, strict, g)[:6]):
            got, want = top_p_filter(rows, p, strict), reference_top_p(rows, p, strict)
            assert torch.equal(got.view(torch.int64), want.view(torch.int64)), (cap, strict, p)
