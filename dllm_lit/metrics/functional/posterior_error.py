"""Posterior error of one denoiser call at the positions it answered: KL to the exact posterior and top-1 agreement.

    KL(p_exact || p_model) = sum_v p(v) (log p(v) - log q(v))       terms with p(v) = 0 contribute 0
    top-1 agreement        = [p(argmax_v q(v)) = max_v p(v)]        the model's first argmax is an exact mode

The agreement asks whether the model's choice is *an* exact argmax, so exact ties (frequent under the chain oracle)
never count against the model.  Both logarithms are taken in the dtype each posterior comes in and the difference in
float64, so a denoiser scored against itself gets exactly 0.
"""
from __future__ import annotations

import torch

__all__ = ["posterior_error"]


def posterior_error(p: torch.Tensor, log_q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(KL(p || q) float64 [n], top-1 agreement bool [n]) of exact rows ``p`` [n, V] and model log-rows ``log_q``."""
    lp = p.log().to(torch.float64)
    p64 = p.to(torch.float64)
    terms = torch.where(p64 > 0, p64 * (lp - log_q.to(torch.float64)), torch.zeros_like(p64))
    top = log_q.argmax(-1, keepdim=True)
    agree = p.gather(-1, top).squeeze(-1) == p.amax(-1)
    return terms.sum(-1), agree
