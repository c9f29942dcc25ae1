"""Fast-dLLM's threshold and factor parallel decoding written as an adaptive rule (:mod:`dllm_lit.samplers.rule`);
draw for draw the built-in :class:`~dllm_lit.samplers.fast_dllm.FastDLLM` (tested with ``torch.equal``).

Wu et al., "Fast-dLLM: Training-free Acceleration of Diffusion LLM by Enabling KV Cache and Parallel Decoding"
(arXiv:2505.22618).  LLaDA's proposals and confidences c = p(x̂) in blocks of ``block_length``; at each step the
n most confident commit, n = max(1, #{c >= threshold}) (threshold rule) or the leading ranks r with
c_(r) >= 1 - factor / (r + 1) (factor rule, :func:`~dllm_lit.samplers.fast_dllm.factor_count`).
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.samplers.fast_dllm import factor_count, threshold_count
from dllm_lit.samplers.llada_rule import LLaDARule

__all__ = ["FastDLLMRule"]


class FastDLLMRule(LLaDARule):
    """LLaDA's rule with Fast-dLLM's adaptive count: exactly one of ``threshold`` (in (0, 1]) and ``factor`` (> 0)."""

    sampler_name = "fast_dllm_rule"

    def __init__(self, denoiser=None, steps: int | list[int] = 128, threshold: float | None = 0.9,
                 factor: float | None = None, block_length: int | None = 32, temperature: float = 0.0,
                 tie_rule: str = "lowest") -> None:
        super().__init__(denoiser, steps, temperature=temperature, block_length=block_length, tie_rule=tie_rule)
        if (threshold is None) == (factor is None):
            raise ValueError(f"give exactly one of threshold and factor, got threshold={threshold!r}, factor={factor!r}")
        self.threshold = None if threshold is None else checks.probability("threshold", threshold)
        self.factor = None if factor is None else checks.real("factor", factor, 0.0, low_open=True)

    def adaptive_count(self, sorted_scores: torch.Tensor, n_masked: torch.Tensor) -> torch.Tensor:
        if self.factor is not None:
            return factor_count(sorted_scores, n_masked, self.factor)
        return threshold_count(sorted_scores, self.threshold)
