"""The first-order fast path of the HMM posterior (:mod:`dllm_lit.denoisers.hmm_first_order`): exact against
brute-force enumeration (V = 3, T <= 5, tolerance 1e-12), the compiled kernel and its torch mirror give the
same bits, the numbers of a sequence do not depend on the batch it is in, and vanishing evidence falls back to
the general loop's rules."""
from __future__ import annotations

import pytest
import torch

from conftest import TINY_KERNEL
from test_hmm_world import brute_posterior, joint
from dllm_lit.denoisers import ABSORBING, MaskedUniform, UniformNoise, forward_backward_posterior, hmm_posterior
from dllm_lit.denoisers.hmm_first_order import first_order_posterior, first_order_posterior_torch
from dllm_lit.denoisers.hmm_posterior import hmm_likelihood_tables
from dllm_lit.markov import HMMWorld, MarkovChain
from dllm_lit.sources import english_char_chain

pytestmark = pytest.mark.usefixtures("single_thread")
TOL = 1e-12
CHANNELS = [UniformNoise(0.6), UniformNoise(0.0), UniformNoise(0.99999), MaskedUniform(0.5, 0.2),
            MaskedUniform(0.3, 0.0), ABSORBING]


def chain_world(seed: int, zeros: bool = False) -> HMMWorld:
    g = torch.Generator().manual_seed(seed)
    P = torch.rand(3, 3, generator=g, dtype=torch.float64)
    if zeros:
        P[1, 1] = 0.0
    return HMMWorld.from_chain(MarkovChain.from_kernel(P / P.sum(1, keepdim=True)))


def both(world: HMMWorld, z: torch.Tensor, channel, loo: bool) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    L, E = hmm_likelihood_tables(world, channel)
    args = (world.A, world.initial, E, L, z, loo)
    return first_order_posterior(*args), first_order_posterior_torch(*args)


@pytest.mark.parametrize("world", [chain_world(0), chain_world(5, zeros=True)])
@pytest.mark.parametrize("channel", CHANNELS)
@pytest.mark.parametrize("loo", [False, True])
@pytest.mark.parametrize("T", [2, 3, 5])
def test_matches_enumeration(world, channel, loo, T) -> None:
    P = joint(world, T)
    L = channel.likelihood(world.vocab_size)
    z = torch.randint(0, L.shape[0], (12, T), generator=torch.Generator().manual_seed(T))
    refs = [brute_posterior(P, L, row.tolist(), loo) for row in z]
    keep = [i for i, r in enumerate(refs) if bool(torch.isfinite(r).all())]
    post = hmm_posterior(world, z[keep], channel, leave_one_out=loo)
    for i, b in enumerate(keep):
        assert (post[i] - refs[b]).abs().max() <= TOL
    fast, mirror = both(world, z[keep], channel, loo)
    if fast is not None:  # None only on vanishing evidence (then the general loop answered above)
        assert torch.equal(fast, mirror)
        assert (fast - post).abs().max() <= TOL


@pytest.mark.parametrize("channel", [UniformNoise(0.3), UniformNoise(0.9999), MaskedUniform(0.4, 0.1)])
@pytest.mark.parametrize("loo", [False, True])
def test_kernel_and_mirror_same_bits_any_batch(channel, loo) -> None:
    """English chain: the compiled kernel, the torch mirror and every sub-batch (odd offsets, single rows)
    give the same float64 numbers; 70 rows run as a block of the kernel's BLOCK (64) with a tail of 6."""
    world = HMMWorld.from_chain(english_char_chain())
    Z = channel.num_symbols(world.vocab_size)
    z = torch.randint(0, Z, (70, 64), generator=torch.Generator().manual_seed(1))
    fast, mirror = both(world, z, channel, loo)
    assert torch.equal(fast, mirror)
    parts = torch.cat([hmm_posterior(world, z[i:i + n], channel, loo) for i, n in ((0, 1), (1, 3), (4, 5), (9, 4), (13, 57))])
    assert torch.equal(parts, fast)
    assert torch.equal(hmm_posterior(world, z[7:8], channel, loo)[0], fast[7])


@pytest.mark.parametrize("form", ["dense", "signed zero", "first state"])
def test_kernel_and_mirror_same_bits_any_evidence(form) -> None:
    """Evidence tables outside the kernel's two-value form (a dense random one; one whose columns differ only in
    the sign of a zero) and one whose exception sits at state 0: the kernel's numbers are the torch mirror's."""
    world = HMMWorld.from_chain(english_char_chain())
    g = torch.Generator().manual_seed(3)
    V = world.vocab_size
    if form == "dense":
        L = torch.rand(V + 2, V, generator=g, dtype=torch.float64) + 0.01
    elif form == "signed zero":
        L = torch.eye(V, dtype=torch.float64)
        L[0, 5] = L[0, 9] = -0.0
    else:
        L = torch.full((V, V), 0.25, dtype=torch.float64)
        L[:, 0] = 0.75
    z = torch.randint(0, L.shape[0], (67, 40), generator=g)
    for loo in (False, True):
        fast = first_order_posterior(world.A, world.initial, L, L, z, loo)
        assert fast is not None and torch.equal(fast, first_order_posterior_torch(world.A, world.initial, L, L, z, loo))


def test_single_position() -> None:
    """T = 1: the leave-one-out law is the stationary law, the full posterior pi o L(z) normalised."""
    world = chain_world(2)
    pi = world.initial
    z = torch.tensor([[0], [2]])
    ch = UniformNoise(0.4)
    assert (hmm_posterior(world, z, ch, leave_one_out=True) - pi).abs().max() <= TOL
    L = ch.likelihood(3)
    want = pi * L[z[:, 0]]
    assert (hmm_posterior(world, z, ch)[:, 0] - want / want.sum(-1, keepdim=True)).abs().max() <= TOL


def test_vanishing_evidence_uses_the_general_rules() -> None:
    """A revealed pair the chain cannot connect (P'(1 -> 1) = 0): the kernel reports it and hmm_posterior answers
    with the first-order reference's fallback rules."""
    chain = MarkovChain.from_kernel(torch.tensor(TINY_KERNEL, dtype=torch.float64))
    world = HMMWorld.from_chain(chain)
    M = chain.mask_id
    z = torch.tensor([[M, 1, 1, M, 0, M], [2, M, M, M, M, 1]])
    assert both(world, z, ABSORBING, False) == (None, None)
    assert (hmm_posterior(world, z) - forward_backward_posterior(chain, z)).abs().max() <= TOL
    zu = torch.tensor([[0, 1, 1, 2], [1, 1, 0, 2]])
    assert both(world, zu, UniformNoise(1.0), True) == (None, None)
    out = hmm_posterior(world, zu, UniformNoise(1.0), leave_one_out=True)
    assert bool(torch.isfinite(out).all()) and torch.allclose(out.sum(-1), torch.ones(2, 4, dtype=torch.float64))
