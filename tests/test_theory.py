"""dllm_lit.theory against brute-force enumeration on tiny chains (V = 3, T <= 7).

Every quantity is enumerated from the joint law of all V^T sequences (marginals by summation, no
Markov shortcut) and must agree with the closed forms to 1e-10 nats (float64 sums of at most a few
thousand terms; observed differences are ~1e-15)."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dllm_lit.theory.information import segment_pair_information
from dllm_lit.theory.bounds import curve_totals, dtc_factor, schedule_bounds, tc_factor, template_schedule
from dllm_lit.theory import (binomial_rounds_kl, dual_total_correlation, information_curve, optimal_schedule,
                             pair_information, round_sizes_kl, schedule_kl_curve, total_correlation, uniform_rounds)

TOL = 1e-10


def _chain(seed: int, V: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    P = rng.gamma(0.7, size=(V, V)) + 1e-3
    P /= P.sum(1, keepdims=True)
    w, vl = np.linalg.eig(P.T)
    pi = np.real(vl[:, np.argmin(abs(w - 1))])
    return P, pi / pi.sum()


def _joint(P: np.ndarray, pi: np.ndarray, T: int) -> np.ndarray:
    """p(x) for every x in V^T, as an array with T axes."""
    p = pi.copy()
    for _ in range(T - 1):
        p = np.einsum("...a,ab->...ab", p, P)
    return p


def _marg(p: np.ndarray, keep: tuple[int, ...]) -> np.ndarray:
    drop = tuple(i for i in range(p.ndim) if i not in keep)
    return p.sum(axis=drop) if drop else p


def _H(q: np.ndarray) -> float:
    q = q[q > 0]
    return float(-(q * np.log(q)).sum())


def _mi(p: np.ndarray, i: int, S: tuple[int, ...]) -> float:
    if not S:
        return 0.0
    keep = tuple(sorted(S + (i,)))
    return _H(_marg(p, (i,))) + _H(_marg(p, tuple(sorted(S)))) - _H(_marg(p, keep))


def _cond(p: np.ndarray, x: tuple[int, ...], i: int, given: tuple[int, ...]) -> float:
    """p(x_i | x_given) by summation."""
    keep = tuple(sorted(given + (i,)))
    num = _marg(p, keep)[tuple(x[k] for k in keep)]
    if not given:
        return float(num)
    g = tuple(sorted(given))
    return float(num / _marg(p, g)[tuple(x[k] for k in g)])


def _kl_rounds(p: np.ndarray, rounds: list[tuple[int, ...]], revealed: tuple[int, ...] = ()) -> float:
    """KL(p || q) with q(x) = p(x_revealed) prod_r prod_{i in r} p(x_i | x_earlier rounds, x_revealed)."""
    kl = 0.0
    for x in itertools.product(range(p.shape[0]), repeat=p.ndim):
        px = p[x]
        if px <= 0:
            continue
        q = float(_marg(p, tuple(sorted(revealed)))[tuple(x[k] for k in sorted(revealed))]) if revealed else 1.0
        seen = tuple(revealed)
        for r in rounds:
            for i in r:
                q *= _cond(p, x, i, seen)
            seen = seen + tuple(r)
        kl += px * math.log(px / q)
    return kl


@pytest.mark.parametrize("seed,T", [(0, 5), (1, 7), (2, 6)])
def test_information_curve_matches_enumeration(seed, T):
    P, pi = _chain(seed)
    p = _joint(P, pi, T)
    g = pair_information((P, pi), T)
    for d in range(1, T):
        assert abs(g[d] - _mi(p, 0, (d,))) < TOL
    Z = information_curve(g, T)
    for j in range(1, T + 1):
        vals = [_mi(p, i, S) for i in range(T) for S in itertools.combinations([k for k in range(T) if k != i], j - 1)]
        assert abs(Z[j] - np.mean(vals)) < TOL, (j, Z[j], np.mean(vals))


@pytest.mark.parametrize("seed,L", [(3, 4), (4, 5)])
def test_left_revealed_curve_matches_enumeration(seed, L):
    """A block after revealed context: Z_j = E I(X_i; X_0, X_S) - I(X_i; X_0) up to a constant; compare
    increments, which are what the schedule formula uses, and the schedule KL itself."""
    P, pi = _chain(seed)
    p = _joint(P, pi, L + 1)
    Z = information_curve(pair_information((P, pi), L + 1), L, left_revealed=True)
    for j in range(1, L + 1):
        vals = [_mi(p, i, (0,) + S) for i in range(1, L + 1)
                for S in itertools.combinations([k for k in range(1, L + 1) if k != i], j - 1)]
        assert abs(Z[j] - np.mean(vals)) < TOL


def _orders_kl(p: np.ndarray, sizes: list[int], positions: list[int], revealed: tuple[int, ...] = ()) -> float:
    kls = []
    for perm in itertools.permutations(positions):
        rounds, s = [], 0
        for k in sizes:
            rounds.append(tuple(perm[s: s + k]))
            s += k
        kls.append(_kl_rounds(p, rounds, revealed))
    return float(np.mean(kls))


@pytest.mark.parametrize("sizes", [[2, 2, 1], [1, 3, 1], [5], [3, 2], [1, 1, 1, 1, 1]])
def test_schedule_kl_matches_enumeration_over_orders(sizes):
    P, pi = _chain(5)
    T = sum(sizes)
    p = _joint(P, pi, T)
    Z = information_curve(pair_information((P, pi), T), T)
    assert abs(round_sizes_kl(Z, sizes) - _orders_kl(p, sizes, list(range(T)))) < TOL


def test_a_non_stationary_start_is_refused_or_computed_exactly():
    """(P, mu0) with mu0 not invariant: refused without ``length``; with it, the position-averaged pair information
    gives the exact curve and schedule KL of the chain started from mu0 (the audit's case: 0.226737 exactly, where the
    stationary formula applied to mu0 gave 0.235165)."""
    P, mu0 = np.array([[0.9, 0.1], [0.2, 0.8]]), np.array([0.5, 0.5])
    with pytest.raises(ValueError, match=r"^pi is not invariant under the kernel .*pass length=L"):
        pair_information((P, mu0), 3)
    p = _joint(P, mu0, 3)
    h = pair_information((P, mu0), 3, length=3)
    assert abs(round_sizes_kl(information_curve(h, 3), [2, 1]) - _orders_kl(p, [2, 1], [0, 1, 2])) < TOL
    assert abs(round_sizes_kl(information_curve(h, 3), [2, 1]) - 0.226737) < 1e-6
    for seed, T in ((7, 5), (8, 6)):
        P, _ = _chain(seed)
        mu0 = np.random.default_rng(seed).dirichlet(np.ones(3))
        p = _joint(P, mu0, T)
        Z = information_curve(pair_information((P, mu0), T, length=T), T)
        for j in range(1, T + 1):
            vals = [_mi(p, i, S) for i in range(T) for S in itertools.combinations([k for k in range(T) if k != i], j - 1)]
            assert abs(Z[j] - np.mean(vals)) < TOL
    P, mu0 = _chain(10)[0], np.array([0.7, 0.2, 0.1])
    h = pair_information((P, mu0), 4, length=4)
    assert abs(round_sizes_kl(information_curve(h, 4), [2, 2]) - _orders_kl(_joint(P, mu0, 4), [2, 2], [0, 1, 2, 3])) < TOL
    # a stationary start through the segment formula: the stationary pair information
    P, pi = _chain(9)
    seg = segment_pair_information(P, pi, 6, 6)
    assert np.abs(seg[1:6] - pair_information((P, pi), 6)[1:6]).max() < 1e-12


def test_block_schedule_kl_matches_enumeration():
    P, pi = _chain(6)
    L, sizes = 4, [2, 2]
    p = _joint(P, pi, L + 1)
    Z = information_curve(pair_information((P, pi), L + 1), L, left_revealed=True)
    assert abs(round_sizes_kl(Z, sizes) - _orders_kl(p, sizes, list(range(1, L + 1)), revealed=(0,))) < TOL


def test_binomial_rounds_match_enumeration():
    """Each position decoded in round r with probability w_r, independently: a mixture over assignments."""
    P, pi = _chain(7)
    T, w = 4, [0.3, 0.5, 0.2]
    p = _joint(P, pi, T)
    Z = information_curve(pair_information((P, pi), T), T)
    expected = 0.0
    for assign in itertools.product(range(len(w)), repeat=T):
        prob = math.prod(w[a] for a in assign)
        rounds = [tuple(i for i in range(T) if assign[i] == r) for r in range(len(w))]
        expected += prob * _kl_rounds(p, [r for r in rounds if r])
    assert abs(binomial_rounds_kl(Z, w) - expected) < TOL


def test_optimal_schedule_is_the_minimum_over_all_compositions():
    P, pi = _chain(8)
    T = 8
    Z = information_curve(pair_information((P, pi), T), T)
    for m in (1, 2, 3, 5, 8):
        sizes, kl = optimal_schedule(Z, m)
        assert len(sizes) == m and sum(sizes) == T and min(sizes) >= 1
        best = min(round_sizes_kl(Z, [b - a for a, b in zip((0,) + c, c + (T,))])
                   for c in itertools.combinations(range(1, T), m - 1))
        assert abs(kl - best) < TOL and abs(round_sizes_kl(Z, sizes) - kl) < TOL
        assert kl <= round_sizes_kl(Z, uniform_rounds(T, m)) + TOL
        assert schedule_kl_curve(Z, [m], "optimal") == [pytest.approx(kl / T, abs=TOL)]
        assert schedule_kl_curve(Z, [m]) == [pytest.approx(round_sizes_kl(Z, uniform_rounds(T, m)) / T, abs=TOL)]


def test_tc_and_dtc_match_enumeration():
    P, pi = _chain(9)
    for T in (2, 3, 5):
        p = _joint(P, pi, T)
        g = pair_information((P, pi), T)
        H = _H(p.reshape(-1))
        tc = sum(_H(_marg(p, (i,))) for i in range(T)) - H
        dtc = H - sum(H - _H(_marg(p, tuple(k for k in range(T) if k != i))) for i in range(T))
        assert abs(total_correlation(g, T) - tc) < TOL
        assert abs(dual_total_correlation(g, T) - dtc) < TOL


def test_bad_schedules_are_refused():
    Z = np.zeros(5)
    with pytest.raises(ValueError, match="sum to the length 4"):
        round_sizes_kl(Z, [1, 1])
    with pytest.raises(ValueError, match="sum to 1"):
        binomial_rounds_kl(Z, [0.5, 0.2])
    with pytest.raises(ValueError, match="schedule must be"):
        schedule_kl_curve(Z, [2], "cosine")


def test_step_total_correlation_matches_enumeration():
    from dllm_lit.theory.step_correlation import chain_powers, step_total_correlation

    P, pi = _chain(10)
    T = 7
    p = _joint(P, pi, T)
    powers = chain_powers(P, T)
    rng = np.random.default_rng(0)
    for revealed, committed in [((), (0, 1, 2)), ((3,), (0, 2, 4, 6)), ((1, 5), (0, 2, 3, 6)), ((0, 6), (2, 3, 4)),
                                ((2,), (3,))]:
        x = tuple(int(v) for v in rng.integers(0, 3, size=T))
        z = np.full(T, -1)
        for r in revealed:
            z[r] = x[r]
        # enumeration: condition the joint on x_R, then TC of the committed positions
        cond = p.copy()
        for r in revealed:
            idx = [slice(None)] * T
            idx[r] = [k for k in range(3) if k != x[r]]
            cond[tuple(idx)] = 0.0
        cond /= cond.sum()
        joint = _marg(cond, tuple(committed))
        tc = sum(_H(_marg(cond, (i,))) for i in committed) - _H(joint.reshape(-1))
        hs = [_H(_marg(cond, (i,))) for i in committed]
        got = step_total_correlation(powers, pi, z, np.array(committed))
        assert abs(got[0] - tc) < TOL and abs(got[1] - sum(hs)) < TOL and abs(got[2] - max(hs)) < TOL
        assert got[0] <= got[1] - got[2] + TOL  # the EB bound


# ---- bounds and templates (dllm_lit.theory.bounds) -----------------------------------------------------------
def _compositions(T: int):
    """Every composition of T (ordered round sizes >= 1)."""
    for c in itertools.product((0, 1), repeat=T - 1):
        cuts = [i + 1 for i, b in enumerate(c) if b]
        yield [b - a for a, b in zip([0] + cuts, cuts + [T])]


def _chain_v(seed: int, V: int, shape: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    P = rng.gamma(shape, size=(V, V)) + 1e-4
    P /= P.sum(1, keepdims=True)
    w, vl = np.linalg.eig(P.T)
    pi = np.real(vl[:, np.argmin(abs(w - 1))])
    return P, pi / pi.sum()


@pytest.mark.parametrize("V", [2, 3, 4])
def test_bounds_hold_for_every_schedule_and_length(V):
    """A number called a bound holds at every T, V and schedule: the exact expected KL of every composition of T
    (T = 1..10, with and without a revealed left neighbour) is below the TC, DTC and full-conditional bounds, for
    sticky (gamma shape 0.1), mixed and nearly independent (shape 20) chains; TC / DTC of the curve are the chain's."""
    for seed, shape in ((V, 0.1), (V + 10, 0.7), (V + 20, 20.0)):
        P, pi = _chain_v(seed, V, shape)
        g = pair_information((P, pi), 12)
        for T in range(1, 11):
            for left in (False, True):
                Z = information_curve(g, T, left_revealed=left)
                tot = curve_totals(Z)
                if not left and T > 1:
                    assert abs(tot["tc"] - total_correlation(g, T)) < TOL
                    assert abs(tot["dtc"] - dual_total_correlation(g, T)) < TOL
                for sizes in _compositions(T):
                    kl, b = round_sizes_kl(Z, sizes), schedule_bounds(Z, sizes)
                    assert kl <= min(b.values()) + TOL, (V, shape, T, left, sizes, kl, b)


def test_bounds_hold_for_general_laws_by_enumeration():
    """The bounds use only that Z is non-decreasing and non-negative: on random joint laws of 4 tokens (not
    Markov; V = 2, 3), Z by enumeration of subsets and the KL by enumeration of orders and sequences."""
    rng = np.random.default_rng(3)
    for V in (2, 3):
        for _ in range(2):
            p = rng.gamma(0.3, size=(V,) * 4)
            p /= p.sum()
            T = 4
            Z = np.zeros(T + 1)
            for j in range(1, T + 1):
                Z[j] = np.mean([_mi(p, i, S) for i in range(T)
                                for S in itertools.combinations([k for k in range(T) if k != i], j - 1)])
            for sizes in _compositions(T):
                kl = _orders_kl(p, sizes, list(range(T)))
                assert abs(kl - round_sizes_kl(Z, sizes)) < TOL
                assert kl <= min(schedule_bounds(Z, sizes).values()) + TOL


def test_templates_minimise_their_factor():
    for T in range(1, 11):
        comps = list(_compositions(T))
        for m in range(1, T + 2):
            for kind, factor in (("tc", tc_factor), ("dtc", dtc_factor)):
                sizes = template_schedule(kind, T, m)
                assert len(sizes) == m and sum(sizes) == T and min(sizes) >= 0
                best = min(factor(c) for c in comps if len(c) <= m)
                assert factor(sizes) == pytest.approx(best, abs=1e-12), (kind, T, m, sizes)
    with pytest.raises(ValueError, match="template must be one of tc, dtc"):
        template_schedule("uniform", 8, 2)


# ---- Monte Carlo estimates (dllm_lit.theory.monte_carlo), for worlds without a closed form ---------------------
@pytest.mark.usefixtures("single_thread")
def test_monte_carlo_curve_and_schedule_kl_in_an_hmm_world():
    """In a small HMM world (4 hidden states, V = 3, T = 4; not a first-order chain) the exact-sample estimates of
    Z_j and of the expected KL of every composition of T lie within 4.5 standard errors of enumeration (Z by
    marginal sums of the joint law, the KL over all orders and sequences)."""
    import torch

    from dllm_lit.denoisers.hmm_oracle import HMMOracleDenoiser
    from dllm_lit.samplers.reference_scoring import order_log_conditionals
    from dllm_lit.sources.hmm_synthetic import HMMSynthetic
    from dllm_lit.theory.monte_carlo import information_curve_estimate, schedule_kl_estimate

    world = HMMSynthetic(num_states=4, vocab_size=3, stay=0.8, emission_support=2).build()
    T, V = 4, 3
    xs = torch.tensor(list(itertools.product(range(V), repeat=T)))
    p = world.log_prob(xs).exp().numpy().reshape((V,) * T)
    c = order_log_conditionals(world, HMMOracleDenoiser(world, dtype=torch.float64), torch.arange(20000), T, 1).numpy()
    Z, se = information_curve_estimate(c)
    for j in range(2, T + 1):
        exact = np.mean([_mi(p, i, S) for i in range(T) for S in itertools.combinations([k for k in range(T) if k != i], j - 1)])
        assert abs(Z[j] - exact) <= 4.5 * se[j], (j, Z[j], exact, se[j])
    for sizes in _compositions(T):
        est, lo, hi = schedule_kl_estimate(c, sizes)
        exact = _orders_kl(p, sizes, list(range(T)))
        assert abs(est - exact) <= 4.5 * (hi - lo) / 3.92 + 1e-12, (sizes, est, exact)
