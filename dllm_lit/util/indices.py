"""Indices of the True entries of boolean masks, as ``torch.nonzero`` returns them, faster on the CPU.

On the CPU, torch's ``nonzero`` runs a single-threaded two-pass kernel; on a [512, 1024] mask numpy's
``flatnonzero`` over the same memory (no copy) takes 4-10x less time (0.5 ms -> 0.08 ms at 0.1% density,
3 ms -> 0.3 ms at 50%).  The indices are the same (ascending row-major order), so any sampler that uses
these helpers draws exactly what it drew with ``nonzero``.  On other devices the helpers call torch.
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["flat_nonzero", "nonzero_pairs", "ranges"]


def flat_nonzero(mask: torch.Tensor) -> torch.Tensor:
    """Ascending flat (row-major) indices of the nonzero entries of ``mask``: int64 [n],
    ``mask.reshape(-1).nonzero().squeeze(1)``."""
    if mask.device.type != "cpu":
        return mask.reshape(-1).nonzero().squeeze(1)
    return torch.from_numpy(np.flatnonzero(mask.detach().numpy()).astype(np.int64, copy=False))


def nonzero_pairs(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, columns) of the nonzero entries of a 2-D ``mask`` in row-major order, int64 [n] each:
    ``mask.nonzero(as_tuple=True)``."""
    if mask.dim() != 2:
        raise ValueError(f"mask must be 2-D, got shape {tuple(mask.shape)}")
    if mask.device.type != "cpu":
        return mask.nonzero(as_tuple=True)
    flat = np.flatnonzero(mask.detach().numpy()).astype(np.int64, copy=False)
    rows = flat // max(1, mask.shape[1])
    return torch.from_numpy(rows), torch.from_numpy(flat - rows * mask.shape[1])


def ranges(starts: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Concatenation of range(starts[i], starts[i] + lengths[i]) over i (int64; lengths >= 0)."""
    total = int(lengths.sum())
    offsets = torch.cumsum(lengths, 0) - lengths
    return (starts - offsets).repeat_interleave(lengths, output_size=total) + torch.arange(total, device=starts.device)
