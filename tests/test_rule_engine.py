"""Samplers written as rules (dllm_lit.samplers.rule): every posterior provider draws what the built-in samplers
and the plain loop draw (torch.equal), the engine picks the provider from the denoiser, and a declared score bound
is checked (a wrong one fails in one line instead of silently changing the draws)."""
from __future__ import annotations

import pytest
import torch

from conftest import GenericDenoiser
from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.samplers import LLaDA
from dllm_lit.samplers.draws import StepUniforms, tempered_draw
from dllm_lit.decoding.providers import choose_provider, decode_rule
from dllm_lit.decoding.reference import reference_decode
from dllm_lit.samplers.rule import BOUNDS, RuleSampler
from dllm_lit.sources import english_char_chain
from examples.my_sampler import LeftToRight

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(scope="module")
def chains() -> dict[str, MarkovChain]:
    g = torch.Generator().manual_seed(5)
    zero = torch.rand(8, 8, generator=g)
    zero[zero < 0.55] = 0.0  # exact zeros in the rows
    zero[:, 1] += 0.2
    zero[1] += 0.2
    return {"english": english_char_chain(), "sparse_teleport": synthetic_chain(12, 4, eps=1e-3, seed=2),
            "eps0": MarkovChain.from_kernel(zero / zero.sum(1, keepdim=True))}


def _plain(s: RuleSampler, n: int, T: int, steps: int, seed: int) -> torch.Tensor:
    """The rule on the dense direct provider (the reference loop), whatever the denoiser."""
    idx = torch.arange(n)
    x = s.initial_state(idx, T, seed)
    reference_decode(s, x, idx, steps, seed)
    return x


@pytest.mark.parametrize("chain_name", ["english", "eps0"])
@pytest.mark.parametrize("tau, block_length, tie_rule", [
    (1.0, None, "lowest"), (0.0, None, "lowest"), (0.5, 8, "highest"), (1.0, 16, "random")])
def test_llada_draws_the_same_on_every_provider(chains, chain_name, tau, block_length, tie_rule) -> None:
    chain = chains[chain_name]
    options = dict(temperature=tau, block_length=block_length, tie_rule=tie_rule)
    rule = LLaDA(**options).connect(chain)
    generic = LLaDA(GenericDenoiser(rule.denoiser), **options).connect(chain)
    for steps in (4, 32):
        want = rule.sample(12, 32, steps, seed=7)  # bounded provider (compact columns, memo)
        assert torch.equal(generic.sample(12, 32, steps, seed=7), want)  # dense direct provider
        assert torch.equal(_plain(rule, 12, 32, steps, 7), want)  # the plain loop on the oracle
    assert rule.nfe(32, 4) == 4 and rule.nfe(32, 64) == 32


class PlainLeftToRight(LeftToRight):
    """The recipe as docs/architecture.md showed it before the rule interface: its own loop on ``probs_at``."""

    def generate(self, indices, seq_len, steps, seed, log_q=None):
        B, width = indices.numel(), -(-seq_len // steps)
        z = torch.full((B, seq_len), self.mask_id, dtype=torch.long, device=indices.device)
        uni = StepUniforms(seed, indices, steps)
        for j, lo in enumerate(range(0, seq_len, width)):
            pos = torch.arange(lo, min(lo + width, seq_len), device=z.device)
            b, p = torch.arange(B, device=z.device).repeat_interleave(pos.numel()), pos.repeat(B)
            probs = self.denoiser.probs_at(z, b, p)
            tok, lq = tempered_draw(probs, uni.at(j, b, p), self.temperature, with_log_prob=True)
            z[b, p] = tok
            if log_q is not None:
                log_q[b, p] = lq
        return z


@pytest.mark.parametrize("tau", [0.0, 1.0, 0.7])
@pytest.mark.parametrize("T, steps", [(32, 4), (30, 7), (16, 16)])
def test_user_recipe_as_a_rule_draws_what_its_plain_loop_drew(chains, tau, T, steps) -> None:
    chain = chains["english"]
    rule, plain = LeftToRight(temperature=tau).connect(chain), PlainLeftToRight(temperature=tau).connect(chain)
    x, stats = rule.generate_with_stats(torch.arange(9), T, steps, 3)
    want, want_stats = plain.generate_with_stats(torch.arange(9), T, steps, 3)
    assert torch.equal(x, want)
    # log q: the same law rows (probs_at or the neighbourhood cache's rows) and the same float64 arithmetic
    assert torch.allclose(stats["log_q"], want_stats["log_q"], rtol=0, atol=1e-12)
    assert float(stats["nfe"][0]) == -(-T // -(-T // steps))  # steps that commit: ceil(T / width)


class OneMinusConfidence(LLaDA):
    """Scores by 1 - p(x̂): no longer below max_v p, yet still declaring the bound (the measured hazard)."""

    def score(self, probs, tok, pos):
        return 1.0 - super().score(probs, tok, pos)


def test_a_wrong_bound_declaration_fails_in_one_line(chains) -> None:
    chain = chains["english"]
    for den in (OracleDenoiser(chain), GenericDenoiser(OracleDenoiser(chain))):  # bounded and dense providers
        s = OneMinusConfidence(den, temperature=1.0).connect(chain)
        with pytest.raises(ValueError, match="bound='pmax'") as err:
            s.sample(4, 64, 8, seed=1)
        assert "\n" not in str(err.value)
    # without the declaration the same rule runs, and every provider draws the same
    fixed = type("OneMinusConfidenceUnbounded", (OneMinusConfidence,), {"bound": None})
    cached = fixed(temperature=1.0).connect(chain)
    assert choose_provider(cached, cached.denoiser) == "cache"
    x = cached.sample(6, 64, 8, seed=1)
    assert torch.equal(x, fixed(GenericDenoiser(cached.denoiser), temperature=1.0).connect(chain).sample(6, 64, 8, seed=1))
    assert torch.equal(x, _plain(cached, 6, 64, 8, 1))


def _rule_classes() -> list[type[RuleSampler]]:
    """Every rule the package and the docs' example define."""
    from dllm_lit.samplers import FastDLLM, PCSampler

    return [LLaDA, FastDLLM, PCSampler, LeftToRight]


@pytest.mark.parametrize("cls", _rule_classes(), ids=lambda c: c.__name__)
def test_declared_bounds_hold_on_random_rows(cls) -> None:
    """A declared bound is a claim about score(): checked on rows with ties, zeros and near-one maxima."""
    assert cls.bound in BOUNDS
    if cls.bound is None:
        return
    g = torch.Generator().manual_seed(0)
    rows = torch.rand(4000, 9, generator=g) ** torch.tensor([1.0, 4.0, 16.0]).repeat_interleave(1334)[:4000, None]
    rows[::7, 3:] = 0.0
    rows[::5] = 1.0
    rows = (rows / rows.sum(1, keepdim=True)).to(torch.float32)
    for options in ({"temperature": 1.0}, {"temperature": 0.0}, {"temperature": 0.3}):
        s = cls(**options)
        if s.maps_bound:  # a bound of the position and max_v p (the PC rule's, which reads the chain's pi)
            s.connect(synthetic_chain(9, 3, eps=1e-3, seed=1))
        pos = torch.arange(4000)
        limit = s.score_bound(rows.amax(-1).double(), pos)
        law = s.propose(rows)
        tok = rows.argmax(-1) if law is None else torch.multinomial(law.double(), 1, generator=g).squeeze(1)
        for t in (tok, torch.randint(9, (4000,), generator=g)):
            t = torch.where(rows.gather(1, t[:, None]).squeeze(1) > 0, t, rows.argmax(-1))  # proposals have mass
            assert (s.score(rows, t, pos) <= limit).all(), options


def test_the_engine_chooses_the_provider_from_the_denoiser(chains) -> None:
    chain = chains["sparse_teleport"]
    oracle = OracleDenoiser(chain)
    assert choose_provider(LLaDA(oracle), oracle) == "bounded"
    assert choose_provider(LeftToRight(oracle), oracle) == "cache"
    assert choose_provider(LLaDA(oracle), GenericDenoiser(oracle)) == "dense"
    x = LLaDA(oracle, temperature=1.0).connect(chain).initial_state(torch.arange(2), 16, 0)
    assert decode_rule(LLaDA(oracle, temperature=1.0).connect(chain), x, torch.arange(2), 4, 0) == "bounded"
    assert (x < chain.vocab_size).all()


def test_rule_settings_are_checked(chains) -> None:
    chain = chains["sparse_teleport"]
    with pytest.raises(ValueError, match="block_length"):
        LLaDA(block_length=5).connect(chain).sample(2, 32, 4, seed=0)
    with pytest.raises(ValueError, match="steps"):
        LLaDA(block_length=8).connect(chain).sample(2, 32, 6, seed=0)  # 4 blocks
    bad = type("BadBound", (LLaDA,), {"bound": "entropy"})
    with pytest.raises(ValueError, match="bound"):
        bad().connect(chain)
    with pytest.raises(ValueError, match="log q"):
        LLaDA(temperature=1.0).connect(chain).generate(torch.arange(2), 8, 4, 0, log_q=torch.zeros(2, 8))


def test_hmm_world_takes_the_dense_provider_with_llada_draws() -> None:
    from dllm_lit.sources.hmm_synthetic import synthetic_hmm

    world = synthetic_hmm(4, 6, seed=1)
    for tau in (0.0, 1.0):
        rule = LLaDA(temperature=tau).connect(world)
        assert choose_provider(rule, rule.denoiser) == "dense"
        assert torch.equal(rule.sample(8, 16, 4, seed=2), _plain(rule, 8, 16, 4, 2))


def test_nan_scores_are_refused(chains) -> None:
    chain = chains["sparse_teleport"]
    nan = type("NaNScore", (LLaDA,), {"bound": None, "score": lambda self, probs, tok, pos: torch.full_like(pos, float("nan"), dtype=torch.float64)})
    for den in (OracleDenoiser(chain), GenericDenoiser(OracleDenoiser(chain))):
        with pytest.raises(ValueError, match="NaN"):
            nan(den).connect(chain).sample(2, 16, 4, seed=0)


@pytest.mark.slow  # a fresh process (7 CPU s); the three paths are compared in-process above
def test_rule_engine_benchmark_runs() -> None:
    """benchmarks/rule_engine.py at a tiny size: the three paths agree (it exits non-zero otherwise)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "benchmarks/rule_engine.py", "--num-sequences", "2", "--seq-len", "32",
                          "--steps", "16", "--plain"], cwd=root, env=env, check=True, capture_output=True, text=True, timeout=300)
    assert "identical samples: True" in out.stdout
