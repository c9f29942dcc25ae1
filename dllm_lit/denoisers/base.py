"""The interface every denoiser shares (oracle or learned), so samplers never depend on which.

A denoiser maps a partially masked sequence z [B, T] (``mask_id`` = V at masked positions) to
log p(x0_i = v | z) for v in [0, V) (MDLM's "SUBS" parameterisation: one-hot at unmasked
positions, no mass on MASK).  For absorbing diffusion the exact posterior does not depend on t,
so the interface has no time argument.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import nn

__all__ = ["Denoiser", "check_tokens"]


def check_tokens(z: torch.Tensor, vocab_size: int, name: str = "z") -> None:
    """Raise ValueError unless z is an integer [B, T] tensor with ids in [0, V] (V = MASK)."""
    if z.dim() != 2:
        raise ValueError(f"{name} must have shape [B, T], got {tuple(z.shape)}")
    if z.is_floating_point():
        raise ValueError(f"{name} must hold integer token ids, got dtype {z.dtype}")


class Denoiser(nn.Module, ABC):
    """Base class: subclasses implement :meth:`forward`; :meth:`log_probs_at` may be specialised."""

    vocab_size: int

    @property
    def mask_id(self) -> int:
        return self.vocab_size

    @abstractmethod
    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """log p(x0_i = v | z) for every position: Tensor[B, T, V]."""

    def log_probs_at(self, z: torch.Tensor, batch_index: torch.Tensor, position_index: torch.Tensor) -> torch.Tensor:
        """log p(x0 | z) at the listed (batch, position) pairs only: Tensor[n, V].

        The default runs :meth:`forward` on the rows involved; the oracle answers in O(n V).
        """
        return self.forward(z)[batch_index, position_index]

    def probs_at(self, z: torch.Tensor, batch_index: torch.Tensor, position_index: torch.Tensor) -> torch.Tensor:
        """p(x0 | z) at the listed positions (rows sum to one): Tensor[n, V]."""
        return self.log_probs_at(z, batch_index, position_index).exp()
