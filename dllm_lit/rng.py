"""Counter-based random numbers keyed by (seed, sequence index, stream, step, position).

Every random draw in dllm_lit is a pure function of its coordinates:

    u = U(seed, sequence_index, stream, step, position, slot)  in (0, 1)

computed with the SplitMix64 finaliser (Steele, Lea & Flood 2014) applied to the key
chain (a bijection of 64-bit words, so distinct (position, slot) under one key never collide).  Nothing depends on how sequences are grouped into batches, on the number of
processes, or on the device: the same key gives bit-identical uniforms on CPU and CUDA.
This is what makes "results depend only on (seed, sequence index)" hold by construction.

The uniforms carry 53 random bits and are shifted by half an ulp, so they lie strictly in
(0, 1): ``log(u)`` and ``1/u`` are always finite.
"""
from __future__ import annotations

import torch

__all__ = ["Stream", "mix64", "uniform", "sequence_keys", "seed_from_generator"]

_MASK64 = (1 << 64) - 1


def _signed(x: int) -> int:
    """Reinterpret an unsigned 64-bit constant as a signed int64 (torch has no uint64 math)."""
    x &= _MASK64
    return x - (1 << 64) if x >= 1 << 63 else x


_GOLDEN = _signed(0x9E3779B97F4A7C15)
_M1 = _signed(0xBF58476D1CE4E5B9)
_M2 = _signed(0x94D049BB133111EB)


class Stream:
    """Stream identifiers: independent families of draws within one sequence."""

    CHAIN = 1  # exact ancestral sampling of the Markov chain
    TOKEN = 2  # categorical token draws of a sampler step
    ORDER = 3  # random keys used to choose which positions to update
    REMASK = 4  # ReMDM remasking decisions
    PROMPT = 5  # prompt tokens of conditional samplers
    BOOTSTRAP = 6
    NOISE = 7  # forward-process masks of denoiser training / evaluation (dllm_lit.training)


def mix64_(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64 finaliser on an int64 tensor, in place (two's-complement wrap-around arithmetic).

    The caller owns ``x`` (a fresh tensor); one temporary is reused for the three shifts.
    """
    tmp = torch.empty_like(x)

    def srl(k: int) -> torch.Tensor:  # logical right shift into tmp (torch's >> is arithmetic)
        torch.bitwise_right_shift(x, k, out=tmp)
        return tmp.bitwise_and_((1 << (64 - k)) - 1)

    x.add_(_GOLDEN)
    x.bitwise_xor_(srl(30)).mul_(_M1)
    x.bitwise_xor_(srl(27)).mul_(_M2)
    return x.bitwise_xor_(srl(31))


def mix64(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64 finaliser on int64 tensors (a new tensor; see :func:`mix64_`)."""
    return mix64_(x.to(torch.int64, copy=True))


def _absorb(h: torch.Tensor, v: torch.Tensor | int) -> torch.Tensor:
    return mix64(h ^ v)


def sequence_keys(seed: int, sequence_index: torch.Tensor, stream: int) -> torch.Tensor:
    """Per-sequence key ``K[b] = mix(mix(mix(seed) ^ index[b]) ^ stream)`` as int64 [B]."""
    idx = sequence_index.to(torch.int64)
    h = mix64(torch.full_like(idx, _signed(int(seed))))
    h = _absorb(h, idx)
    return _absorb(h, int(stream))


def uniform(keys: torch.Tensor, step: int | torch.Tensor, position: torch.Tensor | int, slot: int = 0) -> torch.Tensor:
    """Float64 uniforms in (0, 1) for ``keys`` (int64, any shape broadcastable with ``position``).

    ``u = (top53(mix(mix(key ^ step) ^ (position * 16 + slot))) + 0.5) / 2^53`` with ``0 <= slot < 16``.
    The inner hash depends only on (key, step), so for a [B, 1] key column and a [1, T] position
    row it costs O(B) and every element costs one SplitMix64 finaliser.
    """
    if not 0 <= int(slot) < 16:
        raise ValueError(f"slot must lie in [0, 16), got {slot}")
    h = _absorb(keys, step if isinstance(step, int) else step.to(torch.int64))
    pos = position * 16 + int(slot) if isinstance(position, int) else position.to(torch.int64) * 16 + int(slot)
    return uniform_from_hash(h, pos)


#: elements hashed per chunk by :func:`uniform_from_hash` when ``h`` is a full grid: the chain of in-place
#: SplitMix64 operations then runs on cache-resident memory (a [512, 1024] grid: about 2x faster on CPU)
HASH_CHUNK_ELEMENTS = 2**17


def uniform_from_hash(h: torch.Tensor, pos_slot: torch.Tensor | int) -> torch.Tensor:
    """The last stage of :func:`uniform`: ``(top53(mix(h ^ pos_slot)) + 0.5) / 2^53`` for the (key, step)
    hash ``h`` and ``pos_slot = position * 16 + slot`` (broadcast), computed in place; a 2-D ``h`` of the output's
    shape is hashed on the CPU in chunks of rows of about :data:`HASH_CHUNK_ELEMENTS` elements (elementwise: the same
    numbers)."""
    x = torch.bitwise_xor(h, pos_slot)
    if x.dim() != 2 or h.shape != x.shape or x.numel() <= HASH_CHUNK_ELEMENTS or x.device.type != "cpu":
        return _uniform_bits(x)
    out = torch.empty(x.shape, dtype=torch.float64, device=x.device)
    rows = max(1, HASH_CHUNK_ELEMENTS // x.shape[1])
    for i in range(0, x.shape[0], rows):
        out[i:i + rows] = _uniform_bits(x[i:i + rows])
    return out


def _uniform_bits(x: torch.Tensor) -> torch.Tensor:
    """``(top53(mix(x)) + 0.5) / 2^53`` for a fresh int64 tensor ``x`` (mixed in place)."""
    n = torch.bitwise_right_shift(mix64_(x), 11).bitwise_and_((1 << 53) - 1)
    return n.to(torch.float64).add_(0.5).mul_(2.0**-53)


def seed_from_generator(generator: torch.Generator | None) -> int:
    """Draw a 62-bit seed from ``generator`` (or torch's global RNG when None)."""
    return int(torch.randint(0, 2**62, (1,), generator=generator).item())
