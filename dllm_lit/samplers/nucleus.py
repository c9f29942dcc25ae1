"""Nucleus (top-p) filtering of denoiser marginals, as ReMDM applies it; see ``docs/samplers/remdm.md``.

Upstream (kuleshov-group/remdm, ``nucleus_p < 1``) sorts each row of p_x0 in descending order,
keeps the tokens whose *inclusive* cumulative sum is ``<= p``, always keeps the first (most
probable) token, zeroes the rest and renormalises.  The semantics are strict: the token whose
cumulative sum first crosses ``p`` is DROPPED, so the kept mass can be below ``p``
(e.g. [0.5, 0.3, 0.2] at p = 0.7 keeps only the first token).

Conventions of this re-implementation (documented choices, not upstream accidents):

* Rows are first normalised in float64, and the cumulative sum is taken in float64, so the
  keep set is a deterministic function of the (normalised) probabilities.  A cumulative sum
  that equals ``p`` exactly in float64 is kept (``<=``).
* Ties are broken by token id: the order is the stable descending one, so among equal
  probabilities the lower token id comes first (and is the one kept when the boundary falls
  inside a tie).  Upstream uses an unstable ``torch.sort`` whose tie order is implementation-defined.
  On CPU the code sorts values only (numpy's sort, about ten times faster than ``torch.sort`` with
  indices) and resolves a tie at the boundary by token id, which gives that same set bit for bit.
* ``p = 1`` keeps every token (the rows are only normalised); samplers skip the filter
  entirely at ``p = 1``, as upstream does.
"""
from __future__ import annotations

import numpy as np
import torch

__all__ = ["top_p_filter", "top_k_filter", "check_top_p"]


def check_top_p(p: float, name: str = "top_p") -> float:
    """Return ``float(p)`` or raise ValueError unless 0 < p <= 1."""
    if isinstance(p, bool):
        raise ValueError(f"{name} must be a number in (0, 1], got {p!r}")
    try:
        v = float(p)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in (0, 1], got {p!r}") from None
    if not 0.0 < v <= 1.0:
        raise ValueError(f"{name} must lie in (0, 1], got {p!r}")
    return v


def top_p_filter(probs: torch.Tensor, p: float, strict: bool = True) -> torch.Tensor:
    """Nucleus-filtered, renormalised float64 copy of ``probs`` [..., V] (see module docstring).

    ``strict=False`` gives the Hugging Face / Dream ``top_p_logits`` semantics instead: a token is
    kept when the mass *before* it (descending order) is <= p, so the token that crosses p is kept
    and the kept mass is >= p.  Rows must have positive total mass.  Zero-probability entries stay zero.

    With q = probs / sum(probs), s its values in stable descending order and c = cumsum(s)
    (float64), the kept tokens are those at sorted positions k with c_k <= p (non-strict:
    c_k - s_k <= p), and always the first.
    """
    p = check_top_p(p, "p")
    raw = probs if probs.dtype in (torch.float32, torch.float64) else probs.to(torch.float64)
    total = raw.to(torch.float64).sum(-1, keepdim=True)
    q = raw / total  # type promotion: float64(raw) / total
    if p >= 1.0:
        return q
    keep = _kept_from_values(raw, total, q, p, strict) if q.device.type == "cpu" else _kept_by_sort(q, p, strict)
    out = torch.where(keep, q, torch.zeros((), dtype=q.dtype, device=q.device))
    return out.div_(out.sum(-1, keepdim=True))


def _kept_by_sort(q: torch.Tensor, p: float, strict: bool) -> torch.Tensor:
    """The kept set of :func:`top_p_filter` as a bool mask, by a stable descending sort with indices (any device)."""
    s, order = torch.sort(q, dim=-1, descending=True, stable=True)
    c = s.cumsum(-1)
    keep_sorted = (c <= p) if strict else (c - s <= p)
    keep_sorted[..., 0] = True
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def _kept_from_values(raw: torch.Tensor, total: torch.Tensor, q: torch.Tensor, p: float, strict: bool) -> torch.Tensor:
    """:func:`_kept_by_sort` on CPU from the sorted values alone (numpy's sort, ~10x faster than ``torch.sort``).

    CPU's cumsum is a sequential float64 scan, so c and c - s are nondecreasing and the kept sorted
    positions are a prefix: the first m = max(1, #{k : c_k <= p}) (binary search).  With thr = s_m
    that prefix holds the tokens with q > thr and, of those with q == thr, the m - #{q > thr}
    lowest token ids (the stable order).  ``raw`` is sorted instead of q: x -> float64(x) / total
    is nondecreasing, so it commutes with sorting, and float32 sorts faster.
    """
    s = torch.from_numpy(np.sort(raw.detach().numpy(), axis=-1)).flip(-1) / total
    c = s.cumsum(-1)
    below = c if strict else c - s
    target = torch.full((*c.shape[:-1], 1), p, dtype=c.dtype)
    m = torch.searchsorted(below, target, right=True).clamp_(min=1)
    thr = s.gather(-1, m - 1)
    keep = q >= thr  # the first m tokens and any others tied at thr
    kept = keep.sum(-1, keepdim=True)
    if not torch.equal(kept, m):  # a tie at thr straddles the boundary: keep its lowest token ids only
        tie = q == thr
        keep &= ~tie | (tie.cumsum(-1) <= m - kept + tie.sum(-1, keepdim=True))
    return keep


def _kth_largest(q: torch.Tensor, k: int) -> torch.Tensor:
    """The k-th largest value of each row of ``q`` [..., V] (1 <= k <= V): [..., 1] (np.partition on CPU)."""
    if q.device.type == "cpu":
        V = q.shape[-1]
        return torch.from_numpy(np.partition(q.detach().numpy(), V - k, axis=-1)[..., V - k:V - k + 1])
    return torch.topk(q, k, dim=-1).values[..., -1:]


def top_k_filter(probs: torch.Tensor, k: int) -> torch.Tensor:
    """Renormalised float64 copy of ``probs`` [..., V] keeping the entries >= the k-th largest (ties at the
    k-th value are all kept), as Dream's ``top_k_logits``."""
    q = probs.to(torch.float64)
    kth = _kth_largest(q, min(int(k), q.shape[-1]))
    out = torch.where(q >= kth, q, torch.zeros((), dtype=q.dtype, device=q.device))
    return out / out.sum(-1, keepdim=True)
