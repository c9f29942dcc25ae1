"""The HMM posterior and HMM-world sampling on CUDA agree with the CPU (float64): every channel, dense and
order-k worlds, within 1e-12, and the same bits for any chunking of the batch (the products are index-order sums on
both devices); MDLM samples in an HMM world agree sequence for sequence.  Skipped where torch
sees no CUDA device; run on a GPU machine with ``pytest tests/test_hmm_cuda.py``."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.denoisers import ABSORBING, MaskedUniform, UniformNoise, hmm_posterior
from dllm_lit.samplers import MDLM, LLaDA
from dllm_lit.sources import KthOrderChars, SwitchingChains
from dllm_lit.sources.hmm_synthetic import synthetic_hmm

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("make", [lambda: synthetic_hmm(64, 27, seed=1), lambda: KthOrderChars(2).build(),
                                  lambda: SwitchingChains(3, 0.9).build()])
@pytest.mark.parametrize("channel", [ABSORBING, UniformNoise(0.4), MaskedUniform(0.5, 0.2)])
@pytest.mark.parametrize("loo", [False, True])
def test_posterior_cuda_equals_cpu(make, channel, loo) -> None:
    world = make()
    g = torch.Generator().manual_seed(0)
    z = torch.randint(0, channel.num_symbols(world.vocab_size), (16, 200), generator=g)
    cpu = hmm_posterior(world, z, channel, leave_one_out=loo)
    gpu = hmm_posterior(world, z.cuda(), channel, leave_one_out=loo).cpu()
    assert (cpu - gpu).abs().max() <= 1e-12


@pytest.mark.parametrize("make", [lambda: synthetic_hmm(64, 27, seed=1), lambda: KthOrderChars(2).build(),
                                  lambda: SwitchingChains(3, 0.9).build()])
@pytest.mark.parametrize("channel, loo", [(ABSORBING, False), (UniformNoise(0.4), True)])
def test_posterior_cuda_rows_are_the_cpu_bits_in_any_chunking(make, channel, loo) -> None:
    world = make()
    z = torch.randint(0, channel.num_symbols(world.vocab_size), (12, 64), generator=torch.Generator().manual_seed(1))
    cpu = hmm_posterior(world, z, channel, leave_one_out=loo)
    parts = torch.cat([hmm_posterior(world, z[i:i + 5].cuda(), channel, leave_one_out=loo).cpu()
                       for i in range(0, 12, 5)])
    assert torch.equal(parts, cpu)


@pytest.mark.parametrize("cls", [MDLM, LLaDA])
def test_hmm_world_samples_cuda_equal_cpu(cls) -> None:
    world = SwitchingChains(2, 0.95).build()
    cpu = cls().connect(world)
    gpu = cls().connect(world).to("cuda")
    gpu.denoiser.to("cuda")
    a = cpu.sample(32, 64, 16, seed=3)
    b = gpu.sample(32, 64, 16, seed=3).cpu()
    assert (a != b).any(1).sum() <= 1  # float64 rounding may move a draw, about once in 10^13
