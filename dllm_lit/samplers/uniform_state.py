"""Shared pieces of the uniform-state samplers (Duo / UDLM, Psi, SEDD-uniform, GIDD): the oracle's evidence,
the reverse step of uniform noise, the uniform prior and row-wise draws.

**Which posterior the oracle supplies.**  These samplers take a network output x_theta over the V clean
tokens and plug it into the D3PM-form reverse step

    p(z_s = y | z_t) = sum_x x_theta(x) q(z_s = y | x) q(z_t | z_s = y)  /  sum_x x_theta(x) q(z_t | x)

(numerator and denominator each linear in x_theta).  With x_theta the *leave-one-out* law
q_i(x) = p(x_i = x | z_{-i}) this is Bayes' rule for the position's exact marginal p(z_s^i = y | z_t), so
the leave-one-out posterior is what these models' training losses are minimised by, and what the exact
oracle supplies here (:meth:`Denoiser.log_posterior` with ``leave_one_out=True``).  (The full posterior
p(x_i | z) plugged into the mixture sum_x p(x | z) q(z_s | z_t, x) gives the same marginal.)

**Speed.**  A step is one evaluation (:meth:`Denoiser.log_posterior`, whole batch), then :func:`step_draw` turns
the log-probabilities into each position's step law and its draw in cache-sized chunks of rows
(:func:`~dllm_lit.samplers.draws.row_chunks`): every operation after the evaluation is row-wise, so the draws do
not depend on the chunking.
"""
from __future__ import annotations

import math
from typing import Callable, Iterator

import torch

from dllm_lit.denoisers.base import Denoiser
from dllm_lit.denoisers.channels import EvidenceChannel, UniformNoise
from dllm_lit import checks
from dllm_lit.samplers.draws import StepUniforms, categorical, row_chunks
from dllm_lit.samplers.schedules import time_grid

__all__ = ["NOISES", "duo_alpha", "check_channel", "leave_one_out_chunks", "step_draw", "uniform_prior", "draw_rows",
           "uniform_reverse_step", "uniform_forward", "noise_removal_step", "uniform_start", "DuoNoise",
           "NOISE_REMOVAL", "NO_ORDER"]

#: Duo's final steps (``sampling.noise_removal``)
NOISE_REMOVAL = ("ancestral", "greedy", "none")
#: why uniform-state rows report no log q
NO_ORDER = "uniform-state sampling has no unmasking order: every position may change at every step"

#: Duo's noise schedules (``trainer_base.LogLinear``, ``trainer_base.Cosine``)
NOISES = ("loglinear", "cosine")


def duo_alpha(t: float, noise: str = "loglinear", eps: float = 1e-3) -> float:
    """alpha_t of Duo's schedules with t' = (1 - eps) t: loglinear 1 - t', cosine 1 - cos(pi/2 (1 - t'))."""
    tt = (1.0 - eps) * t
    if noise == "loglinear":
        return 1.0 - tt
    if noise == "cosine":
        return 1.0 - math.cos(0.5 * math.pi * (1.0 - tt))
    raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")


def check_channel(denoiser: Denoiser, channel: EvidenceChannel) -> None:
    """One-line refusal, at wiring, of a denoiser that does not answer ``channel`` leave-one-out."""
    if not denoiser.supports(channel, leave_one_out=True):
        raise ValueError(f"denoiser {type(denoiser).__name__} does not answer the {channel.describe()['channel']} "
                         f"channel leave-one-out, which uniform-state samplers need (the exact oracles do)")


def leave_one_out_chunks(denoiser: Denoiser, z: torch.Tensor,
                         channel: EvidenceChannel) -> Iterator[tuple[slice, torch.Tensor]]:
    """p(x_i = v | z_{-i}) under ``channel`` from one evaluation of the whole batch, handed out per cache-sized
    chunk of rows (:func:`~dllm_lit.samplers.draws.row_chunks`): (rows, x float64 [n, T, V]), x =
    :meth:`Denoiser.posterior` (the exact oracles' float64 probabilities themselves; by
    :meth:`Denoiser.transient_posterior`, so the caller must be done with each chunk before it asks for the next
    evaluation).  Work done on each chunk that is row-wise gives the numbers of the whole batch at once.  A
    denoiser that does not answer the channel leave-one-out is refused in one line."""
    check_channel(denoiser, channel)
    x = denoiser.transient_posterior(z, channel)
    for sl in row_chunks(z.shape[0], z.shape[1] * x.shape[-1], z.device):
        yield sl, x[sl].to(torch.float64)  # the laws never write into x


def step_draw(denoiser: Denoiser, z: torch.Tensor, channel: EvidenceChannel,
              law: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], u: torch.Tensor | None) -> torch.Tensor:
    """One evaluation of the leave-one-out law x under ``channel`` (:func:`leave_one_out_chunks`), then per chunk
    of rows ``law(x, z)`` [n, T, K] drawn by the inverse CDF with uniforms u [B, T] (u None: ``law`` returns the
    new tokens [n, T] itself)."""
    out = torch.empty_like(z)
    for sl, x in leave_one_out_chunks(denoiser, z, channel):
        w = law(x, z[sl])
        out[sl] = w if u is None else draw_rows(w, u[sl])
    return out


def uniform_prior(uni: StepUniforms, step: int, batch: int, seq_len: int, vocab_size: int) -> torch.Tensor:
    """Uniform tokens in [0, V) from the uniforms of ``step`` (the limit law of uniform noise): LongTensor [B, T]."""
    u = uni.grid(step, seq_len, slot=3)
    return (u * vocab_size).long().clamp_(max=vocab_size - 1)


def draw_rows(law: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One inverse-CDF draw per row of ``law`` [B, T, K] (unnormalised, non-negative) with uniforms u [B, T]."""
    B, T, K = law.shape
    return categorical(law.reshape(B * T, K), u.reshape(B * T)).view(B, T)


def uniform_reverse_step(x0: torch.Tensor, zt: torch.Tensor, alpha_s: float, alpha_t: float) -> torch.Tensor:
    """Duo's ``_posterior_from_x0``: the law of z_s given z_t and x0 [B, T, V] (a clean law) under uniform noise
    q(z_t | x) = alpha_t delta_x + (1 - alpha_t) / V, float64 [B, T, V] (rows sum to one):

        [alpha_t V x0 o e_zt + (alpha_ts - alpha_t) e_zt + (alpha_s - alpha_t) x0 + (1 - alpha_ts)(1 - alpha_s) / V]
        / [alpha_t V x0(z_t) + 1 - alpha_t],        alpha_ts = alpha_t / alpha_s.
    """
    V = x0.shape[-1]
    x0 = x0.to(torch.float64)
    a_ts = alpha_t / alpha_s
    c = (1 - a_ts) * (1 - alpha_s) / V
    idx = zt.unsqueeze(-1)
    xz = x0.gather(-1, idx)
    # off z_t the e_zt terms are +0 (exact), so the sum reduces to its last two terms with the same roundings
    # (in place: the same operations in the same order as (alpha_s - alpha_t) * x0 + c, one buffer)
    num = torch.mul(x0, alpha_s - alpha_t).add_(c)
    num.scatter_(-1, idx, alpha_t * V * xz + (a_ts - alpha_t) + (alpha_s - alpha_t) * xz + c)
    return num.div_(alpha_t * V * xz + (1 - alpha_t))


def uniform_forward(law: torch.Tensor, alpha: float) -> torch.Tensor:
    """Forward uniform noise applied to a clean law [..., V]: alpha law + (1 - alpha) / V (Duo ``_forward_process``)."""
    return alpha * law + (1 - alpha) / law.shape[-1]


def noise_removal_step(denoiser: Denoiser, z: torch.Tensor, alpha_t: float, mode: str, u: torch.Tensor) -> torch.Tensor:
    """Duo's final step at alpha_t: "ancestral" (a draw from the exact posterior, the reverse step to alpha = 1 with
    uniforms u), "greedy" (argmax of the leave-one-out law, biased) or "none" (z unchanged, no evaluation)."""
    if mode == "none":
        return z
    if mode == "greedy":
        return step_draw(denoiser, z, UniformNoise(alpha_t), lambda x, zc: x.argmax(-1), None)
    return step_draw(denoiser, z, UniformNoise(alpha_t), lambda x, zc: uniform_reverse_step(x, zc, 1.0, alpha_t), u)


def uniform_start(indices: torch.Tensor, seq_len: int, steps: int, seed: int, vocab_size: int,
                  t_min: float) -> tuple[StepUniforms, torch.Tensor, list[float]]:
    """(the run's uniforms, uniform start tokens [B, T], the grid linspace(1, t_min, steps + 1))."""
    uni = StepUniforms(seed, indices, steps)
    z = uniform_prior(uni, 0, indices.numel(), seq_len, vocab_size).to(indices.device)
    return uni, z, time_grid(steps, t_min).tolist()


class DuoNoise:
    """Mixin of the samplers on Duo's uniform-state noise (Duo, Psi): options, channel check, alpha_t, NFE."""

    no_log_q_reason = NO_ORDER

    def _duo_options(self, noise: str, noise_eps: float, t_min: float, noise_removal: str) -> None:
        self.noise = checks.choice("noise", noise, NOISES)
        self.noise_eps = checks.real("noise_eps", noise_eps, 0.0, 1.0, low_open=True, high_open=True)
        self.t_min = checks.real("t_min", t_min, 0.0, 1.0, low_open=True, high_open=True)
        self.noise_removal = checks.choice("noise_removal", noise_removal, NOISE_REMOVAL)

    def check_options(self) -> None:
        check_channel(self.denoiser, UniformNoise(0.5))

    def nfe(self, seq_len: int, steps: int | None) -> float | None:
        """One evaluation per step, one for the noise removal (none with ``none``)."""
        return float(steps + (self.noise_removal != "none"))

    def alpha(self, t: float) -> float:
        return duo_alpha(t, self.noise, self.noise_eps)
