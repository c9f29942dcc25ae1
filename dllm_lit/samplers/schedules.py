"""Time grids shared by the continuous-time samplers (MDLM, SEDD, ReMDM)."""
from __future__ import annotations

import torch

__all__ = ["time_grid"]


def time_grid(steps: int, t_min: float = 1e-5) -> torch.Tensor:
    """``linspace(1, t_min, steps + 1)`` in float64: t_j for j = 0..steps (step j goes t_j -> t_{j+1}).

    MDLM and ReMDM use t_min = 1e-5 (their upstream default); SEDD's runs in the paper use 1e-3.
    """
    return torch.linspace(1.0, t_min, steps + 1, dtype=torch.float64)
