"""The step-optimal proposal of LLaDA's SMC sandwich (dllm_lit/samplers/llada_esp.py), by enumeration on V = 3: its
density sums to 1 over every k-subset, its draws follow that density, its Z equals the path law's step probabilities
summed by brute force, and the sandwich it drives closes on the exact log q(x) as K grows."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.exact import llada_law
from dllm_lit.markov import MarkovChain
from dllm_lit.samplers import LLaDA, llada_esp
from dllm_lit.samplers.llada_esp import esp_propose, log_step_mass
from dllm_lit.samplers.llada_path_law import LLaDAPathLaw
from test_llada_path_law import KERNEL3

#: a kernel with zeros: after a revealed 0 the next token is 1 surely (confidence 1, G = 0 for every weaker m: the
#: position is a forced member), and some tokens are impossible (r = 0)
KERNEL_FORCED = [[0.0, 1.0, 0.0], [0.3, 0.2, 0.5], [0.5, 0.25, 0.25]]
T = 7


def _world(kernel, temperature: float, tie_rule: str):
    chain = MarkovChain.from_kernel(torch.tensor(kernel, dtype=torch.float64))
    s = LLaDA(OracleDenoiser(chain, dtype=torch.float64), temperature=temperature, tie_rule=tie_rule)
    s.connect(chain)
    return chain, s, LLaDAPathLaw(s, T, 3)  # counts 3, 2, 2


def _states(kernel, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Six paths x of the kernel (uniform start) and states z revealing x at positions 1 and 4 (all-masked for the
    first two)."""
    g, K = torch.Generator().manual_seed(seed), torch.tensor(kernel, dtype=torch.float64)
    x = torch.empty(6, T, dtype=torch.long)
    x[:, 0] = torch.multinomial(torch.ones(3), 6, replacement=True, generator=g)
    for i in range(1, T):
        x[:, i] = torch.multinomial(K[x[:, i - 1]], 1, generator=g).squeeze(1)
    z = torch.full_like(x, 3)
    z[2:, 1], z[2:, 4] = x[2:, 1], x[2:, 4]
    return x, z


def _every_set(law, z, x, step: int, propose=esp_propose):
    """(rows, sets [R, T], log r [R], step log prob [R]): every k-subset of each row's allowed positions, forced."""
    k, allowed = law.counts[step], law.allowed(z, step)
    rows, sets = [], []
    for b in range(z.shape[0]):
        for S in itertools.combinations(allowed[b].nonzero().flatten().tolist(), k):
            rows.append(b)
            sets.append(torch.zeros(T, dtype=torch.bool).index_fill_(0, torch.tensor(S), True))
    rows, sets = torch.tensor(rows), torch.stack(sets)
    u = torch.rand(len(rows), T, dtype=torch.float64)
    commit, log_r = propose(law, z[rows], x[rows], step, u, sets, torch.ones(len(rows), dtype=torch.bool))
    assert torch.equal(commit, sets)
    return rows, sets, log_r, law.step_log_prob(z[rows], sets, x[rows], step)


@pytest.mark.parametrize("kernel, temperature, tie_rule, window", [
    (KERNEL3, 1.0, "lowest", 8), (KERNEL3, 0.7, "highest", 8), (KERNEL_FORCED, 1.5, "lowest", 8),
    (KERNEL_FORCED, 1.0, "highest", 1), (KERNEL3, 1.3, "lowest", 2),
])
def test_density_sums_to_one_and_z_is_the_step_mass(kernel, temperature, tie_rule, window, monkeypatch) -> None:
    """Every k-subset of each row forced through the proposal: sum_S r(S) = 1 (1e-12); the weight P(S) / r(S) is
    Z(m) / rho(m), so sum_S P(S) (brute force over the path law's step_log_prob) = log_step_mass's Z (1e-12), and
    the sets with P(S) = 0 get weight 0.  ``window`` 1 and 2 put most candidates in rho's uniform tail."""
    monkeypatch.setattr(llada_esp, "WINDOW", window)
    chain, _, law = _world(kernel, temperature, tie_rule)
    x, z = _states(kernel)
    for step in (0, 1):
        rows, sets, log_r, log_p = _every_set(law, z, x, step)
        live = torch.isfinite(log_r)  # log r = +inf: a set whose weakest m has Z(m) = 0 (weight 0, P(S) = 0)
        assert bool(torch.isinf(log_p[~live]).all())
        total_r = torch.zeros(6, dtype=torch.float64).index_add_(0, rows[live], log_r[live].exp())
        assert torch.allclose(total_r, 1.0 - _null_mass(law, z, x, step, rows, sets, log_p), rtol=0, atol=1e-12)
        total_p = torch.zeros(6, dtype=torch.float64).index_add_(0, rows, log_p.exp())
        assert torch.allclose(log_step_mass(law, z, x, step).exp(), total_p, rtol=0, atol=1e-12)
        assert total_p.min() > 0


def _null_mass(law, z, x, step, rows, sets, log_p) -> torch.Tensor:
    """rho's mass [6] on the weakest-member ranks whose sets all have P(S) = 0 (drawn, they give weight 0)."""
    ranked = llada_esp._ranked(law, z, x, step)
    log_rho, _ = llada_esp._rho(ranked, law.counts[step])
    rank_of = torch.empty(6, T, dtype=torch.long)
    rank_of.scatter_(1, ranked[0], torch.arange(ranked[0].shape[1]).expand(6, -1).contiguous())
    weakest = torch.where(sets, rank_of[rows], -1).amax(1)
    mass = torch.zeros(6, log_rho.shape[1], dtype=torch.float64).index_put_((rows, weakest), log_p.exp(),
                                                                            accumulate=True)
    return torch.where(mass == 0, log_rho.exp(), 0.0).sum(1)


def _mixture(law, *args):
    return type(law).propose(law, *args)


@pytest.mark.parametrize("kernel, tie_rule", [(KERNEL3, "lowest"), (KERNEL_FORCED, "highest")])
def test_the_metric_mixture_density_sums_to_one(kernel, tie_rule) -> None:
    """LLaDAPathLaw.propose (ESP_SHARE esp + the rest the ranking scan): sum_S r(S) = 1 over every k-subset (1e-12;
    no rho tail at n <= 7), and every set of positive step probability has r(S) > 0."""
    chain, _, law = _world(kernel, 1.0, tie_rule)
    x, z = _states(kernel)
    for step in (0, 1):
        rows, _, log_r, log_p = _every_set(law, z, x, step, _mixture)
        live = torch.isfinite(log_r)
        total_r = torch.zeros(6, dtype=torch.float64).index_add_(0, rows[live], log_r[live].exp())
        assert torch.allclose(total_r, torch.ones(6, dtype=torch.float64), rtol=0, atol=1e-12)
        assert bool(live[torch.isfinite(log_p)].all())


@pytest.mark.parametrize("propose", [esp_propose, _mixture])
def test_draws_follow_the_density(propose) -> None:
    """20000 draws per row at the all-masked state and at a partly revealed one (KERNEL_FORCED, temperature 1):
    each set's frequency is within 5 standard errors of exp(log r) (and log r is the same as the forced set's)."""
    chain, _, law = _world(KERNEL_FORCED, 1.0, "highest")
    x, z = _states(KERNEL_FORCED)
    rows, sets, log_r, _ = _every_set(law, z, x, 0, propose)
    n = 20000
    for b in (0, 3):
        zb, xb = z[b:b + 1].expand(n, T), x[b:b + 1].expand(n, T)
        commit, lr = propose(law, zb, xb, 0, torch.rand(n, T, dtype=torch.float64), None,
                             torch.zeros(n, dtype=torch.bool))
        live = torch.where(torch.isfinite(log_r), log_r.exp(), 0.0)  # +inf: a set the proposal never draws
        for S, want in zip(sets[rows == b], live[rows == b]):
            hit = (commit == S).all(1)
            freq = float(hit.double().mean())
            assert abs(freq - float(want)) <= 5 * math.sqrt(float(want) * (1 - float(want)) / n) + 1e-9
            if bool(hit.any()):
                assert torch.allclose(lr[hit], log_r[rows == b][(sets[rows == b] == S).all(1)].expand(int(hit.sum())),
                                      rtol=0, atol=1e-12)


def test_sandwich_closes_on_log_q_with_k() -> None:
    """V = 3 (KERNEL3), T = 5, 3 steps, 200 samples, the metric's proposal mixture and resampling: the mean of each
    end's log Z_K - log q(x) per sequence is within 0.02 nats of 0 at K = 64 (every lower end finite) and the upper
    gap falls from K = 1."""
    chain = MarkovChain.from_kernel(torch.tensor(KERNEL3, dtype=torch.float64))
    s = LLaDA(OracleDenoiser(chain, dtype=torch.float64), temperature=1.0)
    s.connect(chain)
    idx, n = torch.arange(200), 5
    law = llada_law(chain, n, 3, temperature=1.0)
    s.sandwich_method, gaps = "smc", []
    for K in (1, 64):
        s.sandwich_paths = K
        x, st = s.generate_with_stats(idx, n, 3, 0)
        log_q = law[(x * 3 ** torch.arange(n - 1, -1, -1)).sum(1)].log()
        lo, hi = st["log_q_iw_lower"] - log_q, st["log_q_iw_upper"] - log_q
        assert K == 1 or bool(torch.isfinite(lo).all())
        gaps.append((float(-lo.mean()), float(hi.mean())))
    print(gaps)
    assert max(abs(g) for g in gaps[1]) < 0.02 and gaps[1][1] < gaps[0][1]
