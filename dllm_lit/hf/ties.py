"""Logits that keep the oracle's exact ties, and a seeded jitter that removes them.

The exact oracle makes mathematically equal probabilities that a learned model never makes, often in different
rows: with P(a, a) > 0 and a revealed ``a`` at position 1, p(x_0 = a | z) = pi(a) P(a, a) / pi(a) and
p(x_2 = a | z) = P(a, a) are equal but computed along different routes, so a float32 oracle gives them
different last bits, and a sampler that ranks confidences across positions breaks the tie by rounding.

:func:`exact_logits` computes rows in float64 (error ~1e-16) and rounds the probabilities to float32 before
the logarithm: mathematically equal probabilities get bit-equal logits (unless one lies within ~1e-16 of a
float32 rounding boundary), and identical rows are bit-identical.  A user's ``softmax`` still divides each row
by its own rounded sum, so equal entries of *different* rows can differ in the last bit after it: no choice of
logits prevents that for every row (the sum of a row is a different float for rows with different maxima).
docs/oracle_model.md gives the measured fractions and the recommendation: compare confidence-ranking code with a
tie jitter against the ``random`` tie rule.

:func:`jitter_logits` adds sigma N(0, 1) to every finite logit from a seeded generator: ties then have
probability zero, as under a learned model, at the price of a relative change of order sigma in every row.
"""
from __future__ import annotations

import torch

__all__ = ["exact_logits", "jitter_logits"]


def exact_logits(probs64: torch.Tensor) -> torch.Tensor:
    """Float32 logits ``log(float32(p))`` of float64 rows ``p`` [n, W] (zeros give -inf): the logarithm is taken
    in float64 of the float32-rounded probability, so equal rounded probabilities give equal logits."""
    t = probs64.float().double()
    return torch.where(t > 0, t.log(), float("-inf")).float()


def jitter_logits(logits: torch.Tensor, sigma: float, generator: torch.Generator) -> torch.Tensor:
    """``logits + sigma * N(0, 1)`` at finite entries (a -inf stays -inf), noise drawn on the CPU from
    ``generator`` so that the same seed gives the same noise on every device."""
    noise = torch.randn(logits.shape, generator=generator, dtype=torch.float64).to(logits.device)
    return torch.where(torch.isfinite(logits), logits + (sigma * noise).to(logits.dtype), logits)
