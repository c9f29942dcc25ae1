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
from dllm_lit.exact import chain_law, law_vector
from test_hmm_samplers import world  # noqa: F401  (the tiny HMM world fixture)
from test_wino import loo_row, ranked, tempered

pytestmark = pytest.mark.usefixtures("single_thread")
V, N = 3, 20000
#: goodness-of-fit level: a correct sampler fails one such test in 100
ALPHA = 0.01
# thresholds stay off the tiny kernel's entries (0.1, 0.2, 0.25, 0.3, 0.5, 0.6, 0.8) and the stationary law's


def llada21_laws(den, T: int, L: int, steps: int, thr: float, edit_thr: float | None, max_post: int,
                 tau: float) -> tuple[torch.Tensor, dict[int, float]]:
    """Exact law of the samples and of the NFE, by a DP over (z, block, filling calls j, post-mask calls, NFE)
    following diffusers' LLaDA2Pipeline loop: the block's masks are counted before each call; a filling call ends
    the block when it is the S-th, a post-mask call when it edits nothing (always, editing off) or is the
    (max_post + 1)-th."""
    M, nb = V, T // L
    S = steps // nb
    ks = transfer_schedule(L, S)
    dist = {((M,) * T, 0, 0, 0, 0): 1.0}  # (z, block, j, post, nfe)
    final: dict[tuple, float] = {}
    nfe_law: dict[int, float] = {}
    while dist:
        nxt: dict[tuple, float] = {}

        def put(z, blk, j, post, nfe, done, p):
            if done and blk + 1 == nb:
                final[z] = final.get(z, 0.0) + p
                nfe_law[nfe] = nfe_law.get(nfe, 0.0) + p
                return
            key = (z, blk + 1, 0, 0, nfe) if done else (z, blk, j, post, nfe)
            nxt[key] = nxt.get(key, 0.0) + p

        for (z, blk, j, post, nfe), pz in dist.items():
            pos = list(range(blk * L, blk * L + L))
            mset = [i for i in pos if z[i] == M]
            post += not mset
            if not mset and edit_thr is None:  # a call that can change nothing
                put(z, blk, j, post, nfe + 1, True, pz)
                continue
            laws = {i: tempered(loo_row(den, z, i), tau) for i in pos}
            # the confidence is the proposal's probability under the tempered law; at tau = 0 (argmax) under p
            confs = {i: loo_row(den, z, i) for i in pos} if tau == 0 else laws
            for draw in itertools.product(range(V), repeat=L):
                pd = pz
                for i, v in zip(pos, draw):
                    pd *= laws[i][v]
                if pd == 0:
                    continue
                x0 = dict(zip(pos, draw))
                conf = {i: confs[i][x0[i]] for i in pos}
                new = list(z)
                if mset:
                    k = ks[j]
                    high = [i for i in mset if conf[i] > thr]
                    fill = high if len(high) >= k else ranked({i: conf[i] for i in mset}, True)[:min(k, len(mset))]
                    for i in fill:
                        new[i] = x0[i]
                edits = []
                if edit_thr is not None:
                    edits = [i for i in pos if z[i] != M and x0[i] != z[i] and conf[i] > edit_thr]
                    for i in edits:
                        new[i] = x0[i]
                done = j + 1 >= S if mset else (not edits or post > max_post)
                put(tuple(new), blk, j + bool(mset), post, nfe + 1, done, pd)
        dist = nxt
    return law_vector(final, V, T), nfe_law


def llada21_law(den, T: int, L: int, steps: int, thr: float, edit_thr: float | None, max_post: int,
                tau: float) -> torch.Tensor:
    """The exact law of the samples (:func:`llada21_laws`)."""
    return llada21_laws(den, T, L, steps, thr, edit_thr, max_post, tau)[0]


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


@pytest.mark.parametrize("T, L, steps, thr, edit_thr, max_post, tau", [
    (4, 4, 4, 0.3, 0.4, 3, 1.0),     # early fills and edits: NFE 2 .. 7 (post-mask calls up to max_post + 1)
    (4, 4, 4, 0.7, 0.5, 16, 0.0),    # argmax: one NFE value (4, as the pipeline's)
    (4, 4, 4, 0.3, 0.55, 0, 1.0),    # max_post_steps = 0 still makes one post-mask call
    (4, 4, 4, 0.3, None, 2, 1.0),    # editing off: a block filled early takes one more call
    (4, 2, 4, 0.3, 0.4, 1, 1.0),     # two blocks
])
def test_nfe_law_matches_dynamic_programming(den, T, L, steps, thr, edit_thr, max_post, tau) -> None:
    """The NFE law of the pipeline's loop, exactly: no post-mask call after the S-th filling call, up to
    max_post_steps + 1 post-mask calls otherwise, one call that changes nothing with editing off."""
    law, nfe_law = llada21_laws(den, T, L, steps, thr, edit_thr, max_post, tau)
    assert abs(sum(nfe_law.values()) - 1.0) < 1e-9
    S = steps // (T // L)
    assert max(nfe_law) <= (S + max_post + 1) * (T // L)
    x, nfe = LLaDA21(den, block_length=L, threshold=thr, editing_threshold=edit_thr, max_post_steps=max_post,
                     temperature=tau).generate_with_nfe(torch.arange(N), T, steps, 11)
    if tau == 0:
        assert set(nfe.long().tolist()) == set(nfe_law) == {S * (T // L)}
        assert torch.equal(x, x[:1].expand_as(x)) and float(law[int(sequence_counts(x[:1], V).argmax())]) == 1.0
        return
    top = max(nfe_law) + 1
    expected = torch.tensor([nfe_law.get(n, 0.0) for n in range(top)], dtype=torch.float64)
    observed = torch.bincount(nfe.long(), minlength=top)
    assert observed.numel() == top and chi_square_pvalue(observed, expected) > ALPHA
    if edit_thr is None:  # a block filled before its S-th call ends one (wasted) call later: NFE < S happens
        assert sum(p for n, p in nfe_law.items() if n < S) > 0.01
    if max_post == 0:  # early-filled blocks take exactly one post-mask call: S + 1 never, below S often
        assert S + 1 not in nfe_law and sum(p for n, p in nfe_law.items() if n < S) > 0.01


def test_per_row_top_counts_equal_the_stable_ranking() -> None:
    """The fill's "min(k, #masked) most confident, ties to the lower position" by a partial selection
    (topk_stable_mask with per-row counts) equals ranking by a stable sort, on scores with many ties and -inf."""
    from dllm_lit.samplers.selection import topk_stable_mask
    from dllm_lit.samplers.wino import stable_ranks

    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        s = torch.randint(0, 6, (7, 40), generator=g).double() / 5
        s[torch.rand(7, 40, generator=g) < 0.3] = float("-inf")
        n = (s > float("-inf")).sum(1)
        s, n = s[n > 0], n[n > 0]
        k = torch.minimum(torch.randint(1, 9, (n.numel(),), generator=g), n)
        assert torch.equal(topk_stable_mask(s, k), stable_ranks(s, descending=True) < k[:, None])
