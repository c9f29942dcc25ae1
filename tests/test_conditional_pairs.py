"""Transition metrics of prompted runs against the exact conditional pair law: the per-prompt values against a
direct computation from enumeration, the exact continuations' floor, exact samplers within their interval of the
floor, a one-step sampler above it, and (slow) the excess interval's coverage of 0 for exact samplers."""
from __future__ import annotations

import math

import pytest
import torch

from tiny_worlds import V, WORLDS, brute_log_probs
from dllm_lit.experiments.prompted import draw_prompts, sample_prompted
from dllm_lit.metrics.functional.conditional_pairs import PAIR_KEYS, pair_terms, pair_values
from dllm_lit.samplers import AR, ASSD, MDLMPaper

pytestmark = pytest.mark.usefixtures("single_thread")
T = 5
M = V  # MASK


def test_pair_terms_equal_a_direct_computation() -> None:
    """Per prompt: the exact pair laws by enumeration, the empirical ones by counting, KL / TV over all V^2 cells
    and the NLL of the drawn pairs, averaged over the prompt's adjacent free pairs; NaN without one."""
    world = WORLDS["order2"]()
    canvases = torch.tensor([[0, M, M, M, M], [M, 1, M, M, 2], [M, 2, M, 0, M]])
    R = 7
    run = sample_prompted(None, world, canvases, R, None, seed=4)
    x, lp = brute_log_probs(world, T)
    got = pair_terms(world, run.samples, run.prompt, canvases)
    for m in range(2):
        c = canvases[m]
        keep = ((c == M) | (x == c)).all(1).double()
        p = lp.exp() * keep / (lp.exp() * keep).sum()
        own = run.samples[run.prompt == m]
        kl = tv = nll = 0.0
        pairs = [t for t in range(T - 1) if c[t] == M and c[t + 1] == M]
        for t in pairs:
            law = torch.zeros(V, V, dtype=torch.float64).index_put_((x[:, t], x[:, t + 1]), p, accumulate=True)
            emp = torch.zeros(V, V, dtype=torch.float64)
            for s in own:
                emp[s[t], s[t + 1]] += 1.0 / R
                nll -= math.log(float(law[s[t], s[t + 1]])) / (R * len(pairs))
            seen = emp > 0
            kl += float((emp[seen] * (emp[seen] / law[seen]).log()).sum()) / len(pairs)
            tv += 0.5 * float((emp - law).abs().sum()) / len(pairs)
        for key, want in (("kl", kl), ("tv", tv), ("nll", nll)):
            assert math.isclose(float(got[key][m]), want, rel_tol=1e-10, abs_tol=1e-12), (m, key)
    assert all(bool(got[k][2].isnan()) for k in got)  # [M, 2, M, 0, M]: no two adjacent free positions


def _rows(world, sampler, steps, prompts=32, repeats=16):
    canvases = draw_prompts(world, prompts, 6, seed=0, prefix=1)
    ref = sample_prompted(None, world, canvases, repeats, None, seed=1)
    if sampler is not None:
        sampler.connect(world)
    return ref, sample_prompted(sampler, world, canvases, repeats, steps, seed=3)


@pytest.mark.parametrize("kind", ["chain", "order2", "hmm"])
def test_exact_continuations_read_within_their_interval_of_the_floor(kind) -> None:
    """AR from the prompt (other seeds than the reference's): the floor-corrected KL and TV intervals over 32
    prompts contain 0; a row against itself reads exactly 0."""
    world = WORLDS[kind]()
    ref, run = _rows(world, AR(), None)
    vals = pair_values(world, run.samples, run.prompt, run.canvases, ref.samples)
    assert set(vals) == set(PAIR_KEYS)
    for key in ("cond_pair_kl_excess", "cond_pair_tv_excess"):
        lo, hi = vals[key][1]
        assert lo <= 0.0 <= hi, key
    assert vals["cond_pair_kl"][0] > 0.1  # the plug-in floor at 16 draws per pair law
    same = pair_values(world, ref.samples, ref.prompt, ref.canvases, ref.samples)
    assert same["cond_pair_kl_excess"] == (0.0, (0.0, 0.0)) and same["cond_pair_tv_excess"] == (0.0, (0.0, 0.0))


def test_one_parallel_step_reads_above_the_floor() -> None:
    """MDLM in one step draws the free positions independently: its pair laws miss the chain's dependence."""
    world = WORLDS["chain"]()
    ref, run = _rows(world, MDLMPaper(steps=1), 1)
    vals = pair_values(world, run.samples, run.prompt, run.canvases, ref.samples)
    for key in ("cond_pair_kl_excess", "cond_pair_tv_excess"):
        assert vals[key][1][0] > 0.0, key


@pytest.mark.slow
@pytest.mark.parametrize("make, steps", [(AR, None), (lambda: MDLMPaper(steps=5), 5), (lambda: ASSD(steps=2), 2)])
def test_excess_interval_covers_zero_for_exact_samplers(make, steps) -> None:
    """Order-2 world, 24 prompts x 8 continuations, 60 independent prompt sets: the 90% intervals of
    cond_pair_kl_excess and cond_pair_tv_excess contain 0 in at least 48 of 60 (binomial(60, 0.9) < 48: p ~ 0.003)."""
    world = WORLDS["order2"]()
    sampler = make().connect(world)
    hits = {"cond_pair_kl_excess": 0, "cond_pair_tv_excess": 0}
    for rep in range(60):
        canvases = draw_prompts(world, 24, 6, seed=100 + rep, prefix=1)
        ref = sample_prompted(None, world, canvases, 8, None, seed=1000 + rep)
        run = sample_prompted(sampler, world, canvases, 8, steps, seed=2000 + rep)
        vals = pair_values(world, run.samples, run.prompt, run.canvases, ref.samples, confidence=0.9)
        for key in hits:
            lo, hi = vals[key][1]
            hits[key] += lo <= 0.0 <= hi
    print(type(sampler).__name__, hits)  # the figures of docs/conditional.md (pytest -s)
    assert min(hits.values()) >= 48, hits
