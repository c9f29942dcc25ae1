"""Per-call posterior error (ScoredDenoiser): brute force, zero for the oracle, rising under perturbation, transparent.

Tolerances: the recorded mean KL equals the direct computation (model logits vs the brute-force posterior, float64) to
1e-9; the oracle scored against itself gives exactly 0.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from dllm_lit.denoisers import LearnedDenoiser, OracleDenoiser, ScoredDenoiser
from dllm_lit.denoisers.scored import REFERENCE_MIXING_TOL
from dllm_lit.denoisers.checkpoint import model_from_config
from dllm_lit.markov import synthetic_chain
from dllm_lit.metrics.functional.posterior_error import posterior_error
from dllm_lit.samplers import LLaDA, MDLM
from test_oracle import brute_force_posterior

V, T = 4, 6


class ModuleDenoiser(LearnedDenoiser):
    """A learned denoiser around a model built in memory."""

    def __init__(self, model: nn.Module, **kwargs) -> None:
        super().__init__(**kwargs)
        self.model = model.eval()


def roformer(seed: int = 0, layers: int = 2, vocab: int = V, positions: int = T, init: float = 0.02) -> nn.Module:
    """A random RoFormerForMaskedLM (``init``: the weights' standard deviation; larger makes context matter more)."""
    torch.manual_seed(seed)
    return model_from_config({"model_type": "roformer", "hidden_size": 16, "num_hidden_layers": layers,
                              "num_attention_heads": 2, "intermediate_size": 32, "hidden_dropout_prob": 0.0,
                              "attention_probs_dropout_prob": 0.0, "vocab_size": vocab + 1,
                              "max_position_embeddings": positions, "pad_token_id": None, "initializer_range": init})


class OracleLogits(nn.Module):
    """A 'model' whose logits are the exact log-posterior plus ``sigma`` times fixed noise (sigma = 0: nearly exact)."""

    def __init__(self, chain, sigma: float, positions: int = 64) -> None:
        super().__init__()
        self.oracle, self.sigma = OracleDenoiser(chain, dtype=torch.float64), sigma
        self.noise = torch.randn(positions, chain.vocab_size, generator=torch.Generator().manual_seed(0))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        lp = self.oracle(input_ids).clamp(min=-60.0).float()
        return lp + self.sigma * self.noise[: input_ids.shape[1]]


@pytest.fixture(scope="module")
def chain():
    return synthetic_chain(V, 2, eps=0.05, seed=1)


def test_per_call_error_equals_brute_force(chain) -> None:
    model = roformer()
    scored = ScoredDenoiser(ModuleDenoiser(model)).bind(chain)
    x = chain.sample(5, T, seed=2)
    keep = torch.rand(5, T, generator=torch.Generator().manual_seed(3)) < 0.4
    z = torch.where(keep, x, V)
    b, p = (z == V).nonzero(as_tuple=True)
    scored.probs_at(z, b, p)
    got = scored.summary()
    exact = brute_force_posterior(chain, z)[b, p]
    with torch.no_grad():
        log_q = torch.log_softmax(model(input_ids=z).logits[..., :V].float(), -1)[b, p].double()
    kl = (torch.special.xlogy(exact, exact) - exact * log_q).sum(-1)
    assert got["positions"] == b.numel()
    assert abs(got["kl"] - float(kl.mean())) <= 1e-9
    assert got["top1"] == pytest.approx(float((exact.gather(1, log_q.argmax(1, keepdim=True)).squeeze(1)
                                              == exact.amax(1)).double().mean()))
    scored.probs_at(z, b, p)  # the same state again: nothing is scored twice
    assert scored.summary()["positions"] == b.numel()


def test_oracle_scores_zero_and_draws_are_unchanged(chain) -> None:
    def oracle():
        return OracleDenoiser(chain, mixing_tol=REFERENCE_MIXING_TOL, dtype=torch.float64)

    plain = LLaDA(oracle(), steps=6, block_length=3, temperature=1.0).connect(chain).sample(12, T, seed=4)
    sampler = LLaDA(ScoredDenoiser(oracle()), steps=6, block_length=3, temperature=1.0).connect(chain)
    assert torch.equal(sampler.sample(12, T, seed=4), plain)
    s = sampler.denoiser.summary()
    assert s["kl"] == 0.0 and s["top1"] == 1.0 and s["positions"] > 0
    assert len(s["profile"]) == 6 and sum(r["positions"] for r in s["profile"]) == s["positions"]


def test_error_rises_when_the_model_is_perturbed(chain) -> None:
    kls = []
    for sigma in (0.0, 0.3, 1.0):
        den = ScoredDenoiser(ModuleDenoiser(OracleLogits(chain, sigma)))
        MDLM(den, steps=8).connect(chain).sample(16, 8, seed=5)
        kls.append(den.summary()["kl"])
    assert kls[0] < 1e-6 < kls[1] < kls[2]


def test_wrapper_leaves_a_learned_run_unchanged_and_profiles_it(chain) -> None:
    model = roformer(positions=8)
    plain = LLaDA(ModuleDenoiser(model), steps=8, block_length=4, temperature=1.0).connect(chain).sample(6, 8, seed=1)
    den = ScoredDenoiser(ModuleDenoiser(model))
    run = LLaDA(den, steps=8, block_length=4, temperature=1.0).connect(chain)
    assert torch.equal(run.sample(6, 8, seed=1), plain)
    s = den.summary()
    assert s["kl"] > 0 and len(s["profile"]) == 8 and den.per_sequence().shape == (6, 3)
    # first step of each block reads every masked position of the block: 4 per sequence
    assert s["profile"][0]["positions"] == 6 * 4


def test_leave_one_out_queries_are_scored_on_every_position(chain) -> None:
    ref = OracleDenoiser(chain, mixing_tol=REFERENCE_MIXING_TOL, dtype=torch.float64)
    den = ScoredDenoiser(OracleDenoiser(chain, mixing_tol=REFERENCE_MIXING_TOL, dtype=torch.float64)).bind(chain)
    z = chain.sample(3, T, seed=7)
    out = den.posterior(z, leave_one_out=True)
    assert torch.equal(out, ref.posterior(z, leave_one_out=True))
    assert den.summary()["positions"] == 3 * T and den.summary()["kl"] == 0.0


def test_posterior_error_ties_count_as_agreement() -> None:
    p = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64)
    kl, agree = posterior_error(p, torch.tensor([[-3.0, -0.1, -5.0]]))
    assert bool(agree.all()) and float(kl) > 0
