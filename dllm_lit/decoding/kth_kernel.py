"""The compiled k-th smallest entry of each row near a hint (numba; imported on first use): P2's kept-set threshold,
which moves little from one step to the next.  The value of an order statistic does not depend on how it is found,
so this is ``torch.kthvalue``'s value."""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["kth_smallest_near"]


@numba.njit(cache=True)
def kth_smallest_near(x: np.ndarray, k: int, hint: np.ndarray, width: float, out: np.ndarray) -> None:
    """out[b] = the k-th smallest (1-based) of x[b, :] (no NaN in x): one pass counts the entries below
    hint[b] - width and gathers those in [hint[b] - width, hint[b] + width]; when the k-th lies among them it is
    selected there, else in a copy of the whole row."""
    T = x.shape[1]
    buf = np.empty(T, dtype=x.dtype)
    for b in range(x.shape[0]):
        lo, hi = hint[b] - width, hint[b] + width
        below, n = 0, 0
        for i in range(T):
            v = x[b, i]
            if v < lo:
                below += 1
            elif v <= hi:
                buf[n] = v
                n += 1
        if below < k <= below + n:
            out[b] = np.partition(buf[:n], k - below - 1)[k - below - 1]
        else:
            buf[:] = x[b]
            out[b] = np.partition(buf, k - 1)[k - 1]
