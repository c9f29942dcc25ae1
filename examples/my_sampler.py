"""A native dllm_lit sampler that lives in the user's own package (docs/architecture.md, "Adding a sampler"): left
to right, ceil(T / steps) positions per step, each drawn from its own posterior.  Written as a rule: the engine
supplies the loop, the keyed randomness, the posterior provider, NFE and log q.

    python cli.py predict --model examples.my_sampler.LeftToRight --model.steps '[4, 16]' --data.seq_len 64
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.samplers.draws import tempered_law
from dllm_lit.samplers.rule import RuleSampler


class LeftToRight(RuleSampler):
    sampler_name = "left_to_right"

    def __init__(self, denoiser=None, steps: int | list[int] = 16, temperature: float = 1.0) -> None:
        super().__init__(denoiser, steps)
        self.temperature = checks.real("temperature", temperature, 0.0)

    def check_run(self, seq_len: int, steps: int | None) -> None:
        if steps > seq_len:
            raise ValueError(f"steps ({steps}) must not exceed data.seq_len ({seq_len})")
        super().check_run(seq_len, steps)

    def log_q_reason(self, steps: int | None) -> str | None:
        return None  # the order does not depend on the tokens: log q is recorded, seq_kl_upper is available

    def propose(self, probs: torch.Tensor) -> torch.Tensor | None:
        return tempered_law(probs, self.temperature)  # p^(1/temperature); None (the argmax) at 0

    def score(self, probs: torch.Tensor, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return -pos.to(torch.float64)  # leftmost first

    def counts(self, n: int, steps: int) -> list[int]:
        width = -(-n // steps)
        return [max(0, min(width, n - i * width)) for i in range(steps)]
