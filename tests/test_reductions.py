"""fixed_order_sum: a fixed pairwise tree, so a row's sum depends on that row alone (device- and batch-invariant)."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.markov import synthetic_chain
from dllm_lit.util.reductions import fixed_order_sum


def _tree(row: list[float], dtype: torch.dtype) -> torch.Tensor:
    """The documented order, one scalar addition at a time (each rounded to ``dtype``)."""
    s = [torch.tensor(v, dtype=dtype) for v in row]
    while len(s) > 1:
        h = len(s) // 2
        t = [s[i] + s[i + h] for i in range(h)]
        if len(s) % 2:
            t[0] = t[0] + s[2 * h]
        s = t
    return s[0] if s else torch.tensor(0.0, dtype=dtype)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 27, 64, 101])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_matches_the_documented_tree_bit_for_bit(n, dtype) -> None:
    g = torch.Generator().manual_seed(n)
    x = (torch.rand(5, n, generator=g, dtype=torch.float64) ** 8).to(dtype)  # spread of magnitudes: order matters
    got = fixed_order_sum(x)
    assert got.shape == (5,) and fixed_order_sum(x, keepdim=True).shape == (5, 1)
    for i in range(5):
        assert torch.equal(got[i], _tree(x[i].tolist(), dtype))
    assert torch.allclose(got.double(), x.double().sum(-1), rtol=1e-6)


def test_a_row_sums_the_same_alone_and_in_any_batch() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(300, 4096, generator=g) ** 6
    full = fixed_order_sum(x)
    for sl in (slice(0, 1), slice(7, 8), slice(3, 170), slice(299, 300)):
        assert torch.equal(fixed_order_sum(x[sl]), full[sl])
    assert torch.equal(fixed_order_sum(x.view(3, 100, 4096)).view(-1), full)


def test_oracle_rows_do_not_depend_on_the_batch() -> None:
    chain = synthetic_chain(300, 12, eps=1e-3, seed=2)
    oracle = OracleDenoiser(chain)
    g = torch.Generator().manual_seed(3)
    n, V, D = 500, chain.vocab_size, oracle.depth
    args = (torch.randint(V, (n,), generator=g), torch.randint(0, D + 3, (n,), generator=g),
            torch.randint(V, (n,), generator=g), torch.randint(0, D + 3, (n,), generator=g))
    rows = oracle.probs_given_neighbours(*args)
    for i in (0, 17, 499):
        alone = oracle.probs_given_neighbours(*(a[i:i + 1] for a in args))
        assert torch.equal(alone, rows[i:i + 1])
