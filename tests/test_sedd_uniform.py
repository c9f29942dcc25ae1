"""SEDD with the uniform graph (exact concrete scores from the leave-one-out oracle): output law equals the exact law
of its algorithm (DP over the V^T noisy states), the analytic step equals Bayes' rule, NFE, chunking, bad settings."""
from __future__ import annotations

import math

import pytest
import torch

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.denoisers import UniformNoise
from dllm_lit.markov import HMMWorld
from dllm_lit.denoisers.hmm_posterior import hmm_posterior
from dllm_lit.samplers.sedd_uniform import SEDDUniform, staggered_step, uniform_scores
from dllm_lit.exact import sedd_uniform_law
from test_duo import CountingLOO

pytestmark = pytest.mark.usefixtures("single_thread")
V, T, N = 3, 4, 20000
ALPHA = 0.01  # goodness-of-fit level


@pytest.mark.parametrize("steps, predictor, noise, denoise", [
    (1, "analytic", "geometric", True), (3, "analytic", "geometric", True), (2, "analytic", "loglinear", False),
    (3, "euler", "geometric", True),   # early steps clip P(stay) at 0
    (4, "euler", "loglinear", True),
])
def test_law_matches_dynamic_programming(chain, den, steps, predictor, noise, denoise) -> None:
    law = sedd_uniform_law(chain, T, steps, predictor, noise, denoise=denoise)
    x = SEDDUniform(den, predictor=predictor, noise=noise, denoise=denoise).sample(N, T, steps, seed=steps + 10)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA


def test_analytic_step_is_the_exact_marginal(chain) -> None:
    """Upstream's staggered score times the transposed transition, with exact scores, is Bayes' rule
    p(z_s^i = y | z_t) propto (L_s q_i)(y) K(z_t^i | y), within 1e-9 (also when e^-dsigma is 1e-7)."""
    world = HMMWorld.from_chain(chain)
    z = torch.tensor([[0, 2, 1, 1], [1, 1, 0, 2]])
    for sig_t, sig_s in ((16.0, 0.9), (2.0, 1.5), (0.3, 0.01)):
        a_t, a_s = math.exp(-sig_t), math.exp(-sig_s)
        q = hmm_posterior(world, z, UniformNoise(a_t), leave_one_out=True)
        w = staggered_step(uniform_scores(q, z, a_t), z, sig_t - sig_s)
        bayes = (q @ UniformNoise(a_s).likelihood(V).T) * UniformNoise(a_t / a_s).likelihood(V)[z]
        assert torch.allclose(w / w.sum(-1, keepdim=True), bayes / bayes.sum(-1, keepdim=True), atol=1e-9)


def test_nfe_counts_denoiser_calls(chain, den) -> None:
    for denoise in (True, False):
        counting = CountingLOO(den)
        s = SEDDUniform(counting, denoise=denoise).connect(chain)
        s.sample(5, 6, 4, seed=0)
        assert counting.calls == s.nfe(6, 4) == 4 + denoise
