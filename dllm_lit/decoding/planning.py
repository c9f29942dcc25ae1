"""P2's re-planning law (``edit_law = "plan"``): every step re-plans which positions stay masked, revealed ones
included (the sampler and its sources: :mod:`dllm_lit.samplers.p2`).

Step i = 1..S, with m_i = ``rule.masked_after(T, S, i)`` positions left masked after it: a proposal x^_j at every
masked j with weight w_j = log p(x^_j | z); a revealed j keeps its token with weight eta log p(z_j | z_{-j}); keys
k_j = w_j + s G_j (G_j standard Gumbel from Stream.ORDER uniforms at (step, position), s = ``gumbel_scale``); the
m_i lowest keys become (or stay) MASK (ties: the lower position first), the rest take their proposal / keep their
token.  On a denoiser whose rows are memoised by neighbourhood the step draws only at masked positions that can be
kept (:class:`~.p2_bounded.BoundedPlanning`, the same samples).  NFE = S.
"""
from __future__ import annotations

import torch

from dllm_lit import rng
from dllm_lit.decoding.p2_bounded import BoundedPlanning
from dllm_lit.decoding.row_providers import LeaveOneOutRows, draw_stored
from dllm_lit.decoding.selection_kernels import lowest
from dllm_lit.samplers.draws import StepUniforms
from dllm_lit.util.indices import flat_nonzero

__all__ = ["decode_plan"]


def decode_plan(rule, indices: torch.Tensor, seq_len: int, steps: int, seed: int,
                cache: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples and NFE of the planning rule ``rule`` (module docstring)."""
    B, T, S, M, dev = indices.numel(), seq_len, steps, rule.mask_id, indices.device
    z = torch.full((B, T), M, dtype=torch.long, device=dev)
    b = torch.arange(B, device=dev).repeat_interleave(T)
    p = torch.arange(T, device=dev).repeat(B)
    tok_u = StepUniforms(seed, indices, steps)
    key_u = StepUniforms(seed, indices, steps, stream=rng.Stream.ORDER)
    memo = LeaveOneOutRows.provider_for(rule.denoiser, dev, cache) == "memo"
    bounded = BoundedPlanning(rule, tok_u, dev) if memo else None
    loo = None if memo else LeaveOneOutRows(rule.denoiser, rule.row_features, dev, cache=cache)
    for i in range(1, S + 1):
        m = rule.masked_after(T, S, i)
        noise = None
        if m > 0 and rule.gumbel_scale > 0:
            noise = (bounded.uniforms(key_u, i - 1, T) if bounded is not None else key_u.grid(i - 1, T))
            noise.log_().neg_().log_().neg_()  # G = -log(-log u), in place
            if rule.gumbel_scale != 1.0:
                noise.mul_(rule.gumbel_scale)
        if bounded is not None:
            z = bounded.step(z, i, m, noise)
            continue
        feat, row = loo.rows(z, b, p)                                                    # row of each of B T
        masked = z == M
        x0 = z.clone()
        at = flat_nonzero(masked)
        x0.view(-1)[at] = draw_stored(feat, row[at], tok_u.at(i - 1, b[at], p[at]))
        w = feat["probs"][row, x0.view(-1)].view(B, T).log()
        if rule.eta != 1.0:  # eta = 0 leaves revealed weights at 0 (also where the probability is 0)
            w = torch.where(masked, w, 0.0 if rule.eta == 0 else rule.eta * w)
        z = torch.where(lowest(w if noise is None else w + noise, m), M, x0) if m > 0 else x0
    return z, torch.full((B,), float(S), dtype=torch.float64, device=dev)
