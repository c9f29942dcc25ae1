"""The compiled strict nucleus cut of :mod:`dllm_lit.decoding.nucleus` (numba; imported on first use, so that
importing dllm_lit does not load numba).  Each row is cut by its own loop, so its numbers do not depend on the
batch: the same operations as the definition (the float64 sequential cumsum of the descending values, ties at
the cut by token id), with the values put in order by a bucket sort that stops at the cut."""
from __future__ import annotations

import numba
import numpy as np

__all__ = ["filter_strict_rows", "SUB_BITS"]

#: buckets per binade of the bucket sort (the leading mantissa bits of a value pick its bucket)
SUB_BITS = 4


@numba.njit(cache=True)
def _sort_descending(a: np.ndarray, lo: int, hi: int) -> None:
    """Sort a[lo:hi] in place, descending (insertion sort for the small buckets, else numpy's sort)."""
    if hi - lo > 24:
        a[lo:hi] = np.sort(a[lo:hi])[::-1]
        return
    for i in range(lo + 1, hi):
        x = a[i]
        j = i - 1
        while j >= lo and a[j] < x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x


@numba.njit(cache=True)
def _cut(row: np.ndarray, bits: np.ndarray, tau: float, k_lo: int, k_hi: int, p: float, cap: int,
         counts: np.ndarray, start: np.ndarray, vals: np.ndarray) -> tuple[int, float]:
    """(m, thr) of the row: s = its values >= tau in descending order, c_k = s_1 + ... + s_k added in order
    (float64), m = max(1, #{k : c_k <= p}), thr = s_m; m = -1 when no c_k exceeds p and values below tau exist
    (the cut may lie below them) or when more than ``cap`` values are >= tau (a broad row: left to the caller).

    Bucket sort: a value's bucket is its bit pattern's leading bits (exponent and :data:`SUB_BITS` mantissa
    bits), clamped to [k_lo, k_hi]; a higher bucket holds only larger values, so taking the buckets from the top,
    each sorted on its own, gives the descending order, and the sort stops at the bucket where c crosses p.
    """
    V = row.shape[0]
    nb = k_hi - k_lo + 1
    counts[:nb] = 0
    shift = 52 - SUB_BITS
    n = 0
    for v in range(V):
        if row[v] >= tau:
            k = min(max(bits[v] >> shift, k_lo), k_hi) - k_lo
            counts[k] += 1
            n += 1
            if n > cap:
                return -1, 0.0
    pos = 0
    for k in range(nb - 1, -1, -1):  # descending buckets first
        start[k] = pos
        pos += counts[k]
    for v in range(V):
        if row[v] >= tau:
            k = min(max(bits[v] >> shift, k_lo), k_hi) - k_lo
            vals[start[k]] = row[v]
            start[k] += 1
    c = 0.0
    done = 0
    for k in range(nb - 1, -1, -1):
        size = counts[k]
        if size == 0:
            continue
        _sort_descending(vals, done, done + size)
        for i in range(done, done + size):
            c += vals[i]
            if c > p:  # c_(i+1) > p: the places before i are the ones with c <= p
                return (1, vals[0]) if i == 0 else (i, vals[i - 1])
        done += size
    if n < V:
        return -1, 0.0
    return V, vals[V - 1]


@numba.njit(cache=True)
def filter_strict_rows(q: np.ndarray, bits: np.ndarray, p: float, tau: float, k_lo: int, k_hi: int, cap: int,
                       out: np.ndarray, ok: np.ndarray) -> None:
    """out[r] = q[r] at the kept tokens of the strict nucleus cut at ``p``, 0 elsewhere (``out`` zeroed by the
    caller), for the rows of ``q`` [n, V] (float64, normalised; ``bits`` its int64 view), and ok[r] = True; a row
    whose cut does not fall among its values >= tau, or with more than ``cap`` of them, is left untouched with
    ok[r] = False.

    The values >= tau are the row's largest ones (with every value tied to one of them), so their descending
    cumsum gives the first numbers of the whole row's.  Kept: every q > thr and the first m - #{q > thr} tokens
    with q == thr by id.
    """
    n, V = q.shape
    nb = k_hi - k_lo + 1
    counts = np.empty(nb, dtype=np.int64)
    start = np.empty(nb, dtype=np.int64)
    vals = np.empty(V)
    for r in range(n):
        row = q[r]
        m, thr = _cut(row, bits[r], tau, k_lo, k_hi, p, cap, counts, start, vals)
        if m < 0:
            ok[r] = False
            continue
        ok[r] = True
        above = 0
        for v in range(V):
            if row[v] > thr:
                above += 1
        ties = m - above
        for v in range(V):
            x = row[v]
            if x > thr:
                out[r, v] = x
            elif x == thr and ties > 0:
                out[r, v] = x
                ties -= 1
