"""The compiled strict nucleus cut (optional numba) gives the very numbers of the tensor paths: the same kept set
(ties at the cut broken by token id) and the same filtered rows, bit for bit, on peaked, broad and tied rows.
Tolerance: none (torch.equal)."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.decoding import nucleus
from dllm_lit.decoding.nucleus import top_p_filter

pytest.importorskip("numba")


def tensor_path(probs: torch.Tensor, p: float) -> torch.Tensor:
    """top_p_filter without the compiled cut (the CPU tensor path of ``_kept_from_values``)."""
    raw = probs if probs.dtype in (torch.float32, torch.float64) else probs.to(torch.float64)
    total = raw.to(torch.float64).sum(-1, keepdim=True)
    q = raw / total
    keep = nucleus._kept_from_values(raw, total, q, p, True)
    out = torch.where(keep, q, torch.zeros((), dtype=q.dtype))
    return out.div_(out.sum(-1, keepdim=True))


def sort_path(probs: torch.Tensor, p: float) -> torch.Tensor:
    """The definition: a stable descending sort with indices, c_k <= p kept, the first always."""
    q = probs.to(torch.float64) / probs.to(torch.float64).sum(-1, keepdim=True)
    out = torch.where(nucleus._kept_by_sort(q, p, True), q, torch.zeros((), dtype=q.dtype))
    return out.div_(out.sum(-1, keepdim=True))


def tied_rows(V: int, gen: torch.Generator) -> tuple[torch.Tensor, float]:
    """Dyadic rows summing to exactly 1 with an exact tie straddling the cut: one token 1/4, 16 tied at 1/32,
    256 at 1/1024 (all at random token ids); at p = 1/4 + 5/32 the cumsum equals p after the fifth tied token,
    so 5 of the 16 tied tokens are kept, the lowest ids."""
    rows = torch.zeros(8, V, dtype=torch.float64)
    for r in range(8):
        perm = torch.randperm(V, generator=gen)
        rows[r, perm[0]] = 0.25
        rows[r, perm[1:17]] = 1 / 32
        rows[r, perm[17:273]] = 1 / 1024
    return rows, 0.25 + 5 / 32


def mixed_rows(V: int, gen: torch.Generator) -> torch.Tensor:
    """Point masses (max > p), peaked rows with a few hundred tokens above the candidate threshold, broad rows
    (thousands: the tensor fallback) and rows with repeated values, in one batch."""
    peaked = torch.rand(16, V, generator=gen) ** 40
    point = peaked.clone()
    point[:, 3] = 50.0 * point.sum(-1)
    broad = torch.rand(16, V, generator=gen) + 0.5
    repeated = torch.randint(1, 6, (16, V), generator=gen).double() ** 6
    return torch.cat([peaked, point, broad, repeated])


@pytest.mark.parametrize("V", [300, 4096])
def test_exact_tie_at_the_cut(V: int) -> None:
    rows, p = tied_rows(V, torch.Generator().manual_seed(V))
    out = top_p_filter(rows, p)
    assert torch.equal(out, tensor_path(rows, p)) and torch.equal(out, sort_path(rows, p))
    for r in range(rows.shape[0]):
        tied = (rows[r] == 1 / 32).nonzero().squeeze(1)
        kept_tied = tied[out[r, tied] > 0]
        assert kept_tied.tolist() == tied[:5].tolist()  # the five lowest token ids of the tie
        assert int((out[r] > 0).sum()) == 6


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("p", [0.9, 0.5, 0.99])
def test_same_numbers_as_the_tensor_path(dtype: torch.dtype, p: float) -> None:
    rows = mixed_rows(1024, torch.Generator().manual_seed(7)).to(dtype)
    out = top_p_filter(rows, p)
    assert torch.equal(out, tensor_path(rows, p))
    assert torch.equal(out, sort_path(rows, p))
    assert torch.equal(out.cumsum(-1), tensor_path(rows, p).cumsum(-1))


def test_leading_shape_and_batch_independence() -> None:
    rows = mixed_rows(512, torch.Generator().manual_seed(3))
    whole = top_p_filter(rows.view(4, 16, 512), 0.9).view(-1, 512)
    assert torch.equal(whole, torch.cat([top_p_filter(rows[i:i + 5], 0.9) for i in range(0, 64, 5)]))
    assert torch.equal(whole, tensor_path(rows, 0.9))


def test_kernel_and_fallback_rows_both_met() -> None:
    """The mixed batch sends some rows through the compiled cut and some (broad rows) to the tensor fallback."""
    from dllm_lit.decoding.nucleus_kernel import SUB_BITS, filter_strict_rows

    q = mixed_rows(1024, torch.Generator().manual_seed(7))
    q = q / q.sum(-1, keepdim=True)
    tau, V = 0.1 / 2048, 1024
    k_lo, k_hi = (int(torch.tensor(x, dtype=torch.float64).view(torch.int64)) >> (52 - SUB_BITS) for x in (tau, 1.0))
    out, ok = torch.zeros_like(q), torch.empty(q.shape[0], dtype=torch.bool)
    filter_strict_rows(q.numpy(), q.view(torch.int64).numpy(), 0.9, tau, k_lo, k_hi, nucleus.COMPILED_MAX,
                       out.numpy(), ok.numpy())
    assert 0 < int(ok.sum()) < q.shape[0]


@pytest.mark.parametrize("variant", ["loop", "conf"])
def test_remdm_draws_unchanged(variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """ReMDM's samples on a V = 300 chain are the same with and without the compiled cut."""
    from dllm_lit.denoisers import OracleDenoiser
    from dllm_lit.markov.synthetic import synthetic_chain
    from dllm_lit.samplers.remdm import ReMDM

    den = OracleDenoiser(synthetic_chain(300, 16, eps=1e-3, seed=1))
    s = ReMDM(den, variant=variant, top_p=0.9)
    fast = [s.sample(6, 64, steps, seed=3) for steps in (4, 16)]
    monkeypatch.setattr(nucleus, "numba_available", lambda: False)
    assert all(torch.equal(a, s.sample(6, 64, steps, seed=3)) for a, steps in zip(fast, (4, 16)))
