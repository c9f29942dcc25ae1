"""MDLM's ancestral sampler (``ddpm_cache`` predictor); see ``docs/samplers/mdlm.md``.

Time grid ``t_j = 1 - j (1 - 1e-5)/steps`` for j = 0..steps-1, ``s = t - dt``.  With the
linear move chance (alpha_t = 1 - t), at a masked position

    P(x_s = v) = p(x0 = v | z_t) (t - s) / t,      P(x_s = MASK) = s / t,

and unmasked positions are carried over.  After the last step every remaining MASK is filled
with argmax_v p(x0 = v | z) (``noise_removal``), all at once.

Because the stay-masked probability s/t does not depend on the denoiser, a masked position's
unmasking step is an independent draw with P(step j) = t_j - t_{j+1} and P(final fill) = t_min
(see :mod:`dllm_lit.decoding.ordered_decoding`).  ``decoding="ordered"`` (default) draws it once
per position and decodes with O(k V) work per step; ``decoding="stepwise"`` follows upstream's
loop literally (a fresh coin per masked position per step, O(B T) per step).  Both have the same
law (tested against the exact DP law).
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.decoding import coin_decode_steps, decode_in_order
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.util.indices import nonzero_pairs
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.draws import StepUniforms, argmax_fill, argmax_log_prob, categorical, drawn_log_prob
from dllm_lit.samplers.path_sandwich import add_sandwich
from dllm_lit.samplers.reference_scoring import forward_stats
from dllm_lit.samplers.schedules import time_grid

__all__ = ["MDLM", "DECODING"]

DECODING = ("ordered", "stepwise")


class MDLM(Sampler):
    """MDLM ddpm_cache sampler with the final argmax fill (see module docstring)."""

    sampler_name = "mdlm"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, decoding: str = "ordered") -> None:
        """``decoding``: "ordered" (precomputed unmasking steps, O(k V) per step) or "stepwise" (upstream's loop)."""
        super().__init__(denoiser=denoiser, steps=steps)
        self.decoding = checks.choice("decoding", decoding, DECODING)

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        return self.generate_with_nfe(indices, seq_len, steps, seed)[0]

    def generate_with_nfe(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Samples and, per sequence, the denoiser evaluations of upstream's ddpm_cache loop.

        ddpm_cache reuses p(x0 | z) while the state is unchanged, so a sequence (as a batch of one)
        costs one evaluation per step at which at least one of its positions unmasks, plus one for
        the final argmax fill if a position is still masked (docs/nfe.md).
        """
        if self.decoding == "ordered":
            return self._generate_ordered(indices, seq_len, steps, seed)
        return self._generate_stepwise(indices, seq_len, steps, seed)

    def log_q_reason(self, steps: int | None) -> str | None:
        """None: the unmasking steps do not depend on the tokens (log q is recorded; the argmax fill adds 0)."""
        return None

    def generate_with_stats(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int):
        log_q = self._log_q_buffer(indices, seq_len)
        run = self._generate_ordered if self.decoding == "ordered" else self._generate_stepwise
        x, nfe = run(indices, seq_len, steps, seed, log_q=log_q)
        stats = self._stats(nfe, log_q, indices.numel())

        def order(s: int) -> torch.Tensor:
            return coin_decode_steps(StepUniforms(s, indices, steps).grid(0, seq_len, slot=2),
                                     time_grid(steps).to(indices.device))

        def log_law(j: int, b: torch.Tensor, p: torch.Tensor, probs: torch.Tensor, tok: torch.Tensor) -> torch.Tensor:
            if j == steps:
                return argmax_log_prob(probs, tok)
            return drawn_log_prob(probs, tok)

        stats = add_sandwich(self, stats, x, order, steps, log_law, seed)
        if not self.score_reference:
            return x, stats
        # forward KL: the reference samples scored in an order of the same law (the argmax fill makes it
        # formally infinite when a filled token disagrees: floored, see reference_scoring; no prediction)
        stats.update(forward_stats(self.chain, self.denoiser, indices, seq_len, seed, order(seed), steps, log_law, None))
        return x, stats

    def _generate_ordered(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int,
                          log_q: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        den = self.denoiser
        B, T, M = indices.numel(), seq_len, self.mask_id
        uni = StepUniforms(seed, indices, steps)
        ts = time_grid(steps).to(indices.device)
        # P(decode step <= j) = 1 - t_{j+1}; beyond: the final fill (prob t_min)
        decode_step = coin_decode_steps(uni.grid(0, T, slot=2), ts)

        def draw(j: int, b: torch.Tensor, p: torch.Tensor, probs: torch.Tensor):
            if j == steps:  # the argmax fill: a deterministic choice, log q = 0
                tok = probs.argmax(-1)
                return tok if log_q is None else (tok, torch.zeros(tok.shape, dtype=torch.float64, device=tok.device))
            tok = categorical(probs, uni.at(j, b, p, slot=1))
            return tok if log_q is None else (tok, drawn_log_prob(probs, tok))

        z = torch.full((B, T), M, dtype=torch.long, device=indices.device)
        x = decode_in_order(den, z, decode_step, steps, draw, log_q=log_q)
        used = torch.zeros((B, steps + 1), dtype=torch.bool, device=z.device).scatter_(1, decode_step, True)
        return x, used.sum(1).to(torch.float64)

    def _generate_stepwise(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int,
                           log_q: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        den = self.denoiser
        B, T, M = indices.numel(), seq_len, self.mask_id
        z = torch.full((B, T), M, dtype=torch.long, device=indices.device)
        uni = StepUniforms(seed, indices, steps)
        ts = time_grid(steps).tolist()
        nfe = torch.zeros(B, dtype=torch.float64, device=z.device)
        for j in range(steps):
            t, s = ts[j], ts[j + 1]
            u = uni.grid(j, T)
            move = (z == M) & (u < (t - s) / t)
            b, p = nonzero_pairs(move)
            if b.numel() == 0:
                continue
            nfe += move.any(1)
            probs = den.probs_at(z, b, p)
            z[b, p] = categorical(probs, uni.at(j, b, p, slot=1))
            if log_q is not None:
                log_q[b, p] = drawn_log_prob(probs, z[b, p])
        nfe += (z == M).any(1)  # the argmax fill below adds log q = 0
        return argmax_fill(den, z), nfe
