"""MDLM's training objective and the forward (masking) process, with counter-based randomness.

Linear schedule alpha_t = 1 - t: each token of x0 is masked independently with probability t.
The continuous-time NELBO of absorbing diffusion (Sahoo et al., "Simple and Effective Masked
Diffusion Language Models", arXiv:2406.07524, Eq. 10) with this schedule is

    L = E_{t ~ U(0, 1)} E_{z_t ~ q(.|x0)} [ sum_{i masked} (1 / t) (-log p_theta(x0_i | z_t)) ],

reported per token (divided by T).  As upstream (``diffusion.py``, ``_sample_t``), t is drawn
low-discrepancy within a batch, t_b = (u + b) / B mod 1 with one uniform u per batch, then mapped
to [t_min, 1] (``sampling_eps`` = 1e-3 upstream).  SUBS: the model's logits are restricted to
the V real tokens (no mass on MASK) before the log-softmax.

Every draw is keyed by (seed, sequence index, position) through ``dllm_lit.rng`` (stream NOISE):
the noised version of a sequence does not depend on the batch it is in (the low-discrepancy t
depends on the batch's first index and the sequence's rank in the batch).
"""
from __future__ import annotations

import torch

from dllm_lit import rng

__all__ = ["noise", "masked_kl", "subs_log_probs", "nelbo"]


def noise(x: torch.Tensor, indices: torch.Tensor, seed: int, mask_id: int, t_min: float = 1e-3
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Noised copies z_t of x [B, T] and their times t [B] (float64), see module docstring."""
    B, T = x.shape
    keys = rng.sequence_keys(seed, indices.to(x.device), rng.Stream.NOISE)
    u = rng.uniform(keys[:1], 0, 0)  # one uniform per batch (key of its first sequence)
    t = ((u + torch.arange(B, device=x.device, dtype=torch.float64)) / B) % 1.0
    t = (1.0 - t_min) * t + t_min
    coin = rng.uniform(keys[:, None], 1, torch.arange(T, device=x.device)[None, :])
    return torch.where(coin < t[:, None], torch.full_like(x, mask_id), x), t


def subs_log_probs(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """log-softmax over the first V logits (SUBS: no mass on MASK), in float32."""
    return torch.log_softmax(logits[..., :vocab_size].float(), dim=-1)


def nelbo(logp: torch.Tensor, x: torch.Tensor, z: torch.Tensor, t: torch.Tensor, mask_id: int) -> torch.Tensor:
    """Per-sequence NELBO per token [B]: (1/T) sum_{masked i} -log p(x0_i | z_t) / t."""
    nll = -logp.gather(-1, x[..., None]).squeeze(-1)
    masked = (z == mask_id).to(nll.dtype)
    return (nll * masked).sum(1) / t.to(nll.dtype) / x.shape[1]


def masked_kl(gamma: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """KL(gamma || q) per row, [n], in float64; gamma [n, V] probabilities, logq [n, V] log-probabilities.

    Terms with gamma = 0 contribute 0; a q of zero where gamma > 0 gives +inf.
    """
    g = gamma.to(torch.float64)
    lq = logq.to(torch.float64)
    return (torch.special.xlogy(g, g) - torch.where(g > 0, g * lq, torch.zeros_like(g))).sum(-1)
