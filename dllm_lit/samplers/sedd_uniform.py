"""SEDD with the uniform graph and exact concrete scores from the leave-one-out oracle; see
``docs/samplers/sedd_uniform.md``.

Lou et al., "Discrete Diffusion Modeling by Estimating the Ratios of the Data Distribution" (arXiv:2310.16834),
upstream ``louaaron/Score-Entropy-Discrete-Diffusion`` (``graph_lib.Uniform``, ``noise_lib.GeometricNoise`` /
``LogLinearNoise``, ``sampling.EulerPredictor`` / ``AnalyticPredictor`` / ``Denoiser`` / ``get_pc_sampler``).

Forward: p(z | x) = e^-sigma delta_x + (1 - e^-sigma) / V, i.e. UniformNoise(alpha = e^-sigma(t)).  Geometric
noise sigma(t) = sigma_min^(1 - t) sigma_max^t (rate sigma(t) log(sigma_max / sigma_min)) or loglinear
sigma(t) = -log1p(-(1 - eps) t).  The exact score at position i, with q = p(x_i | z_{-i}) the leave-one-out law:

    s_y = p_t(z with z_i = y) / p_t(z) = (alpha q_y + (1 - alpha) / V) / (alpha q_{z_i} + (1 - alpha) / V).

From uniform tokens, on t = linspace(1, t_min, steps + 1):

* analytic (Tweedie tau-leaping): P(y) propto stag_y trans_y, stag = s / e^-dsigma + (e^-dsigma - 1) / (V e^-dsigma)
  sum(s), trans_y = (1 - e^-dsigma) / V for y != z_i and 1 - (V - 1)(1 - e^-dsigma) / V at z_i (with exact scores
  this is the exact per-position marginal p(z_s^i | z_t));
* euler: P(y) = dt g(t) s_y / V for y != z_i, P(z_i) = 1 - sum; a negative P(z_i) is clipped at 0 and the jumps
  renormalised (the law of upstream's race, which never picks a negative entry).

Final ``denoise`` step (upstream ``Denoiser``, on by default): the analytic formula with dsigma = sigma(t_min),
i.e. a draw from the exact posterior p(x_i | z).  NFE = steps + 1 (steps without ``denoise``).  All in float64:
upstream's float32 loses the first geometric step at steps <= 6 (``benchmarks/sedd_uniform_float32.py``).
Uniforms: prior at slot 3 of step 0; step j's draws slot 0 of step j; the denoise step at step ``steps``.
"""
from __future__ import annotations

import math

import torch

from dllm_lit import checks
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.denoisers.channels import UniformNoise
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.score_entropy import loglinear_rate, loglinear_sigma
from dllm_lit.samplers.uniform_state import NO_ORDER, check_channel, step_draw, uniform_start

__all__ = ["SEDDUniform", "PREDICTORS", "SEDD_NOISES", "uniform_scores", "staggered_step"]

PREDICTORS = ("analytic", "euler")
SEDD_NOISES = ("geometric", "loglinear")


def uniform_scores(q: torch.Tensor, z: torch.Tensor, alpha: float) -> torch.Tensor:
    """Exact concrete scores s_y = p_t(z_i <- y) / p_t(z) from the leave-one-out law q [B, T, V]: float64."""
    m = alpha * q.to(torch.float64) + (1.0 - alpha) / q.shape[-1]
    return m / m.gather(-1, z.unsqueeze(-1))


def staggered_step(score: torch.Tensor, z: torch.Tensor, dsigma: float) -> torch.Tensor:
    """Upstream's analytic step weights stag(score, dsigma) o transp_transition(z, dsigma), clipped at 0: [B, T, V]."""
    V = score.shape[-1]
    epow = math.exp(-dsigma)
    stag = (epow - 1.0) / (V * epow) * score.sum(-1, keepdim=True) + score / epow
    trans = torch.full_like(score, (1.0 - epow) / V)
    trans.scatter_(-1, z.unsqueeze(-1), 1.0 - (V - 1) * (1.0 - epow) / V)
    return (stag * trans).clamp_min(0.0)


class SEDDUniform(Sampler):
    """SEDD uniform-graph sampler with exact scores (module docstring).

    Args:
        denoiser: frozen denoiser answering UniformNoise leave-one-out (the exact oracle if None).
        steps: predictor steps (or a grid); ``denoise`` adds one evaluation.
        predictor: "analytic" (upstream ``run_sample.py``) or "euler" (upstream config default).
        noise: "geometric" (sigma_min, sigma_max) or "loglinear" (noise_eps).
        sigma_min, sigma_max: geometric noise levels (upstream config 1e-4, 20).
        noise_eps: loglinear eps (upstream 1e-3).
        t_min: end of the time grid (upstream ``get_pc_sampler`` eps 1e-5).
        denoise: the final denoising step (upstream ``noise_removal: True``).
    """

    sampler_name = "sedd_uniform"
    no_log_q_reason = NO_ORDER

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, predictor: str = "analytic",
                 noise: str = "geometric", sigma_min: float = 1e-4, sigma_max: float = 20.0,
                 noise_eps: float = 1e-3, t_min: float = 1e-5, denoise: bool = True) -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.predictor = checks.choice("predictor", predictor, PREDICTORS)
        self.noise = checks.choice("noise", noise, SEDD_NOISES)
        self.sigma_min = checks.real("sigma_min", sigma_min, 0.0, low_open=True)
        self.sigma_max = checks.real("sigma_max", sigma_max, self.sigma_min, 700.0, low_open=True)
        self.noise_eps = checks.real("noise_eps", noise_eps, 0.0, 1.0, low_open=True, high_open=True)
        self.t_min = checks.real("t_min", t_min, 0.0, 1.0, low_open=True, high_open=True)
        self.denoise = checks.choice("denoise", denoise, (True, False))

    @property
    def name(self) -> str:
        return "sedd_uniform" if self.predictor == "analytic" else "sedd_uniform_euler"

    def check_options(self) -> None:
        check_channel(self.denoiser, UniformNoise(0.5))

    def nfe(self, seq_len: int, steps: int | None) -> float | None:
        return float(steps + self.denoise)

    def sigma(self, t: float) -> float:
        if self.noise == "geometric":
            return self.sigma_min ** (1.0 - t) * self.sigma_max ** t
        return loglinear_sigma(t, self.noise_eps)

    def rate(self, t: float) -> float:
        if self.noise == "geometric":
            return self.sigma(t) * (math.log(self.sigma_max) - math.log(self.sigma_min))
        return loglinear_rate(t, self.noise_eps)

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        den, V, T = self.denoiser, self.vocab_size, seq_len
        uni, z, ts = uniform_start(indices, T, steps, seed, V, self.t_min)
        for j in range(steps):
            t, s = ts[j], ts[j + 1]
            alpha = math.exp(-self.sigma(t))

            def law(x: torch.Tensor, zc: torch.Tensor, t=t, s=s, alpha=alpha) -> torch.Tensor:
                score = uniform_scores(x, zc, alpha)
                if self.predictor == "analytic":
                    return staggered_step(score, zc, self.sigma(t) - self.sigma(s))
                probs = (t - s) * self.rate(t) * score / V
                probs.scatter_(-1, zc.unsqueeze(-1), 0.0)
                probs.scatter_(-1, zc.unsqueeze(-1), (1.0 - probs.sum(-1, keepdim=True)).clamp_min(0.0))
                return probs

            z = step_draw(den, z, UniformNoise(alpha), law, uni.grid(j, T))
        if self.denoise:
            sig = self.sigma(ts[-1])
            z = step_draw(den, z, UniformNoise(math.exp(-sig)),
                          lambda x, zc: staggered_step(uniform_scores(x, zc, math.exp(-sig)), zc, sig), uni.grid(steps, T))
        return z
