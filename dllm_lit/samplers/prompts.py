"""LLaDA's prompts: a fixed ``prompt`` (token ids at positions 0..P-1), or the paper's conditional prompts ("Conditional
LLaDA" appendix): the one position-0 token a ``prompt_mode`` draws per sequence - from the chain's stationary law
pi, its head or its tail - with ``Stream.PROMPT`` uniforms (independent of ``steps``: every step count sees the same
prompt for a given sequence).  Prompt tokens never change.

Nie et al., "Large Language Diffusion Models" (arXiv:2502.09992).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from dllm_lit import rng
from dllm_lit.samplers.draws import categorical, drawn_log_prob

__all__ = ["PROMPT_MODES", "PROMPT_SET_MASS", "prompt_law", "check_prompt", "Prompted"]

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


def check_prompt(prompt, prompt_mode: str | None) -> list[int]:
    """The fixed prompt as a list of token ids ([] for None); refuses a non-list, negative or non-integer ids, and a
    prompt given together with a ``prompt_mode``."""
    if prompt is None:
        return []
    if isinstance(prompt, (str, bytes)) or not isinstance(prompt, Sequence):
        raise ValueError(f"prompt must be a list of token ids, got {prompt!r}")
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in prompt):
        raise ValueError(f"prompt token ids must be integers in [0, V), got {list(prompt)!r}")
    if prompt_mode is not None:
        raise ValueError("give either prompt or prompt_mode, not both (prompt_mode draws the position-0 token)")
    return list(prompt)


class Prompted:
    """Mixin of a sampler with a prompt: ``self.prompt`` (fixed token ids, from :func:`check_prompt`) or
    ``self.prompt_mode`` (a drawn position-0 token), both set by its ``__init__``."""

    prompt: list[int]
    prompt_mode: str | None

    def prompt_length(self) -> int:
        return 1 if self.prompt_mode is not None else len(self.prompt)

    def check_options(self) -> None:
        """Prompt ids must be tokens of the chain."""
        super().check_options()
        bad = [v for v in self.prompt if v >= self.vocab_size]
        if bad:
            raise ValueError(f"prompt token ids must lie in [0, V={self.vocab_size}), got {bad}")

    def initial_state(self, indices: torch.Tensor, seq_len: int, seed: int,
                      log_q: torch.Tensor | None = None) -> torch.Tensor:
        """All-MASK [B, T] with the prompt written in: the fixed ``prompt``, or per sequence a position-0 token drawn
        from :func:`prompt_law` of the chain's stationary law with ``Stream.PROMPT`` uniforms, its log-probability
        going to ``log_q[:, 0]`` (a fixed prompt is deterministic: log q = 0)."""
        B, dev = indices.numel(), indices.device
        x = torch.full((B, seq_len), self.mask_id, dtype=torch.long, device=dev)
        if self.prompt:
            x[:, : len(self.prompt)] = torch.tensor(self.prompt, dtype=torch.long, device=dev)
        elif self.prompt_mode is not None:
            law = prompt_law(self.chain.stationary, self.prompt_mode).to(dev)
            u = rng.uniform(rng.sequence_keys(seed, indices, rng.Stream.PROMPT), 0, 0)
            x[:, 0] = categorical(law.expand(B, -1), u)
            if log_q is not None:
                log_q[:, 0] = drawn_log_prob(law.expand(B, -1), x[:, 0])
        return x
