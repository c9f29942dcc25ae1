"""MaskGIT and the PC-sampler size their sub-batches by the cache the run keeps: over a denoiser with a row-free
bound and a proposal law (temperature > 0) that is the bound alone, so a batch that the dense path's [V] rows would
split runs whole - with draws identical to the unsplit and the dense run.  The PC-sampler is a rule: the engine's
bounded provider keeps no [V] rows at temperature 0 either (the argmax proposal), so its batch stays whole there
too; MaskGIT's greedy path keeps them and splits."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.markov import synthetic_chain
from dllm_lit.samplers import MaskGIT, PCSampler
from dllm_lit.decoding import confidence_decoding, cut_decoding, posterior_cache


@pytest.mark.parametrize("make, greedy_splits", [(lambda den, tau: MaskGIT(den, temperature=tau), True),
                                                 (lambda den, tau: PCSampler(den, temperature=tau, block_length=8),
                                                  False)])
@pytest.mark.parametrize("tau", [0.0, 0.7])
def test_bounded_runs_whole_batch_with_identical_draws(make, greedy_splits, tau, monkeypatch) -> None:
    chain = synthetic_chain(48, 5, eps=1e-3, seed=2)
    den = OracleDenoiser(chain)
    assert den.has_max_prob_bound
    T, steps, B = 16, 8, 7
    s = make(den, tau)
    s.connect(chain)
    s.use_cache = False
    direct = s.sample(B, T, steps, seed=4)
    s.use_cache = True
    whole = s.sample(B, T, steps, seed=4)
    # room for 3 sequences of [V] rows and cdf per position (2V + 2 numbers), for every sequence of the bound
    elements = 3 * T * (2 * chain.vocab_size + 2)
    monkeypatch.setattr(posterior_cache.PosteriorCache, "max_batch",
                        staticmethod(lambda w, budget=elements, length=1: budget // max(1, length * w)))
    monkeypatch.setattr(posterior_cache.PosteriorCache, "fits",
                        staticmethod(lambda B, w, budget=elements, length=1: B * length * w <= budget))
    plans = []
    orig = confidence_decoding.sub_batches

    def spy(*args, **kwargs):
        plans.append(orig(*args, **kwargs))
        return plans[-1]

    monkeypatch.setattr(confidence_decoding, "sub_batches", spy)
    monkeypatch.setattr(cut_decoding, "sub_batches", spy)  # MaskGIT's cuts
    small = s.sample(B, T, steps, seed=4)
    assert torch.equal(direct, whole) and torch.equal(direct, small)
    # the bounded path keeps the batch whole; a dense greedy path splits it
    assert plans and (len(plans[0]) == 1) == (tau > 0 or not greedy_splits)
