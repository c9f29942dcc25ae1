"""LLaDA's conditional prompts (the paper's "Conditional LLaDA" appendix): the law of the one position-0 token a
``prompt_mode`` draws - the chain's stationary law pi, its head or its tail.

Nie et al., "Large Language Diffusion Models" (arXiv:2502.09992).
"""
from __future__ import annotations

import torch

__all__ = ["PROMPT_MODES", "PROMPT_SET_MASS", "prompt_law"]

PROMPT_MODES = (None, "pi", "pi_head", "pi_tail")
#: cumulative mass of pi that defines the head / tail prompt sets (paper's conditional LLaDA)
PROMPT_SET_MASS = 0.3


def prompt_law(pi: torch.Tensor, mode: str, mass: float = PROMPT_SET_MASS) -> torch.Tensor:
    """Law of the position-0 prompt token for ``prompt_mode`` in {"pi", "pi_head", "pi_tail"}.

    "pi": pi itself.  "pi_head" / "pi_tail": sort tokens by pi descending / ascending (ties by
    token id, stable), keep those whose cumulative mass is <= ``mass`` (up to 1e-12) plus the next one, and
    renormalise pi on that set.  Returns float64 [V].
    """
    pi = pi.to(torch.float64)
    pi = pi / pi.sum()
    if mode == "pi":
        return pi
    if mode not in ("pi_head", "pi_tail"):
        raise ValueError(f"prompt_mode must be one of {PROMPT_MODES}, got {mode!r}")
    order = torch.sort(pi, descending=(mode == "pi_head"), stable=True).indices
    cum = pi[order].cumsum(0)
    n_keep = min(int((cum <= mass + 1e-12).sum()) + 1, pi.numel())  # tolerance: 0.1 + 0.2 <= 0.3
    keep = order[:n_keep]
    out = torch.zeros_like(pi)
    out[keep] = pi[keep]
    if out.sum() <= 0:  # only zero-probability tokens in the set (pathological pi)
        raise ValueError(f"prompt_mode={mode!r}: the selected token set has zero stationary mass")
    return out / out.sum()
