"""Nucleus (top-p) filtering of denoiser marginals, as ReMDM applies it; see ``docs/samplers/remdm.md``.

Upstream (kuleshov-group/remdm, ``nucleus_p < 1``) sorts each row of p_x0 in descending order,
keeps the tokens whose *inclusive* cumulative sum is ``<= p``, always keeps the first (most
probable) token, zeroes the rest and renormalises.  The semantics are strict: the token whose
cumulative sum first crosses ``p`` is DROPPED, so the kept mass can be below ``p``
(e.g. [0.5, 0.3, 0.2] at p = 0.7 keeps only the first token).

Conventions of this re-implementation (documented choices, not upstream accidents):

* Rows are first normalised in float64, and the cumulative sum is taken in float64, so the
  keep set is a deterministic function of the (normalised) probabilities.  A cumulative sum
  that equals ``p`` exactly in float64 is kept (``<=``).
* Ties are broken by token id: the order is the stable descending one, so among equal
  probabilities the lower token id comes first (and is the one kept when the boundary falls
  inside a tie).  Upstream uses an unstable ``torch.sort`` whose tie order is implementation-defined.
  On CPU the code sorts values only (numpy's sort, about ten times faster than ``torch.sort`` with
  indices) and resolves a tie at the boundary by token id, which gives that same set bit for bit.
* ``p = 1`` keeps every token (the rows are only normalised); samplers skip the filter
  entirely at ``p = 1``, as upstream does.
"""
from __future__ import annotations

import numpy as np
import torch

from dllm_lit.denoisers.hmm_first_order import numba_available
from dllm_lit.util.indices import nonzero_pairs

__all__ = ["top_p_filter", "top_k_filter", "check_top_p"]


def check_top_p(p: float, name: str = "top_p") -> float:
    """Return ``float(p)`` or raise ValueError unless 0 < p <= 1."""
    if isinstance(p, bool):
        raise ValueError(f"{name} must be a number in (0, 1], got {p!r}")
    try:
        v = float(p)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in (0, 1], got {p!r}") from None
    if not 0.0 < v <= 1.0:
        raise ValueError(f"{name} must lie in (0, 1], got {p!r}")
    return v


def top_p_filter(probs: torch.Tensor, p: float, strict: bool = True) -> torch.Tensor:
    """Nucleus-filtered, renormalised float64 copy of ``probs`` [..., V] (see module docstring).

    ``strict=False`` gives the Hugging Face / Dream ``top_p_logits`` semantics instead: a token is
    kept when the mass *before* it (descending order) is <= p, so the token that crosses p is kept
    and the kept mass is >= p.  Rows must have positive total mass.  Zero-probability entries stay zero.

    With q = probs / sum(probs), s its values in stable descending order and c = cumsum(s)
    (float64), the kept tokens are those at sorted positions k with c_k <= p (non-strict:
    c_k - s_k <= p), and always the first.
    """
    p = check_top_p(p, "p")
    raw = probs if probs.dtype in (torch.float32, torch.float64) else probs.to(torch.float64)
    total = raw.to(torch.float64).sum(-1, keepdim=True)
    q = raw / total  # type promotion: float64(raw) / total
    if p >= 1.0:
        return q
    if strict and q.device.type == "cpu" and q.numel() and numba_available():
        out = _kept_values_compiled(raw, total, q, p)
    else:
        keep = _kept_from_values(raw, total, q, p, strict) if q.device.type == "cpu" else _kept_by_sort(q, p, strict)
        out = torch.where(keep, q, torch.zeros((), dtype=q.dtype, device=q.device))
    return out.div_(out.sum(-1, keepdim=True))


#: rows with at most this many tokens >= (1 - p) / (2 V) take the compiled cut (broader rows, whose order must be
#: sorted far down, take the bucket cut's certified estimate instead)
COMPILED_MAX = 512


def _kept_values_compiled(raw: torch.Tensor, total: torch.Tensor, q: torch.Tensor, p: float) -> torch.Tensor:
    """q at the kept tokens of the strict cut, 0 elsewhere, by the compiled row loop
    (:func:`~dllm_lit.decoding.nucleus_kernel.filter_strict_rows`, optional numba: a bucket sort of the tokens
    >= (1 - p) / (2 V) that stops at the cut and two passes over the row, instead of about twenty tensor passes);
    rows it leaves (more than :data:`COMPILED_MAX` such tokens, or no cut among them) by :func:`_kept_from_values`.  The same kept set
    either way and q's own values, so the same numbers as ``torch.where(keep, q, 0)``."""
    from dllm_lit.decoding.nucleus_kernel import SUB_BITS, filter_strict_rows

    V = q.shape[-1]
    q2 = q.reshape(-1, V).contiguous()
    out = torch.zeros_like(q2)
    ok = torch.empty(q2.shape[0], dtype=torch.bool)
    tau = (1.0 - p) / (2.0 * V)
    k_lo, k_hi = (int(torch.tensor(x, dtype=torch.float64).view(torch.int64)) >> (52 - SUB_BITS) for x in (tau, 1.0))
    filter_strict_rows(q2.numpy(), q2.view(torch.int64).numpy(), float(p), tau, k_lo, k_hi, COMPILED_MAX, out.numpy(),
                       ok.numpy())
    if not bool(ok.all()):
        r = (~ok).nonzero().squeeze(1)
        sub = q2.index_select(0, r)
        keep = _kept_from_values(raw.reshape(-1, V).index_select(0, r), total.reshape(-1, 1).index_select(0, r),
                                 sub, p, True)
        out[r] = torch.where(keep, sub, torch.zeros((), dtype=q.dtype))
    return out.view(q.shape)


def _kept_by_sort(q: torch.Tensor, p: float, strict: bool) -> torch.Tensor:
    """The kept set of :func:`top_p_filter` as a bool mask, by a stable descending sort with indices (any device)."""
    s, order = torch.sort(q, dim=-1, descending=True, stable=True)
    c = s.cumsum(-1)
    keep_sorted = (c <= p) if strict else (c - s <= p)
    keep_sorted[..., 0] = True
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def _kept_from_values(raw: torch.Tensor, total: torch.Tensor, q: torch.Tensor, p: float, strict: bool) -> torch.Tensor:
    """:func:`_kept_by_sort` on CPU without an index sort.

    CPU's cumsum is a sequential float64 scan, so c and c - s are nondecreasing and the kept sorted
    positions are a prefix: the first m = max(1, #{k : c_k <= p}).  With thr = s_m that prefix holds the
    tokens with q > thr and, of those with q == thr, the m - #{q > thr} lowest token ids (the stable order).
    Rows of at least :data:`BUCKET_MIN_V` tokens whose maximum exceeds p (strict: c_1 = s_1 > p) have m = 1;
    the others take :func:`_cut_by_buckets` where it certifies its cut, else :func:`_cut_by_sort`.
    """
    V = q.shape[-1]
    if V < BUCKET_MIN_V or q.numel() == 0:
        m, thr = _cut_by_sort(raw, total, p, strict)
        return _keep_first(q, m, thr)
    q2 = q.reshape(-1, V)
    thr = q2.amax(-1, keepdim=True)
    m = torch.ones_like(thr, dtype=torch.int64)
    # with c_1 = s_1 > p (strict; non-strict: c_2 - s_2 > p, certified as in _cut_by_buckets) m = 1, thr = max
    rest = (thr <= (p if strict else p + _bucket_delta(V))).squeeze(1).nonzero().squeeze(1)
    drop = torch.full_like(m, -1)
    if rest.numel():  # rows with few tokens above (1 - p) / (2 V): the cut from those tokens alone, where certified
        m_c, thr_c, ok_c = _cut_by_candidates(q2 if rest.numel() == q2.shape[0] else q2.index_select(0, rest), p,
                                              strict)
        if bool(ok_c.any()):
            done = ok_c.nonzero().squeeze(1)
            m[rest[done]], thr[rest[done]] = m_c[done], thr_c[done]
            rest = rest[~ok_c]
    if rest.numel():
        sub = q2 if rest.numel() == q2.shape[0] else q2.index_select(0, rest)
        t_b, d_b, ok = _cut_by_buckets(sub, p, strict)
        thr[rest], drop[rest] = t_b, d_b
        if not bool(ok.all()):
            bad = rest[~ok]
            drop[bad] = -1
            m[bad], thr[bad] = _cut_by_sort(raw.reshape(-1, V)[bad], total.reshape(-1, 1)[bad], p, strict)
    return _keep_first(q2, m, thr, drop).view(q.shape)


def _keep_first(q: torch.Tensor, m: torch.Tensor, thr: torch.Tensor, drop: torch.Tensor | None = None) -> torch.Tensor:
    """The tokens of the first m places of the stable descending order, given m and the m-th value thr; where
    ``drop`` >= 0 (a bucket cut), m = #{q >= thr} - drop instead."""
    keep = q >= thr  # the first m tokens and any others tied at thr
    kept = keep.sum(-1, keepdim=True)
    if drop is not None:
        m = torch.where(drop >= 0, kept - drop, m)
    if not torch.equal(kept, m):  # a tie at thr straddles the boundary: keep its lowest token ids only
        tie = q == thr
        keep &= ~tie | (tie.cumsum(-1) <= m - kept + tie.sum(-1, keepdim=True))
    return keep


def _cut_by_sort(raw: torch.Tensor, total: torch.Tensor, p: float, strict: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(m, thr) [..., 1] of :func:`_kept_from_values` from the sorted values (numpy's sort, ~10x faster than
    ``torch.sort`` with indices): c = cumsum(s), m by binary search.  ``raw`` is sorted instead of q: x ->
    float64(x) / total is nondecreasing, so it commutes with sorting, and float32 sorts faster."""
    s = torch.from_numpy(np.sort(raw.detach().numpy(), axis=-1)).flip(-1) / total
    c = s.cumsum(-1)
    below = c if strict else c - s
    target = torch.full((*c.shape[:-1], 1), p, dtype=c.dtype)
    m = torch.searchsorted(below, target, right=True).clamp_(min=1)
    return m, s.gather(-1, m - 1)


#: rows of at least this many tokens take :func:`_cut_by_buckets` (shorter ones sort: it is as fast)
BUCKET_MIN_V = 256
#: buckets of :func:`_cut_by_buckets`: 2^BUCKET_MANTISSA per binade of q in [2^-BUCKET_BINADES, 2); smaller q
#: share bucket 0
BUCKET_MANTISSA, BUCKET_BINADES = 4, 40
_BUCKETS = (BUCKET_BINADES + 1) << BUCKET_MANTISSA
_BUCKET_BASE = (1023 - BUCKET_BINADES) << BUCKET_MANTISSA  # float64 bits >> (52 - BUCKET_MANTISSA) of 2^-BINADES
#: a row whose crossing bucket holds more than V / BUCKET_MAX_FRACTION tokens is left to the sort
BUCKET_MAX_FRACTION = 8


def _bucket_delta(V: int) -> float:
    """The margin of :func:`_cut_by_buckets`: 4 (2 V + buckets) 2^-53, above its rounding bound."""
    return 4.0 * (2 * V + _BUCKETS) * 2.0**-53


def _cut_by_buckets(q: torch.Tensor, p: float, strict: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(thr, drop, ok) for the rows of ``q`` [n, V] (normalised, float64, CPU): the m-th largest value thr of
    :func:`_cut_by_sort` and the number of tokens equal to thr that the first m places leave out, sorting only
    the tokens of the bucket where the cumulative mass crosses p; ``ok`` (bool [n]) marks the rows where the
    result is certified equal to the sort's (the others are left to :func:`_cut_by_sort`).

    The tokens are bucketed by the leading bits of q (a strictly larger bucket means a strictly larger q, so a
    bucket is a run of the descending order and holds every token tied with one of its own), the buckets'
    masses accumulated from the top, and the crossing bucket's tokens sorted, giving approximate prefix sums
    S^_k of the sorted values around the cut.  The sort's sequential cumsum c_k, and c_k - s_k, differ from the
    exact prefix sums S_k, S_(k-1) by at most (V - 1) u S_k + u (u = 2^-53, S_k <= 1 + V u), and S^_k from S_k by
    at most (V + buckets + V) u S_k (that many additions of nonnegative terms); so where the two S^ bracketing p
    lie more than :func:`_bucket_delta` from it, c_k <= p is decided as the sort decides it, whatever the
    rounding.  Elsewhere (a margin below ~10^-11: about one row in 10^7) the row is not ok, as is a row whose
    crossing bucket holds more than V / :data:`BUCKET_MAX_FRACTION` tokens.
    """
    n, V = q.shape
    nb, delta = _BUCKETS, _bucket_delta(V)
    key = (q.view(torch.int64) >> (52 - BUCKET_MANTISSA)).sub_(_BUCKET_BASE).clamp_(0, nb - 1)
    mass = torch.zeros((n, nb), dtype=torch.float64).scatter_add_(1, key, q).flip(-1).cumsum(-1)  # top buckets
    top = (mass <= p).sum(-1, keepdim=True)  # buckets above the crossing one
    ok = (top < nb).squeeze(1)
    top.clamp_(max=nb - 1)
    above_mass = torch.where(top > 0, mass.gather(1, (top - 1).clamp(min=0)), 0.0)
    rows, cols = nonzero_pairs(key == (nb - 1) - top)  # the crossing bucket's tokens
    size = torch.bincount(rows, minlength=n)
    ok &= size <= max(1, V // BUCKET_MAX_FRACTION)
    if not bool(ok.all()):
        sel = ok.index_select(0, rows)
        rows, cols, size = rows[sel], cols[sel], torch.where(ok, size, 0)
    width = max(1, int(size.max()))
    start = size.cumsum(0) - size
    vals = torch.zeros((n, width), dtype=torch.float64)
    vals[rows, torch.arange(rows.numel()) - start.index_select(0, rows)] = q[rows, cols]
    desc = torch.from_numpy(np.sort(vals.numpy(), axis=-1)[:, ::-1].copy())  # zero padding last, as zero tokens
    est = torch.cat([above_mass, desc], 1).cumsum(1)  # est[:, j] ~ S_(#above + j)
    cross = (est <= p).sum(-1, keepdim=True)  # the first j with est > p
    size = size[:, None]
    ok &= ((cross >= 1) & (cross <= size)).squeeze(1)
    cross.clamp_(1, width)
    ok &= (est.gather(1, cross) > p + delta).squeeze(1) & (est.gather(1, cross - 1) < p - delta).squeeze(1)
    # m = #above + cross - 1 (strict) or #above + cross, at least 1: the j-th value of the bucket, j = m - #above
    j = cross - 1 if strict else cross.clone()
    j[(j == 0) & (top == 0)] = 1
    thr = desc.gather(1, (j - 1).clamp(min=0))
    ties = desc == thr
    drop = ties.sum(-1, keepdim=True) - (j - (desc > thr).sum(-1, keepdim=True))
    ok &= (thr > 0).squeeze(1)
    last_above = (j == 0).squeeze(1) & ok  # m = #above: thr is the smallest value above the bucket, none dropped
    if bool(last_above.any()):
        i = last_above.nonzero().squeeze(1)
        thr[i] = torch.where(key[i] > ((nb - 1) - top[i]), q[i], torch.inf).amin(-1, keepdim=True)
        drop[i] = 0
    return thr, drop, ok


#: rows with at most this many candidate tokens (q >= (1 - p) / (2 V)) take :func:`_cut_by_candidates`
CANDIDATE_MAX = 512


def _cut_by_candidates(q: torch.Tensor, p: float, strict: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(m, thr, ok) of :func:`_cut_by_sort` for the rows of ``q`` [n, V] (normalised, float64, CPU) from their
    candidate tokens only, q_v >= tau = (1 - p) / (2 V); ``ok`` (bool [n]) marks the rows where the result is the
    sort's (the others, with more than :data:`CANDIDATE_MAX` candidates or no crossing among them, are left to
    the caller).

    The candidates hold every token whose value is >= tau, so their values in descending order are the first
    ``count`` values s_1..s_count of the whole row's sorted values, and the sequential float64 cumsum over them
    gives the very numbers c_1..c_count of the sort's cumsum (the same additions in the same order).  Where the
    first k with c_k > p (non-strict: c_k - s_k > p) lies among them, the sort's m = k - 1 (at least 1) and
    thr = s_m are read off exactly, with no margin.  The tokens below tau hold mass < (1 - p) / 2, so a crossing
    is certain unless rounding intervenes; peaked rows (a few hundred tokens carrying the mass) have few
    candidates, and the bucket cut's histogram is skipped for them.
    """
    n, V = q.shape
    cand = q >= (1.0 - p) / (2.0 * V)
    count = cand.sum(-1)
    ok = count <= CANDIDATE_MAX
    m = torch.ones((n, 1), dtype=torch.int64)
    thr = torch.zeros((n, 1), dtype=q.dtype)
    if not bool(ok.any()):
        return m, thr, ok
    idx = ok.nonzero().squeeze(1)
    rows, cols = nonzero_pairs(cand.index_select(0, idx))
    size = count.index_select(0, idx)
    width = max(1, int(size.max()))
    start = size.cumsum(0) - size
    vals = torch.zeros((idx.numel(), width), dtype=q.dtype)
    vals[rows, torch.arange(rows.numel()) - start.index_select(0, rows)] = q[idx.index_select(0, rows), cols]
    s = torch.from_numpy(np.sort(vals.numpy(), axis=-1)[:, ::-1].copy())  # zero padding last
    c = s.cumsum(-1)
    below = c if strict else c - s
    target = torch.full((idx.numel(), 1), p, dtype=c.dtype)
    m_i = torch.searchsorted(below, target, right=True).clamp_(min=1)
    good = (m_i < size[:, None]).squeeze(1)  # the crossing k = m + 1 lies among the candidates
    ok[idx] = good
    m[idx], thr[idx] = m_i, s.gather(-1, m_i - 1)
    return m, thr, ok


def _kth_largest(q: torch.Tensor, k: int) -> torch.Tensor:
    """The k-th largest value of each row of ``q`` [..., V] (1 <= k <= V): [..., 1] (np.partition on CPU)."""
    if q.device.type == "cpu":
        V = q.shape[-1]
        return torch.from_numpy(np.partition(q.detach().numpy(), V - k, axis=-1)[..., V - k:V - k + 1])
    return torch.topk(q, k, dim=-1).values[..., -1:]


def top_k_filter(probs: torch.Tensor, k: int) -> torch.Tensor:
    """Renormalised float64 copy of ``probs`` [..., V] keeping the entries >= the k-th largest (ties at the
    k-th value are all kept), as Dream's ``top_k_logits``."""
    q = probs.to(torch.float64)
    kth = _kth_largest(q, min(int(k), q.shape[-1]))
    out = torch.where(q >= kth, q, torch.zeros((), dtype=q.dtype, device=q.device))
    return out / out.sum(-1, keepdim=True)
