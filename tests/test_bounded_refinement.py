"""LLaDA 2.1's and P2's bounded paths (``decoding/llada21_bounded.py``, ``decoding/p2_bounded.py``, with the rows kept
across calls by ``decoding/tracked_rows.py`` and the oracle's compiled grid keys) draw exactly what the direct
computation draws (``cache=False``: every call's rows afresh, a proposal at every masked position).

Chains with exact ties: a uniform kernel (every row the same numbers, so every confidence and every weight ties and
only the tie rule - the lower position first - decides), the tiny kernel (zero transitions, equal entries), a sparse
synthetic chain and the English chain.  Everything is compared exactly (``torch.equal`` on samples and NFE)."""
from __future__ import annotations

import pytest
import torch

from conftest import TINY_KERNEL, counted_calls
from dllm_lit.denoisers import OracleDenoiser, oracle
from dllm_lit.denoisers.local import LocalDenoiser
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.samplers import LLaDA21, P2
from dllm_lit.decoding import llada21_bounded, p2_bounded
from dllm_lit.decoding.row_providers import LeaveOneOutRows
from dllm_lit.decoding.tracked_rows import TrackedRows
from dllm_lit.sources import english_char_chain

pytestmark = pytest.mark.usefixtures("single_thread")


def _chains() -> dict[str, MarkovChain]:
    return {"uniform": MarkovChain.from_kernel(torch.full((5, 5), 0.2, dtype=torch.float64)),
            "tiny": MarkovChain.from_kernel(torch.tensor(TINY_KERNEL, dtype=torch.float64)),
            "sparse": synthetic_chain(12, 4, eps=1e-3, seed=2), "english": english_char_chain()}


CHAINS = _chains()

LLADA21 = [{}, {"temperature": 0.0}, {"temperature": 0.7, "block_length": 8}, {"editing_threshold": None},
           {"threshold": 0.3, "editing_threshold": 0.2, "max_post_steps": 2}, {"threshold": 0.0, "block_length": 16},
           {"threshold": 1.0, "editing_threshold": 1.0, "max_post_steps": 0}]
P2_OPTIONS = [{}, {"temperature": 0.0}, {"gumbel_scale": 0.0}, {"temperature": 0.0, "gumbel_scale": 0.0},
              {"eta": 0.5, "gumbel_scale": 0.0}, {"eta": 0.0, "temperature": 0.7}, {"eta": 2.0, "gumbel_scale": 0.5}]


def _same(sampler, den, steps: tuple[int, ...], T: int = 32) -> None:
    for s in steps:
        got = sampler(den).generate_with_nfe(torch.arange(10), T, s, 3)
        want = sampler(den).generate_with_nfe(torch.arange(10), T, s, 3, cache=False)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), s


@pytest.mark.parametrize("name", sorted(CHAINS))
@pytest.mark.parametrize("case", range(len(LLADA21)))
def test_llada21_bounded_calls_draw_the_direct_calls(monkeypatch, name: str, case: int) -> None:
    """Fill (threshold set, ranked top-k with ties, k = 0 steps when steps exceed the block), edits and NFE."""
    calls = counted_calls(monkeypatch, llada21_bounded.BoundedRefinement, "call")
    options = LLADA21[case]
    _same(lambda den: LLaDA21(den, **options), OracleDenoiser(CHAINS[name]), (4, 16, 64))
    assert calls  # the bounded path ran (the direct computation runs with cache=False)


@pytest.mark.parametrize("name", sorted(CHAINS))
@pytest.mark.parametrize("case", range(len(P2_OPTIONS)))
@pytest.mark.parametrize("margin", [p2_bounded.GUESS_MARGIN, -0.1])
def test_p2_bounded_steps_draw_the_direct_steps(monkeypatch, name: str, case: int, margin: float) -> None:
    """Kept sets with tied keys (scale 0 on the uniform kernel: every key equal), eta 0 / 0.5 / 2, argmax; with the
    first draws below the last threshold (the default margin) and above it (-0.1: the later rounds find the rest,
    bounds tied with the threshold included)."""
    monkeypatch.setattr(p2_bounded, "GUESS_MARGIN", margin)
    calls = counted_calls(monkeypatch, p2_bounded.BoundedPlanning, "step")
    options = P2_OPTIONS[case]
    _same(lambda den: P2(den, **options), OracleDenoiser(CHAINS[name]), (3, 16, 40))
    assert calls


def test_p2_without_the_compiled_keys(monkeypatch) -> None:
    """Without numba the oracle's grid keys come from the torch formula: the same samples."""
    den = OracleDenoiser(CHAINS["english"])
    want = P2(den).generate_with_nfe(torch.arange(6), 64, 16, 1)
    monkeypatch.setattr(oracle, "numba_available", lambda: False)
    assert torch.equal(P2(den).generate_with_nfe(torch.arange(6), 64, 16, 1)[0], want[0])


@pytest.mark.parametrize("name", ["tiny", "sparse", "english"])
def test_grid_keys_equal_the_neighbour_keys(name: str) -> None:
    """The compiled keys of every position equal neighbour_keys of its leave-one-out query (all masked, all
    revealed, one position, random states)."""
    den = OracleDenoiser(CHAINS[name])
    V = den.vocab_size
    g = torch.Generator().manual_seed(0)
    states = [torch.full((3, 40), V), torch.randint(0, V, (3, 40), generator=g), torch.randint(0, V + 1, (2, 1))]
    for density in (0.1, 0.5, 0.9):
        z = torch.randint(0, V, (5, 300), generator=g)
        z[torch.rand(5, 300, generator=g) < density] = V
        states.append(z)
    for z in states:
        keys, query = den.grid_keys(z)
        assert query is None  # the compiled path
        want, _ = LocalDenoiser.grid_keys(den, z)
        assert torch.equal(keys, want)


@pytest.mark.parametrize("name", ["tiny", "english"])
def test_tracked_rows_are_a_full_lookup(name: str) -> None:
    """After commits, edits and re-masks, every position's tracked row is the row a full lookup gives."""
    den = OracleDenoiser(CHAINS[name])
    V, B, T = den.vocab_size, 4, 60
    g = torch.Generator().manual_seed(1)
    z = torch.full((B, T), V)
    tracked = TrackedRows(den, lambda rows: {"rows": rows}, z)
    full = LeaveOneOutRows(den, lambda rows: {"rows": rows}, z.device, cache=False)
    flat = torch.arange(B * T)
    for step in range(40):
        n = int(torch.randint(1, 6, (1,), generator=g))
        at = torch.randperm(B * T, generator=g)[:n]
        z.view(-1)[at] = torch.randint(0, V + 1, (n,), generator=g)  # commits, edits and re-masks
        tracked.update(z, at)
        f, idx = full.rows(z, flat // T, flat % T)
        assert torch.equal(tracked.features["rows"][tracked.slot.view(-1)], f["rows"][idx]), step
