"""The HMM posterior beyond the first-order chain (switching chains, hidden-state HMMs, order-k context worlds)
gives each sequence the same float64 bits whatever else is in its batch: any chunking, order or padding, the
zero-evidence fallbacks included (torch.equal throughout); the compiled products equal their torch mirrors."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.denoisers import ABSORBING, HMMOracleDenoiser, MaskedUniform, UniformNoise, hmm_posterior
from dllm_lit.markov import HMMWorld, products
from dllm_lit.markov.products import WorldProducts, normalised, numba_available
from dllm_lit.sources import KthOrderChars, SwitchingChains
from dllm_lit.sources.hmm_synthetic import synthetic_hmm
from test_hmm_world import context_world, random_world

pytestmark = pytest.mark.usefixtures("single_thread")

WORLDS = {"switching": lambda: SwitchingChains().build(),  # S = 54, V = 27
          "hmm": lambda: synthetic_hmm(40, 27, stay=0.5, emission_support=3, seed=0),
          "order2": lambda: KthOrderChars(2).build()}  # S = 729


def tokens(world: HMMWorld, n: int, T: int, symbols: int, seed: int) -> torch.Tensor:
    return torch.randint(0, symbols, (n, T), generator=torch.Generator().manual_seed(seed))


def chunked(fn, z: torch.Tensor, size: int) -> torch.Tensor:
    return torch.cat([fn(z[i:i + size]) for i in range(0, z.shape[0], size)])


@pytest.mark.parametrize("kind", sorted(WORLDS))
@pytest.mark.parametrize("channel, loo", [(ABSORBING, False), (ABSORBING, True), (UniformNoise(0.4), True),
                                          (MaskedUniform(0.5, 0.2), False)])
def test_rows_do_not_depend_on_the_chunking(kind, channel, loo) -> None:
    """Chunks of 1, 3 and 7 rows and a permutation give the full batch's rows bit for bit (on main, BLAS's
    gemv / gemm blockings moved about 1 entry in 20 by up to 2.2e-16)."""
    world = WORLDS[kind]()
    z = tokens(world, 15, 24, channel.num_symbols(world.vocab_size), seed=3)

    def post(x: torch.Tensor) -> torch.Tensor:
        return hmm_posterior(world, x, channel, leave_one_out=loo)

    full = post(z)
    for size in (1, 3, 7):
        assert torch.equal(chunked(post, z, size), full), size
    perm = torch.randperm(z.shape[0], generator=torch.Generator().manual_seed(0))
    assert torch.equal(post(z[perm]), full[perm])
    assert post(z[:0]).shape == (0, 24, world.vocab_size)


@pytest.mark.skipif(not numba_available(), reason="the compiled products need the optional extra `fast` (numba)")
@pytest.mark.parametrize("kind", sorted(WORLDS))
def test_torch_ops_give_the_compiled_bits(kind, monkeypatch) -> None:
    """The whole posterior by torch ops (what another device runs) equals the compiled CPU path, bit for bit."""
    world = WORLDS[kind]()
    for channel, loo in ((ABSORBING, False), (MaskedUniform(0.5, 0.2), True)):
        z = tokens(world, 6, 16, channel.num_symbols(world.vocab_size), seed=7)
        fast = hmm_posterior(world, z, channel, leave_one_out=loo)
        with monkeypatch.context() as m:
            m.setattr(products, "numba_available", lambda: False)
            assert torch.equal(hmm_posterior(world, z, channel, leave_one_out=loo), fast)


@pytest.mark.parametrize("kind", ["switching", "order2"])
def test_oracle_denoiser_rows_do_not_depend_on_the_chunking(kind, monkeypatch) -> None:
    """HMMOracleDenoiser (float64): its own chunks of rows, and the caller's, change no bit (absorbing masks with
    the segmented path in the order-2 world, leave-one-out and uniform noise with the full pass)."""
    world = WORLDS[kind]()
    den = HMMOracleDenoiser(world, dtype=torch.float64)
    z = tokens(world, 9, 20, world.vocab_size + 1, seed=4)
    zu = tokens(world, 9, 20, world.vocab_size, seed=5)
    calls = [(den.log_posterior, z), (lambda x: den.posterior(x, leave_one_out=True), z),
             (lambda x: den.posterior(x, UniformNoise(0.3), leave_one_out=True), zu)]
    full = [fn(x) for fn, x in calls]
    for size in (1, 4):
        assert all(torch.equal(chunked(fn, x, size), f) for (fn, x), f in zip(calls, full)), size
    monkeypatch.setattr(HMMOracleDenoiser, "MESSAGE_BYTES", 8 * 20 * world.num_states * 2)  # chunks of 2 rows
    assert all(torch.equal(fn(x), f) for (fn, x), f in zip(calls, full))


@pytest.mark.parametrize("loo", [False, True])
def test_zero_evidence_fallbacks_are_the_same_alone_and_in_a_batch(loo) -> None:
    """A world with zeros in A and B: rows whose forward messages, right messages or posteriors vanish take
    their fallbacks row by row, and a row alone (no fallback anywhere in its batch) equals the same row in a
    batch where other rows fall back."""
    A = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.5, 0.0, 0.0, 0.5], [0.3, 0.0, 0.0, 0.7]])
    B = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.5, 0.0, 0.5]])  # "1 1" is impossible
    world = HMMWorld(emission=B, transition=A, initial=torch.full((4,), 0.25), horizon=6)
    z = tokens(world, 40, 6, 4, seed=6)
    post = hmm_posterior(world, z, leave_one_out=loo)
    assert torch.isfinite(post).all() and torch.allclose(post.sum(-1), torch.ones(40, 6, dtype=torch.float64))
    impossible = torch.isinf(world_log_evidence(world, z))
    assert 0 < int(impossible.sum()) < 40  # the batch mixes rows with and without vanishing evidence
    for i in range(40):
        assert torch.equal(hmm_posterior(world, z[i:i + 1], leave_one_out=loo)[0], post[i]), i
    for size in (3, 7):
        assert torch.equal(chunked(lambda x: hmm_posterior(world, x, leave_one_out=loo), z, size), post)


def world_log_evidence(world: HMMWorld, z: torch.Tensor) -> torch.Tensor:
    from dllm_lit.markov.hmm_conditional import log_evidence

    return log_evidence(world, z)


@pytest.mark.skipif(not numba_available(), reason="the compiled products need the optional extra `fast` (numba)")
@pytest.mark.parametrize("make", [lambda: random_world(S=6, V=3, seed=1), lambda: context_world(V=3, k=2, seed=4),
                                  lambda: context_world(V=2, k=3, seed=5)])
def test_compiled_and_torch_products_give_the_same_bits(make, monkeypatch) -> None:
    """m A, (A m^T)^T, m B and the normalised rows: numba kernels == torch mirrors (torch.equal), a row alone == in a
    batch, and within 1e-14 of the dense products."""
    world = make()
    ops = WorldProducts(world)
    m = torch.rand(37, world.num_states, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    def every(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return ops.right(x), ops.left(x), ops.emit(x), *normalised(x)[:2]

    fast = every(m)
    for i in (0, 5, 36):
        assert all(torch.equal(f[i:i + 1], g) for f, g in zip(fast, every(m[i:i + 1])))
    monkeypatch.setattr(products, "numba_available", lambda: False)
    slow = every(m)
    assert all(torch.equal(f, g) for f, g in zip(fast, slow))
    A = world.dense_transition()
    s = m.sum(-1, keepdim=True)
    for got, want in zip(fast, (m @ A, m @ A.T, m @ world.B, m / s, s)):
        assert (got - want).abs().max() <= 1e-14
