"""Coverage of the sequence-KL intervals on cases with an exact truth, 200 seeds each (slow).

Truths: AR(beta) by its closed form, MDLM on a V = 3 chain by the dynamic program of
``dllm_lit/exact/`` (helpers in ``benchmarks/seq_kl_audit.py``), exact samplers 0.

* ``seq_kl_lower``'s low end is a one-sided 95% lower confidence bound on a lower bound of the
  truth: it must be <= the truth in >= 93% of the seeds (it is a bound, so more is expected).
* ``seq_kl_upper``'s interval (Hall's skewness-corrected Student t of the mean of u / T) targets
  E_o KL(p_s(. | o) || p) / T, which equals the truth for AR (its log q is its exact log-probability):
  two-sided 95%, accepted in [93%, 97%] over 1000 seeds (u alone, through ``upper_interval``, which
  the metric's interval equals in the first 200 seeds).  At 200 seeds the binomial spread of a 95%
  interval's coverage is 1.5 points, and seeds 0-199 of the V = 3 case are an unlucky draw for every
  method (Student t 90.0% there, 94.5% over 2000 seeds), hence 1000.
* ``kl_cs``'s centred interval, for AR, against the exact population transition KL
  sum_i w_i KL(P_beta(. | i) || P(. | i)) (w the pooled law of the source states x_0 .. x_{T-2}),
  which is T / (T - 1) times the per-token sequence KL.  It is the bootstrap spread around a biased
  estimate, not a confidence interval for that truth, and misses the 93-97% target both ways:
  measured 90.0% (V = 3, AR(2), 64 x 5), 99.5% and 98.0% (V = 64, AR(1.25) and AR(0.9), 64 x 32).  Checked >= 85% as a
  guard (a regression of the estimator or its interval), not as the target.
* At an exact zero (FHS and paper-MDLM at steps = T, declared exact), ``seq_kl_upper`` reads 0 with [0, 0] in
  every seed, N = 8 included.
* The sharp chain and small N: no interval below 32 sequences or when every log-ratio is equal; where printed it
  covers.
* The importance-weighted sandwich and the certified bracket cover the DP truth on V = 3 (K = 8).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.metrics.bootstrap import SequenceBootstrapper
from dllm_lit.metrics.functional.sequence_kl import sequence_log_prob, upper_interval
from dllm_lit.metrics.sequence_kl import SequenceKL
from dllm_lit.samplers import AR, FHS, MDLM, MDLMPaper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from seq_kl_audit import KERNEL3, ar_truth, dp_truth  # noqa: E402

SEEDS = 200
UPPER_SEEDS = 1000
pytestmark = pytest.mark.slow


def _intervals(chain: MarkovChain, sampler, N: int, T: int, steps: int | None, seed: int):
    x, stats = sampler.generate_with_stats(torch.arange(N), T, steps, seed)
    m = SequenceBootstrapper(SequenceKL(chain), num_resamples=200, seed=seed)
    exact = torch.full((N,), float(sampler.law_is_exact(T, steps)))  # as the engine adds it
    m.update(x, {"index": torch.arange(N), **stats, "exact_law": exact}, index=torch.arange(N))
    return m.compute(), m.interval()


def _v3() -> MarkovChain:
    return MarkovChain.from_kernel(torch.tensor(KERNEL3, dtype=torch.float64))


def _cases():
    v3 = _v3()
    syn = synthetic_chain(64, 8, eps=1e-3, seed=0)
    yield "v3_ar_beta2", v3, AR(beta=2.0, chain=v3), 64, 5, None, ar_truth(v3, 2.0, 5), True
    yield "syn64_ar_beta1.25", syn, AR(beta=1.25, chain=syn), 64, 32, None, ar_truth(syn, 1.25, 32), True
    yield "syn64_ar_beta0.9", syn, AR(beta=0.9, chain=syn), 64, 32, None, ar_truth(syn, 0.9, 32), True
    from dllm_lit.exact import mdlm_law

    mdlm = MDLM(OracleDenoiser(v3, dtype=torch.float64))
    mdlm.connect(v3)
    yield "v3_mdlm_s2", v3, mdlm, 64, 5, 2, dp_truth(v3, mdlm_law(v3, 5, 2), 5), False


@pytest.mark.parametrize("case", [c[0] for c in _cases()])
def test_lower_bound_and_upper_interval_cover(case: str) -> None:
    name, chain, sampler, N, T, steps, truth, upper_is_truth = next(c for c in _cases() if c[0] == case)
    below, cs_covered, trans_truth = 0, 0, truth * T / (T - 1)
    for seed in range(SEEDS):
        values, intervals = _intervals(chain, sampler, N, T, steps, seed)
        below += intervals["seq_kl_lower"][0] <= truth
        lo, hi = intervals["kl_cs"]
        cs_covered += lo <= trans_truth <= hi
        x, stats = sampler.generate_with_stats(torch.arange(N), T, steps, seed)
        u = stats["log_q"].to(torch.float64) - sequence_log_prob(chain, x)
        assert intervals["seq_kl_upper"] == upper_interval(u, T, 0.95)
    print(f"{name}: lower confidence bound <= truth {below / SEEDS:.3f}"
          + (f", kl_cs interval covers {cs_covered / SEEDS:.3f}" if upper_is_truth else ""))
    assert below / SEEDS >= 0.93, (name, below / SEEDS)
    if upper_is_truth:
        covered = 0
        for seed in range(UPPER_SEEDS):
            x, stats = sampler.generate_with_stats(torch.arange(N), T, steps, seed)
            lo, hi = upper_interval(stats["log_q"].to(torch.float64) - sequence_log_prob(chain, x), T, 0.95)
            covered += lo <= truth <= hi
        print(f"{name}: upper interval covers {covered / UPPER_SEEDS:.3f} of {UPPER_SEEDS} seeds")
        assert 0.93 <= covered / UPPER_SEEDS <= 0.97, (name, covered / UPPER_SEEDS)
        assert cs_covered / SEEDS >= 0.85, (name, cs_covered / SEEDS)


def test_exact_zero_reads_zero() -> None:
    """FHS and paper-MDLM at steps = T (float32 oracle, declared exact): seq_kl_upper = 0 with [0, 0] in every seed,
    also the case that escaped the former float32 tolerance (V = 3 kernel, T = 6, N = 8, seed 23 read 1.02e-8);
    the lower confidence bound is <= 0 (the truth) in >= 93% of them."""
    chain = synthetic_chain(27, 5, eps=0.02, seed=1)
    v3 = _v3()
    for ch, sampler, N, T in ((chain, FHS(), 32, 16), (chain, MDLMPaper(), 32, 16), (v3, MDLMPaper(), 8, 6)):
        sampler.connect(ch)
        below = 0
        for seed in range(SEEDS):
            values, intervals = _intervals(ch, sampler, N, T, T, seed)
            assert values["seq_kl_upper"] == 0.0 and intervals["seq_kl_upper"] == (0.0, 0.0), seed
            assert values["seq_kl_bracket_lo"] == values["seq_kl_bracket_hi"] == 0.0
            below += intervals["seq_kl_lower"][0] <= 0.0
        print(f"{type(sampler).__name__} exact, N = {N}: lower confidence bound <= 0 in {below / SEEDS:.3f}")
        assert below / SEEDS >= 0.93, below / SEEDS


SHARP3 = [[0.05, 0.9, 0.05], [0.05, 0.05, 0.9], [0.9, 0.05, 0.05]]


@pytest.mark.parametrize("N", [8, 32, 64, 128])
def test_upper_interval_on_the_sharp_chain_and_small_n(N: int) -> None:
    """AR(3) on the sharp V = 3 kernel, T = 6 (most sequences share one log-ratio), and AR(2) on KERNEL3, T = 5:
    below 32 sequences no interval is printed; at 32 and more, the interval is printed unless every log-ratio is
    equal, and where printed it covers the truth in 93-97% of 1000 seeds (or in >= 93% when printed in fewer than
    half of the seeds: the flat samples it skips are those where the estimate sits above the truth)."""
    v3, sharp = _v3(), MarkovChain.from_kernel(torch.tensor(SHARP3, dtype=torch.float64))
    for name, chain, beta, T in (("sharp_ar3", sharp, 3.0, 6), ("v3_ar2", v3, 2.0, 5)):
        ar, truth = AR(beta=beta, chain=chain), ar_truth(chain, beta, T)
        printed = covered = 0
        for seed in range(UPPER_SEEDS):
            x, stats = ar.generate_with_stats(torch.arange(N), T, None, seed)
            ci = upper_interval(stats["log_q"].to(torch.float64) - sequence_log_prob(chain, x), T, 0.95)
            printed += ci is not None
            covered += ci is not None and ci[0] <= truth <= ci[1]
        share = covered / max(printed, 1)
        print(f"{name} N = {N}: interval printed in {printed / UPPER_SEEDS:.3f} of seeds, covers {share:.3f} of those")
        if N < 32:
            assert printed == 0
        elif printed >= UPPER_SEEDS / 2:
            assert 0.93 <= share <= 0.97, (name, N, share)
        else:
            assert share >= 0.93, (name, N, share)


@pytest.mark.parametrize("case", ["paper_s2", "mdlm_s2"])
def test_sandwich_bounds_cover(case: str) -> None:
    """The sandwich (K = 8) on V = 3, T = 5, 2 steps, N = 64 (truth by dynamic programming): its lower confidence
    bound <= the truth and its upper one >= the truth in >= 95% of 200 seeds, and so the certified bracket."""
    from dllm_lit.exact import mdlm_law, mdlm_paper_law

    v3 = _v3()
    sampler = (MDLMPaper if case == "paper_s2" else MDLM)(OracleDenoiser(v3, dtype=torch.float64))
    sampler.connect(v3)
    sampler.sandwich_paths = 8
    truth = dp_truth(v3, (mdlm_paper_law if case == "paper_s2" else mdlm_law)(v3, 5, 2), 5)
    shares = sandwich_shares(v3, sampler, 64, 5, 2, truth, SEEDS)
    print(f"{case}: iw lower <= truth, iw upper >= truth, bracket lo / hi: {shares}")
    assert min(shares) >= 0.95


def sandwich_shares(chain: MarkovChain, sampler, N: int, T: int, steps: int, truth: float,
                    seeds: int) -> tuple[float, ...]:
    """Shares of seeds 0 .. seeds-1 with the sandwich's lower confidence bound <= ``truth``, its upper one >= it,
    and the same for the certified bracket's ends."""
    ok = torch.zeros(4)
    for seed in range(seeds):
        values, intervals = _intervals(chain, sampler, N, T, steps, seed)
        ok += torch.tensor([intervals["seq_kl_iw_lower"][0] <= truth, intervals["seq_kl_iw_upper"][1] >= truth,
                            values["seq_kl_bracket_lo"] <= truth, values["seq_kl_bracket_hi"] >= truth]).float()
    return tuple(round(float(v) / seeds, 3) for v in ok)
