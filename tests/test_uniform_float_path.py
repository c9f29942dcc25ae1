"""The uniform-state samplers' float path: they read the exact oracles' float64 forward-backward probabilities
themselves (Denoiser.posterior) instead of exp of the float32-rounded log (the former path).  The tolerance
between the two is stated and checked, and on the bundled English chain the draws of every uniform-state sampler
are identical to the former path's at the size checked here (a flip needs a uniform within ~1e-7 of a cdf
boundary; docs/performance.md)."""
from __future__ import annotations

import math

import pytest
import torch

from dllm_lit.data import MarkovDataModule
from dllm_lit.denoisers import OracleDenoiser, UniformNoise
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.denoisers.channels import MaskedUniform
from dllm_lit.denoisers.hmm_posterior import hmm_posterior
from dllm_lit.markov.hmm import HMMWorld
from dllm_lit.samplers import GIDD, Duo, Psi, SEDDUniform

pytestmark = pytest.mark.usefixtures("single_thread")
#: |x_former - x| <= x (REL_LOG |log x| + ABS_REL): the float32 rounding of log x moves it by at most half an ulp,
#: 2^-24 |log x|, and exp / log add a few float64 ulps
REL_LOG, ABS_REL = 2.0**-24 * 1.001, 2.0**-48


class FormerPath(Denoiser):
    """The oracle as the uniform-state samplers read it before: exp of the float32 log-posterior, in float64."""

    def __init__(self, oracle: OracleDenoiser) -> None:
        super().__init__()
        self.oracle, self.vocab_size = oracle, oracle.vocab_size

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.oracle(z)

    def supports(self, channel, leave_one_out: bool = False) -> bool:
        return True

    def posterior(self, z: torch.Tensor, channel=None, leave_one_out: bool = False) -> torch.Tensor:
        return self.oracle.log_posterior(z, channel, leave_one_out).to(torch.float64).exp_()


@pytest.fixture(scope="module")
def english() -> OracleDenoiser:
    return OracleDenoiser(MarkovDataModule(num_sequences=8, seq_len=64).build_chain())


@pytest.mark.parametrize("channel", [UniformNoise(0.02), UniformNoise(0.7), UniformNoise(0.999),
                                     MaskedUniform(0.4, 0.3)])
def test_probabilities_are_the_forward_backward_and_within_tolerance_of_the_former(english, channel) -> None:
    V = english.vocab_size
    z = torch.randint(0, V + channel.has_mask, (16, 96), generator=torch.Generator().manual_seed(3))
    x = english.posterior(z, channel, leave_one_out=True)
    assert x.dtype == torch.float64
    assert torch.equal(x, hmm_posterior(HMMWorld.from_chain(english.chain), z, channel, True))
    former = FormerPath(english).posterior(z, channel, leave_one_out=True)
    bound = x * (REL_LOG * x.log().abs() + ABS_REL)
    assert bool(((former - x).abs() <= bound).all())
    assert not torch.equal(former, x)  # the paths do differ (at the float32 level)


@pytest.mark.parametrize("make", [lambda d: Duo(d), lambda d: Duo(d, noise_removal="greedy"),
                                  lambda d: Psi(d, high_mode="max-capped-0.01", middle_mode="max-capped-0.01",
                                                low_mode="max-capped-0.01"),
                                  lambda d: SEDDUniform(d), lambda d: GIDD(d)])
def test_draws_equal_the_former_path(english, make) -> None:
    new, old = make(english), make(FormerPath(english))
    new.connect(english.chain), old.connect(english.chain)
    assert torch.equal(new.sample(32, 64, 12, seed=5), old.sample(32, 64, 12, seed=5))


def test_tolerance_is_tight(english) -> None:
    """The bound is attained to within a factor 4 somewhere (it is not loose)."""
    z = torch.randint(0, english.vocab_size, (8, 64), generator=torch.Generator().manual_seed(4))
    x = english.posterior(z, UniformNoise(0.5), leave_one_out=True)
    former = FormerPath(english).posterior(z, UniformNoise(0.5), leave_one_out=True)
    ratio = (former - x).abs() / (x * (REL_LOG * x.log().abs() + ABS_REL))
    assert 0.25 < float(ratio.max()) <= 1.0 and math.isfinite(float(ratio.max()))
