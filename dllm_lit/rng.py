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

__all__ = ["Stream", "mix64", "uniform", "uniform_count_below", "sequence_keys", "seed_from_generator"]

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


#: elements hashed per chunk of rows by :func:`uniform_from_hash` and :func:`bits_below_where` on the CPU when the
#: output is a large 2-D grid: the chain of in-place SplitMix64 operations then runs on cache-resident memory and no
#: grid-sized temporary is allocated (a [512, 1024] grid: about 2x faster)
HASH_CHUNK_ELEMENTS = 2**17


def _grid_row_chunks(shape: torch.Size, device: torch.device) -> list[slice]:
    """Row slices of about HASH_CHUNK_ELEMENTS elements for a large 2-D output on the CPU, else one slice."""
    if len(shape) != 2 or device.type != "cpu" or shape[0] * shape[1] <= HASH_CHUNK_ELEMENTS:
        return [slice(None)]
    rows = max(1, HASH_CHUNK_ELEMENTS // max(1, shape[1]))
    return [slice(i, i + rows) for i in range(0, shape[0], rows)]


def _rows(t: torch.Tensor | int, sl: slice, n_rows: int) -> torch.Tensor | int:
    """The rows ``sl`` of a broadcast operand that has one row per output row (else the operand itself)."""
    return t[sl] if isinstance(t, torch.Tensor) and t.dim() == 2 and t.shape[0] == n_rows else t


def uniform_from_hash(h: torch.Tensor, pos_slot: torch.Tensor | int) -> torch.Tensor:
    """The last stage of :func:`uniform`: ``(top53(mix(h ^ pos_slot)) + 0.5) / 2^53`` for the (key, step)
    hash ``h`` and ``pos_slot = position * 16 + slot`` (broadcast); a large 2-D output is computed on the CPU in
    chunks of rows of about :data:`HASH_CHUNK_ELEMENTS` elements (elementwise: the same numbers)."""
    shape = torch.broadcast_shapes(h.shape, pos_slot.shape if isinstance(pos_slot, torch.Tensor) else ())
    chunks = _grid_row_chunks(shape, h.device)
    if len(chunks) == 1:
        return _uniform_bits(torch.bitwise_xor(h, pos_slot))
    out = torch.empty(shape, dtype=torch.float64, device=h.device)
    for sl in chunks:
        out[sl] = _uniform_bits(torch.bitwise_xor(_rows(h, sl, shape[0]), _rows(pos_slot, sl, shape[0])))
    return out


def bits_below_where(which: torch.Tensor, h_true: torch.Tensor, h_false: torch.Tensor, count_true: torch.Tensor,
                     count_false: torch.Tensor, pos_slot: torch.Tensor) -> torch.Tensor:
    """Bool [B, T]: ``u < threshold`` for the uniforms ``uniform_from_hash(where(which, h_true, h_false), pos_slot)``
    and thresholds with ``count_* = uniform_count_below(threshold_*)`` (``which`` [B, T]; ``h_*`` int64 and
    ``count_*`` int64 broadcastable to it, e.g. [B, 1] columns; ``pos_slot`` [1, T]).  Decided on the integer bits,
    ``top53(mix(h ^ pos_slot)) < count``, in cache-sized row chunks on the CPU: the same decisions as comparing the
    float64 uniforms, without forming them."""
    out = torch.empty(which.shape, dtype=torch.bool, device=which.device)
    n = which.shape[0]
    # the selections as arithmetic (h_false ^ w (h_true ^ h_false), c_false + w (c_true - c_false)):
    # on the CPU torch.where with broadcast operands is several times slower than a multiply
    h_diff, c_diff = h_true ^ h_false, count_true - count_false
    for sl in _grid_row_chunks(which.shape, which.device):
        w = which[sl].to(torch.int64)
        count = torch.mul(w, _rows(c_diff, sl, n)).add_(_rows(count_false, sl, n))
        x = w.mul_(_rows(h_diff, sl, n)).bitwise_xor_(_rows(h_false, sl, n)).bitwise_xor_(pos_slot)
        torch.lt(_top53(mix64_(x)), count, out=out[sl])
    return out


def _uniform_bits(x: torch.Tensor) -> torch.Tensor:
    """``(top53(mix(x)) + 0.5) / 2^53`` for a fresh int64 tensor ``x`` (mixed in place)."""
    return _bits_to_uniform(_top53(mix64_(x)))


def _top53(x: torch.Tensor) -> torch.Tensor:
    """The top 53 bits of the 64-bit words ``x`` as int64 in [0, 2^53), in place."""
    return torch.bitwise_right_shift(x, 11, out=x).bitwise_and_((1 << 53) - 1)


def _bits_to_uniform(n: torch.Tensor) -> torch.Tensor:
    """The uniform ``(n + 0.5) / 2^53`` in float64 of 53-bit integers ``n``: the one formula of every uniform."""
    return n.to(torch.float64).add_(0.5).mul_(2.0**-53)


def uniform_count_below(threshold: torch.Tensor) -> torch.Tensor:
    """N = #{n in [0, 2^53) : u(n) < threshold} as int64, elementwise, for float64 thresholds, where u(n) is the
    uniform of the 53 random bits n (:func:`_bits_to_uniform`).  u is nondecreasing in n, so for every n

        u(n) < threshold  <=>  n < N,

    and a draw ``u < threshold`` can be decided on the integer bits without forming u.  With y = threshold 2^53
    (exact) and 2^53 u(n) in [n, n + 1], N lies in [floor(y) - 1, floor(y) + 1]: the three candidates are checked
    with the same float64 operations that form u.  A NaN threshold gives 0 (``u < nan`` is False)."""
    thr = threshold.to(torch.float64)
    y = (thr * 2.0**53).nan_to_num_(nan=0.0).clamp_(0.0, 2.0**53).floor_()
    lo = (y.to(torch.int64) - 1).clamp_(min=0)
    count = lo.clone()
    for d in range(3):
        n = lo + d
        count += ((n < (1 << 53)) & (_bits_to_uniform(n) < thr)).to(torch.int64)
    return count


def seed_from_generator(generator: torch.Generator | None) -> int:
    """Draw a 62-bit seed from ``generator`` (or torch's global RNG when None)."""
    return int(torch.randint(0, 2**62, (1,), generator=generator).item())
