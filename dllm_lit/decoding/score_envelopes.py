"""Row-free score bounds from reference rows: Dream's entropy and top-k margin scores on the exact oracle, bounded
without the posterior row wherever one side of the neighbourhood is flat.

The oracle's row is q*(v) = L(v) R(v) / sum_w L(w) R(w) with L = P'^(d_left)(x_left, .) (pi with no left
neighbour) and R = P'^(d_right)(., x_right) (ones with no right neighbour), both read from its power table
(:class:`~dllm_lit.denoisers.OracleDenoiser`).  Beyond the table's certified depth D the factor is flat:
P'^D(., b) is within a factor sigma_R = max_b max_w P'^D(w, b) / min_w P'^D(w, b) of a constant, and
P'^D(a, .) within sigma_L = max_a max_v (P'^D(a, v) / pi(v)) / min_v (P'^D(a, v) / pi(v)) of pi (both read from
the stored float32 entries; 1 + O(mixing_tol + 2^-24)).  So when the right factor is flat (none, or d_right >= D)
q*(v) lies within a factor sigma of the *reference row* L / sum L; when the left one is (none, or d_left >= D),
within sigma of pi R / sum pi R.  The computed row adds float32 roundings per entry (products, the division, the
clamp at 1: at most (V + 8) 2^-24 relative) and the proposal law's float64 renormalisation (common to the row), so
the computed law q satisfies ref(v) lo <= q(v) <= ref(v) hi with global constants lo < 1 < hi.

Scores of rows in such an envelope are bounded from the reference row alone:

* negative entropy sum_v f(q_v), f(x) = x log(x + 1e-10): with a = ref_v lo, b = min(ref_v hi, 1),
  f(q_v) <= q_v log(b + 1e-10) <= max(a log(b + 1e-10), b log(b + 1e-10)) (log increasing; one log per entry);
* margin q_(1) - q_(2): at most min(1, ref_(1) hi) - ref_(2) lo.

Each reference row (one per row of the power table) is met by many positions and steps, so its bounds are
memoised for the run.  Positions with both neighbours within D keep the max-probability bound.  Rows whose entries
could leave float32's normal range (where the relative rounding bound fails) get no envelope.
"""
from __future__ import annotations

import torch

from dllm_lit.denoisers.oracle import OracleDenoiser
from dllm_lit.samplers.draws import row_chunks

__all__ = ["ReferenceScoreBounds", "SCORES", "ENVELOPE_SLACK"]

SCORES = ("entropy", "topk_margin")
#: absolute slack added to the entropy score's bound log(u + 1e-10): covers the float64 sum's rounding over V terms
#: (at most about V 2^-53 * 23.1) and a row sum 1 - O(V 2^-53) of the normalised law, both below 1e-10 for V < 2^30
ENVELOPE_SLACK = 1e-6
#: smallest float32 product the envelope admits (far above float32's normal range, 2^-126)
MIN_PRODUCT = 2.0**-100
#: absolute slack of a margin bound (its float64 subtraction and the bound's own rounding)
MARGIN_SLACK = 1e-12


class ReferenceScoreBounds:
    """Upper bounds of a Dream score (``score``: "entropy", the negative entropy sum q log(q + 1e-10), or
    "topk_margin") of the tempered-at-1, unfiltered law of :class:`OracleDenoiser` rows, from the neighbourhood
    alone (module docstring); ``slack``: absolute slack added to entropy bounds (the score's float64 rounding)."""

    def __init__(self, den: OracleDenoiser, score: str, slack: float) -> None:
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {score!r}")
        self.den, self.score, self.slack = den, score, float(slack)
        V, D = den.vocab_size, den.depth
        table = den.table
        pi32 = table[2 * D * V].to(torch.float64)
        cols_D = table[(2 * D - 1) * V:2 * D * V].to(torch.float64)  # P'^D(., b), one row per b
        rows_D = table[(2 * D - 2) * V:(2 * D - 1) * V].to(torch.float64)  # P'^D(a, .), one row per a
        lam = rows_D / pi32
        sigma_r = float((cols_D.amax(1) / cols_D.amin(1)).max())
        sigma_l = float((lam.amax(1) / lam.amin(1)).max()) * (1 + 8 * 2.0**-53)
        sigma = max(sigma_r, sigma_l)
        e32 = (V + 8) * 2.0**-24
        e64 = (2 * V + 32) * 2.0**-53
        self.lo = (1 - e32) * (1 - e64) / ((1 + e32) * (1 + e64) * sigma)
        self.hi = (1 + e32) * (1 + e64) * sigma / ((1 - e32) * (1 - e64))
        #: smallest entry of a flat factor (and of pi, read by the right-only rows' formula)
        self.flat_min = float(min(pi32.min(), cols_D.min(), rows_D.min(), 1.0))
        self.pi32 = pi32
        self.usable = bool(den.certified and (pi32 > 0).all() and sigma < 1.01)
        #: bound per table row used as a reference (NaN: not met yet)
        self.memo = torch.full((table.shape[0],), float("nan"), dtype=torch.float64, device=table.device)

    def __call__(self, x_left: torch.Tensor, d_left: torch.Tensor, x_right: torch.Tensor,
                 d_right: torch.Tensor) -> torch.Tensor:
        """Score upper bounds (float64) at the queries (x_left, d_left, x_right, d_right); +inf where no envelope."""
        ref = self.reference(x_left, d_left, x_right, d_right)
        out = torch.full(ref.shape, torch.inf, dtype=torch.float64, device=ref.device)
        has = ref >= 0
        if not bool(has.any()):
            return out
        idx = ref[has]
        vals = self.memo.index_select(0, idx)
        new = torch.isnan(vals)
        if bool(new.any()):
            todo = torch.unique(idx[new])
            self.memo[todo] = self._bounds(todo)
            vals = self.memo.index_select(0, idx)
        out[has] = vals
        return out

    def reference(self, x_left: torch.Tensor, d_left: torch.Tensor, x_right: torch.Tensor,
                  d_right: torch.Tensor) -> torch.Tensor:
        """Table row of each query's reference (-1: both neighbours within the depth, no envelope): the left factor's
        row where the right factor is flat, else the right factor's row where the left one is."""
        if not self.usable:
            return torch.full(d_left.shape, -1, dtype=torch.long, device=d_left.device)
        D = self.den.depth
        r_idx, c_idx = self.den.table_rows(x_left, d_left, x_right, d_right)
        right_flat = (d_right <= 0) | (d_right >= D)
        left_flat = (d_left <= 0) | (d_left >= D)
        return torch.where(right_flat, r_idx, torch.where(left_flat, c_idx, -1))

    def _bounds(self, idx: torch.Tensor) -> torch.Tensor:
        """Bounds of the reference rows at table rows ``idx`` (left factors: L / sum L; right: pi R / sum pi R)."""
        den = self.den
        V, D = den.vocab_size, den.depth
        out = torch.empty(idx.shape, dtype=torch.float64, device=idx.device)
        is_col = ((idx // V) % 2 == 1) & (idx < 2 * D * V)
        for sl in row_chunks(idx.numel(), V, idx.device):
            factor = den.table[idx[sl]].to(torch.float64)
            ref = torch.where(is_col[sl, None], factor * self.pi32, factor)
            pos_min = torch.where(factor > 0, factor, torch.inf).amin(1)
            ref = ref / ref.sum(1, keepdim=True)
            if self.score == "entropy":
                # x log(x + 1e-10) <= x log(b + 1e-10) on [a, b], at most at a or b: one log per entry
                top = torch.log((ref * self.hi).clamp(max=1.0) + 1e-10)
                bound = torch.where(top < 0, ref * self.lo, (ref * self.hi).clamp(max=1.0)).mul_(top).sum(1) \
                    + self.slack
            else:
                top = torch.topk(ref, min(2, V), dim=1).values
                second = top[:, 1] if V > 1 else torch.zeros_like(top[:, 0])
                bound = (top[:, 0] * self.hi).clamp(max=1.0) - second * self.lo + MARGIN_SLACK
            normal = pos_min * self.flat_min * self.flat_min >= MIN_PRODUCT
            out[sl] = torch.where(normal, bound, torch.inf)
        return out
