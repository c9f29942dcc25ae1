"""Stable selections of the editing laws: ranks and lowest-m sets with ties to the lower position."""
from __future__ import annotations

import torch

__all__ = ["stable_ranks", "lowest"]


def stable_ranks(scores: torch.Tensor, descending: bool) -> torch.Tensor:
    """Rank of every entry of each row [R, L] (0 = best), ties broken by the lower position."""
    order = torch.sort(scores, dim=1, descending=descending, stable=True).indices
    ranks = torch.arange(scores.shape[1], device=scores.device).expand_as(order)
    return torch.empty_like(order).scatter_(1, order, ranks)


def lowest(w: torch.Tensor, m: int) -> torch.Tensor:
    """Bool [B, T]: the m lowest entries of each row of w, ties to the lower position - ``stable_ranks(w) < m`` by a
    selection (``kthvalue``) instead of a sort (about 4x faster at T = 1024); rows holding NaN take the sort."""
    if bool(w.isnan().any()):
        return stable_ranks(w, descending=False) < m
    kth = w.kthvalue(m, dim=1, keepdim=True).values
    below, tie = w < kth, w == kth
    return below | (tie & (tie.cumsum(1) <= m - below.sum(1, keepdim=True)))
