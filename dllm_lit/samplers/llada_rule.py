"""LLaDA's low-confidence remasking written as a rule (:mod:`dllm_lit.samplers.rule`); draw for draw the built-in
``LLaDA(remasking="low_confidence")`` without a prompt (tested with ``torch.equal``).

Nie et al., "Large Language Diffusion Models" (arXiv:2502.09992).  Blocks of ``block_length`` left to right, the
block's even split of commits per step; at a step every masked position of the block proposes
x̂ ~ p^(1/temperature) (the argmax at temperature 0), scores it by its confidence c = p(x̂) <= max_v p (the
declared bound), and the k most confident commit.
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.samplers.draws import tempered_law
from dllm_lit.samplers.rule import RuleSampler
from dllm_lit.samplers.selection import TIE_RULES

__all__ = ["LLaDARule"]


class LLaDARule(RuleSampler):
    """LLaDA low-confidence remasking: ``temperature`` of the proposal, ``block_length`` (None: one block),
    ``tie_rule`` among equal confidences."""

    sampler_name = "llada_rule"
    bound = "pmax"  # c = p(x̂) <= max_v p

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, temperature: float = 0.0,
                 block_length: int | None = None, tie_rule: str = "lowest") -> None:
        super().__init__(denoiser, steps)
        self.temperature = checks.real("temperature", temperature, 0.0)
        self.block_length = checks.optional_integer("block_length", block_length)
        self.tie_rule = checks.choice("tie_rule", tie_rule, TIE_RULES)

    def blocks(self, seq_len: int) -> list[tuple[int, int]]:
        bl = self.block_length or seq_len
        checks.divides("block_length", bl, seq_len)
        return [(lo, lo + bl) for lo in range(0, seq_len, bl)]

    def propose(self, probs: torch.Tensor) -> torch.Tensor | None:
        return tempered_law(probs, self.temperature)  # p^(1/tau); None (argmax) at tau = 0

    def score(self, probs: torch.Tensor, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return probs.gather(1, tok[:, None]).squeeze(1).to(torch.float64)  # the confidence p(x̂)
