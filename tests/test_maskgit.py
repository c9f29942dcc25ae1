"""MaskGIT decoding: output law equals the exact law of its algorithm (DP over proposals and the
Gumbel top-k), schedule, determinism, cache, settings."""
from __future__ import annotations

import math

import pytest
import torch

from conftest import CountingDenoiser, chi_square_pvalue, sequence_counts
from dllm_lit.samplers import MaskGIT
from dllm_lit.samplers.maskgit import num_masked_next
from dllm_lit.exact import chain_law, maskgit_law

V, N = 3, 20000
ALPHA = 0.01


@pytest.mark.parametrize("T, steps, choice_temperature, schedule, temperature", [
    (4, 2, 4.5, "cosine", 1.0),
    (4, 3, 4.5, "cosine", 1.0),
    (4, 3, 1.0, "linear", 0.7),
    (4, 3, 0.0, "cosine", 1.0),    # no Gumbel noise: strict threshold, ties at the cut-off committed
    (4, 6, 4.5, "cosine", 1.0),    # steps > T: a position waits masked until the last step
    (6, 2, 4.5, "cosine", 1.0),
])
def test_law_matches_dynamic_programming(den, T, steps, choice_temperature, schedule, temperature) -> None:
    law = maskgit_law(den.chain, T, steps, choice_temperature, schedule, temperature)
    s = MaskGIT(den, choice_temperature=choice_temperature, schedule=schedule, temperature=temperature)
    x = s.sample(N, T, steps, seed=steps)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_choice_temperature_changes_the_law_and_the_test_sees_it(den) -> None:
    """Power: exact chain samples and c = 0 samples are rejected against the c = 4.5 law."""
    law = maskgit_law(den.chain, 4, 3, 4.5)
    assert chi_square_pvalue(sequence_counts(den.chain.sample(N, 4, seed=1), V), law) < ALPHA
    x0 = MaskGIT(den, choice_temperature=0.0).sample(N, 4, 3, seed=2)
    assert chi_square_pvalue(sequence_counts(x0, V), law) < ALPHA
    assert float((law - chain_law(den.chain, 4)).abs().sum()) > 0.01


def test_argmax_without_noise_is_deterministic(den) -> None:
    x = MaskGIT(den, choice_temperature=0.0, temperature=0.0).sample(50, 6, 3, seed=1)
    law = maskgit_law(den.chain, 6, 3, 0.0, temperature=0.0)
    assert (x == x[0]).all()
    code = int((x[0] * V ** torch.arange(5, -1, -1)).sum())
    assert law[code] == pytest.approx(1.0)


def test_schedule_counts() -> None:
    """n_t = max(1, min(unknown - 1, floor(N cos(pi/2 (t+1)/S)))) as upstream parallel_decode."""
    N, S = 256, 12
    expect = [max(1, min(N - 1, math.floor(N * max(math.cos(math.pi / 2 * (t + 1) / S), 1e-6)))) for t in range(S - 1)]
    assert [num_masked_next(N, t, S, N) for t in range(S - 1)] == expect
    assert num_masked_next(N, 0, S, 3) == 2 and num_masked_next(N, S - 2, S, 1) == 1
    assert num_masked_next(N, 0, 4, torch.tensor([256, 5, 1])).tolist() == [236, 4, 1]


def test_masked_counts_follow_the_schedule(den) -> None:
    """With c > 0 (no ties) exactly n_t positions stay masked after each step t < S - 1 (seen by the denoiser)."""
    T, S = 40, 6
    counting = CountingDenoiser(den)
    seen = []
    inner = counting.probs_at

    def spy(z, b, p):
        seen.append(int((z == den.mask_id).sum()))
        return inner(z, b, p)

    counting.probs_at = spy
    MaskGIT(counting).sample(1, T, S, seed=3)  # not a LocalDenoiser: every masked position queried per step
    unknown, expect = T, [T]
    for t in range(S - 1):
        unknown = num_masked_next(T, t, S, unknown)
        expect.append(unknown)
    assert seen == expect


def test_cache_gives_identical_draws(den) -> None:
    for kw in ({}, {"choice_temperature": 0.0}, {"temperature": 0.0}, {"temperature": 0.6, "schedule": "linear"}):
        s = MaskGIT(den, **kw)
        cached = s.sample(8, 64, 16, seed=3)
        s.use_cache = False
        assert torch.equal(cached, s.sample(8, 64, 16, seed=3)), kw


def test_compact_columns_hand_over_at_a_tied_cut(den, monkeypatch) -> None:
    """The compact-column loop runs every step while no cut ties (c > 0) and hands a tied cut (c = 0, equal
    confidences) to the [B, T] bounded loop at that step; the draws are those of the direct step either way."""
    from dllm_lit.decoding import cut_decoding

    starts = []
    orig = cut_decoding._Run.bounded
    monkeypatch.setattr(cut_decoding._Run, "bounded", lambda run, post, start=0: starts.append(start) or
                        orig(run, post, start))
    for c, whole in ((4.5, True), (0.0, False)):
        s = MaskGIT(den, choice_temperature=c)
        starts.clear()
        cached = s.sample(8, 64, 16, seed=3)
        assert (starts == []) == whole and all(0 <= t < 16 for t in starts), (c, starts)
        s.use_cache = False
        assert torch.equal(cached, s.sample(8, 64, 16, seed=3)), c


def test_no_mask_left(den) -> None:
    """Chunking invariance (also at 1 step and at steps > T): tests/test_sampler_contract.py (config:maskgit)."""
    s = MaskGIT(den)
    for steps in (1, 5, 40):
        full = s.sample(12, 30, steps=steps, seed=5)
        assert full.min() >= 0 and full.max() < V
    assert s.name == "maskgit"


def test_compact_rounds_of_large_vocabularies_give_the_dense_draws(den, monkeypatch) -> None:
    """The compact loop's regime of large vocabularies (row-free bounds, proposals drawn in rounds of 4x growing
    size, best bounds first) on a small chain: the draws of the dense loop without cache, with exact ties at the
    cut (c = 0: equal confidences, handed to the bounded loop) and without (c > 0); the capped rounds do run."""
    import dllm_lit.decoding.confidence_decoding as confidence_decoding
    import dllm_lit.decoding.cut_decoding as cut_decoding

    monkeypatch.setattr(cut_decoding, "ROUNDS_MIN_VOCAB", 1)
    monkeypatch.setattr(confidence_decoding, "ROUNDS_MIN_VOCAB", 1)  # first draws 2k + 1, as at V = 4096
    capped = []
    orig = cut_decoding.topk_stable_mask
    monkeypatch.setattr(cut_decoding, "topk_stable_mask", lambda s, k: capped.append(k) or orig(s, k))
    for kw in ({"choice_temperature": 4.5}, {"choice_temperature": 0.0}, {"temperature": 0.6, "schedule": "linear"}):
        s = MaskGIT(den, **kw)
        cached = s.sample(8, 64, 16, seed=3)
        s.use_cache = False
        assert torch.equal(cached, s.sample(8, 64, 16, seed=3)), kw
    assert capped
