"""The one interval path reproduces, bit for bit, the intervals each metric had before it.

Before the metrics shared :func:`dllm_lit.metrics.functional.bootstrap.bootstrap_interval`, the
transition metrics had their own basic bootstrap (``bootstrap_transition_cis``), the n-gram
diversities a percentile bootstrap of a ratio (``ratio_ci``) and GenPPL the same ratio with an
``exp`` transform.  These tests compare the new path with those functions on several inputs
(sizes, vocabularies, seeds, levels, resample counts, chunkings) with ``==``.
"""
from __future__ import annotations

import math

import pytest
import torch

from dllm_lit.markov import synthetic_chain
from dllm_lit.metrics.bootstrap import ratio_ci as legacy_ratio_ci
from dllm_lit.metrics.functional.bootstrap import IntervalPolicy, RatioOfSums, bootstrap_interval
from dllm_lit.metrics.functional.transition import METRIC_KEYS, ResampledTransitionMetrics, transition_codes
from dllm_lit.metrics.surface import distinct_ngrams_per_sequence
from dllm_lit.metrics.transition import bootstrap_transition_cis as legacy_transition_cis

BASIC = IntervalPolicy("basic", lower_bound=0.0)
# (vocab, top_k, N, T, resamples, confidence, seed, max_chunk_elements)
CASES = [
    (5, 2, 1, 6, 2, 0.95, 0, 1 << 22),
    (12, 3, 7, 20, 20, 0.9, 3, 1 << 22),
    (27, 4, 40, 48, 200, 0.95, 11, 1 << 22),
    (27, 4, 40, 48, 200, 0.95, 11, 100),  # chunked: 2 resamples per chunk
    (64, 8, 24, 48, 20, 0.5, 7, 1 << 22),
    (200, 5, 90, 12, 57, 0.99, 123456789, 1000),
]


def _samples(vocab: int, top_k: int, n: int, t: int, seed: int):
    chain = synthetic_chain(vocab, top_k, eps=0.05, seed=seed % 7)
    x = chain.sample(n, t, seed=seed)
    if n > 3:  # off-support transitions and exact duplicates
        x[0] = torch.randint(0, vocab, (t,), generator=torch.Generator().manual_seed(seed))
        x[1] = x[2]
    return chain, x


@pytest.mark.parametrize("case", CASES)
def test_transition_basic_intervals_identical(case) -> None:
    vocab, top_k, n, t, resamples, confidence, seed, chunk = case
    chain, x = _samples(vocab, top_k, n, t, seed)
    old = legacy_transition_cis(x, chain, num_resamples=resamples, confidence=confidence, seed=seed)
    statistic = ResampledTransitionMetrics(transition_codes(x, vocab), chain)
    new = bootstrap_interval(statistic, n, BASIC, resamples, confidence, seed, max_chunk_elements=chunk)
    assert set(new) == set(METRIC_KEYS)
    for key in METRIC_KEYS:
        assert new[key] == old[key], key


@pytest.mark.parametrize("case", CASES)
def test_ngram_percentile_intervals_identical(case) -> None:
    vocab, top_k, n, t, resamples, confidence, seed, chunk = case
    _, x = _samples(vocab, top_k, n, t, seed)
    for order in (2, 3):
        distinct = distinct_ngrams_per_sequence(x, order).double()
        windows = torch.full_like(distinct, t - order + 1)
        old = legacy_ratio_ci(distinct, windows, num_resamples=resamples, confidence=confidence, seed=seed)
        new = bootstrap_interval(RatioOfSums(distinct, windows), n, IntervalPolicy("percentile"), resamples,
                                 confidence, seed, max_chunk_elements=chunk)
        assert new == old


@pytest.mark.parametrize("case", CASES)
def test_genppl_exp_percentile_intervals_identical(case) -> None:
    _, _, n, _, resamples, confidence, seed, chunk = case
    g = torch.Generator().manual_seed(seed)
    count = torch.randint(0, 60, (n,), generator=g)
    count[0] = max(int(count[0]), 1)
    nll = count.double() * (4.0 + torch.rand(n, generator=g, dtype=torch.float64))
    old = legacy_ratio_ci(nll, count, num_resamples=resamples, confidence=confidence, seed=seed, transform=math.exp)
    policy = IntervalPolicy("percentile", transform=math.exp)
    new = bootstrap_interval(RatioOfSums(nll, count), n, policy, resamples, confidence, seed, max_chunk_elements=chunk)
    assert new == old
