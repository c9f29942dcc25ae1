r"""Sequence hashes for the duplication rate.

Sequence :math:`x_{1:T}` is hashed as
:math:`h = f\bigl(\sum_{t} f((t \ll 32) \,|\, x_t \oplus c) + T\cdot c' \bmod 2^{64}\bigr)` with
:math:`f` the SplitMix64 finaliser (a bijection of 64-bit words with full avalanche).  Modelling
:math:`f` as a random function, two different sequences collide with probability :math:`2^{-64}`,
so among :math:`N` sequences the probability that *any* pair of distinct sequences collides (and
the duplication rate is over-estimated by :math:`\ge 1/N`) is at most :math:`N(N-1)/2^{65}` --
e.g. :math:`2.7\times10^{-10}` for :math:`N=10^5`.  Hash-equal sequences are not re-checked for
exact equality.

The finaliser is the project's one SplitMix64 (:func:`dllm_lit.rng.mix64`).  That function is the
full SplitMix64 output step -- it adds the golden-ratio increment before finalising -- so the bare
finaliser is ``rng.mix64(x - increment)`` (:func:`splitmix64_finalizer`), which keeps every hash
bit-identical to the original definition above.
"""
from __future__ import annotations

import torch
from torch import Tensor

from dllm_lit.metrics.functional.tokens import check_token_ids
from dllm_lit.rng import mix64

__all__ = ["duplication_rate", "sequence_hashes", "splitmix64_finalizer"]

_INT63 = 1 << 63


def _signed(v: int) -> int:
    """Reinterpret an unsigned 64-bit constant as a signed int64 Python int."""
    return v - (1 << 64) if v >= _INT63 else v


_GOLDEN_GAMMA = _signed(0x9E3779B97F4A7C15)  # SplitMix64's increment, also the per-token salt c
_HASH_SALT = _GOLDEN_GAMMA
_HASH_LEN_MUL = 0xD6E8FEB86659FD93


def splitmix64_finalizer(x: Tensor) -> Tensor:
    """The bare SplitMix64 finaliser on int64 tensors (arithmetic modulo :math:`2^{64}`, bijective)."""
    if x.dtype != torch.int64:
        raise ValueError(f"the SplitMix64 finaliser expects an int64 tensor, got dtype={x.dtype}")
    return mix64(x - _GOLDEN_GAMMA)  # rng.mix64 adds the increment first; int64 arithmetic wraps


def sequence_hashes(samples: Tensor) -> Tensor:
    r"""64-bit hash of each row of ``samples`` (see the module docstring for the collision bound).

    .. math::
       h(x_{1:T}) = f\Bigl(T c' + \sum_{t=1}^{T} f\bigl(((t-1) \ll 32)
       \,|\, x_t \oplus c\bigr) \bmod 2^{64}\Bigr)

    Args:
        samples: ``LongTensor[N, T]`` of token ids in ``[0, 2**32)``.

    Returns:
        ``LongTensor[N]`` (int64 bit patterns of the unsigned hashes).
    """
    x = check_token_ids(samples)
    length = x.shape[1]
    pos = torch.arange(length, dtype=torch.int64, device=x.device) << 32
    terms = splitmix64_finalizer((pos.unsqueeze(0) | x) ^ _HASH_SALT)
    # int64 arithmetic wraps modulo 2**64; the length term is reduced in Python first
    total = terms.sum(dim=1) + _signed((length * _HASH_LEN_MUL) % (1 << 64))
    return splitmix64_finalizer(total)


def duplication_rate(hashes: Tensor) -> float:
    """``1 - #distinct / #sequences`` from per-sequence hashes (non-empty int64 ``[N]``)."""
    return 1.0 - torch.unique(hashes).numel() / hashes.numel()
