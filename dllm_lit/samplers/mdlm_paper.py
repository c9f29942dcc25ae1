"""The sampler the paper's tables call "MDLM".

The paper ran LLaDA's ``generate()`` with ``remasking='random'``, temperature 1 and one block
covering the sequence - not MDLM's own ddpm_cache sampler (:class:`dllm_lit.samplers.mdlm.MDLM`).
With n = T masked positions and S = steps, step i commits exactly

    k_i = T // S + [i < T % S]

positions chosen uniformly at random among the still-masked ones, each taking a token drawn
(temperature 1) from its own marginal p(x0_l | z); committed tokens never change and there is
no final step.  With steps = T (one position per step) this is exact sequential sampling of
the conditionals in a random order, so its output law is the chain's law.

Implementation: the random subsets are drawn as one uniformly random order of the positions
consumed k_i at a time (the same law; :func:`~dllm_lit.decoding.ordered_decoding.random_order_steps`,
shared with LLaDA's ``random`` remasking, so ``LLaDA(remasking="random", temperature=1)`` gives the
same draws), and the denoiser is queried only at the k_i committed positions (O(k V) per step).
See ``docs/samplers/llada.md``.

``schedule`` replaces the k_i: ``"optimal"`` (the round sizes minimising the exact expected KL for the
run's chain, T and steps), ``"tc"`` / ``"dtc"`` (chain-free templates minimising the TC / DTC bound) or an explicit list (:mod:`~dllm_lit.samplers.round_schedules`).  Its rows also
report the forward KL (:mod:`~dllm_lit.samplers.reference_scoring`) and, with the exact oracle, its
prediction (``docs/theory.md``).
"""
from __future__ import annotations

import torch

from dllm_lit.decoding import decode_in_order
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.draws import StepUniforms, categorical, drawn_log_prob
from dllm_lit.samplers.selection import transfer_schedule
from dllm_lit.samplers.path_law import RandomSubsetLaw
from dllm_lit.samplers.random_order import RandomRounds, random_order_stats
from dllm_lit.samplers.round_schedules import check_round_counts, check_schedule, round_counts

__all__ = ["MDLMPaper"]


class MDLMPaper(Sampler):
    """LLaDA generate() with remasking='random', temperature 1, one block (the paper's "MDLM").

    Args:
        denoiser: frozen denoiser (None: the chain's exact oracle).
        steps: sampling steps (or a grid); T / steps positions are committed per step.
        schedule: "uniform" (T / steps per step), "optimal" (exact-KL-optimal round sizes for the chain),
            "tc" / "dtc" (the templates minimising the TC / DTC bound, docs/theory.md) or a list of round sizes (one per step, summing to T).
    """

    sampler_name = "mdlm_paper"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128,
                 schedule: str | list[int] = "uniform") -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.schedule = check_schedule(schedule)

    def check_run(self, seq_len: int, steps: int | None) -> None:
        """An explicit schedule has one round size per step, summing to T; a computed one fits (memory, time)."""
        if steps is not None:
            check_round_counts(self.schedule, self.chain, seq_len, steps)

    def counts(self, seq_len: int, steps: int) -> list[int] | None:
        """Round sizes of a run (None: the uniform transfer counts)."""
        return None if self.schedule == "uniform" else round_counts(self.schedule, self.chain, seq_len, steps)

    def nfe(self, seq_len: int, steps: int | None) -> float | None:
        """Steps that commit at least one token: min(steps, T) for the uniform schedule (docs/nfe.md)."""
        if self.schedule == "uniform":
            return float(min(steps, seq_len))
        return float(sum(1 for k in self.counts(seq_len, steps) if k > 0))

    def rounds(self, seq_len: int, steps: int) -> RandomRounds:
        """One block of T positions, no prompt, tokens drawn from the denoiser's rows."""
        counts = self.counts(seq_len, steps)
        return RandomRounds(0, seq_len, 1, None if counts is None else [counts],
                            lambda j, b, p, probs, tok: drawn_log_prob(probs, tok),
                            path_law=lambda: self.path_law(seq_len, steps))

    def log_q_reason(self, steps: int | None) -> str | None:
        """None: the random order does not depend on the tokens (log q is recorded)."""
        return None

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int,
                 log_q: torch.Tensor | None = None) -> torch.Tensor:
        """Samples; with ``log_q`` ([B, T] float64) also the log-probability of every drawn token."""
        z = torch.full((indices.numel(), seq_len), self.mask_id, dtype=torch.long, device=indices.device)
        decode = self.rounds(seq_len, steps).order(seed, indices, steps, seq_len)
        uni = StepUniforms(seed, indices, steps)

        def draw(j: int, b: torch.Tensor, p: torch.Tensor, probs: torch.Tensor):
            tok = categorical(probs, uni.at(j, b, p))
            return tok if log_q is None else (tok, drawn_log_prob(probs, tok))

        return decode_in_order(self.denoiser, z, decode, steps - 1, draw, log_q=log_q)

    def path_law(self, seq_len: int, steps: int) -> RandomSubsetLaw:
        """The step law over reveal states (:mod:`~dllm_lit.samplers.path_law`): uniform k_i-subsets of the masked
        positions, tokens from the denoiser's rows."""
        counts = self.counts(seq_len, steps) or transfer_schedule(seq_len, steps)
        return RandomSubsetLaw(self.denoiser, counts, [(0, seq_len)] * steps,
                               lambda j, b, p, probs, tok: drawn_log_prob(probs, tok))

    def declares_exact(self, seq_len: int, steps: int | None) -> bool:
        """One position per step (every round size <= 1): exact sequential sampling of the conditionals."""
        return steps is not None and max(self.counts(seq_len, steps) or transfer_schedule(seq_len, steps)) <= 1

    def generate_with_stats(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int):
        log_q = self._log_q_buffer(indices, seq_len)
        x = self.generate(indices, seq_len, steps, seed, log_q=log_q)
        stats = self._stats(self.nfe(seq_len, steps), log_q, indices.numel())
        return x, random_order_stats(self, self.rounds(seq_len, steps), indices, seq_len, steps, seed, x, stats)
