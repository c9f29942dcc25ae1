"""The sorted-key row memo (large key ranges) against the dense memo, and the EB-sampler's gap path over it against
the dense loop (draws and NFE identical)."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.samplers import EBSampler
from dllm_lit.decoding import confidence_decoding, gap_decoding
from dllm_lit.decoding.confidence_decoding import posterior_entropy
from dllm_lit.decoding.neighbourhood_rows import NeighbourhoodRows
from dllm_lit.decoding.sparse_rows import SparseNeighbourhoodRows, keyed_rows
from dllm_lit.sources import english_char_chain

pytestmark = pytest.mark.usefixtures("single_thread")


def _features(rows: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"entropy": posterior_entropy(rows), "argmax": rows.argmax(-1)}


def _queries(oracle: OracleDenoiser, n: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    V, D = oracle.vocab_size, oracle.depth
    xl, xr = torch.randint(0, V, (n,), generator=g), torch.randint(0, V, (n,), generator=g)
    d1, d2 = torch.randint(0, D + 3, (n,), generator=g), torch.randint(0, D + 3, (n,), generator=g)
    return xl, d1, xr, d2


def test_sorted_memo_equals_the_dense_memo() -> None:
    """Batches with repeated keys, keys met before and new ones, in random order: every slot reads the features the
    dense memo reads (same rows, same row-wise features: equal numbers), and each key gets one row."""
    oracle = OracleDenoiser(english_char_chain())
    dense, sparse = NeighbourhoodRows(oracle, _features), SparseNeighbourhoodRows(oracle, _features)
    seen = set()
    for step in range(6):
        query = _queries(oracle, 300 if step else 1, step)
        a, b = dense.slots(query), sparse.slots(query)
        for name in ("entropy", "argmax"):
            assert torch.equal(dense.features[name].index_select(0, a), sparse.features[name].index_select(0, b))
        seen |= set(oracle.neighbour_keys(*query).tolist())
        assert sparse.size == len(seen) == sparse.keys.numel()
        assert bool((sparse.keys[1:] > sparse.keys[:-1]).all())
        assert torch.equal(torch.sort(sparse.key_slots).values, torch.arange(sparse.size))


def test_keyed_rows_picks_by_key_range() -> None:
    oracle = OracleDenoiser(english_char_chain())
    assert type(keyed_rows(oracle, _features)) is NeighbourhoodRows
    big = OracleDenoiser(synthetic_chain(256, 8, eps=0.05, seed=4))
    assert not NeighbourhoodRows.applies(big) and type(keyed_rows(big, _features)) is SparseNeighbourhoodRows


def _eps0_chain() -> MarkovChain:
    """8 states, zero-probability transitions (unreachable right neighbours, zero-entropy posteriors)."""
    g = torch.Generator().manual_seed(5)
    kernel = torch.rand(8, 8, generator=g)
    kernel[kernel < 0.55] = 0.0
    kernel[:, 1] += 0.2
    kernel[1] += 0.2
    return MarkovChain.from_kernel(kernel / kernel.sum(1, keepdim=True))


def _eb_runs(chain, oracle, T: int, n: int, steps: int, seed: int, monkeypatch, **kw):
    """(samples, NFE) of the dense loop and of the gap path over the sorted memo."""
    out = []
    for gaps in (False, True):
        with monkeypatch.context() as m:
            if gaps:
                m.setattr(gap_decoding, "keyed_rows", lambda den, derive, device=None:
                          SparseNeighbourhoodRows(den, derive, device=device))
            else:
                m.setattr(confidence_decoding, "gaps_apply", lambda *a: False)
            s = EBSampler(oracle, **kw)
            s.connect(chain)
            x, st = s.generate_with_stats(torch.arange(n), T, steps, seed)
            out.append((x, st["nfe"]))
    return out


@pytest.mark.parametrize("name", ["eps0", "v256"])
def test_eb_gap_path_over_the_sorted_memo_equals_the_dense_loop(name: str, monkeypatch) -> None:
    """Draws and NFE identical to the dense loop: one commit per step (gamma 0), small budgets, budgets forcing long
    committed prefixes that the 8-prefix does not decide (every position then sorted), argmax and sampled
    proposals, both tie rules.  "eps0": a sparse chain with zero-entropy posteriors and exact entropy ties (plateaus
    of equal keys in long gaps, mirrored positions of one gap); "v256": a key range above the dense memo's."""
    chain = synthetic_chain(256, 8, eps=0.05, seed=4) if name == "v256" else _eps0_chain()
    oracle = OracleDenoiser(chain)
    T = 2 * oracle.depth + 30
    for gamma, tie_rule, tau in ((0.0, "lowest", 1.0), (0.01, "highest", 0.0), (0.5, "lowest", 1.0),
                                 (4.0, "highest", 1.0), (12.0, "lowest", 0.0), (40.0, "lowest", 1.0)):
        (x0, n0), (x1, n1) = _eb_runs(chain, oracle, T, 4, 16, 7, monkeypatch, gamma=gamma, tie_rule=tie_rule,
                                      temperature=tau)
        assert (x1 != oracle.mask_id).all()
        assert torch.equal(x0, x1) and torch.equal(n0, n1), (name, gamma, tie_rule, tau)
