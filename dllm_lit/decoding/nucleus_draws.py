"""Token draws from the nucleus-filtered posterior at a step's decoded positions (ReMDM's speed path).

A draw is the float64 inverse CDF of q = top_p_filter(p(x0 | z)) (:mod:`.nucleus`) with the caller's uniforms;
with ``with_weight`` also the conf weight exp(-psi) of the drawn token, psi = q(token) / sum q (ReMDM's conf
variant).  On the CPU a local denoiser's rows are filtered and cumulated once per neighbourhood key
(:func:`~dllm_lit.decoding.providers.keyed_rows` decides from the denoiser and the device): once per run through a
memo (a small key range, :func:`~dllm_lit.decoding.providers.run_memo`), else once per step when at most half the
positions have distinct keys, and drawn from by :func:`~dllm_lit.samplers.draws.categorical_from_stored_cdf`.
Otherwise rows are computed per position, in row chunks (temporaries stay small;
:func:`~dllm_lit.samplers.draws.masked_posterior_chunks`).  The same rows, cdfs and targets every way, so the
same draws.
"""
from __future__ import annotations

import torch

from dllm_lit.decoding.nucleus import top_p_filter
from dllm_lit.decoding.providers import keyed_rows, run_memo
from dllm_lit.samplers.draws import (ROW_CHUNK_ELEMENTS, categorical, categorical_from_stored_cdf,
                                     masked_posterior_chunks)

__all__ = ["NucleusDraws"]


class NucleusDraws:
    """Draws from the ``top_p``-filtered posterior of ``denoiser`` (1 = no filtering), for one run on ``device``."""

    def __init__(self, denoiser, top_p: float, with_weight: bool, device: torch.device) -> None:
        self.denoiser, self.top_p, self.with_weight = denoiser, top_p, with_weight
        self.memo = run_memo(denoiser, self.features, device)

    def features(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """Posterior rows -> what a draw needs of them: the filtered row's float64 cdf and, with weights, the
        filtered row and its sum (the psi of a drawn token)."""
        q = top_p_filter(rows, self.top_p) if self.top_p < 1.0 else rows.to(torch.float64)
        return {"cdf": q.cumsum(-1), "q": q, "q_sum": q.sum(-1)} if self.with_weight else {"cdf": q.cumsum(-1)}

    def draw(self, z: torch.Tensor, b: torch.Tensor, p: torch.Tensor,
             u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Tokens drawn at the masked positions (b, p) of z with uniforms ``u``, and their conf weights exp(-psi)
        (None without ``with_weight``)."""
        den, n = self.denoiser, b.numel()
        query, keyed = keyed_rows(den, z, b, p, self.features, self.memo,
                                  max_rows=min(n // 2, ROW_CHUNK_ELEMENTS // den.vocab_size))
        if keyed is not None:
            f, index = keyed
            tok = categorical_from_stored_cdf(f["cdf"], index, u)
            if not self.with_weight:
                return tok, None
            q = f["q"]
            psi = q.reshape(-1).index_select(0, index * q.shape[1] + tok) / f["q_sum"].index_select(0, index)
            return tok, torch.exp(-psi)
        tok = torch.empty_like(b)
        weight = torch.empty(b.shape, dtype=torch.float64, device=b.device) if self.with_weight else None
        for sl, probs in masked_posterior_chunks(den, z, b, p, query):
            if self.top_p < 1.0:
                probs = top_p_filter(probs, self.top_p)
            tok[sl] = categorical(probs, u[sl])
            if self.with_weight:
                q = probs.to(torch.float64)
                psi = q.gather(1, tok[sl, None]).squeeze(1) / q.sum(-1)
                weight[sl] = torch.exp(-psi)
        return tok, weight
