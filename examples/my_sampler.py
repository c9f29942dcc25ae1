"""A native dllm_lit sampler that lives in the user's own package (docs/architecture.md, "A sampler in your own
package"): left to right, ceil(T / steps) positions per step, each drawn from its own posterior.

    python cli.py predict --model examples.my_sampler.LeftToRight --model.steps '[4, 16]' --data.seq_len 64
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.samplers import Sampler
from dllm_lit.samplers.draws import StepUniforms, tempered_draw


class LeftToRight(Sampler):
    sampler_name = "left_to_right"

    def __init__(self, denoiser=None, steps: int | list[int] = 16, temperature: float = 1.0) -> None:
        super().__init__(denoiser, steps)
        self.temperature = checks.real("temperature", temperature, 0.0)

    def check_run(self, seq_len: int, steps: int | None) -> None:
        if steps > seq_len:
            raise ValueError(f"steps ({steps}) must not exceed data.seq_len ({seq_len})")

    def log_q_reason(self, steps: int | None) -> str | None:
        return None  # the order does not depend on the tokens: log q is recorded, seq_kl_upper is available

    def generate(self, indices, seq_len, steps, seed, log_q=None) -> torch.Tensor:
        B, width = indices.numel(), -(-seq_len // steps)
        z = torch.full((B, seq_len), self.mask_id, dtype=torch.long, device=indices.device)
        uni = StepUniforms(seed, indices, steps)  # U(seed, sequence index, Stream.TOKEN, steps, step, position)
        for j, lo in enumerate(range(0, seq_len, width)):
            pos = torch.arange(lo, min(lo + width, seq_len), device=z.device)
            b, p = torch.arange(B, device=z.device).repeat_interleave(pos.numel()), pos.repeat(B)
            probs = self.denoiser.probs_at(z, b, p)  # p(x0 | z) at these positions: [n, V]
            tok, lq = tempered_draw(probs, uni.at(j, b, p), self.temperature, with_log_prob=True)
            z[b, p] = tok
            if log_q is not None:
                log_q[b, p] = lq
        return z

    def generate_with_stats(self, indices, seq_len, steps, seed):
        log_q = self._log_q_buffer(indices, seq_len)
        x = self.generate(indices, seq_len, steps, seed, log_q=log_q)
        return x, self._stats(self.nfe(seq_len, steps), log_q, indices.numel())
