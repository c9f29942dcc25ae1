"""GIDD's mixed-noise (masking + uniform) sampler with the exact oracle; see ``docs/samplers/gidd.md``.

von Rütte et al., "Generalized Interpolating Discrete Diffusion" (arXiv:2503.04482), upstream ``dvruette/gidd``
(``gidd/diffusion_process.py``: ``HybridDiffusion``; ``gidd/sampling.py``: ``GiddSampler``).

Forward (``HybridDiffusion``): q_t(z | x) = alpha_t delta_x(z) + (beta pi)_t(z) over the V tokens and MASK, with
c_t = B (t (1 - t))^(gamma / 2), B = 2^gamma p_u / (1 - p_u), C_t = 1 + c_t,

    alpha_t = (1 - t) / C_t,    (beta pi)_t = (t e_MASK + c_t / V 1_tokens) / C_t,

i.e. the MaskedUniform(alpha_t, c_t / C_t) channel (uniform noise peaks mid-way, MASK dominates near t = 1).
From all-MASK, step t -> s draws every position independently from

    q(z_s | z_t) = [alpha_ts e_zt(z_s) + (beta pi)_ts(z_t)] q_s(z_s) / q_t(z_t),
    q_r = alpha_r x + (beta pi)_r,   alpha_ts = alpha_t / alpha_s,   (beta pi)_ts = (beta pi)_t - alpha_ts (beta pi)_s,

x = p(x_i | z_{-i}) the oracle's leave-one-out law under MaskedUniform(alpha_t, beta_t) (which makes the step the
exact per-position marginal; :mod:`dllm_lit.samplers.uniform_state`).  ``min_p`` > 0 zeroes entries below
min_p and renormalises (upstream).  Grid t_k = linspace(t_eps, 1 - t_eps, steps + 1), steps t_k -> t_{k-1} for
k = steps..1, with t_0 replaced by 0 so that the last step returns clean tokens (departures: docs page).
NFE = steps.  Uniforms: step k's draws at slot 0 of step steps - k.
"""
from __future__ import annotations

import math

import torch

from dllm_lit import checks
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.denoisers.channels import MaskedUniform
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.draws import StepUniforms
from dllm_lit.samplers.uniform_state import check_channel, step_draw

__all__ = ["GIDD", "gidd_channel", "gidd_step_law"]


def gidd_channel(t: float, p_uniform: float = 0.1, gamma: float = 1.0, clip_noise: float = 20.0) -> MaskedUniform:
    """HybridDiffusion's q_t(z | x) as a MaskedUniform(alpha_t, c_t / C_t) channel (p_u floored at e^-clip_noise)."""
    p_u = max(math.exp(-clip_noise), p_uniform)
    B = math.exp(max(gamma * math.log(2.0) + math.log(p_u) - math.log1p(-p_u), -clip_noise))
    c = B * (t * (1.0 - t)) ** (gamma / 2.0)
    return MaskedUniform(min(max((1.0 - t) / (1.0 + c), 0.0), 1.0), c / (1.0 + c))


def _beta_pi(ch: MaskedUniform, V: int, like: torch.Tensor) -> torch.Tensor:
    """(beta pi) over the V tokens and MASK: [V + 1] float64."""
    out = torch.full((V + 1,), ch.beta / V, dtype=torch.float64, device=like.device)
    out[V] = max(1.0 - ch.alpha - ch.beta, 0.0)
    return out


def gidd_step_law(x: torch.Tensor, z: torch.Tensor, ch_t: MaskedUniform, ch_s: MaskedUniform,
                  min_p: float = 0.0) -> torch.Tensor:
    """``GiddSampler.DenoisingStep``: q(z_s | z_t) from the clean law x [B, T, V], float64 [B, T, V + 1]."""
    V = x.shape[-1]
    x = x.to(torch.float64)
    bp_t, bp_s = _beta_pi(ch_t, V, x), _beta_pi(ch_s, V, x)
    a_ts = ch_t.alpha / ch_s.alpha
    bp_ts = bp_t - a_ts * bp_s
    # q_st = q_ts q_s / q_t(z_t) with q_s = alpha_s [x, 0] + bp_s, q_ts = a_ts e_z + bp_ts(z): built in one buffer,
    # the same IEEE operations per entry as the dense formula (off z, a_ts * 0 + b = b exactly), no one-hot
    idx = z.unsqueeze(-1)
    q_st = torch.empty(x.shape[:-1] + (V + 1,), dtype=torch.float64, device=x.device)
    torch.mul(x, ch_s.alpha, out=q_st[..., :V])
    q_st[..., V] = 0.0
    q_st.add_(bp_s)
    x_z = torch.where(idx < V, x.gather(-1, idx.clamp(max=V - 1)), 0.0)  # the padded x at z_t
    q_t_z = ch_t.alpha * x_z + bp_t[idx]
    b_z = bp_ts[idx]
    at_z = (a_ts + b_z) * q_st.gather(-1, idx)
    q_st.mul_(b_z).scatter_(-1, idx, at_z).div_(q_t_z)
    if min_p > 0:
        q_st = torch.where(q_st < min_p, 0.0, q_st)
        q_st = q_st / q_st.sum(-1, keepdim=True)
    return q_st


class GIDD(Sampler):
    """GIDD mixed-noise sampler (module docstring).

    Args:
        denoiser: frozen denoiser answering MaskedUniform leave-one-out (the exact oracle if None).
        steps: denoising steps (or a grid).
        p_uniform: the uniform-noise share p_u in [0, 1) (upstream config 0.0; the paper's models 0.0, 0.1, 0.2).
        gamma: the schedule exponent in (0, 2] (upstream 1).
        t_eps: end margin of the time grid (upstream 1e-4).
        min_p: probabilities below it are dropped before the draw (upstream 0: off).
    """

    sampler_name = "gidd"
    no_log_q_reason = "GIDD's tokens may change after they appear (uniform noise): there is no unmasking order"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, p_uniform: float = 0.1,
                 gamma: float = 1.0, t_eps: float = 1e-4, min_p: float = 0.0) -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.p_uniform = checks.real("p_uniform", p_uniform, 0.0, 1.0, high_open=True)
        self.gamma = checks.real("gamma", gamma, 0.0, 2.0, low_open=True)
        self.t_eps = checks.real("t_eps", t_eps, 0.0, 0.5, low_open=True, high_open=True)
        self.min_p = checks.real("min_p", min_p, 0.0, 1.0, high_open=True)

    def check_options(self) -> None:
        check_channel(self.denoiser, MaskedUniform(0.5, 0.25))

    def channel(self, t: float) -> MaskedUniform:
        return gidd_channel(t, self.p_uniform, self.gamma)

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        den, M, T = self.denoiser, self.mask_id, seq_len
        uni = StepUniforms(seed, indices, steps)
        z = torch.full((indices.numel(), T), M, dtype=torch.long, device=indices.device)
        ts = torch.linspace(self.t_eps, 1.0 - self.t_eps, steps + 1, dtype=torch.float64).tolist()
        ts[0] = 0.0
        for k in range(steps, 0, -1):
            ch_t, ch_s = self.channel(ts[k]), self.channel(ts[k - 1])
            z = step_draw(den, z, ch_t, lambda x, zc, ch_t=ch_t, ch_s=ch_s: gidd_step_law(x, zc, ch_t, ch_s, self.min_p),
                          uni.grid(steps - k, T))
        return z
