"""Dilated unmasking scheduler (DUS); see ``docs/samplers/dus.md``.

Luxembourg, Permuter and Nachmani, "Plan for Speed: Dilated Scheduling for Masked Diffusion Language Models"
(arXiv:2506.19037); followed in omerlux/DUS ``generate.py`` (``generate_scheduled`` with ``scheduler='dilated'``,
``dilated_unmask_levels``, ``merge_last_level``).

The T positions are cut into blocks of length L, decoded left to right.  Inside a block the positions are revealed
coarse to fine, in levels fixed before sampling (they never look at the denoiser):

    stride s_0 = L // base^skip,  s_{r+1} = s_r // base  while s_r >= 1;
    level r = the offsets o in [0, L) with o % s_r == 0 not revealed by an earlier level,

any offsets left form a last level, and a last level smaller than the one before it is merged into it.  With
L = 8, base 2: {0, 4}, {2, 6}, {1, 3, 5, 7}: log_base(L) levels, each one denoiser call whose revealed tokens are
spread apart.  Every token of a level is drawn from its marginal p(x_i | z) at ``temperature`` (upstream's Gumbel
race exp(logit) / (-log u)^tau has the law p^(1/tau)); committed tokens never change.

Because the order is fixed, the output law is prod_levels prod_{i in level} p~(x_i | x_{earlier levels}) and
``log_q`` (the path probability) is recorded.  ``steps`` is the row's call budget: the block length is the divisor
L of T whose NFE = (T / L) * levels(L) is the largest within the budget (the whole sequence as one block when even
that exceeds it).  Decoding runs through :func:`~dllm_lit.decoding.ordered_decoding.decode_in_order` (Stream.TOKEN
uniforms at (global level, position)).
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.decoding import decode_in_order
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.draws import StepUniforms, tempered_draw

__all__ = ["DUS", "dilated_levels", "dus_block_length", "dus_decode_steps"]


def dilated_levels(length: int, base: int = 2, skip_exp: int = 1) -> list[list[int]]:
    """The reveal levels (offsets in [0, length)) of one block, coarse to fine, last level merged if smaller."""
    if base == 1:
        return [list(range(length))]
    stride = length // base ** skip_exp
    seen: set[int] = set()
    levels: list[list[int]] = []
    while stride >= 1:
        lev = [o for o in range(0, length, stride) if o not in seen]
        if lev:
            levels.append(lev)
            seen.update(lev)
        stride //= base
    rest = [o for o in range(length) if o not in seen]
    if rest:
        levels.append(rest)
    if len(levels) >= 2 and len(levels[-1]) < len(levels[-2]):
        levels[-2].extend(levels.pop())
    return levels


def dus_block_length(seq_len: int, steps: int, base: int = 2, skip_exp: int = 1) -> int:
    """The divisor L of ``seq_len`` with the largest NFE (seq_len / L) * levels(L) <= ``steps`` (ties: the longest L);
    ``seq_len`` if none."""
    best, best_nfe = seq_len, -1
    for L in range(1, seq_len + 1):
        if seq_len % L:
            continue
        nfe = (seq_len // L) * len(dilated_levels(L, base, skip_exp))
        if best_nfe <= nfe <= steps:  # ties: the longer block (more dilation)
            best, best_nfe = L, nfe
    return best


def dus_decode_steps(seq_len: int, block_length: int, base: int = 2, skip_exp: int = 1) -> tuple[torch.Tensor, int]:
    """(decode step of every position [T], number of steps): blocks left to right, levels inside each block."""
    levels = dilated_levels(block_length, base, skip_exp)
    step = torch.empty(seq_len, dtype=torch.long)
    for blk in range(seq_len // block_length):
        for r, lev in enumerate(levels):
            step[torch.tensor(lev) + blk * block_length] = blk * len(levels) + r
    return step, (seq_len // block_length) * len(levels)


class DUS(Sampler):
    """Dilated unmasking: a fixed coarse-to-fine order of spread-out positions per block, tokens from marginals.

    Args:
        denoiser: frozen denoiser (None: the world's exact oracle).
        steps: per row, the denoiser-call budget that sets the block length (module docstring).
        base: dilation base (>= 2): the stride shrinks by this factor from level to level.
        skip_exp: the first stride is L // base^skip_exp (upstream ``base_skip``, default 1).
        temperature: token temperature (0: argmax; upstream's default is 0, the sampler-centric runs use 1).
    """

    sampler_name = "dus"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, base: int = 2,
                 skip_exp: int = 1, temperature: float = 1.0) -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.base = checks.integer("base", base, 2)
        self.skip_exp = checks.integer("skip_exp", skip_exp, 1)
        self.temperature = checks.real("temperature", temperature, 0.0)

    def block_length(self, seq_len: int, steps: int) -> int:
        return dus_block_length(seq_len, steps, self.base, self.skip_exp)

    def nfe(self, seq_len: int, steps: int | None) -> float | None:
        """(T / L) * levels(L): one call per level of every block."""
        L = self.block_length(seq_len, steps)
        return float((seq_len // L) * len(dilated_levels(L, self.base, self.skip_exp)))

    def log_q_reason(self, steps: int | None) -> str | None:
        """None: the order is fixed before sampling."""
        return None

    def generate_with_stats(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int):
        log_q = self._log_q_buffer(indices, seq_len)
        x = self.generate(indices, seq_len, steps, seed, log_q=log_q)
        return x, self._stats(self.nfe(seq_len, steps), log_q, indices.numel())

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int,
                 log_q: torch.Tensor | None = None) -> torch.Tensor:
        B, dev = indices.numel(), indices.device
        order, n = dus_decode_steps(seq_len, self.block_length(seq_len, steps), self.base, self.skip_exp)
        z = torch.full((B, seq_len), self.mask_id, dtype=torch.long, device=dev)
        tok_u = StepUniforms(seed, indices, steps)

        def draw(j: int, b: torch.Tensor, p: torch.Tensor, probs: torch.Tensor):
            return tempered_draw(probs, tok_u.at(j, b, p), self.temperature, with_log_prob=log_q is not None)

        return decode_in_order(self.denoiser, z, order.to(dev).expand(B, seq_len), n - 1, draw, log_q=log_q)
