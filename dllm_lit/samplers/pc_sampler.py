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
"""
from __future__ import annotations

import torch

from dllm_lit import checks, rng
from dllm_lit.decoding import (block_bounds, check_blocks, confidence, decode_blocks, has_max_prob_bound,
                               proposal_features, proposal_widths, propose_tokens, ranking_options, with_tie_rule)
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.draws import StepUniforms, tempered_law
from dllm_lit.samplers.selection import transfer_schedule

__all__ = ["PCSampler"]

#: upstream's epsilon inside log(f_bg + eps)
LOG_EPS = 1e-9


class PCSampler(Sampler):
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
        super().__init__(denoiser=denoiser, steps=steps)
        self.lambd = checks.real("lambd", lambd, 0.0)
        self.alpha = checks.real("alpha", alpha, 0.0, low_open=True)
        ranking_options(self, temperature, tie_rule, block_length)

    @property
    def name(self) -> str:
        base = "pc_sampler"
        if (self.lambd, self.alpha) != (0.25, 10.0):
            base += f"_l{self.lambd:g}_a{self.alpha:g}"
        return with_tie_rule(base, self.tie_rule)

    def check_options(self) -> None:
        if self.chain is None:
            raise ValueError("PCSampler needs the chain (its stationary law is the background frequency): call connect(chain)")

    def check_run(self, seq_len: int, steps: int | None) -> None:
        """block_length divides T and steps is divisible by the number of blocks (upstream's assertions)."""
        check_blocks(seq_len, 0, self.block_length, steps)

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        x = torch.full((indices.numel(), seq_len), self.mask_id, dtype=torch.long, device=indices.device)
        blocks = block_bounds(seq_len, 0, self.block_length)
        if not blocks:
            return x
        tau, tok_u = self.temperature, StepUniforms(seed, indices, steps)
        neg_log_bg = -torch.log(self.chain.stationary.to(torch.float64).to(x.device) + LOG_EPS)
        lambd, alpha = self.lambd, self.alpha

        def score(view) -> torch.Tensor:
            calibrated = (confidence(view) * neg_log_bg[view.tok]).clamp(max=alpha)
            return torch.exp(-lambd * (view.p - view.lo).to(torch.float64)) * calibrated

        bl = blocks[0][1] - blocks[0][0]
        top = float(neg_log_bg.max().clamp(min=0.0))

        def score_bound(bound: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
            # p(x̂) <= bound and -log(pi(x̂) + eps) <= top: the score's factors at their largest (rounding is
            # monotone); 1e-12 covers an ulp of exp evaluated in another array
            decay = torch.exp(-lambd * (pos - pos.div(bl, rounding_mode="floor") * bl).to(torch.float64))
            return decay * (bound * top).clamp(max=alpha) * (1.0 + 1e-12)

        # proposals are drawn only where the score can be among the k best (as LLaDA's confidences); sub-batches
        # sized by what the cache stores per position: the bound alone where rows are recomputed where read (a
        # proposal law over a denoiser with a row-free bound), else the rows and their cdf
        bounded = tau > 0 and has_max_prob_bound(self.denoiser)
        decode_blocks(
            self.denoiser, x, blocks,
            features=lambda probs: proposal_features(probs, tau, cdf=False),
            widths=proposal_widths(self.vocab_size, tau, cdf=False),
            propose=lambda view: propose_tokens(view, tau, tok_u), score=score,
            tie_rule=self.tie_rule, tie_u=StepUniforms(seed, indices, steps, stream=rng.Stream.ORDER),
            schedule=[transfer_schedule(bl, steps // len(blocks))] * len(blocks), use_cache=self.use_cache,
            width=None if bounded else 2 * self.vocab_size + 2, bound="pmax", fresh=("probs",),
            law=(lambda probs: tempered_law(probs, tau)) if tau > 0 else None, score_bound=score_bound)
        return x
