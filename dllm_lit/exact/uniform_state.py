"""Exact output laws of the uniform-state samplers (Duo / UDLM, SEDD-uniform, GIDD) on tiny worlds, by dynamic
programming over the noisy states z in Z^T (Z = V, or V + 1 with GIDD's MASK).

Every sampler moves all positions independently given the current state, so one step maps a law over Z^T to
the next by :func:`~dllm_lit.exact.core.product_step`.  The step laws are written here from Bayes' rule and the
channel tables (:mod:`dllm_lit.denoisers.channels`), independently of the samplers' upstream formulas:

    p(z_s^i = y | z_t)  propto  (L_s q_i)(y) K(z_t^i | y),

q_i = p(x_i | z_{-i}) the leave-one-out law (exact forward-backward, float64), L_s the channel's likelihood at
time s and K the transition s -> t (L_t = K L_s, checked).  SEDD's Euler step uses the exact ratios
p_t(z with z_i = y) / p_t(z) = (L_t q_i)(y) / (L_t q_i)(z_i).
"""
from __future__ import annotations

import itertools
import math

import torch

from dllm_lit.denoisers.channels import EvidenceChannel, MaskedUniform, UniformNoise
from dllm_lit.denoisers.hmm_posterior import hmm_posterior
from dllm_lit.exact.core import State, law_vector, product_step
from dllm_lit.markov import HMMWorld, MarkovChain

__all__ = ["duo_law", "psi_law", "sedd_uniform_law", "gidd_law", "bayes_step_law"]


class _LeaveOneOut:
    """q_i = p(x_i | z_{-i}) under a channel, float64 [T, V], cached per (state, channel)."""

    def __init__(self, world: MarkovChain | HMMWorld) -> None:
        self.world = world if isinstance(world, HMMWorld) else HMMWorld.from_chain(world)
        self._cache: dict = {}

    def __call__(self, z: State, channel: EvidenceChannel) -> torch.Tensor:
        key = (z, channel)
        if key not in self._cache:
            self._cache[key] = hmm_posterior(self.world, torch.tensor([z]), channel, leave_one_out=True)[0]
        return self._cache[key]


def bayes_step_law(q: torch.Tensor, z: State, L_s: torch.Tensor, K: torch.Tensor) -> list[list[tuple[int, float]]]:
    """Per position i: y -> (L_s q_i)(y) K(z_i | y), normalised ([Z, V] table L_s, [Z, Z] table K[z_t, y])."""
    out = []
    for i, zi in enumerate(z):
        w = (L_s @ q[i]) * K[zi]
        w = w / w.sum()
        out.append([(y, float(p)) for y, p in enumerate(w) if p > 0])
    return out


def _uniform_K(V: int, a_t: float, a_s: float) -> torch.Tensor:
    """Transition s -> t of uniform noise: K[z, y] = (a_t / a_s) delta + (1 - a_t / a_s) / V."""
    return UniformNoise(a_t / a_s).likelihood(V)


def _alpha(t: float, noise: str, eps: float) -> float:
    tt = (1 - eps) * t
    return 1 - tt if noise == "loglinear" else 1 - math.cos(math.pi / 2 * (1 - tt))


def _start(V: int, T: int) -> dict[State, float]:
    return {z: V ** -T for z in itertools.product(range(V), repeat=T)}


def _final(dist, loo, V: int, a_t: float, mode: str):
    """Noise removal at alpha_t: 'ancestral' (exact posterior q_i(y) L_t(z_i, y)), 'greedy' (argmax q_i), 'none'."""
    if mode == "none":
        return dist
    ch = UniformNoise(a_t)
    if mode == "greedy":
        out: dict[State, float] = {}
        for z, p in dist.items():
            y = tuple(int(r.argmax()) for r in loo(z, ch))
            out[y] = out.get(y, 0.0) + p
        return out
    return product_step(dist, lambda z: bayes_step_law(loo(z, ch), z, torch.eye(V, dtype=torch.float64),
                                                       ch.likelihood(V)))


def duo_law(world, T: int, steps: int, noise: str = "loglinear", noise_eps: float = 1e-3, t_min: float = 1e-5,
            noise_removal: str = "ancestral") -> torch.Tensor:
    """Exact law of Duo's ancestral sampler (uniform start, t = linspace(1, t_min, steps + 1), noise removal)."""
    return psi_law(world, T, [1.0] * steps, noise, noise_eps, t_min, noise_removal)


def psi_law(world, T: int, kappas: list[float], noise: str = "loglinear", noise_eps: float = 1e-3,
            t_min: float = 1e-5, noise_removal: str = "ancestral", times: list[float] | None = None) -> torch.Tensor:
    """Exact law of the Psi sampler: per step kappa * posterior + (1 - kappa) * forward(alpha_s, clean posterior)
    on ``times`` (default linspace(1, t_min, len(kappas) + 1)); kappa = 1 everywhere is Duo's ancestral sampler."""
    loo = _LeaveOneOut(world)
    V = loo.world.vocab_size
    steps = len(kappas)
    ts = times if times is not None else torch.linspace(1, t_min, steps + 1, dtype=torch.float64).tolist()
    dist = _start(V, T)
    eye = torch.eye(V, dtype=torch.float64)
    for j in range(steps):
        a_t, a_s = _alpha(ts[j], noise, noise_eps), _alpha(ts[j + 1], noise, noise_eps)
        ch, L_s, K, k = UniformNoise(a_t), UniformNoise(a_s).likelihood(V), _uniform_K(V, a_t, a_s), kappas[j]
        assert torch.allclose(K @ L_s, ch.likelihood(V), atol=1e-12)

        def options(z, ch=ch, L_s=L_s, K=K, k=k, a_s=a_s):
            q = loo(z, ch)
            post = bayes_step_law(q, z, L_s, K)
            clean = bayes_step_law(q, z, eye, ch.likelihood(V))
            out = []
            for row_p, row_c in zip(post, clean):
                w = torch.zeros(V, dtype=torch.float64)
                for y, p in row_p:
                    w[y] += k * p
                c = torch.zeros(V, dtype=torch.float64)
                for y, p in row_c:
                    c[y] += p
                w += (1 - k) * (a_s * c + (1 - a_s) / V)
                out.append([(y, float(p)) for y, p in enumerate(w) if p > 0])
            return out

        dist = product_step(dist, options)
    return law_vector(_final(dist, loo, V, _alpha(ts[-1], noise, noise_eps), noise_removal), V, T)


def sedd_uniform_law(world, T: int, steps: int, predictor: str = "analytic", noise: str = "geometric",
                     sigma_min: float = 1e-4, sigma_max: float = 20.0, noise_eps: float = 1e-3,
                     t_min: float = 1e-5, denoise: bool = True) -> torch.Tensor:
    """Exact law of SEDD's uniform-graph sampler with exact ratios (uniform start, linspace(1, t_min, steps + 1))."""
    loo = _LeaveOneOut(world)
    V = loo.world.vocab_size
    if noise == "geometric":
        def sigma(t):
            return sigma_min ** (1 - t) * sigma_max ** t

        def rate(t):
            return sigma(t) * (math.log(sigma_max) - math.log(sigma_min))
    else:
        def sigma(t):
            return -math.log1p(-(1 - noise_eps) * t)

        def rate(t):
            return (1 - noise_eps) / (1 - (1 - noise_eps) * t)
    ts = torch.linspace(1, t_min, steps + 1, dtype=torch.float64).tolist()
    dist = _start(V, T)
    for j in range(steps):
        t, s = ts[j], ts[j + 1]
        a_t, a_s = math.exp(-sigma(t)), math.exp(-sigma(s))
        ch = UniformNoise(a_t)
        if predictor == "analytic":
            L_s, K = UniformNoise(a_s).likelihood(V), _uniform_K(V, a_t, a_s)
            dist = product_step(dist, lambda z, ch=ch, L_s=L_s, K=K: bayes_step_law(loo(z, ch), z, L_s, K))
            continue
        c = (t - s) * rate(t) / V

        def euler(z, ch=ch, c=c):
            q, L = loo(z, ch), ch.likelihood(V)
            out = []
            for i, zi in enumerate(z):
                m = L @ q[i]
                P = c * m / m[zi]
                P[zi] = 0.0
                tot = float(P.sum())
                if tot > 1:
                    P, stay = P / tot, 0.0
                else:
                    stay = 1 - tot
                P[zi] = stay
                out.append([(y, float(p)) for y, p in enumerate(P) if p > 0])
            return out

        dist = product_step(dist, euler)
    if denoise:
        dist = _final(dist, loo, V, math.exp(-sigma(ts[-1])), "ancestral")
    return law_vector(dist, V, T)


def gidd_law(world, T: int, steps: int, p_uniform: float = 0.1, gamma: float = 1.0, t_eps: float = 1e-4,
             min_p: float = 0.0) -> torch.Tensor:
    """Exact law of GIDD's sampler over (V + 1)^T states: all-MASK start at t = 1 - t_eps, steps
    t_k -> t_{k-1} on t = linspace(t_eps, 1 - t_eps, steps + 1), the last one to s = 0 (clean)."""
    loo = _LeaveOneOut(world)
    V = loo.world.vocab_size
    M = V
    B = 2.0 ** gamma * max(p_uniform, math.exp(-20)) / (1 - max(p_uniform, math.exp(-20)))

    def channel(t: float) -> MaskedUniform:
        c = B * (t * (1 - t)) ** (gamma / 2)
        return MaskedUniform(min(max((1 - t) / (1 + c), 0.0), 1.0), c / (1 + c))

    ts = torch.linspace(t_eps, 1 - t_eps, steps + 1, dtype=torch.float64).tolist()
    ts[0] = 0.0
    dist: dict[State, float] = {(M,) * T: 1.0}
    for k in range(steps, 0, -1):
        ch_t, ch_s = channel(ts[k]), channel(ts[k - 1])
        L_t, L_s = ch_t.likelihood(V), ch_s.likelihood(V)
        # K[z_t, y] = a_ts delta + (beta pi)_ts(z_t): beta pi_ts = beta pi_t - a_ts beta pi_s
        a_ts = ch_t.alpha / ch_s.alpha
        bp_t = torch.tensor([ch_t.beta / V] * V + [1 - ch_t.alpha - ch_t.beta], dtype=torch.float64)
        bp_s = torch.tensor([ch_s.beta / V] * V + [1 - ch_s.alpha - ch_s.beta], dtype=torch.float64)
        K = a_ts * torch.eye(V + 1, dtype=torch.float64) + (bp_t - a_ts * bp_s)[:, None]
        assert torch.allclose(K @ L_s, L_t, atol=1e-12)

        def options(z, ch_t=ch_t, L_s=L_s, K=K):
            rows = bayes_step_law(loo(z, ch_t), z, L_s, K)
            if min_p > 0:
                rows = [[(y, p) for y, p in r if p >= min_p] for r in rows]
                rows = [[(y, p / sum(w for _, w in r)) for y, p in r] for r in rows]
            return rows

        dist = product_step(dist, options)
    return law_vector(dist, V, T)
