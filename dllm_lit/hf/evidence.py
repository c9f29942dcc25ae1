"""What each query position of a Hugging Face-style call may condition on: attention masks and positions.

A first-order chain factorises at revealed tokens, so the exact posterior at a query position depends only on
the nearest revealed tokens it may attend to on each side and their chain distances (docs/oracle_model.md).
This module turns ``(input_ids, attention_mask, position_ids)`` into, for every query, the array indices of those
two neighbours (``-1`` / ``L``: none) and the chain positions that give the distances.

* ``attention_mask`` None (or Dream's ``"full"``): every position is a sequence token.
* 2-D ``[B, L]`` (1 / True = token, 0 = padding): padding is not part of the sequence; it is neither evidence
  nor a query.  Without ``position_ids`` a token's chain position counts the tokens before it (padding
  removed); with them, their values are the chain positions.
* 4-D ``[B, 1 or H, L, L]`` (bool / 0-1 integers, True = may attend; or additive floats, 0 = may attend,
  -inf or the dtype's lowest value = may not): query i conditions only on the revealed keys j with
  ``mask[b, :, i, j]`` set.  Heads must agree, and an additive mask may hold no other value (a soft bias has
  no exact meaning for a posterior): otherwise a one-line error.

Chain positions of the sequence tokens must increase strictly along a row (array order is chain order).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Evidence", "read_evidence", "NO_LEFT"]

NO_LEFT = -1


@dataclass
class Evidence:
    """Per-row token flags and the key mask of one call.

    ``token`` [B, L] bool: sequence tokens (not padding).  ``allowed`` [B, L, L] bool or None: query i may
    attend key j (None: every query attends every token).  ``pos`` [B, L] int64: chain positions.
    """

    token: torch.Tensor
    allowed: torch.Tensor | None
    pos: torch.Tensor


def _four_d(mask: torch.Tensor, B: int, L: int) -> torch.Tensor:
    """A 4-D attention mask as bool [B, L, L] (True = may attend), or a one-line error."""
    if mask.shape[-2:] != (L, L) or mask.shape[0] not in (1, B):
        raise ValueError(f"attention_mask of 4 dimensions must have shape [B, 1, L, L] = [{B}, 1, {L}, {L}], "
                         f"got {tuple(mask.shape)}")
    if mask.dtype == torch.bool:
        allowed = mask
    elif mask.is_floating_point():
        low = torch.finfo(mask.dtype).min
        blocked = (mask == float("-inf")) | (mask <= low / 2)
        if not bool(((mask == 0) | blocked).all()):
            raise ValueError("attention_mask (4-D additive) may only hold 0 (attend) and -inf or the dtype's lowest "
                             "value (blocked): a soft attention bias has no exact posterior")
        allowed = ~blocked
    else:
        if not bool(((mask == 0) | (mask == 1)).all()):
            raise ValueError("attention_mask (4-D integer) may only hold 0 (blocked) and 1 (attend)")
        allowed = mask != 0
    if allowed.shape[1] > 1 and not bool((allowed == allowed[:, :1]).all()):
        raise ValueError("attention_mask (4-D) differs between heads: one posterior per query cannot honour "
                         "several key sets; pass [B, 1, L, L]")
    return allowed[:, 0].expand(B, L, L)


def read_evidence(input_ids: torch.Tensor, attention_mask: torch.Tensor | str | None,
                  position_ids: torch.Tensor | None) -> Evidence:
    """Parse the mask and positions of a call (module docstring); one-line errors for what has no exact meaning."""
    B, L = input_ids.shape
    dev = input_ids.device
    allowed = None
    if isinstance(attention_mask, str):
        if attention_mask != "full":
            raise ValueError(f"attention_mask must be a tensor, None or the string 'full' (Dream's no mask), "
                             f"got {attention_mask!r}")
        attention_mask = None  # Dream's spelling of "no mask"
    if attention_mask is not None and not isinstance(attention_mask, torch.Tensor):
        raise ValueError(f"attention_mask must be a tensor, None or 'full', got {type(attention_mask).__name__}")
    if attention_mask is None:
        token = torch.ones(B, L, dtype=torch.bool, device=dev)
    elif attention_mask.dim() == 2:
        if attention_mask.shape != (B, L):
            raise ValueError(f"attention_mask of 2 dimensions must have the shape of input_ids {(B, L)}, "
                             f"got {tuple(attention_mask.shape)}")
        if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):  # NaN compares False
            raise ValueError("attention_mask (2-D) may only hold 0 (padding) and 1 (token)")
        token = attention_mask.to(dev) != 0
    elif attention_mask.dim() == 4:
        allowed = _four_d(attention_mask.to(dev), B, L)
        token = torch.ones(B, L, dtype=torch.bool, device=dev)
    else:
        raise ValueError(f"attention_mask must be None, 2-D [B, L] or 4-D [B, 1, L, L], got {attention_mask.dim()} "
                         "dimensions")
    if position_ids is None:
        pos = token.long().cumsum(1) - 1
    else:
        pos = torch.as_tensor(position_ids, device=dev)
        if pos.is_floating_point() or pos.is_complex() or pos.dtype == torch.bool:
            raise ValueError(f"position_ids must hold integers, got dtype {pos.dtype}")
        pos = pos.long()
        if pos.dim() == 1:
            pos = pos[None]
        if pos.dim() != 2 or pos.shape[1] != L or pos.shape[0] not in (1, B):
            raise ValueError(f"position_ids must have shape [B, L] or [1, L] with L = {L}, got {tuple(pos.shape)}")
        pos = pos.expand(B, L)
        big = torch.iinfo(torch.int64).max
        tok_pos = torch.where(token, pos, big)
        # strictly increasing over the tokens of a row: each token's position exceeds the largest before it
        prev = torch.where(token, pos, -big).cummax(1).values
        if L > 1 and bool((token[:, 1:] & (tok_pos[:, 1:] <= prev[:, :-1])).any()):
            raise ValueError("position_ids must increase strictly along the tokens of each row (array order is the "
                             "chain's order)")
    return Evidence(token, allowed, pos)


def neighbours(revealed: torch.Tensor, allowed: torch.Tensor | None,
               chunk_elems: int = 2**24) -> tuple[torch.Tensor, torch.Tensor]:
    """Array indices (int64 [B, L]) of the nearest revealed key strictly left (-1: none) and right (L: none) of
    each query, among the keys it may attend to (``allowed`` None: all).  O(B L) with ``allowed`` None, else
    O(B L^2) in chunks of about ``chunk_elems`` entries."""
    B, L = revealed.shape
    dev = revealed.device
    idx = torch.arange(L, device=dev)
    if allowed is None:
        left = torch.full((B, L), NO_LEFT, dtype=torch.long, device=dev)
        right = torch.full((B, L), L, dtype=torch.long, device=dev)
        if L > 1:
            left[:, 1:] = torch.where(revealed[:, :-1], idx[:-1], NO_LEFT).cummax(1).values
            right[:, :-1] = torch.where(revealed[:, 1:], idx[1:], L).flip(1).cummin(1).values.flip(1)
        return left, right
    left = torch.empty(B, L, dtype=torch.long, device=dev)
    right = torch.empty(B, L, dtype=torch.long, device=dev)
    rows = max(1, chunk_elems // max(1, L * L))
    before = idx[None, :] < idx[:, None]  # [i, j]: j < i
    after = idx[None, :] > idx[:, None]
    for s in range(0, B, rows):
        ok = allowed[s:s + rows] & revealed[s:s + rows, None, :]
        left[s:s + rows] = torch.where(ok & before, idx, NO_LEFT).amax(2)
        right[s:s + rows] = torch.where(ok & after, idx, L).amin(2)
    return left, right
