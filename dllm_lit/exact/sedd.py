"""Exact law of SEDD's absorbing sampler (loglinear noise, the oracle's score), written from the upstream formulas.

With sigma(t) = -log(1 - (1 - noise_eps) t) and the score s_v = (p_v / expm1 sigma(t))^beta of a masked position,
a step t -> s reveals token v with P(v) = c s_v (analytic: c = e^{sigma(t) - sigma(s)} - 1; euler:
c = (t - s) sigma'(t)), P(MASK) = 1 - sum_v P(v) clipped at 0, the revealed token drawn from p^(beta/tau);
a final denoise step samples every leftover MASK from p^(beta/tau).
"""
from __future__ import annotations

import math

import torch

from dllm_lit.exact.core import PosteriorCache, State, law_vector, product_step
from dllm_lit.markov import MarkovChain

__all__ = ["sedd_law"]


def sedd_law(chain: MarkovChain, T: int, steps: int, predictor: str = "analytic", beta: float = 1.0,
             token_temperature: float = 1.0, t_min: float = 1e-3, noise_eps: float = 1e-3) -> torch.Tensor:
    """Exact output law of SEDD on t = linspace(1, t_min, steps + 1) (module docstring)."""
    if predictor not in ("analytic", "euler"):
        raise ValueError(f"predictor must be one of analytic, euler, got {predictor!r}")
    M, V = chain.mask_id, chain.vocab_size
    post = PosteriorCache(chain)

    def sigma(t: float) -> float:
        return -math.log1p(-(1 - noise_eps) * t)

    def token(g: torch.Tensor) -> torch.Tensor:
        w = g ** (beta / token_temperature)
        return w / w.sum()

    ts = torch.linspace(1.0, t_min, steps + 1, dtype=torch.float64).tolist()
    dist: dict[State, float] = {(M,) * T: 1.0}
    for j in range(steps):
        t, s = ts[j], ts[j + 1]
        c = (math.exp(sigma(t) - sigma(s)) - 1 if predictor == "analytic"
             else (t - s) * (1 - noise_eps) / (1 - (1 - noise_eps) * t))

        def options(z, t=t, c=c):
            g = post(z)
            out = []
            for i, v in enumerate(z):
                if v != M:
                    out.append([(v, 1.0)])
                    continue
                U = min(float((c * (g[i] / math.expm1(sigma(t))) ** beta).sum()), 1.0)
                q = token(g[i])
                out.append([(M, 1.0 - U)] + [(u, U * float(q[u])) for u in range(V) if q[u] > 0])
            return out

        dist = product_step(dist, options)

    def final_options(z):
        g = post(z)
        return [[(v, 1.0)] if v != M else [(u, float(q)) for u, q in enumerate(token(g[i])) if q > 0]
                for i, v in enumerate(z)]

    return law_vector(product_step(dist, final_options), V, T)
