"""First-hitting sampler (FHS); see ``docs/samplers/fhs.md``.

Zheng et al., "Masked Diffusion Models are Secretly Time-Agnostic Masked Models and Exploit
Inaccurate Categorical Sampling" (arXiv:2409.02908); followed in kuleshov-group/bd3lms
``diffusion.py`` (``sampling.first_hitting`` in ``_ddpm_caching_update`` / ``_semi_ar_sampler``).

Under MDLM's reverse process each masked position unmasks at an independent time, so with n
positions still masked at time t the next unmasking ("first hitting") happens at

    t' = t * u^(1/n),    u ~ Uniform(0, 1),

at one position chosen uniformly among the n, which takes a token drawn from its marginal
p(x0_l | z).  Each iteration therefore reveals exactly one position and one sequence of T masked
positions takes exactly T denoiser evaluations.  The time t' only enters a time-conditioned
learned denoiser; the exact oracle (and the :class:`~dllm_lit.denoisers.Denoiser` interface) has
no time argument, so t' is not computed here.

Because the revealed position does not depend on the drawn tokens, the T iterations are a
uniformly random order of the positions (within each block, blocks left to right as bd3lms'
semi-autoregressive loop) decoded one at a time - sequential exact conditionals, so the output
law is the chain's law exactly.  :func:`~dllm_lit.decoding.ordered_decoding.random_order_steps`
draws the order and :func:`~dllm_lit.decoding.ordered_decoding.decode_in_order` queries the
denoiser only at the revealed position of each iteration: O(B T V) per run.

Steps.  Upstream's loop runs ``num_steps`` iterations and stops once nothing is masked, so with
num_steps >= T the step count does not matter (num_steps < T would leave MASK tokens in the
output).  Here FHS always runs its T iterations: the ``steps`` value of a row is ignored and
randomness is keyed by T instead, so every row of a grid holds the same samples, and those equal
``MDLMPaper`` at steps = T draw for draw.  NFE = T per sequence.
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.decoding import decode_in_order, random_order_steps
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.draws import StepUniforms, categorical, drawn_log_prob

__all__ = ["FHS"]


class FHS(Sampler):
    """First-hitting sampler: one uniformly chosen masked position per iteration, token from its marginal.

    Args:
        denoiser: frozen denoiser (None: the chain's exact oracle).
        steps: accepted for grid compatibility and ignored (FHS always takes T iterations).
        block_length: bd3lms block size (blocks decoded left to right); None = one block of length T.
    """

    sampler_name = "fhs"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128,
                 block_length: int | None = None) -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.block_length = checks.optional_integer("block_length", block_length)

    def check_run(self, seq_len: int, steps: int | None) -> None:
        """block_length must divide the sequence length."""
        checks.divides("block_length", self.block_length, seq_len)

    def nfe(self, seq_len: int, steps: int | None) -> float | None:
        """T: one evaluation per revealed position."""
        return float(seq_len)

    def log_q_reason(self, steps: int | None) -> str | None:
        """None: the random order does not depend on the tokens (log q is recorded)."""
        return None

    def declares_exact(self, seq_len: int, steps: int | None) -> bool:
        """True: one position per iteration from its exact conditional (the chain's law)."""
        return True

    def generate_with_stats(self, indices: torch.Tensor, seq_len: int, steps: int | None, seed: int):
        log_q = self._log_q_buffer(indices, seq_len)
        x = self.generate(indices, seq_len, steps, seed, log_q=log_q)
        return x, self._stats(self.nfe(seq_len, steps), log_q, indices.numel())

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int | None, seed: int,
                 log_q: torch.Tensor | None = None) -> torch.Tensor:
        """Samples; with ``log_q`` ([B, T] float64) also the log-probability of every drawn token."""
        T = seq_len
        bl = self.block_length or T
        z = torch.full((indices.numel(), T), self.mask_id, dtype=torch.long, device=indices.device)
        decode = random_order_steps(seed, indices, T, T, 0, bl, T // bl)  # one position per iteration
        uni = StepUniforms(seed, indices, T)

        def draw(j: int, b: torch.Tensor, p: torch.Tensor, probs: torch.Tensor):
            tok = categorical(probs, uni.at(j, b, p))
            return tok if log_q is None else (tok, drawn_log_prob(probs, tok))

        return decode_in_order(self.denoiser, z, decode, T - 1, draw, log_q=log_q)
