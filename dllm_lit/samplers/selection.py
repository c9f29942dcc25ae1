"""Which positions commit at a step: LLaDA's transfer schedule and a stable top-k."""
from __future__ import annotations

import torch

__all__ = ["transfer_schedule", "topk_stable", "topk_stable_mask"]


def transfer_schedule(n: int, steps: int) -> list[int]:
    """Tokens committed per step for n masked positions in ``steps`` steps (LLaDA's
    ``get_num_transfer_tokens``): base = n // steps, the first n % steps steps get one extra."""
    base, rem = divmod(int(n), int(steps))
    return [base + (1 if i < rem else 0) for i in range(int(steps))]


def topk_stable(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Column indices [B, k] of the k largest scores per row, ties -> lower column first."""
    return torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]


def topk_stable_mask(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Bool [B, n]: the set :func:`topk_stable` selects (k largest per row, ties -> lower column), without a full sort.

    The k-th largest value v_k (a partial selection) splits each row: every score > v_k is taken,
    then the leftmost scores == v_k until k are taken.
    """
    if k <= 0:
        return torch.zeros_like(scores, dtype=torch.bool)
    thr = torch.topk(scores, k, dim=1).values[:, -1:]
    above = scores > thr
    tie = scores == thr
    need = k - above.sum(1, keepdim=True)
    return above | (tie & (tie.cumsum(1) <= need))
