"""Adaptive counts in the rule interface (``RuleSampler.adaptive_count``): ``FastDLLM``, a rule with Fast-dLLM's
threshold and factor counts, draws on every provider what the hand-wired engine call of the former built-in drew
(torch.equal, NFE per sequence); PC-sampler scores as a rule draw what ``PCSampler`` draws; a bad count or a bound
declaration is refused in one line."""
from __future__ import annotations

import pytest
import torch

from conftest import GenericDenoiser
from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit import rng
from dllm_lit.samplers import FastDLLM
from dllm_lit.decoding.confidence_decoding import (BlockDecoding, block_bounds, confidence, decode_blocks,
                                                   proposal_features, proposal_widths, propose_tokens)
from dllm_lit.samplers.draws import StepUniforms
from dllm_lit.samplers.fast_dllm import factor_count, threshold_count
from dllm_lit.decoding.providers import choose_provider, decode_rule
from dllm_lit.samplers.rule import RuleSampler
from dllm_lit.sources import english_char_chain

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def chains() -> dict[str, MarkovChain]:
    g = torch.Generator().manual_seed(5)
    peaked = torch.rand(8, 8, generator=g) * 0.1  # next = current + 1 with probability ~0.85, exact zeros
    peaked[peaked < 0.04] = 0.0
    peaked += torch.eye(8).roll(1, 1)
    return {"english": english_char_chain(), "sparse_teleport": synthetic_chain(12, 4, eps=1e-3, seed=2),
            "peaked": MarkovChain.from_kernel(peaked / peaked.sum(1, keepdim=True))}


def _plain(s: RuleSampler, idx: torch.Tensor, T: int, steps: int, seed: int,
           provider: str = "dense") -> tuple[torch.Tensor, torch.Tensor]:
    """Samples and NFE of ``s`` on ``provider`` (the chosen one when it can run there)."""
    x, taken = s.initial_state(idx, T, seed), torch.zeros(idx.numel(), dtype=torch.float64)
    decode_rule(s, x, idx, steps, seed, taken=taken, provider=provider)
    return x, taken


def hand_wired(s: FastDLLM, idx: torch.Tensor, T: int, steps: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The former built-in FastDLLM: LLaDA's proposal features (stored cdf), confidences and Fast-dLLM's count
    passed to the engine's loop by hand."""
    x = torch.full((idx.numel(), T), s.mask_id, dtype=torch.long)
    tau, tok_u = s.temperature, StepUniforms(seed, idx, steps)

    def count(sorted_conf, m):
        return factor_count(sorted_conf, m, s.factor) if s.factor is not None else threshold_count(sorted_conf,
                                                                                                  s.threshold)

    nfe = decode_blocks(s.denoiser, x, block_bounds(T, 0, s.block_length), BlockDecoding(
        features=lambda probs: proposal_features(probs, tau), widths=proposal_widths(s.vocab_size, tau),
        propose=lambda view: propose_tokens(view, tau, tok_u), score=confidence, tie_rule=s.tie_rule,
        tie_u=StepUniforms(seed, idx, steps, stream=rng.Stream.ORDER), count=count, width=2 * s.vocab_size + 2))
    return x, nfe


@pytest.mark.parametrize("chain_name", ["english", "sparse_teleport", "peaked"])
@pytest.mark.parametrize("options", [
    dict(threshold=0.9, temperature=1.0), dict(threshold=0.3, temperature=0.0, block_length=8),
    dict(threshold=0.5, temperature=0.7, block_length=16, tie_rule="highest"),
    dict(threshold=None, factor=1.0, temperature=1.0), dict(threshold=None, factor=2.5, temperature=1.0,
                                                            tie_rule="random", block_length=None)],
    ids=lambda o: "-".join(f"{k}{v}" for k, v in o.items()))
def test_fast_dllm_rule_draws_what_the_hand_wired_engine_drew(chains, chain_name, options) -> None:
    chain = chains[chain_name]
    rule = FastDLLM(**options).connect(chain)
    generic = FastDLLM(GenericDenoiser(rule.denoiser), **options).connect(chain)
    assert choose_provider(rule, rule.denoiser) == "cache" and choose_provider(generic, generic.denoiser) == "dense"
    idx = torch.arange(3, 13)
    for steps in (4, 32):
        want, want_nfe = hand_wired(rule, idx, 32, steps, 7)
        assert bool((want_nfe < 32).any()) or chain_name != "peaked"  # several commits a step
        for got, nfe in (rule.generate_with_nfe(idx, 32, steps, 7), generic.generate_with_nfe(idx, 32, steps, 7),
                         _plain(rule, idx, 32, steps, 7), _plain(rule, idx, 32, steps, 7, "bounded")):
            assert torch.equal(got, want)
            assert torch.equal(nfe, want_nfe)
    assert rule.nfe(32, 4) is None  # adaptive: counted per sequence


class TwoAtATime(RuleSampler):
    """Left to right, two positions a step (one when one is left): an adaptive count whose order ignores the
    tokens, so log q is recorded."""

    sampler_name = "two_at_a_time"

    def log_q_reason(self, steps):
        return None

    def score(self, probs, tok, pos):
        return -pos.to(torch.float64)

    def adaptive_count(self, sorted_scores, n_masked):
        return n_masked.clamp(max=2)


def test_adaptive_counts_record_log_q_and_nfe_on_every_provider(chains) -> None:
    chain = chains["english"]
    rule = TwoAtATime().connect(chain)
    generic = TwoAtATime(GenericDenoiser(rule.denoiser)).connect(chain)
    x, stats = rule.generate_with_stats(torch.arange(5), 15, 4, 1)
    y, gstats = generic.generate_with_stats(torch.arange(5), 15, 4, 1)
    assert torch.equal(x, y)
    assert torch.equal(stats["nfe"], torch.full((5,), 8.0, dtype=torch.float64))  # ceil(15 / 2) steps
    assert torch.equal(gstats["nfe"], stats["nfe"])
    assert torch.allclose(stats["log_q"], gstats["log_q"], rtol=0, atol=1e-12)  # same rows, same float64 sums
    assert bool((stats["log_q"] < 0).all())


@pytest.mark.parametrize("count, match", [(0, r"\[1, masked positions\]: got 0"), (99, "got 99")])
def test_a_bad_adaptive_count_fails_in_one_line(chains, count, match) -> None:
    bad = type("BadCount", (TwoAtATime,), {"adaptive_count": lambda self, s, m: torch.full_like(m, count)})
    oracle = OracleDenoiser(chains["english"])
    for den in (oracle, GenericDenoiser(oracle)):
        with pytest.raises(ValueError, match=match) as err:
            bad(den).connect(chains["english"]).sample(2, 8, 4, seed=0)
        assert "\n" not in str(err.value)


def test_a_declared_bound_is_checked_under_adaptive_counts(chains) -> None:
    """A declared bound is checked under adaptive counts on every provider."""
    wrong = type("WrongBound", (FastDLLM,), {"score": lambda self, probs, tok, pos: 1.0 - probs.gather(
        1, tok[:, None]).squeeze(1).double()})
    oracle = OracleDenoiser(chains["english"])
    for den in (oracle, GenericDenoiser(oracle)):
        with pytest.raises(ValueError, match="bound='pmax'"):
            wrong(den, temperature=1.0).connect(chains["english"]).sample(2, 32, 4, seed=0)
    with pytest.raises(ValueError, match="bound='pmax'"):  # the bounded provider checks it where it scores
        _plain(wrong(oracle, temperature=1.0).connect(chains["english"]), torch.arange(2), 32, 4, 0, "bounded")


@pytest.mark.parametrize("options", [dict(temperature=1.0), dict(temperature=0.0, block_length=8, lambd=0.0),
                                     dict(temperature=0.5, block_length=16, alpha=0.3, tie_rule="random")],
                         ids=lambda o: "-".join(f"{k}{v}" for k, v in o.items()))
def test_pc_sampler_draws_the_same_on_every_provider(chains, options) -> None:
    from dllm_lit.samplers import PCSampler

    for chain in (chains["english"], chains["peaked"]):
        rule = PCSampler(**options).connect(chain)
        assert choose_provider(rule, rule.denoiser) == "bounded"  # its declared score_bound
        want = rule.sample(10, 32, 8, seed=4)
        assert torch.equal(_plain(rule, torch.arange(10), 32, 8, 4, "cache")[0], want)
        assert torch.equal(PCSampler(GenericDenoiser(rule.denoiser), **options).connect(chain).sample(10, 32, 8, seed=4),
                           want)
        assert torch.equal(_plain(rule, torch.arange(10), 32, 8, 4)[0], want)
