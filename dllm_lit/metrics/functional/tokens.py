"""Validation of token-id batches shared by the surface metrics."""
from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["MAX_LENGTH", "MAX_TOKEN_ID", "check_token_ids"]

MAX_TOKEN_ID = (1 << 32) - 1
MAX_LENGTH = (1 << 31) - 1


def check_token_ids(samples: Tensor, name: str = "samples", min_length: int = 1) -> Tensor:
    """Validate a ``LongTensor[N, T]`` of token ids in ``[0, 2**32)`` with ``N >= 1``, ``T >= min_length``;
    return it as int64."""
    if not isinstance(samples, Tensor):
        raise ValueError(f"`{name}` must be a torch.Tensor of token ids with shape [N, T], got {type(samples).__name__}")
    if samples.dtype.is_floating_point or samples.dtype.is_complex or samples.dtype == torch.bool:
        raise ValueError(f"`{name}` must have an integer dtype (token ids), got dtype={samples.dtype}")
    if samples.ndim != 2:
        raise ValueError(f"`{name}` must be 2-D with shape [N, T], got shape {tuple(samples.shape)}")
    n_seq, length = samples.shape
    if n_seq == 0:
        raise ValueError(f"`{name}` is empty (N = 0 sequences); pass at least one sequence")
    if length < min_length:
        raise ValueError(f"`{name}` has length T = {length}, but T >= {min_length} is required")
    if length > MAX_LENGTH:
        raise ValueError(f"`{name}` has length T = {length} > {MAX_LENGTH}")
    samples = samples.to(torch.int64)
    lo, hi = int(samples.min()), int(samples.max())
    if lo < 0 or hi > MAX_TOKEN_ID:
        raise ValueError(f"`{name}` must hold token ids in [0, {MAX_TOKEN_ID}], got values in [{lo}, {hi}]")
    return samples
