"""WINO: its output law against the exact law of its algorithm (a DP over partially masked states, the re-mask
counter and the block's call count, enumerating the joint proposals of each call), on the tiny chain and on a tiny
HMM world; NFE = counted calls; the leave-one-out rows against the oracle's forward-backward."""
from __future__ import annotations

import itertools

import pytest
import torch

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.denoisers import HMMOracleDenoiser, OracleDenoiser
from dllm_lit.samplers import WINO
from dllm_lit.exact import chain_law, law_vector
from test_hmm_samplers import world  # noqa: F401  (the tiny HMM world fixture)

pytestmark = pytest.mark.usefixtures("single_thread")
V, N = 3, 20000
#: goodness-of-fit level: a correct sampler fails one such test in 100
ALPHA = 0.01
# thresholds stay off the tiny kernel's entries (0.1, 0.2, 0.25, 0.3, 0.5, 0.6, 0.8): a comparison at an exact tie
# would depend on the last bit of the rows


def loo_row(den, z: tuple, i: int) -> list[float]:
    """p(x_i | z_{-i}): the posterior at i with z_i masked (the denoiser's plain probs_at query)."""
    zz = torch.tensor([list(z)])
    zz[0, i] = V
    return den.probs_at(zz, torch.tensor([0]), torch.tensor([i]))[0].double().tolist()


def tempered(row: list[float], tau: float) -> list[float]:
    if tau == 0:
        out = [0.0] * len(row)
        out[max(range(len(row)), key=lambda v: (row[v], -v))] = 1.0
        return out
    w = [r ** (1 / tau) for r in row]
    return [x / sum(w) for x in w]


def ranked(scores: dict[int, float], descending: bool) -> list[int]:
    return sorted(scores, key=lambda i: (-scores[i] if descending else scores[i], i))


def wino_law(den, T: int, L: int, thr: float, thr_back: float, tau: float, cap: int, at_threshold: bool = False,
             cap_by_this_call: bool = False) -> torch.Tensor:
    """Exact law of WINO by a DP over (z, previous commit count, calls in the block).  Defaults: the authors' loop
    (commit above ``thr``; at least ``n`` low tokens: re-mask the ``n - 1`` lowest, ``n`` the previous call's commit
    count).  d2Cache's HEAD ``wino.py`` differs in both flags: ``at_threshold`` commits at ``>= thr``,
    ``cap_by_this_call`` takes ``n`` = this call's commit count."""
    M = V
    dist = {((M,) * T, 30, 0): 1.0}
    final: dict[tuple, float] = {}
    while dist:
        nxt: dict[tuple, float] = {}
        for (z, last, k), pz in dist.items():
            blk = next(b for b in range(T // L) if any(z[b * L + j] == M for j in range(L)))
            pos = list(range(blk * L, blk * L + L))
            rows = {i: loo_row(den, z, i) for i in pos}
            mset = [i for i in pos if z[i] == M]
            back = {i: rows[i][z[i]] for i in pos if z[i] != M}
            laws = [tempered(rows[i], tau) for i in mset]
            for draw in itertools.product(range(V), repeat=len(mset)):
                pd = pz
                for law, v in zip(laws, draw):
                    pd *= law[v]
                if pd == 0:
                    continue
                x0 = dict(zip(mset, draw))
                conf = {i: rows[i][x0[i]] for i in mset}
                most = min(max(int(len(mset) * 0.7), 5), 20)
                above = [i for i in mset if (conf[i] >= thr if at_threshold else conf[i] > thr)]
                if len(above) > most:
                    commit = ranked(conf, True)[:most]
                elif not above:
                    commit = ranked(conf, True)[:1]
                else:
                    commit = above
                remask = []
                if len(commit) > 1 and k < cap:
                    low = [i for i in back if back[i] < thr_back]
                    n = len(commit) if cap_by_this_call else last
                    remask = ranked(back, False)[:max(n - 1, 0)] if len(low) >= n else low
                new = list(z)
                for i in commit:
                    new[i] = x0[i]
                for i in remask:
                    new[i] = M
                new = tuple(new)
                if M not in new:
                    final[new] = final.get(new, 0.0) + pd
                elif not any(new[j] == M for j in pos):
                    key = (new, 30, 0)
                    nxt[key] = nxt.get(key, 0.0) + pd
                else:
                    key = (new, len(commit), k + 1)
                    nxt[key] = nxt.get(key, 0.0) + pd
        dist = nxt
    return law_vector(final, V, T)


@pytest.mark.parametrize("T, L, thr, thr_back, tau", [
    (4, 4, 0.6, 0.9, 1.0),
    (4, 4, 0.35, 0.9, 1.0),   # wide in: several commits, hence re-masking
    (4, 2, 0.35, 0.95, 1.0),  # two blocks
    (4, 4, 0.4, 0.9, 0.7),    # tempered proposals
])
def test_law_matches_dynamic_programming(den, T, L, thr, thr_back, tau) -> None:
    law = wino_law(den, T, L, thr, thr_back, tau, cap=4 * L)
    assert abs(float(law.sum()) - 1.0) < 1e-9
    s = WINO(den, block_length=L, wide_in_threshold=thr, narrow_out_threshold=thr_back, temperature=tau)
    x = s.sample(N, T, 1, seed=T + L)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_law_in_an_hmm_world(world) -> None:
    """The generic leave-one-out path (the HMM oracle's forward-backward) in a world that is not a first-order chain."""
    s = WINO(block_length=4, wide_in_threshold=0.3).connect(world)
    assert isinstance(s.denoiser, HMMOracleDenoiser)
    law = wino_law(s.denoiser, 4, 4, 0.3, 0.9, 1.0, cap=16)
    x = s.sample(N, 4, 1, seed=2)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_power_the_law_is_not_the_chain_law(den) -> None:
    law = wino_law(den, 4, 4, 0.35, 0.9, 1.0, cap=16)
    assert float((law - chain_law(den.chain, 4)).abs().sum()) > 0.01
    x = WINO(den, block_length=4, wide_in_threshold=0.35).sample(N, 4, 1, seed=9)
    assert chi_square_pvalue(sequence_counts(x, V), chain_law(den.chain, 4)) < ALPHA


def test_nfe_and_determinism(den) -> None:
    s = WINO(den, block_length=8, wide_in_threshold=0.4)
    x, nfe = s.generate_with_nfe(torch.arange(12), 32, 1, 3)
    assert x.min() >= 0 and x.max() < V
    assert (nfe >= 4).all() and (nfe < 32).any()  # at least one call per block; wide in saves calls
    # chunking invariance of samples and NFE: tests/test_sampler_contract.py (variant:wino_blocks)
