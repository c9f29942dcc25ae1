"""Random draws shared by the samplers, all driven by counter-based uniforms (``dllm_lit.rng``).

Upstream samplers draw categoricals with an exponential race,
``argmax(probs / -log(u))`` (MDLM ``_sample_categorical``, SEDD ``sample_categorical``), or a
Gumbel race for LLaDA.  Both are exact samplers of the normalised ``probs``; here the same law
is drawn by the inverse CDF in float64 from a single uniform per position, which is exact,
cheaper (one uniform instead of V) and free of the float32 precision issue that ReMDM's
"fp64 Gumbel" fixes.
"""
from __future__ import annotations

import torch

from dllm_lit import rng

__all__ = ["categorical", "categorical_from_cdf", "cdf_and_last", "StepUniforms"]


def categorical(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Index k with F(k-1) <= u * F(V-1) < F(k), F the float64 cumsum of ``probs`` [n, V].

    Unnormalised rows are allowed; zero-probability entries are never returned.
    """
    cdf = probs.to(torch.float64).cumsum(-1)
    target = (u.to(torch.float64) * cdf[..., -1]).unsqueeze(-1)
    k = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    # u * total can round up to total: return the last entry with positive mass
    last = (probs > 0).to(torch.int64).cumsum(-1).argmax(-1)
    return torch.minimum(k, last)


def categorical_from_cdf(cdf: torch.Tensor, last: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """:func:`categorical` from a precomputed float64 cumsum ``cdf`` [n, V] and last positive index ``last`` [n]."""
    target = (u.to(torch.float64) * cdf[..., -1]).unsqueeze(-1)
    k = torch.searchsorted(cdf.contiguous(), target, right=True).squeeze(-1)
    return torch.minimum(k, last)


def cdf_and_last(probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(float64 cumsum, index of the last positive entry) of unnormalised rows [n, V], as :func:`categorical` uses."""
    return probs.to(torch.float64).cumsum(-1), (probs > 0).to(torch.int64).cumsum(-1).argmax(-1)


class StepUniforms:
    """Uniforms for one sampler run: U(seed, sequence index, stream, steps, step j, position, slot).

    ``steps`` (the run's number of steps) is folded into the key so different step counts use
    independent randomness; the sampler name is not, so samplers that coincide in law for some
    settings (ReMDM with sigma = 0 and MDLM) coincide draw for draw.
    """

    def __init__(self, seed: int, indices: torch.Tensor, steps: int, stream: int = rng.Stream.TOKEN) -> None:
        self.keys = rng.mix64(rng.sequence_keys(seed, indices, stream) ^ int(steps))

    def grid(self, step: int, seq_len: int, slot: int = 0) -> torch.Tensor:
        """Float64 [B, T] uniforms for every position of every sequence at step ``step``."""
        pos = torch.arange(seq_len, device=self.keys.device)
        return rng.uniform(self.keys[:, None], step, pos[None, :], slot)

    def at(self, step: int, batch_index: torch.Tensor, position_index: torch.Tensor, slot: int = 0) -> torch.Tensor:
        """Float64 [n] uniforms at the listed (batch, position) pairs."""
        return rng.uniform(self.keys[batch_index], step, position_index, slot)
