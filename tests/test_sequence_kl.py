"""Sequence-level KL bracket, floor- and Miller-Madow-corrected KL, and intervals that contain their estimate.

Exact checks on tiny chains (V = 3): the law of a sampler *given its unmasking order* is computed by
dynamic programming over partially masked states (``dllm_lit/exact/``), for every order, so
E_order KL(p_s(. | order) || p) - the target of ``seq_kl_upper`` - and KL(p_s || p) are exact.
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.metrics.bootstrap import SequenceBootstrapper
from dllm_lit.metrics.functional.sequence_kl import miller_madow_bias, sequence_kl_values, sequence_log_prob
from dllm_lit.metrics.functional.transition import transition_codes, transition_metrics_from_counts
from dllm_lit.metrics.sequence_kl import SequenceKL
from dllm_lit.metrics.transition import TransitionMetrics
from dllm_lit.samplers import AR, FHS, MDLM, MDLMPaper
from dllm_lit.samplers.schedules import time_grid
from dllm_lit.exact import PosteriorCache, chain_law, law_vector, product_step, random_order_steps_law

#: strictly positive kernel: every sequence has p(x) > 0, so every KL here is finite
KERNEL = [[0.6, 0.3, 0.1], [0.2, 0.1, 0.7], [0.5, 0.25, 0.25]]


@pytest.fixture(scope="module")
def chain() -> MarkovChain:
    return MarkovChain.from_kernel(torch.tensor(KERNEL, dtype=torch.float64))


def _u(sampler, chain, n: int, T: int, steps: int, seed: int) -> torch.Tensor:
    x, stats = sampler.generate_with_stats(torch.arange(n), T, steps, seed)
    return stats["log_q"] - sequence_log_prob(chain, x)


# ---------------------------------------------------------------- exactness: u = 0 for exact samplers
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-6)])
def test_exact_samplers_have_zero_upper_end(dtype, tol) -> None:
    """MDLMPaper at steps = T and FHS commit one position per step from its exact conditional, so
    log q = log p(x) and u = 0 up to float error: per token |u| / T <= 1e-12 (float64 oracle) or
    1e-6 (float32 oracle, the default).  AR (exact chain samples) gives u = 0 exactly."""
    chain = synthetic_chain(27, 5, eps=0.02, seed=1)
    T = 48
    for sampler in (MDLMPaper(OracleDenoiser(chain, dtype=dtype)), FHS(OracleDenoiser(chain, dtype=dtype))):
        sampler.connect(chain)
        u = _u(sampler, chain, 16, T, T, 5)
        assert u.abs().max().item() / T <= tol, type(sampler).__name__
    ar = AR(chain=chain)
    assert torch.equal(_u(ar, chain, 16, T, None, 5), torch.zeros(16, dtype=torch.float64))


# ---------------------------------------------------------------- exact laws given the order
def _law_given_order(chain: MarkovChain, post: PosteriorCache, decode: tuple[int, ...], fill_step: int | None) -> torch.Tensor:
    """Law of the output when position i is decoded at step decode[i]; the positions of one step are drawn
    independently from their exact marginals (argmax at ``fill_step``)."""
    M, V, T = chain.mask_id, chain.vocab_size, len(decode)
    dist = {(M,) * T: 1.0}
    for j in sorted(set(decode)):
        def options(z, j=j):
            g = post(z)
            out = []
            for i, v in enumerate(z):
                if decode[i] != j:
                    out.append([(v, 1.0)])
                elif j == fill_step:
                    out.append([(int(g[i].argmax()), 1.0)])
                else:
                    out.append([(w, float(g[i, w])) for w in range(V) if g[i, w] > 0])
            return out
        dist = product_step(dist, options)
    return law_vector(dist, V, T)


def _mdlm_orders(T: int, steps: int) -> dict[tuple[int, ...], float]:
    """MDLM ddpm_cache: each position's decode step i.i.d., P(j) = t_j - t_{j+1}, P(fill = steps) = t_min."""
    ts = time_grid(steps).tolist()
    p = [ts[j] - ts[j + 1] for j in range(steps)]
    p.append(1.0 - sum(p))
    return {d: math.prod(p[j] for j in d) for d in itertools.product(range(steps + 1), repeat=T)}


def _paper_orders(T: int, steps: int) -> dict[tuple[int, ...], float]:
    """Paper MDLM: a uniformly random order cut into k_i = T // S + [i < T % S] positions per step."""
    return random_order_steps_law(T, [T // steps + (1 if i < T % steps else 0) for i in range(steps)])


def _kl(a: torch.Tensor, b: torch.Tensor) -> float:
    keep = a > 0
    return float((a[keep] * (a[keep] / b[keep]).log()).sum())


def _transition_kl(law: torch.Tensor, chain: MarkovChain, T: int) -> float:
    """Population transition KL of a law over V^T sequences (the plug-in with expected counts)."""
    V = chain.vocab_size
    seqs = torch.tensor(list(itertools.product(range(V), repeat=T)))
    counts = torch.zeros(V, V, dtype=torch.float64)
    for t in range(T - 1):
        counts.index_put_((seqs[:, t], seqs[:, t + 1]), law, accumulate=True)
    return transition_metrics_from_counts(counts, chain)["kl"]


CASES = {  # name -> (sampler factory, T, steps, orders, fill step)
    "mdlm_T4_s2": (lambda den: MDLM(den), 4, 2, _mdlm_orders, 2),
    "paper_T4_s2": (lambda den: MDLMPaper(den), 4, 2, _paper_orders, None),
    "paper_T6_s3": (lambda den: MDLMPaper(den), 6, 3, _paper_orders, None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_upper_end_is_unbiased_and_the_bracket_holds(chain: MarkovChain, case: str) -> None:
    """E[u] / T equals E_order KL(p_s(. | order) || p) / T computed by enumeration (orders x DP), within
    4 standard errors of the mean of N = 20000 sequences; and the exact values satisfy
    (T - 1)/T KL_trans(p_s) <= KL(p_s || p)/T <= E_order KL(p_s(. | order) || p)/T."""
    make, T, steps, orders, fill = CASES[case]
    post = PosteriorCache(chain)
    p = chain_law(chain, T)
    expected_u, p_s = 0.0, torch.zeros_like(p)
    for d, w in orders(T, steps).items():
        law = _law_given_order(chain, post, d, fill)
        expected_u += w * _kl(law, p)
        p_s += w * law
    seq_kl = _kl(p_s, p)
    lower = (T - 1) * _transition_kl(p_s, chain, T)
    assert lower <= seq_kl + 1e-12 and seq_kl <= expected_u + 1e-12
    sampler = make(OracleDenoiser(chain, dtype=torch.float64))
    sampler.connect(chain)
    N = 20000
    u = _u(sampler, chain, N, T, steps, seed=7)
    se = float(u.std()) / math.sqrt(N)
    assert abs(float(u.mean()) - expected_u) <= 4 * se, (float(u.mean()), expected_u, se)


# ---------------------------------------------------------------- log q recording leaves samples alone
# generate_with_stats gives generate's samples draw for draw, log q does not depend on the batch, is finite and <= 0
# where recorded, NaN with a one-line reason otherwise: tests/test_sampler_contract.py (test_log_q, test_chunks;
# LOG_Q_REASON lists which cases must record it and what the others' reasons name)


# ---------------------------------------------------------------- the metric
def test_miller_madow_and_values(chain: MarkovChain) -> None:
    """entropy_mm = sum_i (n_i/M) [H(p_hat(.|i)) + (m_i - 1)/(2 n_i)] per conditioning state, kl_mm = nll - entropy_mm."""
    x = synthetic_chain(12, 4, eps=0.05, seed=2).sample(30, 20, seed=1)
    ch = synthetic_chain(12, 4, eps=0.05, seed=2)
    codes = transition_codes(x, 12)
    counts = torch.bincount(codes.reshape(-1), minlength=144).view(12, 12).double()
    M = counts.sum()
    direct = 0.0
    for i in range(12):
        n = counts[i].sum()
        if n == 0:
            continue
        p = counts[i][counts[i] > 0] / n
        direct += float(n / M) * (float(-(p * p.log()).sum()) + (p.numel() - 1) / (2 * float(n)))
    plug = transition_metrics_from_counts(counts.long(), ch)
    vals = sequence_kl_values(codes, None, ch, None)
    assert vals["entropy_mm"] == pytest.approx(direct, rel=1e-12)
    assert vals["kl_mm"] == pytest.approx(plug["nll"] - direct, rel=1e-9, abs=1e-12)
    pairs, c = torch.unique(codes, return_counts=True)
    assert miller_madow_bias(pairs, c, 12) == pytest.approx(direct - plug["entropy"], rel=1e-9)
    assert vals["kl_excess"] is None and vals["seq_kl_upper"] is None


def _bootstrapped(chain, row_x, row_stats, chunks) -> SequenceBootstrapper:
    m = SequenceBootstrapper(SequenceKL(chain), num_resamples=30, seed=4)
    for sl in chunks:
        stats = {"index": torch.arange(row_x.shape[0])[sl], "log_q": row_stats["log_q"][sl]}
        m.update(row_x[sl], stats, index=stats["index"])
    return m


def test_pairing_with_the_reference_row(chain: MarkovChain) -> None:
    """kl_excess = kl(row) - kl(reference); the reference row paired with itself gives 0 and [0, 0];
    values and intervals do not depend on the order in which chunks arrive."""
    ch = synthetic_chain(10, 3, eps=0.05, seed=3)
    N, T = 40, 24
    ref_sampler, row_sampler = AR(chain=ch), MDLM()
    row_sampler.connect(ch)
    ref_x, ref_stats = ref_sampler.generate_with_stats(torch.arange(N), T, None, 9)
    row_x, row_stats = row_sampler.generate_with_stats(torch.arange(N), T, 4, 9)
    forward = [slice(0, 15), slice(15, 40)]
    backward = [slice(25, 40), slice(0, 25)]
    ref = _bootstrapped(ch, ref_x, ref_stats, forward)
    ref.metric.pair_with(ref.metric)
    values = ref.compute()
    assert values["kl_excess"] == 0.0 and values["seq_kl_upper"] == 0.0
    assert ref.interval()["kl_excess"] == (0.0, 0.0)
    results = []
    for chunks, ref_chunks in ((forward, forward), (backward, forward), (forward, backward)):
        ref = _bootstrapped(ch, ref_x, ref_stats, ref_chunks)
        row = _bootstrapped(ch, row_x, row_stats, chunks)
        row.metric.pair_with(ref.metric)
        results.append((row.compute(), row.interval()))
    assert results[0] == results[1] == results[2]
    values, intervals = results[0]
    kl = lambda x: TransitionMetrics(ch).forward(x)["kl"]  # noqa: E731
    assert values["kl_excess"] == pytest.approx(kl(row_x) - kl(ref_x), rel=1e-12)
    assert values["trans_kl_corrected"] == pytest.approx((T - 1) / T * values["kl_excess"], rel=1e-12)
    for key, interval in intervals.items():
        if interval is None:  # no sandwich stats: no sandwich intervals; the bracket ends are bounds themselves
            assert key.startswith(("seq_kl_iw_", "seq_kl_bracket_")), key
            continue
        lo, hi = interval
        assert lo <= values[key] <= hi, key


def test_every_interval_contains_its_estimate() -> None:
    """The hardening issue: with the per-key policies no transition interval excludes its point value,
    for exact chain samples (where the plug-in bias dominates) and for a biased sampler."""
    ch = synthetic_chain(27, 6, eps=0.02, seed=5)
    mdlm = MDLM()
    mdlm.connect(ch)
    for x in (ch.sample(48, 64, seed=2), mdlm.generate(torch.arange(48), 64, 4, 2)):
        m = TransitionMetrics(ch, per_sequence=True)
        m.update(x)
        values, intervals = m.compute(), m.bootstrap_ci(num_resamples=50, seed=1)
        assert intervals["support_frac"] is None
        for key, ci in intervals.items():
            if ci is not None:
                assert ci[0] <= values[key] <= ci[1], key
