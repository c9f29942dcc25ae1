"""Psi predictor-corrector samplers on uniform-state (Duo) diffusion with the exact oracle; see ``docs/samplers/psi.md``.

Psi samplers (arXiv:2602.21185), upstream ``s-sahoo/duo`` (``trainer_base.py``: ``Diffusion._psi_update``,
``_mode_to_psi_kappas``, ``_get_kappas``, ``_get_sampling_time_profile``; runs in ``scripts/psi_samplers/``).

Each step t -> s mixes Duo's ancestral posterior with a "PC" law that denoises to t = 0 and re-noises to s:

    q = kappa_j q(z_s | z_t, x) + (1 - kappa_j) [alpha_s q(z_0 | z_t, x) + (1 - alpha_s) / V],

both from one leave-one-out law x (one evaluation).  kappa = 1 is Duo's ancestral sampler.  The grid
linspace(1, t_min, steps + 1) is split into high / middle / low phases (fractions ``high_frac``, ``middle_frac``
of its points), each with a mode: ``pure-posterior`` (kappa 1), ``pure-pc`` (0), ``constant-<eta>`` (eta), or
ReMDM-like ``constant-remdm-<eta>``, ``max-capped-<eta>``, ``max-rescale-<eta>`` with
kappa = clip(1 - sigma / (1 - alpha_s), 0, 1) and sigma = eta, min(eta, (1 - alpha_s) / alpha_t), or
min(eta, (1 - alpha_s) / alpha_t) eta (a ReMDM-like phase's last point gets kappa 1).  Noise removal as Duo's.
NFE = steps + 1 (steps with ``none``).
"""
from __future__ import annotations

import functools

import torch

from dllm_lit import checks
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.denoisers.channels import UniformNoise
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.schedules import time_grid
from dllm_lit.samplers.uniform_state import (DuoNoise, noise_removal_step, step_draw, uniform_reverse_step,
                                             uniform_start)

__all__ = ["Psi", "parse_mode", "psi_kappas", "psi_step_law"]

_FIXED = {"pure-posterior": 1.0, "pure-pc": 0.0}
_PREFIXES = ("constant-remdm-", "max-capped-", "max-rescale-", "constant-")


def parse_mode(name: str, mode: str) -> tuple[str, float]:
    """(kind, eta) of a mode string; one-line error naming the field otherwise."""
    if mode in _FIXED:
        return mode, _FIXED[mode]
    for p in _PREFIXES:
        if isinstance(mode, str) and mode.startswith(p):
            try:
                eta = float(mode[len(p):])
            except ValueError:
                break
            if 0.0 <= eta <= 1.0:
                return p.rstrip("-"), eta
            break
    raise ValueError(f"{name} must be pure-posterior, pure-pc, constant-<eta>, constant-remdm-<eta>, "
                     f"max-capped-<eta> or max-rescale-<eta> with eta in [0, 1], got {mode!r}")


def _phase(kind: str, eta: float, alphas: list[float]) -> list[float]:
    n = len(alphas)
    if kind in _FIXED or kind == "constant":
        return [eta] * n
    out = []
    for a_t, a_s in zip(alphas[:-1], alphas[1:]):
        cap = min(eta, (1 - a_s) / a_t) if a_t > 0 else eta
        sigma = {"constant-remdm": eta, "max-capped": cap, "max-rescale": (cap if a_t > 0 else 1.0) * eta}[kind]
        out.append(min(max(1 - sigma / (1 - a_s), 0.0), 1.0))
    return out + [1.0] if n else out


def psi_kappas(times: list[float], alpha, modes: tuple[str, str, str], high_frac: float, middle_frac: float) -> list[float]:
    """upstream ``_get_kappas``: one kappa per grid point (the first ``len(times) - 1`` are used)."""
    n = len(times)
    n_hi, n_mid = round(high_frac * n), round(middle_frac * n)
    cuts = [(0, n_hi), (n_hi, n_hi + n_mid), (n_hi + n_mid, n)]
    out: list[float] = []
    for (lo, hi), mode in zip(cuts, modes):
        kind, eta = parse_mode("mode", mode)
        out += _phase(kind, eta, [alpha(t) for t in times[lo:hi]])
    return out


def psi_step_law(x: torch.Tensor, zc: torch.Tensor, a_t: float, a_s: float, kappa: float) -> torch.Tensor:
    """kappa R(a_s) + (1 - kappa) uniform_forward(R(1), a_s), R(a) = uniform_reverse_step(x, zc, a, a_t): in place
    on the two fresh reverse-step buffers, the out-of-place formula's operations in its order (same bits)."""
    w = uniform_reverse_step(x, zc, a_s, a_t).mul_(kappa)
    if kappa < 1:
        f = uniform_reverse_step(x, zc, 1.0, a_t).mul_(a_s).add_((1 - a_s) / x.shape[-1])
        w.add_(f.mul_(1 - kappa))
    return w


class Psi(DuoNoise, Sampler):
    """Psi predictor-corrector sampler on Duo's uniform-state diffusion (module docstring).

    Args:
        denoiser, steps, noise, noise_eps, t_min, noise_removal: as :class:`~dllm_lit.samplers.duo.Duo`.
        high_mode, middle_mode, low_mode: the kappa mode of each phase (upstream defaults: pure-posterior).
        high_frac, middle_frac: fractions of the grid points in the high and middle phases (upstream 0.2, 0.6).
    """

    sampler_name = "psi"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, noise: str = "loglinear",
                 noise_eps: float = 1e-3, t_min: float = 1e-5, high_mode: str = "pure-posterior",
                 middle_mode: str = "pure-posterior", low_mode: str = "pure-posterior", high_frac: float = 0.2,
                 middle_frac: float = 0.6, noise_removal: str = "ancestral") -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self._duo_options(noise, noise_eps, t_min, noise_removal)
        for field, mode in (("high_mode", high_mode), ("middle_mode", middle_mode), ("low_mode", low_mode)):
            parse_mode(field, mode)
        self.high_mode, self.middle_mode, self.low_mode = high_mode, middle_mode, low_mode
        self.high_frac = checks.real("high_frac", high_frac, 0.0, 1.0)
        self.middle_frac = checks.real("middle_frac", middle_frac, 0.0, 1.0 - self.high_frac)

    def kappas(self, steps: int) -> list[float]:
        return psi_kappas(time_grid(steps, self.t_min).tolist(), self.alpha,
                          (self.high_mode, self.middle_mode, self.low_mode), self.high_frac, self.middle_frac)

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        den, T = self.denoiser, seq_len
        uni, z, ts = uniform_start(indices, T, steps, seed, self.vocab_size, self.t_min)
        kap = self.kappas(steps)
        for j in range(steps):
            a_t, a_s = self.alpha(ts[j]), self.alpha(ts[j + 1])
            law = functools.partial(psi_step_law, a_t=a_t, a_s=a_s, kappa=kap[j])
            z = step_draw(den, z, UniformNoise(a_t), law, uni.grid(j, T))
        return noise_removal_step(den, z, self.alpha(ts[-1]), self.noise_removal, uni.grid(steps, T))
