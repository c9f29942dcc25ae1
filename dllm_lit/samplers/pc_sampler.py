"""The PC-sampler ("Uncode"): position-aware, calibrated confidence (NEUIR/PC-Sampler ``src/generate.py``,
``generate_with_pc_sampler`` / ``pc_sampler_function``); see ``docs/samplers/confidence.md``.

Huang et al., "PC-Sampler: Position-Aware Calibration of Decoding Bias in Masked Diffusion Models"
(arXiv:2508.13021).

LLaDA's ``generate()`` (blocks, ``get_num_transfer_tokens`` schedule, proposals) with the confidence
replaced by

    score_i = exp(-lambda * (i - lo)) * min(alpha, -p_i(x̂_i) * log(f_bg(x̂_i) + 1e-9)),

i - lo the position's index within its block (0 at the block start, as upstream) and f_bg the
background token frequency; under the oracle f_bg is the chain's stationary law pi (upstream
counts token frequencies in a corpus).  The k best scores commit (ties by ``tie_rule``).
lambda = 0 removes the positional decay; a large lambda decodes nearly left to right.

A rule (:mod:`dllm_lit.samplers.rule`): LLaDA's with this score, written as ``score_from_probability`` (a function
of p(x̂) alone, which the engine reads from the draw's row).  The score can exceed max_v p (when -log pi > 1)
but not exp(-lambda (i - lo)) min(alpha, max_v p max_v -log(pi(v) + 1e-9)): the rule declares that ``score_bound``
and takes the bounded provider on the exact oracle.
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.decoding import with_tie_rule
from dllm_lit.samplers.llada import LLaDA

__all__ = ["PCSampler"]

#: upstream's epsilon inside log(f_bg + eps)
LOG_EPS = 1e-9


class PCSampler(LLaDA):
    """LLaDA low-confidence decoding with PC-sampler scores (see module docstring).

    Args:
        denoiser: frozen denoiser (None: the chain's exact oracle).
        steps: sampling steps (or a grid), divisible by the number of blocks.
        lambd: positional decay lambda >= 0 (upstream's evaluations: 0.25; function default 1).
        alpha: clip alpha > 0 of the calibrated confidence (upstream's evaluations: 10; function default 1).
        block_length: block length dividing T (None: one block, as upstream's evaluations).
        temperature: 0 = argmax proposals (upstream default); tau > 0 samples p^(1/tau).
        tie_rule: order of equal scores ("lowest", "highest", "random").
    """

    sampler_name = "pc_sampler"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, lambd: float = 0.25,
                 alpha: float = 10.0, block_length: int | None = None, temperature: float = 0.0,
                 tie_rule: str = "lowest") -> None:
        super().__init__(denoiser, steps, temperature=temperature, block_length=block_length, tie_rule=tie_rule)
        self.lambd = checks.real("lambd", lambd, 0.0)
        self.alpha = checks.real("alpha", alpha, 0.0, low_open=True)

    @property
    def name(self) -> str:
        base = "pc_sampler"
        if (self.lambd, self.alpha) != (0.25, 10.0):
            base += f"_l{self.lambd:g}_a{self.alpha:g}"
        return with_tie_rule(base, self.tie_rule)

    def check_options(self) -> None:
        if self.chain is None:
            raise ValueError("PCSampler needs the chain (its stationary law is the background frequency): call connect(chain)")
        super().check_options()

    def _neg_log_bg(self, device: torch.device) -> torch.Tensor:
        return -torch.log(self.chain.stationary.to(torch.float64).to(device) + LOG_EPS)

    def _decay(self, pos: torch.Tensor) -> torch.Tensor:
        i = pos % self.block_length if self.block_length else pos  # index within the block (blocks start at 0)
        return torch.exp(-self.lambd * i.to(torch.float64))

    def score_bound(self, pmax: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        # p(x̂) <= pmax and -log(pi(x̂) + eps) <= its maximum (rounding is monotone); 1e-12 covers an ulp of exp
        top = float(self._neg_log_bg(pmax.device).max().clamp(min=0.0))
        return self._decay(pos) * (pmax * top).clamp(max=self.alpha) * (1.0 + 1e-12)

    def score_from_probability(self, p_tok: torch.Tensor, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        # LLaDA's marked score calls this with p(x̂), so the engine may read p(x̂) from the draw's row
        calibrated = (p_tok.to(torch.float64) * self._neg_log_bg(tok.device)[tok]).clamp(max=self.alpha)
        return self._decay(pos) * calibrated
