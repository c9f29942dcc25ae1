"""SEDD's absorbing-graph sampler with an exact oracle score; see ``docs/samplers/sedd.md``.

Lou et al., "Discrete Diffusion Modeling by Estimating the Ratios of the Data Distribution"
(arXiv:2310.16834); the oracle-score replacement follows the sampler-centric evaluation paper.

Noise: loglinear with eps = ``noise_eps`` (1e-3): sigma(t) = -log1p(-(1 - eps) t),
g(t) = sigma'(t) = (1 - eps) / (1 - (1 - eps) t).  Time grid t_j = linspace(1, t_min, steps + 1)
(the paper's t_min = 1e-3; upstream's default is 1e-5), dt = t_j - t_{j+1}.

Score at a masked position with oracle marginal p = p(x0 | z) over the V real tokens:

    s_v = p_v e^-sigma / (1 - e^-sigma) = p_v / expm1(sigma(t)),     s_MASK = 1.

The paper's temperature (``beta``) scales the log-score, log s_v -> beta log s_v
(s_MASK = 1 is unchanged), i.e. s_v -> s_v^beta.  Predictor step probabilities at a masked
position (unmasked positions never change):

    analytic (Tweedie tau-leaping):  P(v) = s_v^beta (e^dsigma - 1),  dsigma = sigma(t) - sigma(t - dt)
    euler:                           P(v) = dt g(t) s_v^beta
    both:                            P(MASK) = 1 - sum_v P(v).

For the loglinear schedule e^dsigma - 1 = dt g(t) exactly, so the two predictors give the same
step probabilities for every score; with beta = 1 both equal MDLM's P(v) = p_v dt / t,
P(MASK) = (t - dt) / t.

beta also changes the unmasking schedule.  The unmask probability U = sum_v P(v) =
c(t) sum_v p_v^beta with c = (e^dsigma - 1) / expm1(sigma)^beta depends on the denoiser when
beta != 1: beta > 1 unmasks more slowly early (expm1(sigma) > 1) and faster late
(expm1(sigma) < 1), and the token law becomes p^beta renormalised.  When sum_v P(v) > 1 the
paper's P(MASK) is negative (late steps for beta > 1, e.g. beta = 2 at 8 steps; early steps for
beta < 1).  Here P(MASK) is clipped at 0 and the token probabilities renormalised (the position
unmasks surely).  Upstream (``sample_categorical``: argmax of probs / Exp(1)) does the same in
law: a negative entry can never win the race and the race samples proportionally to the
positive entries.

``token_temperature`` tau sharpens only the token law: given that a position unmasks, its token
is drawn from P(v)^(1/tau) renormalised (= p^(beta/tau)), the unmasking probability U is left
unchanged (tau = 0: argmax, ties -> lowest id; tau = 1: off).

Final denoise step (upstream ``Denoiser``, at t = t_min with dsigma = sigma(t_min)): every
leftover MASK is *sampled* from a law proportional to s_v^beta (then ^(1/tau)) over the real
tokens, i.e. proportional to p^(beta/tau) - not argmax.

Efficiency.  With beta = 1 the unmask probability U_j at step j does not depend on the
denoiser, so each position's unmasking step is drawn once up front (inverse CDF of the
discrete "first unmask step" law from one uniform per position, the same law as a Bernoulli(U_j)
per step) and :func:`dllm_lit.decoding.ordered_decoding.decode_in_order` queries the denoiser
only at the positions that unmask (O(k V) per step, final step included).
With beta != 1, U depends on sum_v p_v^beta, so every masked position is queried at every step.
Uniforms: Stream.ORDER (unmask steps, beta = 1) or slot 0 of Stream.TOKEN (unmask decision,
beta != 1); token draws slot 1 of Stream.TOKEN at (step, position); final step j = steps.
"""
from __future__ import annotations

import math

import torch

from dllm_lit import checks, rng
from dllm_lit.decoding import CachedFeatures, PosteriorCache, decode_in_order
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.util.indices import nonzero_pairs
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.draws import StepUniforms, categorical_from_cdf, tempered_draw
from dllm_lit.samplers.schedules import time_grid
from dllm_lit.samplers.score_entropy import (PREDICTORS, loglinear_rate, loglinear_sigma, step_probabilities,
                                            step_scale, token_law)

__all__ = ["SEDD", "PREDICTORS", "loglinear_sigma", "loglinear_rate", "step_scale", "step_probabilities", "token_law"]


class SEDD(Sampler):
    """SEDD absorbing sampler with oracle scores (see module docstring for the update).

    Args:
        denoiser: frozen denoiser (oracle built from the data module's chain if None).
        steps: predictor steps (or a grid); one final denoise step follows.
        predictor: "analytic" (Tweedie tau-leaping, upstream run_sample default) or "euler".
        beta: the paper's score temperature, log s -> beta log s (> 0; 1 = exact score).
        token_temperature: tau >= 0; token law p^(1/tau) given unmasking, schedule unchanged.
        t_min: end of the time grid linspace(1, t_min, steps + 1) (paper 1e-3).
        noise_eps: loglinear noise eps (upstream 1e-3).
    """

    sampler_name = "sedd"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128,
                 predictor: str = "analytic", beta: float = 1.0, token_temperature: float = 1.0,
                 t_min: float = 1e-3, noise_eps: float = 1e-3) -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.predictor = checks.choice("predictor", predictor, PREDICTORS)
        self.beta = checks.real("beta", beta, 0.0, low_open=True)
        self.token_temperature = checks.real("token_temperature", token_temperature, 0.0)
        self.t_min = checks.real("t_min", t_min, 0.0, 1.0, low_open=True, high_open=True)
        self.noise_eps = checks.real("noise_eps", noise_eps, 0.0, 1.0, low_open=True, high_open=True)

    def nfe(self, seq_len: int, steps: int | None) -> float | None:
        """steps + 1: upstream evaluates the score at every predictor step and at the final denoise step."""
        return float(steps + 1)

    def log_q_reason(self, steps: int | None) -> str | None:
        """None at beta = 1 (unmask steps drawn up front); otherwise the unmask probability
        c sum_v p_v^beta depends on the tokens revealed so far."""
        if self.beta == 1:
            return None
        return "with beta != 1 the unmasking probability depends on the posterior, i.e. on the tokens already drawn"

    def generate_with_stats(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int):
        if self.beta != 1:
            return super().generate_with_stats(indices, seq_len, steps, seed)
        log_q = self._log_q_buffer(indices, seq_len)
        x = self.generate(indices, seq_len, steps, seed, log_q=log_q)
        return x, self._stats(self.nfe(seq_len, steps), log_q, indices.numel())

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int,
                 log_q: torch.Tensor | None = None) -> torch.Tensor:
        """Samples; with ``log_q`` ([B, T] float64; beta = 1 only) also the log-probability of every drawn token."""
        den, M, T = self.denoiser, self.mask_id, seq_len
        B, dev = indices.numel(), indices.device
        z = torch.full((B, T), M, dtype=torch.long, device=dev)
        uni = StepUniforms(seed, indices, steps)
        ts = time_grid(steps, self.t_min).tolist()
        eps, beta, tau = self.noise_eps, self.beta, self.token_temperature
        if beta == 1:
            # U_j = c_j / expm1(sigma(t_j)) (sum_v p_v = 1): the unmask step is drawn up front.
            U = torch.tensor([min(1.0, step_scale(ts[j], ts[j + 1], self.predictor, eps) / math.expm1(loglinear_sigma(ts[j], eps)))
                              for j in range(steps)], dtype=torch.float64)
            survive = torch.cumprod(1.0 - U, 0)  # P(still masked after step j)
            first = (1.0 - survive).to(dev)  # P(unmasked by step j), non-decreasing
            u = StepUniforms(seed, indices, steps, stream=rng.Stream.ORDER).grid(0, T)
            when = torch.searchsorted(first, u.reshape(-1), right=True)  # first j with u < first[j]; steps = never

            def draw(j: int, b: torch.Tensor, p: torch.Tensor, probs: torch.Tensor):
                # final step j = steps: same law at beta = 1
                return tempered_draw(probs, uni.at(j, b, p, slot=1), tau, with_log_prob=log_q is not None)

            return decode_in_order(den, z, when.view(B, T), steps, draw, log_q=log_q)
        if log_q is not None:
            raise ValueError(f"SEDD records log q only at beta = 1: {self.log_q_reason(steps)}")
        return self._generate_tempered(z, uni, ts, steps)

    def _tempered_features(self, probs: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per position: S_beta = sum_v p_v^beta (float64) and the token law's cdf."""
        p = probs.to(torch.float64)
        mass = torch.exp(self.beta * p.log()).sum(-1)  # p = 0 -> 0
        return {"mass": mass, "cdf": token_law(probs, self.beta, self.token_temperature).cumsum(-1)}

    def _generate_tempered(self, z: torch.Tensor, uni: StepUniforms, ts: list[float], steps: int) -> torch.Tensor:
        """beta != 1: P(unmask) = c_j S_beta / expm1(sigma_j)^beta (clipped at 1), token ~ p^(beta/tau); the final
        step samples every leftover mask from p^(beta/tau).  S_beta and the token cdf come from a
        :class:`PosteriorCache` (recomputed only where the posterior can change) when it fits in memory, else from
        ``probs_at`` at every masked position: the same features either way."""
        den, M = self.denoiser, self.mask_id
        B, T = z.shape
        V = self.vocab_size
        eps, beta = self.noise_eps, self.beta
        cache = None
        if PosteriorCache.fits(B, V + 2, length=T):
            spec = CachedFeatures(self._tempered_features, {"mass": ((), torch.float64), "cdf": ((V,), torch.float64)})
            cache = PosteriorCache(den, B, 0, T, spec, z.device)
        for j in range(steps + 1):
            b, p = nonzero_pairs(z == M)
            if b.numel() == 0:
                break
            if cache is not None:
                cache.refresh(z)
                feature = lambda name, sel=None: cache.get(name, b if sel is None else b[sel], p if sel is None else p[sel])  # noqa: E731
            else:
                f = self._tempered_features(den.probs_at(z, b, p))
                feature = lambda name, sel=None: f[name] if sel is None else f[name][sel]  # noqa: E731
            if j == steps:  # final denoise step: leftover masks sampled proportional to s^beta (then ^(1/tau))
                z[b, p] = categorical_from_cdf(feature("cdf"), uni.at(steps, b, p, slot=1))
                break
            scale = step_scale(ts[j], ts[j + 1], self.predictor, eps) * math.exp(-beta * math.log(math.expm1(loglinear_sigma(ts[j], eps))))
            move = uni.at(j, b, p) < scale * feature("mass")
            if bool(move.any()):
                z[b[move], p[move]] = categorical_from_cdf(feature("cdf", move), uni.at(j, b[move], p[move], slot=1))
        return z
