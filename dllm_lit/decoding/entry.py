"""The rule engine's one entry: the decoding path a rule's declarations choose (:class:`~dllm_lit.samplers.rule.RuleSampler`).

    stability_history > 0         -> :func:`~.stability_decoding.decode_stable`  (KLASS: previous rows kept)
    cuts                          -> :func:`~.cut_decoding.decode_cuts`          (MaskGIT: commit above a cut)
    order "random" + step_grid    -> :func:`~.providers.decode_step_grid`        (BD3: per-block step grids)
    order "random"                -> :func:`~.providers.decode_random_order`     (LLaDA's random remasking)
    otherwise                     -> :func:`~.providers.decode_rule`             (the k best scores commit)
"""
from __future__ import annotations

import torch

from dllm_lit.decoding.cut_decoding import decode_cuts
from dllm_lit.decoding.providers import decode_random_order, decode_rule, decode_step_grid
from dllm_lit.decoding.stability_decoding import decode_stable

__all__ = ["decode"]


def decode(rule, x: torch.Tensor, indices: torch.Tensor, seq_len: int, steps: int | None, seed: int,
           log_q: torch.Tensor | None = None) -> torch.Tensor | None:
    """Decode x [B, T] in place by the path ``rule`` declares (module docstring).  Returns the denoiser evaluations
    of each sequence (float64 [B]) where the path counts them per sequence (adaptive counts, stability, step grids),
    else None (the rule's fixed ``nfe``)."""
    if rule.stability_history:
        return decode_stable(rule, x, indices, steps, seed)
    grid = rule.order == "random" and rule.step_grid(seq_len, steps) is not None
    taken = torch.zeros(indices.numel(), dtype=torch.float64, device=indices.device) if rule.adaptive or grid else None
    if rule.cuts:
        decode_cuts(rule, x, indices, steps, seed)
    elif grid:
        decode_step_grid(rule, x, indices, steps, seed, log_q=log_q, taken=taken)
    elif rule.order == "random":
        decode_random_order(rule, x, indices, steps, seed, log_q=log_q)
    else:
        decode_rule(rule, x, indices, steps, seed, log_q=log_q, taken=taken)
    return taken
