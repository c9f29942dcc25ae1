"""Stable selections of the editing laws: ranks and lowest-m sets with ties to the lower position."""
from __future__ import annotations

import torch

from dllm_lit.denoisers.hmm_products import numba_available

__all__ = ["stable_ranks", "lowest", "kth_smallest"]


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


def kth_smallest(w: torch.Tensor, k: int, hint: torch.Tensor | None = None, width: float = 0.5) -> torch.Tensor:
    """[B, 1]: ``w.kthvalue(k, dim=1, keepdim=True).values`` for w [B, T] without NaN.  With a ``hint`` [B, 1] of
    where it lies, on a float64 CPU w and numba installed: one compiled pass gathering the entries within ``width``
    of the hint, the selection among them (``kth_kernel``; the whole row where the k-th is not there) - the same
    value (an order statistic does not depend on how it is found), about 2x faster at T = 1024."""
    if hint is None or w.device.type != "cpu" or w.dtype != torch.float64 or not numba_available() or w.numel() == 0:
        return w.kthvalue(k, dim=1, keepdim=True).values
    from dllm_lit.decoding.kth_kernel import kth_smallest_near

    out = torch.empty(w.shape[0], dtype=torch.float64)
    kth_smallest_near(w.contiguous().numpy(), int(k), hint.reshape(-1).to(torch.float64).contiguous().numpy(),
                      float(width), out.numpy())
    return out[:, None]
