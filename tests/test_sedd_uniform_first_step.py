"""Upstream SEDD-uniform's float32 arithmetic loses the first geometric step at few steps; the project's float64 step
is Bayes' rule there and its position-0 marginal is the exact law's (``benchmarks/sedd_uniform_float32.py`` prints
the figures ``docs/samplers/sedd_uniform.md`` quotes)."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from dllm_lit.denoisers import UniformNoise
from dllm_lit.exact.uniform_state import sedd_uniform_law
from dllm_lit.samplers.sedd_uniform import SEDDUniform

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from sedd_uniform_float32 import (EPS, float32_first_step, float32_log_scores, float32_sample,  # noqa: E402
                                  float64_first_step)

pytestmark = pytest.mark.usefixtures("single_thread")
Z = torch.tensor([[0, 1], [2, 2]])


def test_float32_first_step_has_no_information(den) -> None:
    """At sigma = 20 the float32 scores are exactly 1; e - 1 rounds to -1 for steps <= 6, and the staggered score
    comes out -32 for every token at steps = 1 (every weight negative) and 0 at steps 2..6 (every weight zero)."""
    assert torch.equal(float32_log_scores(den, Z, 20.0).exp(), torch.ones(2, 2, 3))
    for steps in range(1, 7):
        dsigma, em1, stag, trans = float32_first_step(den, Z, steps)
        assert dsigma > 17.3 and em1 == -1.0
        w = stag * trans
        assert (w < 0).all() if steps == 1 else (w == 0).all()
    dsigma, em1, stag, _ = float32_first_step(den, Z, 7)
    assert dsigma < 17.3 and em1 > -1.0 and (stag > 0).all()


def test_float64_first_step_is_bayes(den) -> None:
    """The project's first step (e^-dsigma down to 2e-9) is Bayes' rule p(z_s^i = y | z_t), within 1e-9."""
    s = SEDDUniform(den)
    V = den.vocab_size
    for steps in (1, 2, 6):
        w = float64_first_step(den, Z, steps)
        a_t, a_s = math.exp(-s.sigma(1.0)), math.exp(-s.sigma(1.0 - (1.0 - EPS) / steps))
        q = den.posterior(Z, UniformNoise(a_t), leave_one_out=True).to(torch.float64)
        bayes = (q @ UniformNoise(a_s).likelihood(V).T) * UniformNoise(a_t / a_s).likelihood(V)[Z]
        assert (w > 0).all()
        assert torch.allclose(w / w.sum(-1, keepdim=True), bayes / bayes.sum(-1, keepdim=True), atol=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("steps", [1, 2, 6])
def test_position0_marginal(chain, den, steps) -> None:
    """P(x_0 = 0) at T = 2, N = 20000: the project's sampler within 4 standard errors of the exact law, upstream's
    float32 arithmetic more than 12 away (0.37, 0.99, 0.56 against 0.50 in the benchmark)."""
    n, T = 20000, 2
    exact = float(sedd_uniform_law(chain, T, steps).reshape(3, -1)[0].sum())
    se = math.sqrt(exact * (1 - exact) / n)
    ours = float((SEDDUniform(den).sample(n, T, steps, seed=steps)[:, 0] == 0).double().mean())
    upstream = float((float32_sample(den, n, T, steps, seed=steps)[:, 0] == 0).double().mean())
    assert abs(ours - exact) < 4 * se
    assert abs(upstream - exact) > 12 * se


def test_doc_states_upstream_float32_loss() -> None:
    doc = (ROOT / "docs/samplers/sedd_uniform.md").read_text()
    for phrase in ("float32", "benchmarks/sedd_uniform_float32.py", "tests/test_sedd_uniform_first_step.py",
                   "rounds to -1", "every weight negative", "float64"):
        assert phrase in doc, phrase
