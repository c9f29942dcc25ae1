"""Duo / UDLM ancestral sampling of uniform-state diffusion with the exact oracle; see ``docs/samplers/duo.md``.

Sahoo et al., "The Diffusion Duality" (arXiv:2506.10892), upstream ``s-sahoo/duo`` (``trainer_base.py``:
``generate_samples``, ``_ancestral_update``, ``LogLinear``, ``Cosine``; ``algo.py``: ``DUO_BASE._posterior_from_x0``).

Forward noise q(z_t | x) = alpha_t delta_x + (1 - alpha_t) / V, loglinear alpha_t = 1 - (1 - eps) t (or cosine).
Start from uniform tokens; on t_j = linspace(1, t_min, steps + 1) every position draws, independently,

    z_s ~ [alpha_t V x e_zt + (alpha_ts - alpha_t) e_zt + (alpha_s - alpha_t) x + (1 - alpha_ts)(1 - alpha_s) / V]
          / [alpha_t V x(z_t) + 1 - alpha_t],

x = p(x_i | z_{-i}) the oracle's leave-one-out law under UniformNoise(alpha_t) (which makes this the exact
per-position marginal p(z_s^i | z_t); :mod:`dllm_lit.samplers.uniform_state`).  Then the noise removal at t_min:

* ``ancestral`` (upstream default): the same step with alpha_s = 1, i.e. a draw from the exact posterior
  p(x_i | z) of every position;
* ``greedy``: every position replaced by argmax_v x(v) at once (upstream ``forward(...).argmax``) - biased: it
  ignores the position's own token and the law's spread (documented, not a bug);
* ``none``: the state at t_min is returned.

NFE = steps + 1 (one evaluation per step; upstream disables its cache for time-conditioned models), steps
with ``none``.  Uniforms: the prior at slot 3 of step 0, step j's draws at slot 0 of step j, the final
ancestral draw at step ``steps``.
"""
from __future__ import annotations

import torch

from dllm_lit.denoisers.base import Denoiser
from dllm_lit.denoisers.channels import UniformNoise
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.uniform_state import (NOISE_REMOVAL, DuoNoise, noise_removal_step, step_draw, uniform_reverse_step,
                                             uniform_start)

__all__ = ["Duo", "NOISE_REMOVAL"]


class Duo(DuoNoise, Sampler):
    """Duo / UDLM ancestral sampler (module docstring).

    Args:
        denoiser: frozen denoiser answering UniformNoise leave-one-out (the exact oracle if None).
        steps: ancestral steps (or a grid); the noise removal adds one evaluation.
        noise: "loglinear" (upstream default) or "cosine".
        noise_eps: the schedule's eps (upstream 1e-3).
        t_min: end of the time grid linspace(1, t_min, steps + 1) (upstream 1e-5).
        noise_removal: "ancestral" (upstream default), "greedy" (argmax tail, biased) or "none".
    """

    sampler_name = "duo"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, noise: str = "loglinear",
                 noise_eps: float = 1e-3, t_min: float = 1e-5, noise_removal: str = "ancestral") -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self._duo_options(noise, noise_eps, t_min, noise_removal)

    @property
    def name(self) -> str:
        return "duo" if self.noise_removal == "ancestral" else f"duo_{self.noise_removal}"

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        den, T = self.denoiser, seq_len
        uni, z, ts = uniform_start(indices, T, steps, seed, self.vocab_size, self.t_min)
        for j in range(steps):
            a_t, a_s = self.alpha(ts[j]), self.alpha(ts[j + 1])
            z = step_draw(den, z, UniformNoise(a_t), lambda x, zc: uniform_reverse_step(x, zc, a_s, a_t), uni.grid(j, T))
        return noise_removal_step(den, z, self.alpha(ts[-1]), self.noise_removal, uni.grid(steps, T))
