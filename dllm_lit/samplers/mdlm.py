"""MDLM's ancestral sampler (``ddpm_cache`` predictor), upstream-samplers.md Sec. 1.

Time grid ``t_j = 1 - j (1 - 1e-5)/steps`` for j = 0..steps-1, ``s = t - dt``.  With the
linear move chance (alpha_t = 1 - t), at a masked position

    P(x_s = v) = p(x0 = v | z_t) (t - s) / t,      P(x_s = MASK) = s / t,

and unmasked positions are carried over.  After the last step every remaining MASK is filled
with argmax_v p(x0 = v | z) (``noise_removal``), all at once.

Because the stay-masked probability s/t does not depend on the denoiser, the step first
decides which positions unmask (one uniform each) and queries the denoiser only there:
O(k V) for k unmasked positions, the same law as drawing from the (V+1)-way categorical.
"""
from __future__ import annotations

import torch

from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.draws import StepUniforms, categorical

__all__ = ["MDLM", "time_grid"]


def time_grid(steps: int, t_min: float = 1e-5) -> torch.Tensor:
    """``linspace(1, t_min, steps + 1)`` in float64 (upstream ``timesteps``)."""
    return torch.linspace(1.0, t_min, steps + 1, dtype=torch.float64)


class MDLM(Sampler):
    """MDLM ddpm_cache sampler with the final argmax fill (see module docstring)."""

    sampler_name = "mdlm"

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        den = self.denoiser
        B, T, M = indices.numel(), seq_len, self.mask_id
        z = torch.full((B, T), M, dtype=torch.long, device=indices.device)
        uni = StepUniforms(seed, indices, steps)
        ts = time_grid(steps).tolist()
        for j in range(steps):
            t, s = ts[j], ts[j + 1]
            u = uni.grid(j, T)
            move = (z == M) & (u < (t - s) / t)
            b, p = move.nonzero(as_tuple=True)
            if b.numel() == 0:
                continue
            probs = den.probs_at(z, b, p)
            z[b, p] = categorical(probs, uni.at(j, b, p, slot=1))
        return argmax_fill(den, z)


def argmax_fill(denoiser, z: torch.Tensor) -> torch.Tensor:
    """Fill every remaining MASK with argmax_v p(x0 = v | z), all positions in parallel."""
    b, p = (z == denoiser.mask_id).nonzero(as_tuple=True)
    if b.numel():
        z = z.clone()
        z[b, p] = denoiser.probs_at(z, b, p).argmax(-1)
    return z
