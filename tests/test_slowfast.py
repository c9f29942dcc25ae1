"""SlowFast: its output law against the exact law of its algorithm (a DP over partially masked states and the
sub-cycle's bookkeeping - span start and end, slow-call count, estimate history, frozen flag - enumerating each
call's joint proposals), on the tiny chain and on a tiny HMM world; NFE = counted calls; determinism."""
from __future__ import annotations

import itertools
import math
import statistics

import pytest
import torch

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.samplers import SlowFast
from dllm_lit.exact import chain_law, law_vector
from test_hmm_samplers import world  # noqa: F401  (the tiny HMM world fixture)
from test_wino import loo_row, tempered

pytestmark = pytest.mark.usefixtures("single_thread")
V, N = 3, 20000
#: goodness-of-fit level: a correct sampler fails one such test in 100
ALPHA = 0.01
# thresholds stay off the tiny kernel's conditionals where a comparison would be an exact tie


def best(conf: dict[int, float]) -> list[int]:
    """The most confident position (ties: the lower position), as a one-element list (empty without candidates)."""
    return [min(conf, key=lambda i: (-conf[i], i))] if conf else []


def slowfast_law(den, T: int, L: int, K: int, W: int, thr: float, std: float, high: float, tau: float):
    """Exact law of SlowFast by a DP over (z, block, start, end, slow calls made, history, frozen)."""
    M = V
    dist = {((M,) * T, 0, 0, L, 0, (), False): 1.0}
    final: dict[tuple, float] = {}
    while dist:
        nxt: dict[tuple, float] = {}
        for (z, blk, e, end, k, hist, fixed), pz in dist.items():
            off = blk * L
            if k >= K and not any(z[off + j] == M for j in range(e, end)):    # span full: the sub-cycle ends
                e, k, hist, fixed = end, 0, (), False
                if not any(z[off + j] == M for j in range(L)):               # block full: the next one
                    if blk + 1 == T // L:
                        final[z] = final.get(z, 0.0) + pz
                        continue
                    blk, e, end, off = blk + 1, 0, L, off + L
                key = (z, blk, e, end, k, hist, fixed)
                nxt[key] = nxt.get(key, 0.0) + pz
                continue
            mset = [j for j in range(L) if z[off + j] == M]
            rows = {j: loo_row(den, z, off + j) for j in mset}
            laws = [tempered(rows[j], tau) for j in mset]
            for draw in itertools.product(range(V), repeat=len(mset)):
                pd = pz * math.prod(law[v] for law, v in zip(laws, draw))
                if pd == 0:
                    continue
                x0 = dict(zip(mset, draw))
                conf = {j: rows[j][x0[j]] for j in mset}
                n_end, n_hist, n_fixed = end, hist, fixed
                if k < K:
                    if not fixed:
                        hits = [j for j in mset if j >= e and conf[j] >= thr]
                        d = max(hits) + 1 - e if hits else (1 if e < L else 0)
                        est = min(max(e + d, 1), L)
                        n_hist = (hist + (est,))[-W:]
                        if len(n_hist) >= W:
                            stable = statistics.pstdev(n_hist) < std if W > 1 else True
                            n_end = est if stable else min(max(int(statistics.mean(n_hist)), 1), L)
                            n_fixed = stable or k == K - 1
                    if k == K - 1 and not n_fixed:
                        n_end = min(max(int(statistics.mean(n_hist)), 1), L) if n_hist else L // 2
                        n_fixed = True
                    region = [j for j in mset if j >= e]
                else:
                    region = [j for j in mset if e <= j < end]
                hi = [j for j in region if conf[j] >= high]
                commit = hi if len(hi) > 1 else best({j: conf[j] for j in region})
                new = list(z)
                for j in commit:
                    new[off + j] = x0[j]
                key = (tuple(new), blk, e, n_end, k + 1 if k < K else k, n_hist, n_fixed)
                nxt[key] = nxt.get(key, 0.0) + pd
        dist = nxt
    return law_vector(final, V, T)


@pytest.mark.parametrize("T, L, K, W, thr, std, high, tau", [
    (4, 4, 2, 2, 0.3, 1.0, 0.9, 1.0),    # upstream's thresholds, two slow calls
    (4, 4, 1, 2, 0.45, 1.0, 0.55, 1.0),  # fewer slow calls than the window: the fallback mean
    (4, 2, 1, 1, 0.35, 1.0, 0.4, 0.7),   # two blocks, window 1 (always frozen), parallel commits, tempered
    (4, 4, 3, 2, 0.35, 0.4, 0.4, 1.0),   # strict stability: floored means of unstable estimates
])
def test_law_matches_dynamic_programming(den, T, L, K, W, thr, std, high, tau) -> None:
    law = slowfast_law(den, T, L, K, W, thr, std, high, tau)
    assert abs(float(law.sum()) - 1.0) < 1e-9
    s = SlowFast(den, block_length=L, k_exploration_steps=K, stability_window=W, cycle_threshold=thr,
                 stability_std=std, high_threshold=high, temperature=tau)
    x = s.sample(N, T, 1, seed=1)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_law_in_an_hmm_world(world) -> None:
    s = SlowFast(block_length=4, k_exploration_steps=2, high_threshold=0.4).connect(world)
    law = slowfast_law(s.denoiser, 4, 4, 2, 2, 0.3, 1.0, 0.4, 1.0)
    x = s.sample(N, 4, 1, seed=2)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_power_the_law_is_not_the_chain_law(den) -> None:
    law = slowfast_law(den, 4, 4, 2, 2, 0.3, 1.0, 0.4, 1.0)
    assert float((law - chain_law(den.chain, 4)).abs().sum()) > 0.01
    x = SlowFast(den, block_length=4, k_exploration_steps=2, high_threshold=0.4).sample(N, 4, 1, seed=9)
    assert chi_square_pvalue(sequence_counts(x, V), chain_law(den.chain, 4)) < ALPHA


def test_nfe_and_determinism(den) -> None:
    s = SlowFast(den, block_length=8)
    x, nfe = s.generate_with_nfe(torch.arange(12), 32, 1, 3)
    assert x.min() >= 0 and x.max() < V
    assert (nfe >= 4 * 6).all()  # at least one sub-cycle of 6 slow calls per block
    # chunking invariance of samples and NFE: tests/test_sampler_contract.py (variant:slowfast_blocks)
