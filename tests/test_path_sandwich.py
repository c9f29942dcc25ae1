"""The importance-weighted path sandwich (dllm_lit.samplers.path_sandwich) and the certified bracket.

Fast checks: the samples and log q do not change when the sandwich is on; with K = 1 the upper estimate is the
own order's log q; with many fresh orders both estimates reach the exact log q(x) of a V = 3 chain (the law by
dynamic programming, dllm_lit.exact.mdlm_paper_law), within 0.02 nats; an exact sampler's orders all give log p(x);
the metric's sandwich columns, their refusals (few sequences, every value equal), the sandwich's two bounds at one-sided
(1 + level) / 2 each (at one step, one path: the upper end's interval is ``seq_kl_upper``'s) and the bracket's
Bonferroni levels.
Coverage over seeds: ``tests/test_sequence_kl_coverage.py`` (slow).
"""
from __future__ import annotations

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.exact import mdlm_paper_law
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.metrics.functional.dv_bound import DVBound
from dllm_lit.metrics.functional.path_sandwich import (MIN_INTERVAL_N, certified_bracket, interval_refusal, mean_bounds,
                                                       sandwich_intervals)
from dllm_lit.metrics.functional.mean_interval import skew_corrected_t_interval
from dllm_lit.metrics.functional.sequence_kl import sequence_log_prob
from dllm_lit.metrics.sequence_kl import SequenceKL
from dllm_lit.results.metric_options import SandwichOptions
from dllm_lit.samplers import MDLM, LLaDA, MDLMPaper

KERNEL3 = [[0.6, 0.3, 0.1], [0.2, 0.1, 0.7], [0.5, 0.25, 0.25]]


def _v3() -> MarkovChain:
    return MarkovChain.from_kernel(torch.tensor(KERNEL3, dtype=torch.float64))


@pytest.mark.parametrize("make", [MDLMPaper, lambda: LLaDA(remasking="random", temperature=1.0), MDLM])
def test_sandwich_leaves_the_samples_and_log_q_unchanged(make) -> None:
    chain = synthetic_chain(16, 4, eps=0.02, seed=2)
    s = make()
    s.connect(chain)
    x0, st0 = s.generate_with_stats(torch.arange(6), 12, 4, 3)
    s.sandwich_paths = 1
    x1, st1 = s.generate_with_stats(torch.arange(6), 12, 4, 3)
    assert torch.equal(x0, x1) and torch.equal(st0["log_q"], st1["log_q"])
    # K = 1: the upper estimate is the own order alone, the lower one a fresh order's log q (<= 0)
    assert torch.equal(st1["log_q_iw_upper"], st1["log_q"]) and bool((st1["log_q_iw_lower"] <= 0).all())


def test_rescoring_is_the_sampler_law_and_fresh_orders_are_uniform() -> None:
    """paper-MDLM, V = 3, T = 5, 2 steps, float64 oracle: sum_o q(o) q(x | o) over the 10 orders, each q(x | o)
    rescored as the sandwich does, is the exact q(x) of the dynamic program (1e-12); the fresh orders of
    path_seed are uniform over the 10 (chi-square over 1000 sequences, p > 1e-3)."""
    from scipy.stats import chisquare

    from dllm_lit.exact import random_order_steps_law
    from dllm_lit.samplers.draws import drawn_log_prob
    from dllm_lit.decoding.ordered_decoding import random_order_steps
    from dllm_lit.samplers.path_sandwich import path_seed
    from dllm_lit.samplers.reference_scoring import teacher_forced_log_q
    from dllm_lit.samplers.selection import transfer_schedule

    chain, T, steps = _v3(), 5, 2
    s = MDLMPaper(OracleDenoiser(chain, dtype=torch.float64))
    s.connect(chain)
    x, _ = s.generate_with_stats(torch.arange(6), T, steps, 1)
    laws = random_order_steps_law(T, transfer_schedule(T, steps))
    law = lambda j, b, p, probs, tok: drawn_log_prob(probs, tok)  # noqa: E731
    q = sum(w * teacher_forced_log_q(s.denoiser, x, torch.tensor([d] * 6), steps - 1, law, floor=False).sum(1).exp()
            for d, w in laws.items())
    code = (x * torch.tensor([3 ** (T - 1 - i) for i in range(T)])).sum(1)
    assert torch.allclose(q, mdlm_paper_law(chain, T, steps)[code], rtol=1e-12, atol=0)
    fresh = [random_order_steps(path_seed(1, k), torch.arange(1000), steps, T, 0, T, 1) for k in (1, 2)]
    seen = [tuple(d) for d in fresh[0].tolist()]
    counts = [seen.count(d) for d in laws]
    assert sum(counts) == 1000 and chisquare(counts).pvalue > 1e-3
    assert not torch.equal(fresh[0], fresh[1])  # another path, another order


def test_an_exact_sampler_gives_log_p_on_every_order() -> None:
    chain = synthetic_chain(12, 3, eps=0.05, seed=4)
    s = MDLMPaper(OracleDenoiser(chain, dtype=torch.float64))
    s.connect(chain)
    s.sandwich_paths = 4
    x, st = s.generate_with_stats(torch.arange(5), 10, 10, 0)
    lp = sequence_log_prob(chain, x)
    for key in ("log_q_iw_lower", "log_q_iw_upper"):
        assert (st[key] - lp).abs().max() < 1e-10, key
    assert s.law_is_exact(10, 10) and not s.law_is_exact(10, 5)


def test_refusals_and_one_sided_bounds() -> None:
    assert interval_refusal(torch.ones(MIN_INTERVAL_N - 1)) == "few"
    assert interval_refusal(torch.full((64,), 0.3)) == "flat"
    assert interval_refusal(torch.tensor([0.0] * 63 + [float("nan")])) == "missing"
    v = torch.linspace(0, 1, 64, dtype=torch.float64) ** 3
    lo, hi = mean_bounds(v, 2, 0.95)
    assert lo < float(v.mean()) / 2 < hi
    assert mean_bounds(v[:8], 2, 0.95) is None and mean_bounds(torch.full((64,), 0.3), 2, 0.95) is None
    with pytest.raises(ValueError, match="sandwich_paths"):
        SandwichOptions(sandwich_paths=-1)


def test_bracket_takes_the_best_bound_at_the_bonferroni_level() -> None:
    g = torch.Generator().manual_seed(0)
    u_path = 3.0 + torch.randn(64, generator=g, dtype=torch.float64)
    u_lo = 2.0 + torch.randn(64, generator=g, dtype=torch.float64)
    u_hi = 2.5 + torch.randn(64, generator=g, dtype=torch.float64)
    dv = DVBound(0.1, (0.01, 0.01), 31)
    lo, hi = certified_bracket(dv, u_path, u_lo, u_hi, 4, 0.95)
    assert lo == max(mean_bounds(u_lo, 4, 0.975)[0], dv.interval(0.975)[0])
    assert hi == min(mean_bounds(u_path, 4, 0.975)[1], mean_bounds(u_hi, 4, 0.975)[1])
    assert certified_bracket(dv, None, None, None, 4, 0.95) == (max(0.0, dv.interval(0.95)[0]), None)
    assert certified_bracket(dv, u_path, u_lo, u_hi, 4, 0.95, exact=True) == (0.0, 0.0)


def test_metric_reports_the_sandwich_columns() -> None:
    chain = synthetic_chain(16, 4, eps=0.02, seed=2)
    s = MDLMPaper()
    s.connect(chain)
    s.sandwich_paths = 2
    N, T = 40, 12
    x, st = s.generate_with_stats(torch.arange(N), T, 3, 5)
    m = SequenceKL(chain)
    m.update(x, {"index": torch.arange(N), **st})
    values, own = m.compute(), m.own_intervals(0.95)
    lp = sequence_log_prob(chain, x)
    assert values["seq_kl_iw_lower"] == pytest.approx(float((st["log_q_iw_lower"] - lp).mean()) / T, rel=1e-12)
    assert values["seq_kl_iw_upper"] == pytest.approx(float((st["log_q_iw_upper"] - lp).mean()) / T, rel=1e-12)
    assert own["seq_kl_iw_lower"][0] <= values["seq_kl_iw_lower"] <= own["seq_kl_iw_upper"][1] or \
        own["seq_kl_iw_lower"][0] <= values["seq_kl_iw_upper"]
    assert 0.0 <= values["seq_kl_bracket_lo"] <= values["seq_kl_bracket_hi"]


def test_sandwich_bounds_bracket_jointly_at_the_level() -> None:
    """The sandwich's intervals are each estimate's two-sided skewness-corrected t interval at the level, so its low
    and high ends are one-sided at (1 + level) / 2 each and together bracket the truth at the level; at one step
    (one path, both ends the exact log q) the upper end's interval is seq_kl_upper's (to 1e-9: u and the sandwich's
    log q are computed apart).  One-sided 95% each under-covered in a 200-seed audit (92.0%, V = 3, one step)."""
    g = torch.Generator().manual_seed(1)
    lo_v, hi_v = (torch.randn(64, generator=g, dtype=torch.float64).exp() for _ in range(2))
    b_lo, b_hi = sandwich_intervals(lo_v, hi_v, 5, 0.95)
    assert b_lo == skew_corrected_t_interval(lo_v / 5, 0.95, point=float((lo_v / 5).mean()))
    assert b_hi == mean_bounds(hi_v, 5, 0.975) and b_hi[1] > mean_bounds(hi_v, 5, 0.95)[1]
    assert sandwich_intervals(lo_v[:8], None, 5, 0.95) == (None, None)
    chain = _v3()
    s = MDLMPaper(OracleDenoiser(chain, dtype=torch.float64))
    s.connect(chain)
    s.sandwich_paths, s.sandwich_method = 4, "smc"
    x, st = s.generate_with_stats(torch.arange(64), 5, 1, 0)
    m = SequenceKL(chain)
    m.update(x, {"index": torch.arange(64), **st})
    own = m.own_intervals(0.95)
    assert own["seq_kl_iw_upper"] == pytest.approx(own["seq_kl_upper"], rel=1e-9, abs=1e-12)
    assert own["seq_kl_iw_lower"] == pytest.approx(own["seq_kl_upper"], rel=1e-9, abs=1e-12)
