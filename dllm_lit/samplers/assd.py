"""Any-subset speculative decoding (ASSD); see ``docs/samplers/assd.md``.

Guo and Ermon, "Reviving Any-Subset Autoregressive Models with Principled Parallel Sampling and Speculative
Decoding" (arXiv:2504.20456); followed in gabeguo/any-order-speculative-decoding ``speculative_decoding.py``.

A uniformly random order sigma of the T positions is drawn once.  With n positions decoded (sigma(<n) revealed in
z) one iteration takes the next window W = sigma(n), ..., sigma(n + k' - 1), k' = min(k, T - n):

* draft (one denoiser call): d_i ~ q_i = p(x_{W_i} | z), independently for i < k';
* verify (one call, an any-subset model's single pass): p_i = p(x_{W_i} | z, d_0..d_{i-1}) for 1 <= i < k'
  (p_0 = q_0: the first draft is always accepted);
* accept d_1, d_2, ... in turn while u_i < p_i(d_i) / q_i(d_i); at the first rejection m the token at W_m is drawn
  from (p_m - q_m)_+ renormalised and the rest of the window is discarded (speculative sampling).

Speculative sampling makes every committed token a draw from its exact conditional given sigma(<i), so the output
law given sigma is prod_i p(x_{sigma(i)} | x_{sigma(<i)}) = the world's law: ASSD is exact for any k (the
goodness-of-fit test and the exact-sample floor of its KL rows).  ``log_q`` records log p_i of every committed
token, which therefore equals log p(x) under the world.

The ``steps`` value of a row sets the draft length k = ceil(T / steps) (steps = the iteration count were every
draft accepted); the iteration count and NFE are adaptive: 2 per iteration with k' > 1, 1 when k' = 1 (the draft
is then the verified conditional, upstream's last-token shortcut applied to every such window).

Randomness: sigma from Stream.ORDER keys at step 0; draft / accept / residual uniforms from Stream.TOKEN at (the
sequence's own iteration count, position, slot 0 / 1 / 2): a sequence's draws depend only on (seed, index).
"""
from __future__ import annotations

import math

import torch

from dllm_lit import rng
from dllm_lit.decoding import draft_rows
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.draws import StepUniforms, categorical
from dllm_lit.samplers.selection import topk_stable

__all__ = ["ASSD", "draft_length"]

def draft_length(seq_len: int, steps: int) -> int:
    """k = ceil(T / steps), at least 1."""
    return max(1, math.ceil(seq_len / steps))


class ASSD(Sampler):
    """Any-subset speculative decoding over a random order, drafting from the denoiser itself (exact).

    Args:
        denoiser: frozen denoiser (None: the world's exact oracle); its p(x_i | z) plays the any-subset model.
        steps: per row, sets the draft length k = ceil(T / steps).
    """

    sampler_name = "assd"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128) -> None:
        super().__init__(denoiser=denoiser, steps=steps)

    def log_q_reason(self, steps: int | None) -> str | None:
        """None: the order is drawn up front; log q = sum of the verified conditionals of the committed tokens."""
        return None

    def declares_exact(self, seq_len: int, steps: int | None) -> bool:
        """True: speculative acceptance keeps the exact conditionals' law for every draft length."""
        return True

    def generate_with_nfe(self, indices, seq_len, steps, seed):
        x, stats = self.generate_with_stats(indices, seq_len, steps, seed)
        return x, stats["nfe"]

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        return self.generate_with_stats(indices, seq_len, steps, seed)[0]

    def generate_with_stats(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int):
        B, T, dev = indices.numel(), seq_len, indices.device
        k = draft_length(T, steps)
        z = torch.full((B, T), self.mask_id, dtype=torch.long, device=dev)
        log_q = self._log_q_buffer(indices, T)
        nfe = torch.zeros(B, dtype=torch.float64, device=dev)
        keys = rng.uniform(StepUniforms(seed, indices, steps, stream=rng.Stream.ORDER).keys[:, None], 0,
                           torch.arange(T, device=dev)[None, :])
        sigma = torch.cat([topk_stable(keys, T), torch.full((B, k), -1, dtype=torch.long, device=dev)], 1)
        tok_u = StepUniforms(seed, indices, steps)
        n = torch.zeros(B, dtype=torch.long, device=dev)      # tokens decoded per sequence
        it = torch.zeros(B, dtype=torch.long, device=dev)     # iterations per sequence (randomness key)
        col = torch.arange(k, device=dev)
        while True:
            rows = torch.nonzero(n < T).squeeze(1)
            if rows.numel() == 0:
                break
            R = rows.numel()
            W = sigma[rows[:, None], n[rows, None] + col[None, :]]            # [R, k], -1 past the end
            valid = W >= 0
            Wc = W.clamp(min=0)
            bb = rows[:, None].expand(R, k)
            step = it[rows, None].expand(R, k)
            q = self._rows(z, bb[valid], Wc[valid])                           # draft conditionals [n, V]
            d = torch.zeros(R, k, dtype=torch.long, device=dev)
            d[valid] = categorical(q, tok_u.at(step[valid], bb[valid], Wc[valid], 0))
            Q = torch.ones(R, k, q.shape[1], dtype=torch.float64, device=dev)
            Q[valid] = q
            P = Q.clone()                                                      # P[:, 0] = Q[:, 0]
            wide = valid[:, 1] if k > 1 else torch.zeros(R, dtype=torch.bool, device=dev)
            if bool(wide.any()):
                P[wide, 1:] = draft_rows(self.denoiser, z, rows[wide], W[wide], d[wide], valid[wide])
            nfe[rows] += torch.where(wide, 2.0, 1.0).to(torch.float64)
            pd, qd = P.gather(2, d[..., None]).squeeze(2), Q.gather(2, d[..., None]).squeeze(2)
            accept = tok_u.at(step, bb, Wc, 1) * qd < pd
            accept[:, 0] = True
            accept &= valid
            m = torch.where(accept.all(1), k, (~accept).int().argmax(1))       # first rejection (or k)
            m = torch.minimum(m, valid.sum(1))
            keep = col[None, :] < m[:, None]
            tok = d.clone()
            rej = m < valid.sum(1)                                             # a rejection inside the window
            if bool(rej.any()):
                r = torch.nonzero(rej).squeeze(1)
                res = (P[r, m[r]] - Q[r, m[r]]).clamp(min=0)
                res = torch.where(res.sum(1, keepdim=True) > 0, res, P[r, m[r]])  # p = q: never reached in law
                tok[r, m[r]] = categorical(res, tok_u.at(step[r, 0], rows[r], Wc[r, m[r]], 2))
                keep[r, m[r]] = True
            kb, kp = bb[keep], Wc[keep]
            z[kb, kp] = tok[keep]
            log_q[kb, kp] = P[keep].gather(1, tok[keep][:, None]).squeeze(1).log()
            n[rows] += keep.sum(1)
            it[rows] += 1
        return z, self._stats(nfe, log_q, B)

    # ------------------------------------------------------------------ denoiser queries
    def _rows(self, z: torch.Tensor, b: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """p(x_p | z) at masked (b, p): float64 [n, V]."""
        return self.denoiser.probs_at(z, b, p).to(torch.float64)
