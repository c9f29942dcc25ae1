r"""The path law of a sampler: the probability of each decoding step, for the sequential Monte Carlo sandwich.

A sampler that unmasks positions over ``num_steps`` steps and never changes a committed token has the marginal

    q(x) = sum over paths z_0 -> z_1 -> ... -> z_S = x of  prod_j q_j(z_{j+1} | z_j),

where step j commits the set S_j (masked in z_j) with x's tokens there.  :class:`PathLaw` is what a sampler exposes
so that :mod:`dllm_lit.samplers.path_smc` can estimate q(x) over these paths:

* ``allowed(z, j)``: the positions that may commit at step j (masked, in the active block);
* ``count(z, j)``: the number of commits of step j when the schedule fixes it, else None;
* ``step_log_prob(z, commit, x, j)``: log q_j(commit with x's tokens | z) (float64; -inf where impossible).

Optional: ``tilt(z, x, j)`` (float64 [B, T]), per-position log weights that guide the proposal (the SMC's
:func:`~dllm_lit.samplers.path_smc.subset_proposal`; without it the proposal is uniform over the allowed
positions), and ``log_twist(z, x)`` (float64 [B] or None), a guess of log q(x | z) that the SMC's intermediate
targets carry (the exact chain's log p(x's masked tokens | z) for the oracle: exact for an exact sampler).

:class:`RandomSubsetLaw` is the law of the random-order samplers: step j commits a uniform k_j-subset of the
allowed positions, each drawing its token from the denoiser's row p_i(. | z_j) (``log_law``: the law it is drawn
from, e.g. tempered), so

    q_j(S | z) = C(m_j, k_j)^{-1} prod_{i in S} q_i(x_i | z),     m_j = #allowed,

the paper's "MDLM" (one window, :class:`~dllm_lit.samplers.mdlm_paper.MDLMPaper`) and LLaDA's ``random`` remasking
(one window per block).
"""
from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import torch

from dllm_lit.denoisers.local import nearest_revealed
from dllm_lit.samplers.reference_scoring import LogLaw

__all__ = ["PathLaw", "RandomSubsetLaw", "log_binomial", "oracle_log_revealed", "oracle_log_tilt"]


@runtime_checkable
class PathLaw(Protocol):
    """A sampler's step law over reveal states (module docstring)."""

    num_steps: int

    def allowed(self, z: torch.Tensor, step: int) -> torch.Tensor:
        """Bool [B, T]: positions that may commit at ``step`` (masked, in the active block)."""

    def count(self, z: torch.Tensor, step: int) -> torch.Tensor | None:
        """Long [B]: commits at ``step`` when the schedule fixes them, else None."""

    def step_log_prob(self, z: torch.Tensor, commit: torch.Tensor, x: torch.Tensor, step: int) -> torch.Tensor:
        """Float64 [B]: log q(step ``step`` from ``z`` reveals exactly ``commit`` with x's tokens there); -inf if
        impossible."""


def log_binomial(m: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """log C(m, k) (float64; -inf where k < 0 or k > m)."""
    m, k = m.to(torch.float64), k.to(torch.float64)
    ok = (k >= 0) & (k <= m)
    out = torch.lgamma(m + 1) - torch.lgamma(k.clamp(min=0) + 1) - torch.lgamma((m - k).clamp(min=0) + 1)
    return torch.where(ok, out, torch.full_like(out, -math.inf))


def oracle_log_tilt(denoiser, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """log p(x_i | z) at every position (float64 [B, T]) for the exact oracle, from three table entries per position:
    P'^a(x_l, x_i) P'^b(x_i, x_r) / P'^(a+b)(x_l, x_r) (pi for a missing left neighbour, 1 for a missing right one;
    distances beyond the table's depth read its last power).  A guide for the proposal, not the sampler's law."""
    T, V, D = z.shape[1], denoiser.vocab_size, denoiser.depth
    left, right = (t.long() for t in nearest_revealed(z, denoiser.mask_id))
    pos = torch.arange(T, device=z.device)
    d_l, d_r = torch.where(left >= 0, pos - left, 0), torch.where(right < T, right - pos, 0)
    x_l, x_r = x.gather(1, left.clamp(min=0)), x.gather(1, right.clamp(max=T - 1))
    table = denoiser.table.to(torch.float64)
    r_idx, c_idx = denoiser.table_rows(x_l, d_l, x_r, d_r)
    num = table[r_idx, x] * table[c_idx, x]
    both = (d_l > 0) & (d_r > 0)
    span = table[(2 * (d_l + d_r).clamp(min=1, max=D) - 2) * V + x_l, x_r]
    norm = torch.where(both, span, torch.where(d_r > 0, table[2 * D * V, x_r], torch.ones_like(span)))
    return (num / norm).clamp(min=1e-300).log().nan_to_num(0.0)


def oracle_log_revealed(denoiser, x: torch.Tensor, revealed: torch.Tensor) -> torch.Tensor:
    """log p(x on ``revealed``) (float64 [B]) under the oracle's chain: log pi(x_r1) + sum log P'^(r_{i+1} - r_i)
    (x_ri, x_r{i+1}) over the revealed positions r_1 < r_2 < ... (distances beyond the table's depth read its last
    power)."""
    T, V, D = x.shape[1], denoiser.vocab_size, denoiser.depth
    left, _ = nearest_revealed(torch.where(revealed, x, denoiser.mask_id), denoiser.mask_id)
    left = left.long()
    d = (torch.arange(T, device=x.device) - left).clamp(max=D)
    x_l = x.gather(1, left.clamp(min=0))
    table = denoiser.table.to(torch.float64)
    row = torch.where(left >= 0, (2 * d - 2) * V + x_l, 2 * D * V)
    term = table[row, x].clamp(min=1e-300).log()
    return torch.where(revealed, term, torch.zeros_like(term)).sum(1)


class RandomSubsetLaw:
    """Uniform k_j-subsets of a window [lo_j, hi_j) of the masked positions (module docstring).

    Args:
        denoiser: the sampler's denoiser (its rows at the committed positions give the token laws).
        counts: k_j, one per step.
        windows: (lo_j, hi_j) per step (the active block).
        log_law: ``log_law(j, b, p, probs, tokens)``, log q of the tokens under the law drawn from at step j.
    """

    def __init__(self, denoiser, counts: list[int], windows: list[tuple[int, int]], log_law: LogLaw) -> None:
        if len(counts) != len(windows):
            raise ValueError(f"counts and windows must have one entry per step, got {len(counts)} and {len(windows)}")
        self.denoiser, self.counts, self.windows, self.log_law = denoiser, list(counts), list(windows), log_law
        self.num_steps = len(self.counts)

    def allowed(self, z: torch.Tensor, step: int) -> torch.Tensor:
        lo, hi = self.windows[step]
        pos = torch.arange(z.shape[1], device=z.device)
        return (z == self.denoiser.mask_id) & (pos >= lo) & (pos < hi)

    def count(self, z: torch.Tensor, step: int) -> torch.Tensor:
        return torch.full((z.shape[0],), self.counts[step], dtype=torch.long, device=z.device)

    def step_log_prob(self, z: torch.Tensor, commit: torch.Tensor, x: torch.Tensor, step: int) -> torch.Tensor:
        allowed = self.allowed(z, step)
        k = commit.sum(1)
        ok = ~(commit & ~allowed).any(1) & (k == self.counts[step])
        out = -log_binomial(allowed.sum(1), k)
        b, p = commit.nonzero(as_tuple=True)
        if b.numel():
            lq = self.log_law(step, b, p, self.denoiser.probs_at(z, b, p), x[b, p]).to(torch.float64)
            out = out.index_add(0, b, lq)
        return torch.where(ok, out, torch.full_like(out, -math.inf))

    def tilt(self, z: torch.Tensor, x: torch.Tensor, step: int) -> torch.Tensor | None:
        """log p(x_i | z) at every position from the oracle's table (:func:`oracle_log_tilt`), None for other
        denoisers (the proposal is then uniform)."""
        return oracle_log_tilt(self.denoiser, z, x) if self._oracle() else None

    def _oracle(self) -> bool:
        return hasattr(self.denoiser, "table_rows") and bool(getattr(self.denoiser, "certified", False))

    def log_twist(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor | None:
        """log p(x's masked tokens | z's revealed ones) under the oracle's chain (:func:`oracle_log_revealed`),
        None for other denoisers."""
        if not self._oracle():
            return None
        return oracle_log_revealed(self.denoiser, x, x != self.denoiser.mask_id) - oracle_log_revealed(
            self.denoiser, x, z != self.denoiser.mask_id)
