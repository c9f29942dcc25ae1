"""Evidence channels: how a noisy token z_t carries evidence about the clean token x_t.

A channel is its likelihood table ``L[z, v] = p(z_t = z | x_t = v)`` up to a positive factor per z (the
posterior does not see that factor).  Every position is observed through the same channel:

* :class:`AbsorbingMask` - z in [0, V]: a revealed token (L = delta) or MASK = V (L = 1); prompts are revealed
  tokens.  MDLM / LLaDA / ReMDM's channel.
* :class:`UniformNoise` (alpha) - z in [0, V): p(z | x) = alpha delta_x(z) + (1 - alpha) / V (uniform-state
  diffusion: Duo / UDLM, SEDD-uniform).
* :class:`MaskedUniform` (alpha, beta) - z in [0, V]: p(z | x) = alpha delta_x(z) + beta / V for z < V and
  1 - alpha - beta for MASK (GIDD's mixed noise).

Bad levels (outside [0, 1], alpha + beta > 1) fail with one line at construction.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from dllm_lit import checks

__all__ = ["EvidenceChannel", "AbsorbingMask", "UniformNoise", "MaskedUniform", "ABSORBING"]


class EvidenceChannel(ABC):
    """Base: :meth:`likelihood` [Z, V] and the size of the z alphabet (V or V + 1)."""

    has_mask: bool = True

    def num_symbols(self, vocab_size: int) -> int:
        return vocab_size + 1 if self.has_mask else vocab_size

    @abstractmethod
    def likelihood(self, vocab_size: int) -> torch.Tensor:
        """p(z | x) up to a positive factor per z, as a [Z, V] table (row z, column x)."""

    def check_tokens(self, z: torch.Tensor, vocab_size: int) -> None:
        """One-line error unless z [B, T] holds ids in [0, Z)."""
        Z = self.num_symbols(vocab_size)
        if z.dim() != 2 or z.is_floating_point():
            raise ValueError(f"z must be an integer [B, T] tensor, got {tuple(z.shape)} {z.dtype}")
        if z.numel() and (int(z.min()) < 0 or int(z.max()) >= Z):
            raise ValueError(f"z ids must lie in [0, {Z}) under the {self.describe()['channel']} channel, "
                             f"got [{int(z.min())}, {int(z.max())}]")

    def describe(self) -> dict:
        return {"channel": type(self).__name__}


@dataclass(frozen=True)
class AbsorbingMask(EvidenceChannel):
    """z = x or MASK (= V): L[v, .] = delta_v, L[V, .] = 1."""

    def likelihood(self, vocab_size: int) -> torch.Tensor:
        return torch.cat([torch.eye(vocab_size, dtype=torch.float64), torch.ones(1, vocab_size, dtype=torch.float64)])


@dataclass(frozen=True)
class UniformNoise(EvidenceChannel):
    """p(z | x) = alpha delta_x(z) + (1 - alpha) / V, alpha in [0, 1] (alpha = 1: clean, 0: pure noise)."""

    alpha: float = 1.0
    has_mask = False

    def __post_init__(self) -> None:
        checks.real("alpha (uniform-noise level)", self.alpha, 0.0, 1.0)

    def likelihood(self, vocab_size: int) -> torch.Tensor:
        V = vocab_size
        return self.alpha * torch.eye(V, dtype=torch.float64) + (1.0 - self.alpha) / V

    def describe(self) -> dict:
        return {"channel": "UniformNoise", "alpha": self.alpha}


@dataclass(frozen=True)
class MaskedUniform(EvidenceChannel):
    """GIDD mixed noise: keep with alpha, a uniform token with beta, MASK with 1 - alpha - beta."""

    alpha: float = 1.0
    beta: float = 0.0

    def __post_init__(self) -> None:
        checks.real("alpha (keep probability)", self.alpha, 0.0, 1.0)
        checks.real("beta (uniform-token probability)", self.beta, 0.0, 1.0)
        if self.alpha + self.beta > 1.0 + 1e-12:
            raise ValueError(f"alpha + beta must be <= 1 (the rest is the MASK probability), got {self.alpha + self.beta}")

    def likelihood(self, vocab_size: int) -> torch.Tensor:
        V = vocab_size
        L = self.alpha * torch.eye(V, dtype=torch.float64) + self.beta / V
        return torch.cat([L, torch.full((1, V), max(1.0 - self.alpha - self.beta, 0.0), dtype=torch.float64)])

    def describe(self) -> dict:
        return {"channel": "MaskedUniform", "alpha": self.alpha, "beta": self.beta}


#: the default channel of every denoiser
ABSORBING = AbsorbingMask()
