"""Score-entropy step maths of SEDD's absorbing graph, shared by SEDD's samplers (:mod:`.sedd`, :mod:`.sedd_uniform`).

Lou et al., "Discrete Diffusion Modeling by Estimating the Ratios of the Data Distribution" (arXiv:2310.16834):
the loglinear noise sigma(t) = -log1p(-(1 - eps) t) with rate g(t) = sigma'(t), the predictor's step factor
(analytic: e^dsigma - 1; euler: dt g(t)), and the step law P(v) = c s_v^beta, P(MASK) = 1 - sum_v P(v) at a masked
position with score s_v = p_v / expm1(sigma) (derivation and clipping in :mod:`.sedd`).
"""
from __future__ import annotations

import math

import torch

from dllm_lit.samplers.draws import sharpen

__all__ = ["PREDICTORS", "loglinear_sigma", "loglinear_rate", "step_scale", "step_probabilities", "token_law"]

PREDICTORS = ("analytic", "euler")


def loglinear_sigma(t: float, eps: float = 1e-3) -> float:
    """Total noise sigma(t) = -log1p(-(1 - eps) t) (upstream LogLinearNoise.total_noise)."""
    return -math.log1p(-(1.0 - eps) * t)


def loglinear_rate(t: float, eps: float = 1e-3) -> float:
    """Noise rate g(t) = sigma'(t) = (1 - eps) / (1 - (1 - eps) t) (LogLinearNoise.rate_noise)."""
    return (1.0 - eps) / (1.0 - (1.0 - eps) * t)


def step_scale(t: float, s: float, predictor: str, eps: float = 1e-3) -> float:
    """Factor c with P(v) = c * s_v (before clipping): e^dsigma - 1 (analytic) or dt g(t) (euler)."""
    if predictor == "analytic":
        return math.expm1(loglinear_sigma(t, eps) - loglinear_sigma(s, eps))
    if predictor == "euler":
        return (t - s) * loglinear_rate(t, eps)
    raise ValueError(f"predictor must be one of {PREDICTORS}, got {predictor!r}")


def _token_weights(p: torch.Tensor, sigma: float, beta: float) -> torch.Tensor:
    """Tempered scores s_v^beta = (p_v / expm1(sigma))^beta in float64 [n, V]."""
    p = p.to(torch.float64)
    if beta == 1:
        return p / math.expm1(sigma)
    return torch.exp(beta * (p.log() - math.log(math.expm1(sigma))))  # p = 0 -> 0


def step_probabilities(p: torch.Tensor, t: float, s: float, predictor: str = "analytic", beta: float = 1.0,
                       token_temperature: float = 1.0, eps: float = 1e-3) -> torch.Tensor:
    """Step law at masked positions with marginals p [n, V]: float64 [n, V + 1] (last column MASK).

    P(v) = c s_v^beta, P(MASK) = 1 - sum_v P(v) clipped at 0 (tokens renormalised when the sum
    exceeds one), then the token part re-shaped by ``token_temperature`` at fixed total.
    """
    w = step_scale(t, s, predictor, eps) * _token_weights(p, loglinear_sigma(t, eps), beta)
    unmask = w.sum(-1, keepdim=True).clamp(max=1.0)
    q = token_law(p, beta, token_temperature)
    return torch.cat([unmask * q, 1.0 - unmask], dim=-1)


def token_law(p: torch.Tensor, beta: float = 1.0, tau: float = 1.0) -> torch.Tensor:
    """Token law given unmasking: p^(beta/tau) renormalised, float64 [n, V] (tau = 0: argmax,
    ties -> lowest id).  Proportional to s^beta (then ^(1/tau)): the sigma factor cancels."""
    p = p.to(torch.float64)
    if tau == 0:
        return torch.nn.functional.one_hot(p.argmax(-1), p.shape[-1]).to(torch.float64)
    power = beta / tau
    if power != 1:
        p = sharpen(p, power)  # max entry 1: never all-zero
    return p / p.sum(-1, keepdim=True)
