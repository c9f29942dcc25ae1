"""Duo / UDLM ancestral sampler (uniform-state, exact leave-one-out oracle): its output law equals the exact law of
its algorithm (dynamic programming over the V^T noisy states, dllm_lit/exact/), NFE, chunking, bad settings."""
from __future__ import annotations

import pytest
import torch

from conftest import CountingDenoiser, chi_square_pvalue, sequence_counts
from dllm_lit.denoisers import UniformNoise
from dllm_lit.samplers.duo import Duo
from dllm_lit.samplers.uniform_state import uniform_reverse_step
from dllm_lit.exact import chain_law, duo_law

pytestmark = pytest.mark.usefixtures("single_thread")
V, T, N = 3, 4, 20000
ALPHA = 0.01  # goodness-of-fit level: a correct sampler fails a test with probability 1 %


@pytest.mark.parametrize("steps, noise, noise_removal", [
    (1, "loglinear", "ancestral"), (3, "loglinear", "ancestral"), (2, "cosine", "ancestral"),
    (3, "loglinear", "greedy"), (2, "loglinear", "none"),
])
def test_law_matches_dynamic_programming(chain, den, steps, noise, noise_removal) -> None:
    law = duo_law(chain, T, steps, noise, noise_removal=noise_removal)
    x = Duo(den, noise=noise, noise_removal=noise_removal).sample(N, T, steps, seed=steps)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_greedy_tail_is_biased_and_ancestral_converges(chain) -> None:
    """The greedy tail's law stays far from the chain's as steps grow; the ancestral tail's approaches it.
    Total variation at 1, 4, 8 steps (exact laws; docs/samplers/duo.md gives 16 and 64)."""
    exact = chain_law(chain, T)
    tv = {m: [0.5 * (duo_law(chain, T, s, noise_removal=m) - exact).abs().sum().item() for s in (1, 4, 8)]
          for m in ("ancestral", "greedy")}
    assert tv["ancestral"][0] > tv["ancestral"][1] > tv["ancestral"][2]
    assert min(tv["greedy"]) > 0.3 > tv["ancestral"][2]


def test_exact_samples_are_rejected_against_few_step_law(chain) -> None:
    """Power: exact chain samples fail against the 1-step law."""
    assert chi_square_pvalue(sequence_counts(chain.sample(N, T, seed=5), V), duo_law(chain, T, 1)) < ALPHA


def test_reverse_step_is_bayes_rule() -> None:
    """Upstream's closed form equals sum_x x(x) q(z_s | x) q(z_t | z_s) / sum_x x(x) q(z_t | x), within 1e-12."""
    gen = torch.Generator().manual_seed(0)
    x0 = torch.rand(2, 5, 7, generator=gen, dtype=torch.float64)
    x0 = x0 / x0.sum(-1, keepdim=True)
    zt = torch.randint(0, 7, (2, 5), generator=gen)
    for a_t, a_s in ((0.1, 0.3), (0.5, 0.9), (0.2, 1.0)):
        L_s, K = UniformNoise(a_s).likelihood(7), UniformNoise(a_t / a_s).likelihood(7)
        bayes = (x0 @ L_s.T) * K[zt]
        bayes = bayes / bayes.sum(-1, keepdim=True)
        assert torch.allclose(uniform_reverse_step(x0, zt, a_s, a_t), bayes, atol=1e-12)


def test_nfe_counts_denoiser_calls(chain, den) -> None:
    for mode, extra in (("ancestral", 1), ("greedy", 1), ("none", 0)):
        counting = CountingLOO(den)
        s = Duo(counting, noise_removal=mode).connect(chain)
        s.sample(5, 6, 4, seed=0)
        assert counting.calls == s.nfe(6, 4) == 4 + extra


def test_denoiser_without_uniform_channel_refused(chain, den) -> None:
    with pytest.raises(ValueError, match="UniformNoise channel leave-one-out"):
        Duo(CountingDenoiser(den)).connect(chain)


class CountingLOO(CountingDenoiser):
    """The oracle answering every channel, counting log_posterior calls."""

    def __init__(self, oracle) -> None:
        super().__init__(oracle)
        self.calls = 0

    def supports(self, channel, leave_one_out=False):
        return True

    def log_posterior(self, z, channel=None, leave_one_out=False):
        self.calls += 1
        return self.oracle.log_posterior(z, channel, leave_one_out)


def tiny_hmm():
    """A tiny HMM that is not a first-order chain (V = 3, S = 4; as tests/test_hmm_samplers.py)."""
    from dllm_lit.markov import HMMWorld

    A = torch.tensor([[0.7, 0.2, 0.1, 0.0], [0.1, 0.6, 0.0, 0.3], [0.25, 0.25, 0.5, 0.0], [0.0, 0.3, 0.2, 0.5]],
                     dtype=torch.float64)
    B = torch.tensor([[0.8, 0.2, 0.0], [0.1, 0.1, 0.8], [0.3, 0.6, 0.1], [0.0, 0.5, 0.5]], dtype=torch.float64)
    return HMMWorld(emission=B, transition=A)


def test_law_in_an_hmm_world() -> None:
    """Through HMMOracleDenoiser (uniform channel, leave-one-out forward-backward) the law is the DP's."""
    world = tiny_hmm()
    x = Duo().connect(world).sample(N, T, 2, seed=41)
    assert chi_square_pvalue(sequence_counts(x, V), duo_law(world, T, 2)) > ALPHA
