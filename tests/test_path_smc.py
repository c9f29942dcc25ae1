"""The path law (dllm_lit.samplers.path_law) and the SMC sandwich over reveal states (dllm_lit.samplers.path_smc).

Fast checks on a V = 3 chain with the float64 oracle: the path law's step probabilities, summed over every path,
give the exact law of the dynamic program (dllm_lit.exact.mdlm_paper_law, 1e-12); the SMC's estimate is exact in
expectation (K = 1: the proposal's density enumerated; K = 4: a Monte Carlo mean over 4000 runs within 4 standard
errors); the two ends bracket log q(x) on average; keyed randomness makes the estimates batch-independent.
Coverage of the bracket's confidence bounds over seeds: ``tests/test_path_smc_coverage.py`` (slow).
"""
from __future__ import annotations

import itertools

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.exact import mdlm_paper_law
from dllm_lit.markov import MarkovChain
from dllm_lit.samplers.draws import drawn_log_prob
from dllm_lit.samplers.path_law import PathLaw, RandomSubsetLaw

KERNEL3 = [[0.6, 0.3, 0.1], [0.2, 0.1, 0.7], [0.5, 0.25, 0.25]]


def _world(T: int, counts: list[int]):
    chain = MarkovChain.from_kernel(torch.tensor(KERNEL3, dtype=torch.float64))
    den = OracleDenoiser(chain, dtype=torch.float64)
    law = RandomSubsetLaw(den, counts, [(0, T)] * len(counts), lambda j, b, p, probs, tok: drawn_log_prob(probs, tok))
    return chain, den, law


def _paths(T: int, counts: list[int]):
    """Every ordered partition of range(T) into sets of the given sizes."""
    def rec(rest: frozenset, j: int):
        if j == len(counts):
            yield []
            return
        for S in itertools.combinations(sorted(rest), counts[j]):
            for tail in rec(rest - set(S), j + 1):
                yield [S, *tail]
    return list(rec(frozenset(range(T)), 0))


def _sum_over_paths(law, T: int, paths, mask_id: int) -> torch.Tensor:
    """sum over ``paths`` (lists of committed sets) of prod_j exp(step_log_prob), for every x in {0, 1, 2}^T."""
    xs = torch.tensor(list(itertools.product(range(3), repeat=T)))
    total = torch.zeros(len(xs), dtype=torch.float64)
    for path in paths:
        z = torch.full_like(xs, mask_id)
        lp = torch.zeros(len(xs), dtype=torch.float64)
        for j, S in enumerate(path):
            commit = torch.zeros_like(xs, dtype=torch.bool)
            commit[:, list(S)] = True
            lp += law.step_log_prob(z, commit, xs, j)
            z = torch.where(commit, xs, z)
        total += lp.exp()
    return total


@pytest.mark.parametrize("counts", [[1, 2, 1], [2, 2], [4]])
def test_step_probabilities_sum_over_paths_to_the_exact_law(counts) -> None:
    T = sum(counts)
    chain, den, law = _world(T, counts)
    assert isinstance(law, PathLaw)
    total = _sum_over_paths(law, T, _paths(T, counts), den.mask_id)
    assert torch.allclose(total, mdlm_paper_law(chain, T, len(counts), counts), rtol=0, atol=1e-12)


def test_windowed_law_sums_to_the_exact_block_law() -> None:
    """LLaDA's random remasking in two blocks of 3 (a window per step, rounds 2 + 1 each): the step probabilities
    summed over every path equal the dynamic program's law built with the same windows (1e-12)."""
    from dllm_lit.exact.core import PosteriorCache, law_vector
    from dllm_lit.exact.subsets import random_subset_step

    T, counts, windows = 6, [2, 1, 2, 1], [(0, 3), (0, 3), (3, 6), (3, 6)]
    chain, den, _ = _world(T, counts)
    law = RandomSubsetLaw(den, counts, windows, lambda j, b, p, probs, tok: drawn_log_prob(probs, tok))
    post, M = PosteriorCache(chain), den.mask_id
    dist = {(M,) * T: 1.0}
    for k, (lo, hi) in zip(counts, windows):
        dist = random_subset_step(dist, post, M, k, lambda g, i: [(v, float(g[i, v])) for v in range(3)], lo, hi)
    exact = law_vector(dist, 3, T)
    paths = [[a, tuple(set(range(3)) - set(a)), b, tuple(set(range(3, 6)) - set(b))]
             for a in itertools.combinations(range(3), 2) for b in itertools.combinations(range(3, 6), 2)]
    total = _sum_over_paths(law, T, paths, M)
    assert torch.allclose(total, exact, rtol=0, atol=1e-12)


def test_step_log_prob_is_minus_inf_off_the_law() -> None:
    _, den, law = _world(4, [2, 2])
    x = torch.tensor([[0, 1, 2, 0]])
    z = torch.full_like(x, den.mask_id)
    one = torch.tensor([[True, False, False, False]])  # one commit where the schedule fixes two
    assert law.step_log_prob(z, one, x, 0).item() == float("-inf")
    z2 = torch.tensor([[0, den.mask_id, den.mask_id, den.mask_id]])
    again = torch.tensor([[True, True, False, False]])  # position 0 is already revealed
    assert law.step_log_prob(z2, again, x, 1).item() == float("-inf")


def test_pick_proposal_is_normalised() -> None:
    """Summed over every ordered pick sequence, the proposal's probabilities (its log r minus log k!) total 1 (1e-12),
    with the oracle's guide and its uniform mixture, on a state with a revealed position."""
    from dllm_lit.samplers.path_smc import subset_proposal

    T, k = 5, 3
    _, den, law = _world(T, [1, 3, 1])
    seqs = list(itertools.permutations([0, 2, 3, 4], k))
    n = len(seqs)
    x = torch.tensor([[0, 2, 1, 1, 0]]).expand(n, T).clone()
    z = torch.where(torch.arange(T) == 1, x, den.mask_id)
    _, log_r, guided = subset_proposal(law.guide(z, x), z == den.mask_id, torch.full((n,), k),
                                       torch.full((n, k), 0.5, dtype=torch.float64), torch.tensor(seqs))
    total = torch.exp(log_r - torch.lgamma(torch.tensor(k + 1.0, dtype=torch.float64))).sum()
    assert guided and float(total) == pytest.approx(1.0, abs=1e-12)


def test_guide_updates_match_a_fresh_guide() -> None:
    """The guide's incremental tilt and twist after reveals equal those of a guide built on the new state, its tilt
    the float64 oracle's log p(x_i | z) and its twist log p(x) - log p(x on the revealed positions) (1e-12)."""
    from dllm_lit.markov import synthetic_chain
    from dllm_lit.metrics.functional.sequence_kl import sequence_log_prob
    from dllm_lit.samplers.oracle_guide import OracleGuide

    chain = synthetic_chain(16, 4, eps=0.02, seed=2)
    den = OracleDenoiser(chain, dtype=torch.float64)
    x = chain.sample(3, 20, seed=0)
    z = torch.full_like(x, den.mask_id)
    g = OracleGuide(den, z, x)
    for pos in ([5, 0, 19], [12, 7, 3], [6, 8, 18]):
        g.reveal(torch.arange(3), torch.tensor(pos))
        z[torch.arange(3), torch.tensor(pos)] = x[torch.arange(3), torch.tensor(pos)]
    fresh = OracleGuide(den, z, x)
    masked = z == den.mask_id
    assert torch.allclose(g.tilt[masked], fresh.tilt[masked], rtol=0, atol=1e-12)
    assert torch.allclose(g.log_twist, fresh.log_twist, rtol=0, atol=1e-12)
    b, p = masked.nonzero(as_tuple=True)
    exact = den.probs_at(z, b, p).gather(1, x[b, p, None]).squeeze(1).log()
    assert torch.allclose(g.tilt[b, p], exact, rtol=0, atol=1e-12)
    full = OracleGuide(den, torch.full_like(x, den.mask_id), x).log_twist  # nothing revealed: log p(x)
    assert torch.allclose(full, sequence_log_prob(chain, x).to(torch.float64), rtol=0, atol=1e-10)


@pytest.mark.parametrize("resample_below", [0.0, 1.0])
def test_smc_estimate_is_unbiased(resample_below) -> None:
    """E[Z_K] = q(x) for one x of a V = 3, T = 5, 3-step world: the mean of Z_K over 4000 keyed runs lies within 4
    standard errors of the exact q(x), for K = 1 and K = 4 (with and without resampling at every step)."""
    from dllm_lit import rng
    from dllm_lit.samplers.path_smc import smc_log_q

    counts = [2, 2, 1]
    chain, den, law = _world(5, counts)
    exact = mdlm_paper_law(chain, 5, 3, counts)
    x = torch.tensor([[0, 2, 1, 1, 0]])
    code = int((x[0] * torch.tensor([81, 27, 9, 3, 1])).sum())
    R = 4000
    xr = x.expand(R, 5).clone()
    for K in (1, 4):
        keys = rng.sequence_keys(11 + K, torch.arange(R), rng.Stream.ORDER)
        z = smc_log_q(law, torch.full_like(xr, den.mask_id), xr, keys, K, resample_below=resample_below).exp()
        assert abs(float(z.mean()) - float(exact[code])) < 4 * float(z.std()) / R ** 0.5


@pytest.mark.parametrize("resample_below", [0.0, 1.0])
def test_sandwich_brackets_log_q_and_tightens_with_k(resample_below) -> None:
    """paper-MDLM, V = 3, T = 5, 3 steps, 400 samples: the mean lower end is below the mean exact log q(x) and the
    mean upper end above it (each within 3 standard errors of the right side), and the gap shrinks from K = 1 to 8;
    without resampling and with it at every step (the conditional SMC keeping the own path's lineage)."""
    from dllm_lit.samplers import MDLMPaper
    from dllm_lit.samplers.path_smc import smc_sandwich

    T, S, N = 5, 3, 400
    chain, den, law = _world(T, [2, 2, 1])
    s = MDLMPaper(den)
    s.connect(chain)
    idx = torch.arange(N)
    x, _ = s.generate_with_stats(idx, T, S, 0)
    log_q = mdlm_paper_law(chain, T, S)[(x * 3 ** torch.arange(T - 1, -1, -1)).sum(1)].log()
    gaps = []
    for K in (1, 8):
        order = s.rounds(T, S).order(0, idx, S, T)
        r = smc_sandwich(law, torch.full_like(x, den.mask_id), x, order, idx, 0, K, resample_below)
        lo, hi = r["log_q_iw_lower"] - log_q, r["log_q_iw_upper"] - log_q
        assert float(lo.mean()) < 3 * float(lo.std()) / N ** 0.5
        assert float(hi.mean()) > -3 * float(hi.std()) / N ** 0.5
        gaps.append(float((hi - lo).mean()))
    assert gaps[1] < gaps[0] / 2


def test_estimates_do_not_depend_on_the_batch_and_leave_the_samples_unchanged() -> None:
    from dllm_lit.markov import synthetic_chain
    from dllm_lit.samplers import MDLMPaper

    chain = synthetic_chain(16, 4, eps=0.02, seed=2)
    s = MDLMPaper()
    s.connect(chain)
    x0, st0 = s.generate_with_stats(torch.arange(6), 12, 4, 3)
    s.sandwich_paths, s.sandwich_method = 3, "smc"
    x1, st1 = s.generate_with_stats(torch.arange(6), 12, 4, 3)
    assert torch.equal(x0, x1) and torch.equal(st0["log_q"], st1["log_q"])
    _, a = s.generate_with_stats(torch.arange(0, 2), 12, 4, 3)
    _, b = s.generate_with_stats(torch.arange(2, 6), 12, 4, 3)
    for key in ("log_q_iw_lower", "log_q_iw_upper"):
        assert torch.equal(st1[key], torch.cat([a[key], b[key]]))
    assert bool((st1["log_q_iw_lower"] <= 0).all())


def test_exact_sampler_reads_log_p() -> None:
    """One position per step on the exact oracle: every path has weight p(x), so both ends are log p(x) (1e-5,
    float32 rows against the float64 table of the twist)."""
    from dllm_lit.markov import synthetic_chain
    from dllm_lit.metrics.functional.sequence_kl import sequence_log_prob
    from dllm_lit.samplers import MDLMPaper

    chain = synthetic_chain(16, 4, eps=0.02, seed=2)
    s = MDLMPaper()
    s.connect(chain)
    s.sandwich_paths, s.sandwich_method = 4, "smc"
    x, st = s.generate_with_stats(torch.arange(8), 10, 10, 1)
    lp = sequence_log_prob(chain, x).to(torch.float64)
    for key in ("log_q_iw_lower", "log_q_iw_upper"):
        assert torch.allclose(st[key], lp, rtol=0, atol=1e-5)


def test_sandwich_method_is_checked_and_in_the_run_identity_when_set() -> None:
    from dllm_lit.results.metric_options import SandwichOptions, identity

    with pytest.raises(ValueError, match="sandwich_method"):
        SandwichOptions(sandwich_paths=4, sandwich_method="particles")
    # the default (the behaviour before the option) stays out of the identity, so stored runs keep matching
    assert identity(SandwichOptions(sandwich_paths=4)) == {"sandwich_paths": 4}
    assert identity(SandwichOptions(sandwich_paths=4, sandwich_method="smc"))["sandwich_method"] == "smc"
    from dllm_lit.results.writer import ResultsWriter  # what the engine reads to set the sampler's method

    settings = ResultsWriter(metric_options={"sandwich_paths": 4, "sandwich_method": "smc"}).metric_settings()
    assert settings["sandwich_method"] == "smc"
