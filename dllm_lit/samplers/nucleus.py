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
* Ties are broken by token id: the sort is stable, so among equal probabilities the lower
  token id comes first (and is the one kept when the boundary falls inside a tie).  Upstream
  uses an unstable ``torch.sort`` whose tie order is implementation-defined.
* ``p = 1`` keeps every token (the rows are only normalised); samplers skip the filter
  entirely at ``p = 1``, as upstream does.
"""
from __future__ import annotations

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
    """
    p = check_top_p(p, "p")
    q = probs.to(torch.float64)
    q = q / q.sum(-1, keepdim=True)
    if p >= 1.0:
        return q
    sorted_q, order = torch.sort(q, dim=-1, descending=True, stable=True)
    cum = sorted_q.cumsum(-1)
    keep_sorted = (cum <= p) if strict else (cum - sorted_q <= p)
    keep_sorted[..., 0] = True
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    out = torch.where(keep, q, torch.zeros((), dtype=q.dtype, device=q.device))
    return out / out.sum(-1, keepdim=True)


def top_k_filter(probs: torch.Tensor, k: int) -> torch.Tensor:
    """Renormalised float64 copy of ``probs`` [..., V] keeping the entries >= the k-th largest (ties at the
    k-th value are all kept), as Dream's ``top_k_logits``."""
    q = probs.to(torch.float64)
    kth = torch.topk(q, min(int(k), q.shape[-1]), dim=-1).values[..., -1:]
    out = torch.where(q >= kth, q, torch.zeros((), dtype=q.dtype, device=q.device))
    return out / out.sum(-1, keepdim=True)
