"""top_p_filter keeps exactly the documented set: strict cumsum <= p, first kept, ties by token id."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.samplers.nucleus import top_p_filter


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
    from dllm_lit.samplers.nucleus import top_k_filter

    x = torch.tensor([[0.4, 0.2, 0.2, 0.2], [0.1, 0.6, 0.3, 0.0]], dtype=torch.float64)
    assert torch.allclose(top_k_filter(x, 2), torch.tensor([[0.4, 0.2, 0.2, 0.2], [0, 2 / 3, 1 / 3, 0]], dtype=torch.float64))
    assert torch.equal(top_k_filter(x, 10), x / x.sum(1, keepdim=True))
