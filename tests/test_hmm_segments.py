"""The segmented HMM posterior (absorbing masks, order-k context worlds, memo across calls) against brute-force
enumeration and the full forward-backward, and sampler draws identical with the memo on, off, or the full pass."""
from __future__ import annotations

import itertools

import pytest
import torch

import dllm_lit.samplers as samplers
from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.denoisers import ABSORBING, HMMOracleDenoiser, hmm_posterior
from dllm_lit.denoisers.hmm_segments import SegmentedPosterior, _groups, segments_apply
from dllm_lit.markov import HMMWorld
from dllm_lit.exact import mdlm_law
from test_hmm_world import brute_posterior, context_world, joint, random_world

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.mark.parametrize("k, T", [(1, 6), (2, 6), (3, 6)])
def test_every_mask_pattern_matches_enumeration(k, T) -> None:
    """Every reveal pattern of one sequence (2^T), tolerance 1e-9 to brute force, 1e-12 to the full pass."""
    world = context_world(V=2, k=k, seed=k)
    x = world.sample(1, T, seed=5)[0]
    P, L = joint(world, T), ABSORBING.likelihood(2)
    seg = SegmentedPosterior(world, memo_bytes=0)
    zs = torch.stack([torch.where(torch.tensor(bits, dtype=torch.bool), x, 2)
                      for bits in itertools.product([False, True], repeat=T)])
    got = seg(zs)
    assert (got - hmm_posterior(world, zs)).abs().max() <= 1e-12
    for i in range(0, len(zs), 7):
        assert (got[i] - brute_posterior(P, L, zs[i].tolist(), False)).abs().max() <= 1e-9


def test_memo_and_batch_composition_leave_rows_unchanged() -> None:
    """The same rows, bit for bit, with the memo, without it, one sequence at a time, and in another order."""
    world = context_world(V=3, k=2, seed=4)
    x = world.sample(24, 40, seed=2)
    g = torch.Generator().manual_seed(0)
    memo = SegmentedPosterior(world)
    for frac in (1.0, 0.9, 0.6, 0.3, 0.1, 0.0):
        z = torch.where(torch.rand(x.shape, generator=g) < frac, world.mask_id, x)
        fresh = SegmentedPosterior(world, memo_bytes=0)(z)
        assert torch.equal(memo(z), fresh)
        one = torch.cat([SegmentedPosterior(world, memo_bytes=0)(z[i:i + 1]) for i in range(len(z))])
        assert torch.equal(one, fresh)
        perm = torch.randperm(len(z), generator=g)
        assert torch.equal(SegmentedPosterior(world, memo_bytes=0)(z[perm]), fresh[perm])
        assert (fresh - hmm_posterior(world, z)).abs().max() <= 1e-12


def test_applies_only_to_positive_context_worlds() -> None:
    assert segments_apply(context_world())
    assert not segments_apply(random_world())
    rows = context_world().rows.clone()
    rows[0] = torch.tensor([1.0, 0.0, 0.0])
    assert not segments_apply(HMMWorld(context_rows=rows))
    with pytest.raises(ValueError, match="positive rows"):
        SegmentedPosterior(random_world())


def test_groups_cover_every_segment_once() -> None:
    lengths = torch.tensor([200, 200, 100, 99, 98] + [5] * 13 + [2, 1]).numpy()
    runs = _groups(lengths, 32.0)
    assert runs[0][0] == 0 and runs[-1][1] == len(lengths)
    assert all(a[1] == b[0] for a, b in zip(runs, runs[1:]))


@pytest.mark.parametrize("name, kwargs, steps", [("MDLM", {}, 5), ("MDLMPaper", {}, 6), ("LLaDA", {}, 4),
                                                 ("SEDD", {}, 5), ("ReMDM", {"variant": "conf"}, 6),
                                                 ("ReMDM", {"variant": "loop"}, 6)])
def test_sampler_draws_identical_to_the_full_pass(name, kwargs, steps) -> None:
    """Segments + memo (default), segments without memo, and the full forward-backward give equal samples."""
    world = context_world(V=3, k=2, seed=7)
    draws = []
    for kw in ({}, {"memo": False}, {"segments": False}):
        s = getattr(samplers, name)(**kwargs).connect(world)
        s.denoiser = HMMOracleDenoiser(world, segments=kw.get("segments", True))
        if kw.get("memo") is False:
            s.denoiser._segmented.memo_bytes = 0
        draws.append(s.sample(64, 24, steps, seed=3))
    assert torch.equal(draws[0], draws[1]) and torch.equal(draws[0], draws[2])


@pytest.mark.parametrize("steps", [2, 3])
def test_mdlm_law_in_an_order2_world(steps) -> None:
    """MDLM with the segmented oracle follows its exact law (tiny order-2 world, V = 2, T = 4; chi-square, 1 %)."""
    world = context_world(V=2, k=2, seed=9)
    s = samplers.MDLM().connect(world)
    assert s.denoiser._segmented is not None
    x = s.sample(20000, 4, steps, seed=steps)
    assert chi_square_pvalue(sequence_counts(x, 2), mdlm_law(world, 4, steps)) > 0.01
