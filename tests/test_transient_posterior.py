"""The uniform-state samplers' evaluation (``Denoiser.transient_posterior``: the oracle's leave-one-out posterior
written into one buffer reused across calls) gives the numbers of ``posterior`` itself, at any batch size, after a
larger or smaller call, on the kernel's path and on its vanishing-evidence fallback; the samplers' draws are those of
fresh buffers (docs/performance.md, "Uniform-state samplers")."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.denoisers.channels import MaskedUniform, UniformNoise
from dllm_lit.markov import MarkovChain
from dllm_lit.samplers import DiffusionGemma, Duo

pytestmark = pytest.mark.usefixtures("single_thread")
V, T = 5, 9


def _chain(zeros: bool) -> MarkovChain:
    g = torch.Generator().manual_seed(3)
    K = torch.rand(V, V, generator=g, dtype=torch.float64) + 0.05
    if zeros:  # transitions the chain never makes: clean evidence (alpha = 1) can vanish
        K[0, 1] = K[1, 2] = K[2, 0] = 0.0
    return MarkovChain.from_kernel(K / K.sum(1, keepdim=True))


class FreshOracle(OracleDenoiser):
    """The reference: every evaluation in fresh memory (``posterior`` itself)."""

    def transient_posterior(self, z, channel):
        return self.posterior(z, channel, leave_one_out=True)


@pytest.mark.parametrize("zeros", [False, True])
def test_transient_equals_posterior_at_any_batch(zeros) -> None:
    den = OracleDenoiser(_chain(zeros))
    g = torch.Generator().manual_seed(1)
    channels = [UniformNoise(0.37), UniformNoise(1.0), MaskedUniform(0.5, 0.2)]
    for B in (17, 3, 17, 40):  # the buffer grows, is reused by a smaller call, then by equal ones
        for ch in channels:
            z = torch.randint(0, ch.num_symbols(V), (B, T), generator=g)
            got = den.transient_posterior(z, ch)
            assert torch.equal(got, den.posterior(z, ch, leave_one_out=True)), (B, ch)
    z = torch.randint(0, V, (6, T), generator=g)
    first = den.transient_posterior(z, UniformNoise(0.5)).data_ptr()
    assert den.transient_posterior(z, UniformNoise(0.6)).data_ptr() == first  # one buffer, reused


@pytest.mark.parametrize("batch", [5, 23])
def test_sampler_draws_equal_fresh_buffers(batch) -> None:
    chain = _chain(False)
    for make in (lambda d: Duo(d, steps=3), lambda d: DiffusionGemma(d, steps=4)):
        fast = make(OracleDenoiser(chain)).connect(chain).generate(torch.arange(batch), T, 3, seed=7)
        ref = make(FreshOracle(chain)).connect(chain).generate(torch.arange(batch), T, 3, seed=7)
        assert torch.equal(fast, ref)


class TemperedOracle(OracleDenoiser):
    """A subclass whose ``posterior`` is not the oracle's (here sharpened): the samplers must see it."""

    def posterior(self, z, channel=None, leave_one_out=False):
        p = super().posterior(z, channel, leave_one_out) ** 2
        return p / p.sum(-1, keepdim=True)


def test_a_subclass_posterior_is_not_bypassed() -> None:
    den = TemperedOracle(_chain(False))
    z = torch.randint(0, V, (4, T), generator=torch.Generator().manual_seed(2))
    assert torch.equal(den.transient_posterior(z, UniformNoise(0.4)), den.posterior(z, UniformNoise(0.4), True))
    assert not torch.allclose(den.transient_posterior(z, UniformNoise(0.4)),
                              OracleDenoiser(_chain(False)).posterior(z, UniformNoise(0.4), True))
