"""Posterior rows for samplers that score revealed tokens as well as masked ones (token editing, WINO).

At a masked position the row is p(x_i | z); at a revealed position it is the leave-one-out law p(x_i | z_{-i}),
the evidence of every other position (:mod:`dllm_lit.denoisers.channels`).  The two coincide at a masked position
(its own evidence is empty), so one leave-one-out query answers both.  A
:class:`~dllm_lit.denoisers.LocalDenoiser` answers from the nearest revealed neighbours strictly left and right of
each position (the position itself excluded), O(n V); any other denoiser through
``log_posterior(z, leave_one_out=True)`` on the rows involved.
"""
from __future__ import annotations

import torch

from dllm_lit.denoisers.channels import ABSORBING
from dllm_lit.denoisers.local import LocalDenoiser, revealed_neighbours_at

__all__ = ["check_leave_one_out", "posterior_rows"]


def check_leave_one_out(denoiser, sampler: str) -> None:
    """One-line error unless ``denoiser`` answers leave-one-out posteriors under absorbing masks."""
    if not isinstance(denoiser, LocalDenoiser) and not denoiser.supports(ABSORBING, leave_one_out=True):
        raise ValueError(f"{sampler} needs leave-one-out posteriors at revealed positions; "
                         f"{type(denoiser).__name__} does not answer them (supports(ABSORBING, leave_one_out=True))")


def posterior_rows(denoiser, z: torch.Tensor, b: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """float64 [n, V]: p(x_p | z) at masked (b, p), p(x_p | z_{-p}) at revealed (b, p)."""
    if isinstance(denoiser, LocalDenoiser):
        a, c = revealed_neighbours_at(z.contiguous(), denoiser.mask_id, b, p)
        return denoiser.probs_from_neighbours(z, b, p, a, c).to(torch.float64)
    rows, inv = torch.unique(b, return_inverse=True)
    lp = denoiser.log_posterior(z[rows], ABSORBING, leave_one_out=True)
    return lp[inv, p].exp().to(torch.float64)
