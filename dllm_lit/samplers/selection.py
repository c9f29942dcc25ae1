"""Which positions commit at a step: LLaDA's transfer schedule and a stable top-k."""
from __future__ import annotations

import torch

__all__ = ["transfer_schedule", "topk_stable"]


def transfer_schedule(n: int, steps: int) -> list[int]:
    """Tokens committed per step for n masked positions in ``steps`` steps (LLaDA's
    ``get_num_transfer_tokens``): base = n // steps, the first n % steps steps get one extra."""
    base, rem = divmod(int(n), int(steps))
    return [base + (1 if i < rem else 0) for i in range(int(steps))]


def topk_stable(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Column indices [B, k] of the k largest scores per row, ties -> lower column first."""
    return torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]
