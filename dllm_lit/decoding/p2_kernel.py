"""P2's bounded step compiled (numba; imported on first use, so that importing dllm_lit does not load numba): the
step of :class:`~.p2_bounded.BoundedPlanning` one sequence at a time, its keys in cache, with the numbers of the
torch step - the same gathers, the same float64 sums and products, ``torch.searchsorted``'s binary search on the
same cdf targets, the Stream.TOKEN uniforms by the same SplitMix64 integer arithmetic (``dllm_lit.rng``), and the
threshold an order statistic (a selection returns the value ``kthvalue`` returns).  ``tests/test_p2_kernel.py``."""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["plan_step", "hash_uniforms"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@numba.njit(cache=True, inline="always")
def _uniform(h: np.int64, pos_slot: np.int64) -> float:
    """``rng.uniform_from_hash(h, pos_slot)``: (top53(mix(h ^ pos_slot)) + 0.5) / 2^53 (SplitMix64 finaliser)."""
    x = np.uint64(h) ^ np.uint64(pos_slot)
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    x = x ^ (x >> np.uint64(31))
    return (np.float64(x >> np.uint64(11)) + 0.5) * 2.0**-53


@numba.njit(cache=True)
def hash_uniforms(h: np.ndarray, out: np.ndarray) -> None:
    """out[b, j] = ``rng.uniform_from_hash(h[b], 16 j)`` (a StepUniforms grid at slot 0, h[b] the (key, step) hash)."""
    B, T = out.shape
    for b in range(B):
        for j in range(T):
            out[b, j] = _uniform(h[b], np.int64(16 * j))


@numba.njit(cache=True, inline="always")
def _draw(cdf: np.ndarray, argmax: np.ndarray, use_cdf: bool, s: int, h: np.int64, j: int) -> int:
    """``draw_stored`` at row s with the uniform of position j, or the stored argmax: the number of leading cdf
    entries not above the target min(u total, nextafter(total, 0)) (torch.minimum: NaN if either is), which is
    what torch.searchsorted(right=True) returns on a cdf row (non-decreasing, or all NaN).  Counted without
    branches, so that independent draws' loads from rows read at random overlap: over the whole row for V <= 64
    (its cache lines fetched at once), else by binary lifting."""
    if not use_cdf:
        return argmax[s]
    V = cdf.shape[1]
    total = cdf[s, V - 1]
    a = _uniform(h, np.int64(16 * j)) * total
    c = np.nextafter(total, 0.0)
    target = a if (np.isnan(a) or a < c) else c
    if np.isnan(c):
        target = c
    k = 0
    if V <= 64:
        for i in range(V):
            k += not cdf[s, i] > target
        return k
    step = 1
    while 2 * step <= V:
        step *= 2
    while step:
        i = min(k + step, V) - 1
        k = k + step if (k + step <= V and not cdf[s, i] > target) else k
        step >>= 1
    return k


@numba.njit(cache=True)
def _kth_smallest(a: np.ndarray, n: int, k: int) -> float:
    """The k-th smallest (0-based) of a[:n] (no NaN), by Hoare's selection in place."""
    lo, hi = 0, n - 1
    while lo < hi:
        pivot = a[(lo + hi) >> 1]
        i, j = lo, hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while pivot < a[j]:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            return a[k]
    return a[k]


@numba.njit(cache=True)
def _kth_near(keys: np.ndarray, buf: np.ndarray, k: int, hint: float, d: float) -> float:
    """The k-th smallest (0-based) of ``keys`` (no NaN), selected among the keys in [hint - d, hint + d] when it lies
    there (one counting pass), else among all."""
    lo, hi = hint - d, hint + d
    below = 0
    n = 0
    for x in keys:
        below += x < lo
        buf[n] = x
        n += (x >= lo) & (x <= hi)
    if below <= k < below + n:
        return _kth_smallest(buf, n, k - below)
    buf[:] = keys
    return _kth_smallest(buf, keys.shape[0], k)


@numba.njit(cache=True)
def plan_step(z: np.ndarray, slot: np.ndarray, W: np.ndarray, V1: int, noise: np.ndarray, cdf: np.ndarray,
              argmax: np.ndarray, use_cdf: bool, h: np.ndarray, M: int, m: int, eta: float, width: float,
              guess: np.ndarray, fresh: bool, x0: np.ndarray) -> bool:
    """x0 [B, T] (a copy of z) := the state after the step leaving m positions masked (``BoundedPlanning.step``);
    ``noise`` [B, T] the keys' s G (an empty array: s = 0), ``h`` [B] the proposals' (key, step) hashes, ``guess``
    [B] the last thresholds (``fresh``: none yet), updated.  False, with x0 untouched, where a bound is NaN (the
    caller then takes the torch step)."""
    B, T = z.shape
    has_noise = noise.shape[0] > 0
    if m == 0:
        for b in range(B):
            for j in range(T):
                if z[b, j] == M:
                    x0[b, j] = _draw(cdf, argmax, use_cdf, slot[b * T + j], h[b], j)
        return True
    bound = np.empty((B, T))
    for b in range(B):
        for j in range(T):
            v = z[b, j]
            w = W[slot[b * T + j] * V1 + v]
            if v != M and eta != 1.0:
                w = 0.0 if eta == 0.0 else eta * w
            if has_noise:
                w += noise[b, j]
            if np.isnan(w):
                return False
            bound[b, j] = w
    keys = np.empty(T)
    buf = np.empty(T)
    undrawn = np.empty(T, dtype=np.bool_)
    for b in range(B):
        for j in range(T):
            undrawn[j] = z[b, j] == M
            keys[j] = -np.inf if undrawn[j] else bound[b, j]
        if fresh:
            buf[:] = bound[b]
            hint = _kth_smallest(buf, T, m)
        else:
            hint = guess[b]
        lim = hint - width
        while True:
            for j in range(T):
                if undrawn[j] and bound[b, j] >= lim:
                    s = slot[b * T + j]
                    tok = _draw(cdf, argmax, use_cdf, s, h[b], j)
                    x0[b, j] = tok
                    w = W[s * V1 + tok]
                    keys[j] = w + noise[b, j] if has_noise else w
                    undrawn[j] = False
            t = _kth_near(keys, buf, m, hint, width)  # the (T - m)-th largest known key
            more = False
            for j in range(T):
                if undrawn[j] and bound[b, j] >= t:
                    more = True
                    break
            if not more:
                break
            lim = hint = t
        guess[b] = t
        need = m
        for j in range(T):
            if keys[j] < t:
                need -= 1
        for j in range(T):  # the m lowest keys, ties at t to the lower positions
            if keys[j] < t:
                x0[b, j] = M
            elif keys[j] == t and need > 0:
                x0[b, j] = M
                need -= 1
    return True
