"""The one interval path reproduces, bit for bit, the intervals each metric had before it.

Before the metrics shared :func:`dllm_lit.metrics.functional.bootstrap.bootstrap_interval`, the
transition metrics had their own basic bootstrap (``bootstrap_transition_cis`` on the gathered
samples), the n-gram diversities a percentile bootstrap of a ratio (``ratio_ci``) and GenPPL the
same ratio with an ``exp`` transform (its ``bootstrap_ci`` method).  ``GOLDEN`` holds the intervals
those functions returned at commit f7dd906 (before this refactoring) on the inputs below, as
``float.hex`` strings; the first version of this file compared the new path with the old
functions directly.  Every case is run through the metric classes (``update`` in two batches, then
``bootstrap_ci``) and with resampling split into small chunks, and compared with ``==``.
"""
from __future__ import annotations

import pytest
import torch

from dllm_lit.markov import synthetic_chain
from dllm_lit.metrics.bootstrap import IntervalPolicy, metric_interval
from dllm_lit.metrics.functional.transition import METRIC_KEYS
from dllm_lit.metrics.genppl import GenerativePerplexity
from dllm_lit.metrics.ngram_diversity import NgramDiversity
from dllm_lit.metrics.transition import TransitionMetrics

# (vocab, top_k, N, T, resamples, confidence, seed) -> {key: (low, high)} from the old functions
GOLDEN = {
    (5, 2, 1, 6, 2, 0.95, 0): {
        'nll': ('0x1.ad67bd659b223p-2', '0x1.ad67bd659b223p-2'),
        'kl': ('0x1.ad67bd659b223p-2', '0x1.ad67bd659b223p-2'),
        'tv': ('0x1.5e71b41eef1ecp-2', '0x1.5e71b41eef1ecp-2'),
        'entropy': ('0x0.0p+0', '0x0.0p+0'),
        'unigram_l1': ('0x1.1b5bc6e302a9fp-2', '0x1.1b5bc6e302a9fp-2'),
        'other_mass': ('0x0.0p+0', '0x0.0p+0'),
        'support_frac': ('0x1.3333333333334p-1', '0x1.3333333333334p-1'),
        'div2': ('0x1.3333333333333p-1', '0x1.3333333333333p-1'),
        'div3': ('0x1.8000000000000p-1', '0x1.8000000000000p-1'),
        'genppl': ('0x1.f9551217d5599p+5', '0x1.f9551217d5599p+5'),
    },
    (12, 3, 7, 20, 20, 0.9, 3): {
        'nll': ('0x1.1e6c91acf0f2ap+0', '0x1.1eeabfe047156p+1'),
        'kl': ('0x0.0p+0', '0x1.69a0c5f221ccdp-1'),
        'tv': ('0x1.6a25b0a0cec0cp-4', '0x1.ab4c739d17cc3p-3'),
        'entropy': ('0x1.39165b9e15390p+0', '0x1.95dcc49a5c228p+0'),
        'unigram_l1': ('0x1.ecec87d89a738p-3', '0x1.fec25dd3d546ep-2'),
        'other_mass': ('0x1.d41d41d41d410p-7', '0x1.ecc07b301ecc0p-3'),
        'support_frac': ('0x1.79435e50d7943p-2', '0x1.09d108daa89d1p-1'),
        'div2': ('0x1.6d544e8846d54p-1', '0x1.9cae00c519caep-1'),
        'div3': ('0x1.c680680680680p-1', '0x1.e79e79e79e79ep-1'),
        'genppl': ('0x1.43b6aa8f1281dp+6', '0x1.c8c0fbe07756ep+6'),
    },
    (27, 4, 40, 48, 200, 0.95, 11): {
        'nll': ('0x1.4ee008e05d416p+0', '0x1.bbd1e3ea2e982p+0'),
        'kl': ('0x0.0p+0', '0x1.423fd782c1515p-3'),
        'tv': ('0x1.b0d835e81ede8p-6', '0x1.6853040b2312cp-4'),
        'entropy': ('0x1.66e7d85e9136ep+0', '0x1.978c9d182b3d3p+0'),
        'unigram_l1': ('0x1.9dd514821efb8p-6', '0x1.c3b31a5e0f38ep-4'),
        'other_mass': ('0x1.52234b9a09264p-6', '0x1.860bc3de030cep-4'),
        'support_frac': ('0x1.ee91f976bd8c8p-4', '0x1.2ed7b190e2965p-3'),
        'div2': ('0x1.6e4706c108eedp-1', '0x1.86014ea6e3e50p-1'),
        'div3': ('0x1.c970a3d70a3d7p-1', '0x1.dd8272ddb7dffp-1'),
        'genppl': ('0x1.4be18fa95abdcp+6', '0x1.9cf18b46e0c77p+6'),
    },
    (64, 8, 24, 48, 20, 0.5, 7): {
        'nll': ('0x1.f6fc86a13b5c0p+0', '0x1.1e84ed1201821p+1'),
        'kl': ('0x1.73312b3866c24p-3', '0x1.788d6c7a54278p-2'),
        'tv': ('0x1.660e21e22fecep-3', '0x1.a075ce4734664p-3'),
        'entropy': ('0x1.d20c49b9703ddp+0', '0x1.dd60e7d3bc382p+0'),
        'unigram_l1': ('0x1.2bc6e683cc0c6p-4', '0x1.acbf0b8f1194cp-4'),
        'other_mass': ('0x1.415c9882b9310p-5', '0x1.3677d46cefa8ep-4'),
        'support_frac': ('0x1.d10572620ae4dp-2', '0x1.e07432d63dbb0p-2'),
        'div2': ('0x1.db3bea3677d47p-1', '0x1.df6ec07432d64p-1'),
        'div3': ('0x1.f555555555555p-1', '0x1.f83b5cc0ed730p-1'),
        'genppl': ('0x1.5e2e79c1f6467p+6', '0x1.9412eeffbecf1p+6'),
    },
    (200, 5, 90, 12, 57, 0.99, 123456789): {
        'nll': ('0x1.7182642520ed2p+0', '0x1.cf8d5bb063ba6p+0'),
        'kl': ('0x1.013edc6eb1848p-2', '0x1.35d45b46e369dp-1'),
        'tv': ('0x1.e833bf54b53b0p-3', '0x1.2fad1f795b2e8p-2'),
        'entropy': ('0x1.22a25e7cf1598p+0', '0x1.40db0781bbfb5p+0'),
        'unigram_l1': ('0x1.a9410f65ef730p-4', '0x1.c073cdbd3fb12p-3'),
        'other_mass': ('0x1.6970e363db030p-6', '0x1.2a8d8a2050198p-4'),
        'support_frac': ('0x1.3e2f4a495b0b0p-1', '0x1.6046d4f35c3e3p-1'),
        'div2': ('0x1.f6769e5658d45p-1', '0x1.fef73544c8a9ap-1'),
        'div3': ('0x1.fb9bb189f1b5bp-1', '0x1.0000000000000p+0'),
        'genppl': ('0x1.558640c3833cfp+6', '0x1.8a75673bd490ep+6'),
    },
}


#: the transition metrics' interval before the per-key policies
LEGACY_TRANSITION_INTERVAL = IntervalPolicy("basic", lower_bound=0.0)


def _samples(vocab: int, top_k: int, n: int, t: int, seed: int):
    chain = synthetic_chain(vocab, top_k, eps=0.05, seed=seed % 7)
    x = chain.sample(n, t, seed=seed)
    if n > 3:  # off-support transitions and exact duplicates
        x[0] = torch.randint(0, vocab, (t,), generator=torch.Generator().manual_seed(seed))
        x[1] = x[2]
    return chain, x


def _text_statistics(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-text NLL sums and scored-token counts (some texts with no scored token)."""
    g = torch.Generator().manual_seed(seed)
    count = torch.randint(0, 60, (n,), generator=g)
    count[0] = max(int(count[0]), 1)
    nll = count.double() * (4.0 + torch.rand(n, generator=g, dtype=torch.float64))
    return nll, count


def _hex(interval) -> tuple[str, str]:
    return (float(interval[0]).hex(), float(interval[1]).hex())


@pytest.mark.parametrize("case", list(GOLDEN), ids=str)
def test_transition_intervals_unchanged(case) -> None:
    vocab, top_k, n, t, resamples, confidence, seed = case
    chain, x = _samples(vocab, top_k, n, t, seed)
    metric = TransitionMetrics(chain, per_sequence=True)
    metric.update(x[: n // 2 + 1])
    if n > 1:
        metric.update(x[n // 2 + 1 :])
    # the transition metrics now use one policy per key (centred / percentile / none); the engine must still
    # reproduce the former basic interval (clipped at 0) bit for bit under that policy
    got = metric_interval(metric, resamples, confidence, seed, policy=LEGACY_TRANSITION_INTERVAL)
    assert set(got) == set(METRIC_KEYS)
    for key in METRIC_KEYS:
        assert _hex(got[key]) == GOLDEN[case][key], key


@pytest.mark.parametrize("case", list(GOLDEN), ids=str)
def test_ngram_intervals_unchanged(case) -> None:
    vocab, top_k, n, t, resamples, confidence, seed = case
    _, x = _samples(vocab, top_k, n, t, seed)
    for order in (2, 3):
        metric = NgramDiversity(order, per_sequence=True)
        metric.update(x[: n // 2 + 1])
        if n > 1:
            metric.update(x[n // 2 + 1 :])
        got = metric.bootstrap_ci(num_resamples=resamples, confidence=confidence, seed=seed)
        assert _hex(got) == GOLDEN[case][f"div{order}"]


@pytest.mark.parametrize("case", list(GOLDEN), ids=str)
def test_genppl_intervals_unchanged(case) -> None:
    _, _, n, _, resamples, confidence, seed = case
    nll, count = _text_statistics(n, seed)
    metric = GenerativePerplexity("not-loaded", max_length=64)  # the LM is only loaded by update()
    metric.text_nll.append(nll)  # the states update() would have filled
    metric.text_tokens.append(count)
    got = metric.bootstrap_ci(num_resamples=resamples, confidence=confidence, seed=seed)
    assert _hex(got) == GOLDEN[case]["genppl"]


@pytest.mark.parametrize("max_chunk_elements", [1, 100, 1000])
def test_intervals_do_not_depend_on_resample_chunking(max_chunk_elements: int, monkeypatch) -> None:
    """Weights drawn in chunks of resamples are the same draws (the generator is sequential)."""
    import dllm_lit.metrics.functional.bootstrap as engine

    monkeypatch.setattr(engine.bootstrap_interval, "__kwdefaults__",
                        {**engine.bootstrap_interval.__kwdefaults__, "max_chunk_elements": max_chunk_elements})
    for case in list(GOLDEN)[1:3]:
        test_transition_intervals_unchanged(case)
        test_ngram_intervals_unchanged(case)
        test_genppl_intervals_unchanged(case)
