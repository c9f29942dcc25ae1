"""LLaDA 2.1 block refinement with token editing: its output law against the exact law of its algorithm (a DP over
partially masked states, the block's step and post-step counters, enumerating the joint proposals of each call), on
the tiny chain and on a tiny HMM world; NFE = counted calls."""
from __future__ import annotations

import itertools

import pytest
import torch

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.denoisers import HMMOracleDenoiser
from dllm_lit.samplers import LLaDA21
from dllm_lit.samplers.selection import transfer_schedule
from exact_laws import chain_law, law_vector
from test_hmm_samplers import world  # noqa: F401  (the tiny HMM world fixture)
from test_wino import loo_row, ranked, tempered

pytestmark = pytest.mark.usefixtures("single_thread")
V, N = 3, 20000
#: goodness-of-fit level: a correct sampler fails one such test in 100
ALPHA = 0.01
# thresholds stay off the tiny kernel's entries (0.1, 0.2, 0.25, 0.3, 0.5, 0.6, 0.8) and the stationary law's


def llada21_law(den, T: int, L: int, steps: int, thr: float, edit_thr: float | None, max_post: int,
                tau: float) -> torch.Tensor:
    """Exact law by a DP over (z, mask-filling step j, post-mask calls) within the current block."""
    M, nb = V, T // L
    S = steps // nb
    ks = transfer_schedule(L, S)
    dist = {((M,) * T, 0, 0, 0): 1.0}  # (z, block, j, post)
    final: dict[tuple, float] = {}
    while dist:
        nxt: dict[tuple, float] = {}

        def put(key, p):
            if key[1] == nb:
                final[key[0]] = final.get(key[0], 0.0) + p
            else:
                nxt[key] = nxt.get(key, 0.0) + p

        for (z, blk, j, post), pz in dist.items():
            pos = list(range(blk * L, blk * L + L))
            has_mask = any(z[i] == M for i in pos)
            if not has_mask:
                post += 1
                if edit_thr is None or post > max_post:
                    put((z, blk + 1, 0, 0), pz)
                    continue
            laws = {i: tempered(loo_row(den, z, i), tau) for i in pos}
            mset = [i for i in pos if z[i] == M]
            for draw in itertools.product(range(V), repeat=L):
                pd = pz
                for i, v in zip(pos, draw):
                    pd *= laws[i][v]
                if pd == 0:
                    continue
                x0 = dict(zip(pos, draw))
                conf = {i: laws[i][x0[i]] for i in pos}
                new = list(z)
                if mset:
                    k = ks[min(j, S - 1)]
                    high = [i for i in mset if conf[i] > thr]
                    fill = high if len(high) >= k else ranked({i: conf[i] for i in mset}, True)[:min(k, len(mset))]
                    for i in fill:
                        new[i] = x0[i]
                edits = []
                if edit_thr is not None:
                    edits = [i for i in pos if z[i] != M and x0[i] != z[i] and conf[i] > edit_thr]
                    for i in edits:
                        new[i] = x0[i]
                new = tuple(new)
                if not mset and not edits:
                    put((new, blk + 1, 0, 0), pd)
                else:
                    put((new, blk, j + (1 if mset else 0), post), pd)
        dist = nxt
    return law_vector(final, V, T)


@pytest.mark.parametrize("T, L, steps, thr, edit_thr, max_post, tau", [
    (4, 4, 2, 0.7, 0.45, 2, 1.0),
    (4, 4, 4, 0.42, 0.55, 3, 1.0),
    (4, 2, 2, 0.7, 0.45, 1, 1.0),    # two blocks, one step each
    (4, 4, 2, 0.7, None, 2, 1.0),    # editing off: threshold block refinement only
    (3, 3, 3, 0.7, 0.65, 2, 0.7),    # tempered proposals and confidences
])
def test_law_matches_dynamic_programming(den, T, L, steps, thr, edit_thr, max_post, tau) -> None:
    law = llada21_law(den, T, L, steps, thr, edit_thr, max_post, tau)
    assert abs(float(law.sum()) - 1.0) < 1e-9
    s = LLaDA21(den, block_length=L, threshold=thr, editing_threshold=edit_thr, max_post_steps=max_post,
                temperature=tau)
    x = s.sample(N, T, steps, seed=T + L + steps)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_law_in_an_hmm_world(world) -> None:
    s = LLaDA21(block_length=4, editing_threshold=0.45, max_post_steps=2).connect(world)
    assert isinstance(s.denoiser, HMMOracleDenoiser)
    law = llada21_law(s.denoiser, 4, 4, 2, 0.7, 0.45, 2, 1.0)
    x = s.sample(N, 4, 2, seed=4)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_editing_moves_the_law_and_the_test_sees_it(den) -> None:
    on = llada21_law(den, 4, 4, 2, 0.7, 0.45, 2, 1.0)
    off = llada21_law(den, 4, 4, 2, 0.7, None, 2, 1.0)
    assert float((on - off).abs().sum()) > 0.01
    x = LLaDA21(den, block_length=4, editing_threshold=None).sample(N, 4, 2, seed=6)
    assert chi_square_pvalue(sequence_counts(x, V), on) < ALPHA
    assert chi_square_pvalue(sequence_counts(x, V), chain_law(den.chain, 4)) < ALPHA


def test_nfe_counts_fill_and_post_calls(den) -> None:
    """Editing off: at most S calls; on: the mask phase plus at most max_post_steps more per block."""
    T, steps = 32, 8
    off = LLaDA21(den, editing_threshold=None)
    _, n_off = off.generate_with_nfe(torch.arange(16), T, steps, 1)
    assert (n_off <= steps).all() and (n_off >= 1).all()
    on = LLaDA21(den, editing_threshold=0.3, max_post_steps=4)
    _, n_on = on.generate_with_nfe(torch.arange(16), T, steps, 1)
    assert (n_on <= steps + 4).all() and (n_on > n_off).any()  # chunking: test_sampler_contract (config:llada21)
    assert on.name == "llada21" and off.name == "llada21_noedit"
