"""The compiled neighbourhood keys of every position of a state (numba; imported on first use, so that importing
dllm_lit does not load numba): :meth:`dllm_lit.denoisers.OracleDenoiser.grid_keys` in two scans per sequence,
integer arithmetic only, the numbers of the torch formula (``OracleDenoiser.table_rows``)."""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["grid_keys"]


@numba.njit(cache=True)
def grid_keys(z: np.ndarray, mask_id: int, V: int, D: int, R: int, out: np.ndarray) -> None:
    """out[b, i] = r * R + c, r / c the power-table rows of the nearest revealed token strictly left / right of i
    (distance capped at D): r = (2 min(d, D) - 2) V + x_left (2 D V: none), c = (2 min(d, D) - 1) V + x_right
    (2 D V + 1: none)."""
    B, T = z.shape
    for b in range(B):
        a = -1
        for i in range(T):
            out[b, i] = ((2 * min(i - a, D) - 2) * V + z[b, a] if a >= 0 else 2 * D * V) * R
            if z[b, i] != mask_id:
                a = i
        c = T
        for i in range(T - 1, -1, -1):
            out[b, i] += (2 * min(c - i, D) - 1) * V + z[b, c] if c < T else 2 * D * V + 1
            if z[b, i] != mask_id:
                c = i
