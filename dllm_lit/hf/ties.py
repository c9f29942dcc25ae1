"""Logits whose softmax keeps the oracle's exact ties, and a seeded jitter that removes them.

The exact oracle makes mathematically equal probabilities that a learned model never makes, often in different
rows: with P(a, a) > 0 and a revealed ``a`` at position 1, p(x_0 = a | z) = pi(a) P(a, a) / pi(a) and
p(x_2 = a | z) = P(a, a) are equal but computed along different routes.  A sampler that ranks confidences
``softmax(logits)[x_i]`` across positions then breaks the tie by rounding, not by its own rule.

:func:`softmax_exact_logits` fixes both sources of rounding for the usual ``torch.softmax(logits, -1)`` in float32:

1. rows computed in float64 (error ~1e-16) are rounded to float32 targets t: equal probabilities become equal
   floats (unless one lies within ~1e-16 of a float32 rounding boundary);
2. the logits start at log t and each entry is moved by float32 ulps until ``torch.softmax`` of the whole row,
   on the same device, returns exactly t at that entry: equal targets give bit-equal softmax outputs whatever
   the rest of their rows.

:func:`jitter_logits` adds sigma N(0, 1) to every finite logit from a seeded generator: ties then have
probability zero, as under a learned model, at the price of a relative change of order sigma in every row.
"""
from __future__ import annotations

import torch

__all__ = ["softmax_exact_logits", "jitter_logits", "NUDGE_ROUNDS"]

#: rounds of per-entry corrections; rows converge in 1-3 rounds in practice (tests/test_oracle_model.py)
NUDGE_ROUNDS = 8


def softmax_exact_logits(probs64: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Float32 logits [n, W] with ``torch.softmax(logits, -1) == probs64.float()`` entrywise where reachable.

    ``probs64``: float64 rows [n, W] (zeros allowed: logit -inf, softmax exactly 0).  Returns (logits, misses):
    ``misses`` counts positive entries whose softmax still differs from the target by an ulp after
    :data:`NUDGE_ROUNDS` rounds (their probability is then within one float32 ulp of the target).
    """
    target = probs64.float()
    pos = target > 0
    logt = torch.where(pos, target.double().log(), float("-inf"))
    logits = logt.float()
    active = torch.arange(logits.shape[0], device=logits.device)
    for _ in range(NUDGE_ROUNDS):
        sub = logits.index_select(0, active)
        out = torch.softmax(sub, -1)
        tgt = target.index_select(0, active)
        miss = (out != tgt) & pos.index_select(0, active)
        bad_rows = miss.any(1)
        if not bool(bad_rows.any()):
            return logits, 0
        # the correction log t - log out, in float64; entries it would not move step one ulp toward the target
        corr = logt.index_select(0, active) - out.double().clamp_min(1e-300).log()
        moved = (sub.double() + corr).float()
        stuck = miss & (moved == sub)
        toward = torch.where(out < tgt, torch.full_like(sub, float("inf")), torch.full_like(sub, float("-inf")))
        moved = torch.where(stuck, torch.nextafter(sub, toward), moved)
        sub = torch.where(miss, moved, sub)
        logits.index_copy_(0, active, sub)
        active = active[bad_rows]
    misses = int(((torch.softmax(logits, -1) != target) & pos).sum())
    return logits, misses


def jitter_logits(logits: torch.Tensor, sigma: float, generator: torch.Generator) -> torch.Tensor:
    """``logits + sigma * N(0, 1)`` at finite entries (a -inf stays -inf), noise drawn on the CPU from
    ``generator`` so that the same seed gives the same noise on every device."""
    noise = torch.randn(logits.shape, generator=generator, dtype=torch.float64).to(logits.device)
    return torch.where(torch.isfinite(logits), logits + (sigma * noise).to(logits.dtype), logits)
