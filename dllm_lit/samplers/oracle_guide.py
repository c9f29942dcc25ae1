r"""The SMC sandwich's guide for a sampler on the exact oracle: p(x_i | z) at every position and the chain's twist.

For a Markov chain (the oracle's P' and pi, :class:`~dllm_lit.denoisers.oracle.OracleDenoiser`) and a state z that
reveals x on R, with nearest revealed neighbours a < i < b of a masked position i,

    p(x_i | z) = P'^(i-a)(x_a, x_i) P'^(b-i)(x_i, x_b) / P'^(b-a)(x_a, x_b)       (pi(x_i) without a, 1 without b)
    log p(x_R) = log pi(x_r1) + sum log P'^(r_{i+1} - r_i)(x_ri, x_r{i+1}),      twist = log p(x) - log p(x_R).

Revealing one position s in the gap (a, b) changes p(x_i | z) only inside that gap and log p(x_R) by
l(a, s) + l(s, b) - l(a, b) (l the pair term), so :meth:`OracleGuide.reveal` updates both in O(gap) per particle
instead of O(T).  Distances beyond the table's depth D read P'^D (certified: within the oracle's mixing tolerance).
A guide steers the proposal only: the SMC's weights use the sampler's own step law, so its rounding cannot bias them.
"""
from __future__ import annotations

import torch

from dllm_lit.denoisers.local import nearest_revealed

__all__ = ["OracleGuide"]

_TINY = 1e-300


class OracleGuide:
    """Guide state of P particles (``tilt`` [P, T] = log p(x_i | z), ``log_twist`` [P]) for the oracle ``denoiser``,
    the targets ``x`` and the first states ``z`` [P, T]."""

    def __init__(self, denoiser, z: torch.Tensor, x: torch.Tensor) -> None:
        self.table = denoiser.table.to(torch.float64)
        self.V, self.D, self.T = denoiser.vocab_size, denoiser.depth, z.shape[1]
        self.x = x
        left, right = (t.long() for t in nearest_revealed(z, denoiser.mask_id))
        self.left, self.right = left, right
        pos = torch.arange(self.T, device=z.device).expand_as(z)
        self.tilt = self._log_cond(x, pos, left, right, x.gather(1, left.clamp(min=0)),
                                   x.gather(1, right.clamp(max=self.T - 1)))
        revealed = z != denoiser.mask_id
        self.log_twist = self._log_revealed(torch.ones_like(revealed)) - self._log_revealed(revealed)

    def _pair(self, a: torch.Tensor, b: torch.Tensor, xa: torch.Tensor, xb: torch.Tensor) -> torch.Tensor:
        """l(a, b) = log P'^(b-a)(x_a, x_b) (a >= 0), log pi(x_b) (a < 0); 0 where b >= T (no right token)."""
        V, D = self.V, self.D
        row = torch.where(a >= 0, (2 * (b - a).clamp(min=1, max=D) - 2) * V + xa, 2 * D * V)
        out = self.table[row, xb.clamp(max=V - 1)].clamp(min=_TINY).log()
        return torch.where(b < self.T, out, torch.zeros_like(out))

    def _log_revealed(self, revealed: torch.Tensor) -> torch.Tensor:
        left, _ = nearest_revealed(torch.where(revealed, self.x, -1), -1)
        left = left.long()
        pos = torch.arange(self.T, device=self.x.device).expand_as(left)
        term = self._pair(left, pos, self.x.gather(1, left.clamp(min=0)), self.x)
        return torch.where(revealed, term, torch.zeros_like(term)).sum(1)

    def _log_cond(self, xi: torch.Tensor, i: torch.Tensor, a: torch.Tensor, b: torch.Tensor, xa: torch.Tensor,
                  xb: torch.Tensor) -> torch.Tensor:
        """log p(x_i | x_a, x_b) for positions i with neighbours a (-1: none) and b (T: none), elementwise."""
        V, D, T = self.V, self.D, self.T
        has_a, has_b = a >= 0, b < T
        lf = self.table[torch.where(has_a, (2 * (i - a).clamp(min=1, max=D) - 2) * V + xa, 2 * D * V), xi]
        rf = self.table[torch.where(has_b, (2 * (b - i).clamp(min=1, max=D) - 1) * V + xb, 2 * D * V + 1), xi]
        span = self.table[(2 * (b - a).clamp(min=1, max=D) - 2) * V + xa, xb]
        norm = torch.where(has_a & has_b, span, torch.where(has_b, self.table[2 * D * V, xb], torch.ones_like(span)))
        return (lf * rf / norm).clamp(min=_TINY).log().nan_to_num(0.0)

    def reveal(self, rows: torch.Tensor, pos: torch.Tensor) -> None:
        """Reveal x at (rows[n], pos[n]) (one position per row, rows distinct): update the gap around each."""
        if rows.numel() == 0:
            return
        a, b = self.left[rows, pos], self.right[rows, pos]
        xr = self.x[rows]
        n = torch.arange(rows.numel(), device=rows.device)
        xs, xa, xb = xr[n, pos], xr[n, a.clamp(min=0)], xr[n, b.clamp(max=self.T - 1)]
        self.log_twist[rows] -= (self._pair(a, pos, xa, xs) + self._pair(pos, b, xs, xb) - self._pair(a, b, xa, xb))
        p = torch.arange(self.T, device=rows.device)[None, :]
        lo = (p > a[:, None]) & (p < pos[:, None])  # right neighbour becomes s
        hi = (p > pos[:, None]) & (p < b[:, None])  # left neighbour becomes s
        n, i = (lo | hi).nonzero(as_tuple=True)
        r, ln, rn = rows[n], torch.where(lo[n, i], a[n], pos[n]), torch.where(lo[n, i], pos[n], b[n])
        self.left[r, i], self.right[r, i] = ln, rn
        self.tilt[r, i] = self._log_cond(xr[n, i], i, ln, rn, xr[n, ln.clamp(min=0)], xr[n, rn.clamp(max=self.T - 1)])

    def select(self, anc: torch.Tensor) -> None:
        """Keep the particles ``anc`` (resampling)."""
        self.left, self.right, self.tilt = self.left[anc], self.right[anc], self.tilt[anc]
        self.log_twist, self.x = self.log_twist[anc], self.x[anc]
