"""Every shipped sampler runs in an HMM world through the HMM oracle (generic denoiser paths), and the exact
laws of MDLM, the paper's MDLM and LLaDA on a tiny HMM world (V = 3, S = 4) match their samples."""
from __future__ import annotations

import pytest
import torch

import dllm_lit.samplers as samplers
from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.denoisers import HMMOracleDenoiser, OracleDenoiser
from dllm_lit.markov import HMMWorld
from dllm_lit.metrics.sequence_kl import SequenceKL
from dllm_lit.exact import chain_law, mdlm_law
from test_llada import llada_law
from dllm_lit.exact import mdlm_paper_law

pytestmark = pytest.mark.usefixtures("single_thread")
V, S, T, N = 3, 4, 4, 20000
ALPHA = 0.01


@pytest.fixture(scope="module")
def world() -> HMMWorld:
    """A tiny HMM that is not a first-order chain (state persistence, overlapping emissions, some zeros)."""
    A = torch.tensor([[0.7, 0.2, 0.1, 0.0], [0.1, 0.6, 0.0, 0.3], [0.25, 0.25, 0.5, 0.0], [0.0, 0.3, 0.2, 0.5]],
                     dtype=torch.float64)
    B = torch.tensor([[0.8, 0.2, 0.0], [0.1, 0.1, 0.8], [0.3, 0.6, 0.1], [0.0, 0.5, 0.5]], dtype=torch.float64)
    return HMMWorld(emission=B, transition=A)


@pytest.mark.parametrize("steps", [2, 3])
def test_mdlm_law(world, steps) -> None:
    s = samplers.MDLM().connect(world)
    assert isinstance(s.denoiser, HMMOracleDenoiser)
    x = s.sample(N, T, steps, seed=steps)
    assert chi_square_pvalue(sequence_counts(x, V), mdlm_law(world, T, steps)) > ALPHA


@pytest.mark.parametrize("steps", [2, 4])
def test_mdlm_paper_law(world, steps) -> None:
    s = samplers.MDLMPaper().connect(world)
    law = mdlm_paper_law(world, T, steps)
    x = s.sample(N, T, steps, seed=steps)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA
    if steps == T:  # one position per step: exact sequential sampling of the world
        assert torch.allclose(law, chain_law(world, T), atol=1e-12)


@pytest.mark.parametrize("remasking, temperature, steps, block_length",
                         [("low_confidence", 1.0, 2, None), ("low_confidence", 1.0, 4, 2), ("random", 1.0, 2, None)])
def test_llada_law(world, remasking, temperature, steps, block_length) -> None:
    s = samplers.LLaDA(remasking=remasking, temperature=temperature, block_length=block_length).connect(world)
    x = s.sample(N, T, steps, seed=steps)
    law = llada_law(world, T, steps, remasking, temperature, block_length)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_exact_samples_are_rejected_against_a_biased_law(world) -> None:
    """The tests have power in this world: exact samples fail against MDLM's 2-step law."""
    x = world.sample(N, T, seed=11)
    assert chi_square_pvalue(sequence_counts(x, V), mdlm_law(world, T, 2)) < ALPHA


SHIPPED = [name for name in samplers.__all__ if name not in ("Sampler", "top_p_filter")]


def test_external_sampler_runs_in_an_hmm_world(world) -> None:
    """The oracle model answers HMM worlds too (issue 38; its rows: tests/test_oracle_model_worlds.py)."""
    s = samplers.ExternalSampler(generate="examples.llada_generate:generate", prompt_length=2,
                                 kwargs={"block_length": 30, "temperature": 1.0}).connect(world)
    x = s.sample(3, 32, 6, seed=1)
    assert x.shape == (3, 32) and int(x.min()) >= 0 and int(x.max()) < world.vocab_size


@pytest.mark.parametrize("name", [n for n in SHIPPED if n != "ExternalSampler"])
def test_every_sampler_runs_in_an_hmm_world(world, name) -> None:
    s = getattr(samplers, name)().connect(world)
    steps = 8 if name != "AR" else None
    x = s.sample(6, 32, steps, seed=1)
    assert x.shape == (6, 32) and x.min() >= 0 and x.max() < V
    assert torch.equal(s.sample(3, 32, steps, seed=1, start_index=3), x[3:])


def test_law_is_exact_with_the_hmm_oracle(world) -> None:
    """The HMM oracle answers the world's exact posterior, so a sampler declaring exactness (one position per
    step) has an exact law there; fewer steps, or the oracle of another world, do not."""
    s = samplers.MDLMPaper().connect(world)
    assert s.law_is_exact(T, T) and not s.law_is_exact(T, 2)
    other = HMMWorld(emission=world.B.clone(), transition=world.A.clone())
    s.denoiser = HMMOracleDenoiser(other)
    assert not s.law_is_exact(T, T)


def _order2_world() -> HMMWorld:
    """An order-2 context world (V = 3, S = 9, positive rows: the segmented exact posterior)."""
    g = torch.Generator().manual_seed(3)
    rows = torch.rand(V * V, V, generator=g, dtype=torch.float64) + 0.1
    return HMMWorld(context_rows=rows / rows.sum(1, keepdim=True))


@pytest.mark.parametrize("kind", ["dense", "order2"])
def test_exact_samplers_read_zero_sequence_kl_in_an_hmm_world(world, kind) -> None:
    """Paper-MDLM and FHS at steps = T (one position per step from the HMM oracle's exact posterior) and AR read
    seq_kl_upper = 0 with the bracket [0, 0] in every seed, although their float32 log q differs from the
    world's log p by ~1e-7 (decided by declared exactness, not a threshold); paper-MDLM at 2 steps, and paper-MDLM
    at steps = T on the oracle of the world's first-order projection (an approximation of the world), do not."""
    w = world if kind == "dense" else _order2_world()
    n, T5 = 32, 5

    def read(s, steps, seed):
        x, stats = s.generate_with_stats(torch.arange(n), T5, steps, seed)
        stats["exact_law"] = torch.full((n,), float(s.law_is_exact(T5, steps)), dtype=torch.float64)  # as the engine
        m = SequenceKL(w.bigram_chain, world=w)
        m.update(x, {"index": torch.arange(n), **stats})
        return m.compute(), (stats["log_q"] - w.log_prob(x)).abs().max().item()

    exact = [(samplers.MDLMPaper().connect(w), T5), (samplers.FHS().connect(w), T5), (samplers.AR().connect(w), None)]
    for s, steps in exact:
        for seed in range(3):
            v, _ = read(s, steps, seed)
            assert v["seq_kl_upper"] == v["seq_kl_bracket_lo"] == v["seq_kl_bracket_hi"] == 0.0, (s.name, seed)
    assert read(exact[0][0], T5, 0)[1] > 0.0  # the zero is not float agreement
    projected = samplers.MDLMPaper(OracleDenoiser(w.bigram_chain)).connect(w)
    for s, steps in ((samplers.MDLMPaper().connect(w), 2), (projected, T5)):
        assert not s.law_is_exact(T5, steps)
        for seed in range(3):
            v, _ = read(s, steps, seed)
            assert v["seq_kl_upper"] != 0.0 and v["seq_kl_bracket_hi"] > 0.0, (steps, seed)  # an estimate: either sign
