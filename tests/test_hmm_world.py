"""HMM worlds: exact quantities and the exact posterior under every evidence channel, against brute-force
enumeration on tiny worlds (tolerance 1e-9 unless stated)."""
from __future__ import annotations

import itertools

import pytest
import torch

from conftest import TINY_KERNEL, chi_square_pvalue, sequence_counts
from dllm_lit.denoisers import (ABSORBING, HMMOracleDenoiser, MaskedUniform, OracleDenoiser, UniformNoise,
                                forward_backward_posterior, hmm_posterior)
from dllm_lit.markov import HMMWorld, MarkovChain
from dllm_lit.markov.chain import ChainError
from dllm_lit.markov.hmm_exact import dependence_profile, entropy_rate, mutual_information, ngram_marginals
from dllm_lit.sources import HMMSynthetic, KthOrderChars, SwitchingChains
from dllm_lit.sources.hmm_synthetic import synthetic_hmm

pytestmark = pytest.mark.usefixtures("single_thread")
TOL = 1e-9
CHANNELS = [ABSORBING, UniformNoise(0.6), MaskedUniform(0.5, 0.2), UniformNoise(0.0)]


def random_world(S: int = 4, V: int = 3, seed: int = 0, zeros: bool = False) -> HMMWorld:
    g = torch.Generator().manual_seed(seed)
    A = torch.rand(S, S, generator=g, dtype=torch.float64)
    B = torch.rand(S, V, generator=g, dtype=torch.float64)
    if zeros:
        A[0, 1:] = 0.0
        B[1, 0] = 0.0
    return HMMWorld(emission=B / B.sum(1, keepdim=True), transition=A / A.sum(1, keepdim=True))


def context_world(V: int = 3, k: int = 2, seed: int = 1) -> HMMWorld:
    g = torch.Generator().manual_seed(seed)
    rows = torch.rand(V ** k, V, generator=g, dtype=torch.float64)
    return HMMWorld(context_rows=rows / rows.sum(1, keepdim=True))


def joint(world: HMMWorld, T: int) -> torch.Tensor:
    """p(x) over V^T by summing over every hidden path (independent of the forward algorithm)."""
    S, V = world.num_states, world.vocab_size
    A, B, mu = world.dense_transition(), world.B, world.initial
    paths = torch.tensor(list(itertools.product(range(S), repeat=T)))  # [S^T, T]
    w = mu[paths[:, 0]]
    emit = B[paths[:, 0]]
    for t in range(1, T):
        w = w * A[paths[:, t - 1], paths[:, t]]
        emit = (emit[:, :, None] * B[paths[:, t]][:, None, :]).reshape(len(paths), -1)
    return (w @ emit).reshape((V,) * T)


def brute_posterior(P: torch.Tensor, L: torch.Tensor, z: list[int], loo: bool) -> torch.Tensor:
    T, V = P.dim(), P.shape[0]
    out = torch.empty(T, V, dtype=torch.float64)
    for t in range(T):
        Q = P.clone()
        for u in range(T):
            if loo and u == t:
                continue
            shape = [1] * T
            shape[u] = V
            Q = Q * L[z[u]].reshape(shape)
        m = Q.sum(dim=[d for d in range(T) if d != t])
        out[t] = m / m.sum()
    return out


@pytest.mark.parametrize("make", [lambda: random_world(), lambda: random_world(seed=3, zeros=True),
                                  lambda: context_world()])
@pytest.mark.parametrize("channel", CHANNELS)
@pytest.mark.parametrize("loo", [False, True])
def test_posterior_matches_enumeration(make, channel, loo) -> None:
    world, T = make(), 5
    P = joint(world, T)
    L = channel.likelihood(world.vocab_size)
    g = torch.Generator().manual_seed(7)
    z = torch.randint(0, L.shape[0], (8, T), generator=g)
    if channel is ABSORBING:
        z[0] = world.mask_id  # nothing revealed
        z[1, :2] = torch.tensor([0, 2])  # a prompt
        z[1, 2:] = world.mask_id
    keep = [b for b in range(z.shape[0]) if float((P * _evidence(L, z[b].tolist(), T)).sum()) > 0]
    post = hmm_posterior(world, z[keep], channel, leave_one_out=loo)
    for i, b in enumerate(keep):
        ref = brute_posterior(P, L, z[b].tolist(), loo)
        assert (post[i] - ref).abs().max() <= TOL


def _evidence(L, z, T):
    E = torch.ones((L.shape[1],) * T, dtype=torch.float64)
    for u in range(T):
        shape = [1] * T
        shape[u] = L.shape[1]
        E = E * L[z[u]].reshape(shape)
    return E


def test_first_order_special_case_matches_reference_and_fast_oracle() -> None:
    """S = V, B = I: the HMM posterior is the first-order reference (also with impossible evidence), and the
    fast oracle answers every channel through the same contract."""
    chain = MarkovChain.from_kernel(torch.tensor(TINY_KERNEL, dtype=torch.float64))
    world = HMMWorld.from_chain(chain)
    M = chain.mask_id
    z = torch.tensor([[M, 1, M, M, 1, M], [1, 1, M, 0, M, M], [M] * 6, [2, M, M, M, M, 1]])
    ref = forward_backward_posterior(chain, z)
    assert (hmm_posterior(world, z) - ref).abs().max() <= 1e-12
    fast = OracleDenoiser(chain, dtype=torch.float64)
    assert fast.supports(UniformNoise(0.3), leave_one_out=True)
    assert (fast.log_posterior(z).exp() - ref).abs().max() <= 1e-10
    zu = torch.randint(0, 3, (4, 6), generator=torch.Generator().manual_seed(0))
    assert torch.allclose(fast.log_posterior(zu, UniformNoise(0.3)).exp(), hmm_posterior(world, zu, UniformNoise(0.3)),
                          atol=1e-12)
    hmm = HMMOracleDenoiser(world, dtype=torch.float64)
    assert (hmm(z).exp() - ref).abs().max() <= 1e-12


def test_learned_style_denoiser_refuses_other_channels() -> None:
    from conftest import GenericDenoiser

    chain = MarkovChain.from_kernel(torch.tensor(TINY_KERNEL, dtype=torch.float64))
    den = GenericDenoiser(OracleDenoiser(chain))
    assert den.supports(ABSORBING) and not den.supports(UniformNoise(0.5))
    with pytest.raises(ValueError, match="UniformNoise channel"):
        den.log_posterior(torch.zeros(1, 3, dtype=torch.long), UniformNoise(0.5))


@pytest.mark.parametrize("make", [lambda: random_world(), lambda: context_world(), lambda: random_world(seed=3, zeros=True)])
def test_exact_quantities_match_enumeration(make) -> None:
    world = make()
    P4 = joint(world, 4)
    x = torch.tensor(list(itertools.product(range(world.vocab_size), repeat=4)))
    assert (world.log_prob(x).exp() - P4.reshape(-1)).abs().max() <= TOL
    for n in (1, 2, 3):
        marg = P4.sum(dim=tuple(range(n, 4)))
        assert (ngram_marginals(world, n) - marg).abs().max() <= TOL
    dep = dependence_profile(world, 3)
    for d in (1, 2, 3):
        J = P4.sum(dim=[u for u in range(4) if u not in (0, d)])
        assert abs(dep[d - 1] - mutual_information(J)) <= TOL


def test_entropy_rate_exact_for_context_worlds_and_estimated_otherwise() -> None:
    world = context_world()
    h = entropy_rate(world)
    # H(X_4 | X_{<4}) by enumeration equals the rate once the context is determined (4 > k = 2)
    P5, P4 = joint(world, 5), joint(world, 4)
    cond = -(P5 * (P5 / P4[..., None]).clamp_min(1e-300).log()).sum()
    assert h.exact and abs(float(h) - float(cond)) <= TOL
    rw = random_world()
    est = entropy_rate(rw, num_sequences=128, length=64)
    P6, P5 = joint(rw, 6), joint(rw, 5)
    upper = float(-(P6 * (P6 / P5[..., None]).clamp_min(1e-300).log()).sum())  # H(X_5 | X_<5) >= H
    assert not est.exact and est.stderr > 0 and est <= upper + 5 * est.stderr


def test_sampling_follows_the_law_and_is_batch_invariant() -> None:
    world = random_world(seed=5)
    x = world.sample(20000, 4, seed=1)
    assert chi_square_pvalue(sequence_counts(x, 3), joint(world, 4).reshape(-1)) > 0.01
    part = world.sample(5, 9, seed=1, start_index=3)
    assert torch.equal(world.sample(10, 9, seed=1)[3:8], part)
    cw = context_world()
    y = cw.sample(20000, 4, seed=2)
    assert chi_square_pvalue(sequence_counts(y, 3), joint(cw, 4).reshape(-1)) > 0.01


def test_context_operator_equals_dense() -> None:
    cw = context_world(V=3, k=3)
    dense = HMMWorld(emission=cw.B, transition=cw.dense_transition(), initial=cw.initial)
    m = torch.rand(5, cw.num_states, dtype=torch.float64)
    assert torch.allclose(cw.right(m), dense.right(m), atol=1e-15)
    assert torch.allclose(cw.left(m), dense.left(m), atol=1e-15)


def test_sources_build_and_first_order_case() -> None:
    from dllm_lit.sources import english_char_chain

    w1 = KthOrderChars(1).build()
    assert torch.allclose(w1.rows, english_char_chain().kernel, atol=1e-15)
    assert abs(float(entropy_rate(w1)) - float(entropy_rate(HMMWorld.from_chain(english_char_chain())))) < 1e-12
    w2 = KthOrderChars(2, sparsity={"top_k": 5, "eps": 1e-3}).build()
    nu = KthOrderChars(2).counts().sum(0).double()
    kept = (w2.rows - 1e-3 * nu / nu.sum()) > 1e-12  # entries above the teleport floor: the top-K
    assert w2.num_states == 27 ** 2 and (kept.sum(1) <= 5).all()
    sw0 = SwitchingChains(num_chains=2, rho=0.0).build()
    assert dependence_profile(sw0, 2)[0] > 0
    sw1 = SwitchingChains(num_chains=2, rho=1.0).build()
    assert dependence_profile(sw1, 64)[-1] > 1e-3  # the topic never switches: long-range dependence stays
    hs = HMMSynthetic(num_states=6, vocab_size=5, emission_support=1).build()
    assert hs.deterministic_emission


def test_kth_order_from_any_text(tmp_path) -> None:
    p = tmp_path / "t.txt"
    p.write_text("the cat sat on the mat. The hat!")
    w = KthOrderChars(order=2, path=str(p)).build()
    assert w.num_states == 27 ** 2 and w.metadata["order"] == 2
    with pytest.raises(FileNotFoundError, match="text file not found"):
        KthOrderChars(order=2, path=str(tmp_path / "missing.txt")).build()


@pytest.mark.parametrize("build, match", [
    (lambda: SwitchingChains(rho=1.5), "rho"),
    (lambda: SwitchingChains(rho=-0.1), "rho"),
    (lambda: KthOrderChars(order=0), "order"),
    (lambda: KthOrderChars(order=4), "order"),
    (lambda: UniformNoise(1.2), "alpha"),
    (lambda: UniformNoise(-0.2), "alpha"),
    (lambda: MaskedUniform(0.7, 0.5), "alpha \\+ beta"),
    (lambda: HMMWorld(emission=torch.eye(2), transition=torch.tensor([[0.5, 0.6], [0.5, 0.5]])), "row 0 of transition"),
    (lambda: HMMWorld(emission=torch.tensor([[0.5, 0.4], [0.5, 0.5]]), transition=torch.eye(2)), "row 0 of emission"),
    (lambda: MaskedUniform(1.1, 0.0), "alpha"),
    (lambda: MaskedUniform(0.5, -0.1), "beta"),
    (lambda: HMMWorld(context_rows=torch.tensor([[0.5, 0.6], [0.5, 0.5]])), "row 0 of context_rows"),
    (lambda: HMMWorld(emission=torch.eye(2), transition=torch.tensor([[0.5, 0.5], [0.5, 0.5]]),
                      initial=torch.tensor([0.9, 0.1])), "invariant"),
    (lambda: HMMWorld(emission=torch.zeros(0, 3), transition=torch.zeros(0, 0)), "transition must be non-empty"),
    (lambda: HMMWorld(emission=torch.zeros(2, 0), transition=torch.eye(2), initial=torch.tensor([0.5, 0.5])),
     "emission must be non-empty"),
    (lambda: HMMWorld(context_rows=torch.zeros(0, 2)), "context_rows must be non-empty"),
    # no unique stationary law without initial: the identity, a block-diagonal kernel, a context chain stuck in a or b
    (lambda: HMMWorld(emission=torch.eye(2), transition=torch.eye(2)), "more than one stationary law .*states 0 and 1"),
    (lambda: HMMWorld(emission=torch.eye(3), transition=torch.tensor([[1.0, 0, 0], [0, 0.5, 0.5], [0, 0.5, 0.5]])),
     "more than one stationary law"),
    (lambda: HMMWorld(context_rows=torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.5, 0.5], [0.0, 1.0]])),
     "more than one stationary law"),
    (lambda: synthetic_hmm(4, 3, stay=1.0), "stay"),
    (lambda: HMMSynthetic(emission_support=40, vocab_size=27), "emission_support"),
])
def test_bad_settings_fail_with_one_line(build, match) -> None:
    with pytest.raises(ValueError, match=match) as err:
        build()
    assert "\n" not in str(err.value)


def test_a_reducible_transition_is_a_world_once_its_law_is_chosen() -> None:
    """Refused without ``initial`` (the law would depend on the solver's start), accepted with an invariant one;
    transient states and a period leave the law unique and are accepted."""
    world = HMMWorld(emission=torch.eye(2), transition=torch.eye(2), initial=torch.tensor([0.3, 0.7]))
    assert torch.allclose(world.stationary, torch.tensor([0.3, 0.7], dtype=torch.float64))
    transient = HMMWorld(emission=torch.eye(2), transition=torch.tensor([[0.5, 0.5], [0.0, 1.0]]))
    assert transient.initial.tolist() == pytest.approx([0.0, 1.0], abs=1e-9)
    periodic = HMMWorld(emission=torch.eye(2), transition=torch.tensor([[0.0, 1.0], [1.0, 0.0]]))
    assert periodic.initial.tolist() == pytest.approx([0.5, 0.5], abs=1e-12)


def test_hmm_oracle_keeps_a_bounded_number_of_channel_tables() -> None:
    """A uniform-state sampler asks for a new noise level at every step: the oracle's likelihood-table memo stays
    bounded (least recently used dropped) and a dropped table is rebuilt to the same posterior."""
    chain = MarkovChain.from_kernel(torch.tensor(TINY_KERNEL, dtype=torch.float64))
    oracle = HMMOracleDenoiser(HMMWorld.from_chain(chain), dtype=torch.float64)
    z = torch.tensor([[0, 1, 2, 1, 1, 0]])
    first = oracle.log_posterior(z, UniformNoise(0.5))
    for k in range(3 * oracle.MAX_TABLES):
        oracle.log_posterior(z, UniformNoise(0.01 + 0.03 * k))
    assert len(oracle._tables) == oracle.MAX_TABLES
    assert torch.equal(oracle.log_posterior(z, UniformNoise(0.5)), first)
