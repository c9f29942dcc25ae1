"""Time grids shared by the continuous-time samplers (MDLM, SEDD, ReMDM) and the block grids of BD3-LM (BlockMDLM)."""
from __future__ import annotations

import torch

__all__ = ["time_grid", "block_times", "stay_probs"]


def time_grid(steps: int, t_min: float = 1e-5) -> torch.Tensor:
    """``linspace(1, t_min, steps + 1)`` in float64: t_j for j = 0..steps (step j goes t_j -> t_{j+1}).

    MDLM and ReMDM use t_min = 1e-5 (their upstream default); SEDD's runs in the paper use 1e-3.
    """
    return torch.linspace(1.0, t_min, steps + 1, dtype=torch.float64)


def block_times(S: int, grid: str) -> tuple[list[float], list[float], bool]:
    """(t_j, s_j for j < S, final argmax fill?) of one block's S steps: ``"bd3"``, upstream's ``linspace(1, 0, S)``
    with s = max(t - 1/S, 0) (upstream's s = t - 1/S is negative at t = 0, where its s/t is -inf; docs/samplers/bd3.md);
    ``"mdlm"``, MDLM's ``linspace(1, 1e-5, S + 1)`` and its argmax fill."""
    if grid == "mdlm":
        ts = time_grid(S).tolist()
        return ts[:-1], ts[1:], True
    ts = torch.linspace(1.0, 0.0, S, dtype=torch.float64).tolist()
    return ts, [max(t - 1.0 / S, 0.0) for t in ts], False


def stay_probs(S: int, grid: str) -> torch.Tensor:
    """s_j / t_j (0 at t_j = 0): the probability that a masked position stays masked at step j (float64 [S])."""
    ts, ss, _ = block_times(S, grid)
    return torch.tensor([s / t if t > 0 else 0.0 for t, s in zip(ts, ss)], dtype=torch.float64)
