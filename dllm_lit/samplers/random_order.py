"""Statistics of the random-order samplers (LLaDA's random remasking, the paper's MDLM).

Such a run reveals, after a prompt of P positions, ``num_blocks`` blocks of ``block_length`` positions left to
right, each in rounds of uniformly random subsets (sizes: the transfer counts or a ``schedule``'s,
:mod:`.round_schedules`).  The order is drawn up front (:func:`~dllm_lit.decoding.random_order_steps`) and never
depends on the tokens, so

* the sandwich on the sequence KL re-draws it with fresh seeds (:func:`.path_sandwich.add_sandwich`; the SMC
  sandwich when the sampler gives a path law);
* without a prompt (a prompt conditions the law), the forward KL scores the run's exact chain samples in an order
  drawn with the run's seed (:func:`.reference_scoring.forward_stats`), predicted exactly by the random-order theory
  when the tokens are drawn from the denoiser's rows (:func:`.reference_scoring.random_order_theory`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from dllm_lit.decoding import random_order_steps
from dllm_lit.samplers.path_sandwich import add_sandwich
from dllm_lit.samplers.reference_scoring import LogLaw, forward_stats, random_order_theory
from dllm_lit.samplers.selection import transfer_schedule

__all__ = ["RandomRounds", "random_order_stats"]


@dataclass(frozen=True)
class RandomRounds:
    """A random-order run's layout and laws: ``prompt`` positions, then ``num_blocks`` blocks of ``block_length``
    revealed in rounds of ``counts[block]`` positions (None: the transfer counts); ``log_law`` the log q of a drawn
    token, ``predicted`` whether the theory predicts the forward KL (tokens drawn from the denoiser's rows),
    ``path_law`` a factory of the path law for the SMC sandwich (None: the order sandwich only)."""

    prompt: int
    block_length: int
    num_blocks: int
    counts: list[list[int]] | None
    log_law: LogLaw
    predicted: bool = True
    path_law: Callable[[], object] | None = None

    def order(self, seed: int, indices: torch.Tensor, steps: int, seq_len: int) -> torch.Tensor:
        """The decode step of every position [B, T] (-1 in the prompt) drawn with ``seed``."""
        return random_order_steps(seed, indices, steps, seq_len, self.prompt, self.block_length, self.num_blocks,
                                  counts=self.counts)

    def sizes(self, steps: int) -> list[list[int]]:
        """Each block's round sizes."""
        return self.counts or [transfer_schedule(self.block_length, steps // self.num_blocks)] * self.num_blocks


def random_order_stats(sampler, rounds: RandomRounds, indices: torch.Tensor, seq_len: int, steps: int, seed: int,
                       x: torch.Tensor, stats: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``stats`` of the run that drew ``x`` plus the sandwich and, with ``sampler.score_reference``, the forward KL
    and its prediction (module docstring)."""
    stats = add_sandwich(sampler, stats, x, lambda s: rounds.order(s, indices, steps, seq_len), steps - 1,
                         rounds.log_law, seed, rounds.path_law, indices)
    if sampler.score_reference and rounds.prompt == 0 and rounds.num_blocks > 0:
        theory = random_order_theory(sampler, [(rounds.block_length, blk > 0, "sizes", c)
                                               for blk, c in enumerate(rounds.sizes(steps))]) \
            if rounds.predicted else None
        stats.update(forward_stats(sampler.chain, sampler.denoiser, indices, seq_len, seed,
                                   rounds.order(seed, indices, steps, seq_len), steps - 1, rounds.log_law, theory))
    return stats
