"""The one interval path reproduces the intervals each metric had before it, to rounding.

Before the metrics shared :func:`dllm_lit.metrics.functional.bootstrap.bootstrap_interval`, the
transition metrics had their own basic bootstrap (``bootstrap_transition_cis`` on the gathered
samples), the n-gram diversities a percentile bootstrap of a ratio (``ratio_ci``) and GenPPL the
same ratio with an ``exp`` transform (its ``bootstrap_ci`` method).  ``GOLDEN`` holds the intervals
those functions returned at commit f7dd906 (before this refactoring) on the inputs below; the first
version of this file compared the new path with the old functions directly.  Every case is run
through the metric classes (``update`` in two batches, then ``bootstrap_ci``) and with resampling
split into small chunks.

Tolerance: relative ``REL_TOL`` = 1e-12 (absolute 1e-15 near zero).  The endpoints are float64
functionals (``log``, sums over pairs) whose last bits depend on the CPU's vector width (AVX2,
AVX-512, scalar) through torch's vectorised ``log`` and reductions; the measured spread between
such paths is below 2e-15 relative.  A wrong resample, quantile or policy moves an endpoint by far
more (the smallest interval width here is 1e-3 relative).
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

# (vocab, top_k, N, T, resamples, confidence, seed) -> {key: (low, high)} from the old functions (float64 values)
GOLDEN = {
    (5, 2, 1, 6, 2, 0.95, 0): {
        'nll': (0.41934104855207205, 0.41934104855207205),
        'kl': (0.41934104855207205, 0.41934104855207205),
        'tv': (0.34223061980062996, 0.34223061980062996),
        'entropy': (0.0, 0.0),
        'unigram_l1': (0.27671728859483297, 0.27671728859483297),
        'other_mass': (0.0, 0.0),
        'support_frac': (0.6000000000000001, 0.6000000000000001),
        'div2': (0.6, 0.6),
        'div3': (0.75, 0.75),
        'genppl': (63.16653841609804, 63.16653841609804),
    },
    (12, 3, 7, 20, 20, 0.9, 3): {
        'nll': (1.1188441321582538, 2.2415389866929827),
        'kl': (0.0, 0.7063047273703887),
        'tv': (0.08841485019085854, 0.20864191363486925),
        'entropy': (1.2229974041885932, 1.5853999020438412),
        'unigram_l1': (0.24068552140971078, 0.4987883244078323),
        'other_mass': (0.014285714285714263, 0.24060150375939848),
        'support_frac': (0.3684210526315789, 0.5191729323308271),
        'div2': (0.7135338345864661, 0.806015037593985),
        'div3': (0.8876984126984127, 0.9523809523809523),
        'genppl': (80.92838500547846, 114.18846083382024),
    },
    (27, 4, 40, 48, 200, 0.95, 11): {
        'nll': (1.3081059978260376, 1.7336714216931743),
        'kl': (0.0, 0.15734833114417116),
        'tv': (0.026418736117632152, 0.08796979503148766),
        'entropy': (1.4019751768948612, 1.5919893440252408),
        'unigram_l1': (0.025258321788427657, 0.11027822780392979),
        'other_mass': (0.020638297872340408, 0.09522606382978724),
        'support_frac': (0.12074468085106382, 0.1478723404255319),
        'div2': (0.7153856382978724, 0.7617287234042553),
        'div3': (0.8934375, 0.9326358695652174),
        'genppl': (82.97027458778706, 103.23588286158507),
    },
    (64, 8, 24, 48, 20, 0.5, 7): {
        'nll': (1.9647907394058706, 2.23843158129877),
        'kl': (0.1812461258494703, 0.36772698876033116),
        'tv': (0.17483164283293323, 0.20334969668197111),
        'entropy': (1.8204999997835707, 1.8647599117213933),
        'unigram_l1': (0.07318773312431678, 0.10467438235455012),
        'other_mass': (0.03922872340425532, 0.07579787234042554),
        'support_frac': (0.45412234042553196, 0.4691932624113475),
        'div2': (0.9281914893617021, 0.9363918439716312),
        'div3': (0.9791666666666666, 0.9848278985507246),
        'genppl': (87.54538634362835, 101.01848983385186),
    },
    (200, 5, 90, 12, 57, 0.99, 123456789): {
        'nll': (1.4433958616872826, 1.8107507043493825),
        'kl': (0.2512163584291369, 0.6051357769044504),
        'tv': (0.23837995030649273, 0.2965588491268094),
        'entropy': (1.13529005575524, 1.2533421222433223),
        'unigram_l1': (0.10382181181827543, 0.2189708779696607),
        'other_mass': (0.02206060606060606, 0.07288888888888889),
        'support_frac': (0.6214545454545455, 0.6880404040404041),
        'div2': (0.9813737373737373, 0.997979797979798),
        'div3': (0.9914222222222223, 1.0),
        'genppl': (85.38110642899049, 98.61465161785983),
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


#: stated tolerance of every comparison (see the module docstring)
REL_TOL, ABS_TOL = 1e-12, 1e-15


def _close(interval, expected) -> bool:
    return tuple(interval) == pytest.approx(tuple(expected), rel=REL_TOL, abs=ABS_TOL)


@pytest.mark.parametrize("case", list(GOLDEN), ids=str)
def test_transition_intervals_unchanged(case) -> None:
    vocab, top_k, n, t, resamples, confidence, seed = case
    chain, x = _samples(vocab, top_k, n, t, seed)
    metric = TransitionMetrics(chain, per_sequence=True)
    metric.update(x[: n // 2 + 1])
    if n > 1:
        metric.update(x[n // 2 + 1 :])
    # the transition metrics now use one policy per key (centred / percentile / none); the engine must still
    # reproduce the former basic interval (clipped at 0) under that policy
    got = metric_interval(metric, resamples, confidence, seed, policy=LEGACY_TRANSITION_INTERVAL)
    assert set(got) == set(METRIC_KEYS)
    for key in METRIC_KEYS:
        assert _close(got[key], GOLDEN[case][key]), (key, got[key], GOLDEN[case][key])


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
        assert _close(got, GOLDEN[case][f"div{order}"]), (order, got)


@pytest.mark.parametrize("case", list(GOLDEN), ids=str)
def test_genppl_intervals_unchanged(case) -> None:
    _, _, n, _, resamples, confidence, seed = case
    nll, count = _text_statistics(n, seed)
    metric = GenerativePerplexity("not-loaded", max_length=64)  # the LM is only loaded by update()
    metric.text_nll.append(nll)  # the states update() would have filled
    metric.text_tokens.append(count)
    got = metric.bootstrap_ci(num_resamples=resamples, confidence=confidence, seed=seed)
    assert _close(got, GOLDEN[case]["genppl"]), got


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
