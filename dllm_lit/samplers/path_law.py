r"""The path law of a sampler: the probability of each decoding step, for the sequential Monte Carlo sandwich.

A sampler that unmasks positions over ``num_steps`` steps and never changes a committed token has the marginal

    q(x) = sum over paths z_0 -> z_1 -> ... -> z_S = x of  prod_j q_j(z_{j+1} | z_j),

where step j commits the set S_j (masked in z_j) with x's tokens there.  :class:`PathLaw` is what a sampler exposes
so that :mod:`dllm_lit.samplers.path_smc` can estimate q(x) over these paths:

* ``allowed(z, j)``: the positions that may commit at step j (masked, in the active block);
* ``count(z, j)``: the number of commits of step j when the schedule fixes it, else None;
* ``step_log_prob(z, commit, x, j)``: log q_j(commit with x's tokens | z) (float64; -inf where impossible).

Optional: ``guide(z, x)``, an object that steers the SMC (None: uniform picks, no twist) with ``tilt`` (float64
[B, T], log p(x_i | z) at every position: the proposal's :func:`~dllm_lit.samplers.path_smc.subset_proposal` guide),
``log_twist`` (float64 [B], a guess of log q(x | z) carried by the intermediate targets: the exact chain's
log p(x's masked tokens | z) for the oracle, exact for an exact sampler), ``reveal(rows, pos)`` (x revealed at one
position per listed row) and ``select(rows)`` (resampling); :class:`~dllm_lit.samplers.oracle_guide.OracleGuide`.

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

from dllm_lit import rng
from dllm_lit.samplers.reference_scoring import LogLaw

__all__ = ["PathLaw", "RandomSubsetLaw", "log_binomial", "path_seed"]


#: offset of the sandwich's order seeds (the sampler's own orders use ``seed`` itself); shared by every path estimator
_SANDWICH_SALT = 0x5A4D_5157


def path_seed(seed: int, k: int) -> int:
    """The seed of fresh order k (k >= 1) for a run seeded ``seed``: a 63-bit SplitMix64 mix of both."""
    h = rng.mix64(torch.tensor([(int(seed) * 1_000_003 + _SANDWICH_SALT + int(k)) & ((1 << 63) - 1)]))
    return int(h.item()) & ((1 << 62) - 1)


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

    def guide(self, z: torch.Tensor, x: torch.Tensor):
        """The exact oracle's :class:`~dllm_lit.samplers.oracle_guide.OracleGuide` (certified table), else None."""
        if not (hasattr(self.denoiser, "table_rows") and bool(getattr(self.denoiser, "certified", False))):
            return None
        from dllm_lit.samplers.oracle_guide import OracleGuide

        return OracleGuide(self.denoiser, z, x)
