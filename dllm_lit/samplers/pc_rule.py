"""The PC-sampler's position-aware calibrated confidence written as a rule (:mod:`dllm_lit.samplers.rule`); draw for
draw the built-in :class:`~dllm_lit.samplers.pc_sampler.PCSampler` (tested with ``torch.equal``).

Huang et al., "PC-Sampler: Position-Aware Calibration of Decoding Bias in Masked Diffusion Models"
(arXiv:2508.13021).  LLaDA's blocks, schedule and proposals, scored by

    exp(-lambda (i - lo)) * min(alpha, -p(x̂) log(pi(x̂) + 1e-9)),

i - lo the index within the block and pi the chain's stationary law.  The score can exceed max_v p (when
-log pi > 1) but not exp(-lambda (i - lo)) min(alpha, max_v p max_v -log(pi(v) + 1e-9)): the rule declares that
``score_bound`` (as ``PCSampler`` bounds its scores) and takes the bounded provider on the exact oracle.
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.samplers.llada_rule import LLaDARule
from dllm_lit.samplers.pc_sampler import LOG_EPS

__all__ = ["PCRule"]


class PCRule(LLaDARule):
    """LLaDA's rule with PC-sampler scores: decay ``lambd`` >= 0, clip ``alpha`` > 0."""

    sampler_name = "pc_rule"

    def __init__(self, denoiser=None, steps: int | list[int] = 128, lambd: float = 0.25, alpha: float = 10.0,
                 block_length: int | None = None, temperature: float = 0.0, tie_rule: str = "lowest") -> None:
        super().__init__(denoiser, steps, temperature=temperature, block_length=block_length, tie_rule=tie_rule)
        self.lambd = checks.real("lambd", lambd, 0.0)
        self.alpha = checks.real("alpha", alpha, 0.0, low_open=True)

    def _neg_log_bg(self, device: torch.device) -> torch.Tensor:
        return -torch.log(self.chain.stationary.to(torch.float64).to(device) + LOG_EPS)

    def score_bound(self, pmax: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        # p(x̂) <= pmax and -log(pi(x̂) + eps) <= its maximum (rounding is monotone); 1e-12 covers an ulp of exp
        top = float(self._neg_log_bg(pmax.device).max().clamp(min=0.0))
        i = pos % self.block_length if self.block_length else pos
        return torch.exp(-self.lambd * i.to(torch.float64)) * (pmax * top).clamp(max=self.alpha) * (1.0 + 1e-12)

    def score(self, probs: torch.Tensor, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        neg_log_bg = self._neg_log_bg(tok.device)
        calibrated = (super().score(probs, tok, pos) * neg_log_bg[tok]).clamp(max=self.alpha)
        i = pos % self.block_length if self.block_length else pos  # index within the block (blocks start at 0)
        return torch.exp(-self.lambd * i.to(torch.float64)) * calibrated
