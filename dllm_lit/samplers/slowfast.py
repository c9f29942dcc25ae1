"""SlowFast sampling: slow exploratory calls that find a span, fast calls that fill it; see
``docs/samplers/slowfast.md``.

Wei et al., "Accelerating Diffusion Large Language Models with SlowFast Sampling: The Three Golden Principles"
(arXiv:2506.10848); followed in the authors' ``generate_slow_fast_sampling`` (slow_fast_sampling ``generate.py``).

Blocks of L left to right.  Inside a block, sub-cycles, each starting at the offset e reached by the last one
(0 at the block's start).  Every call proposes x^_i ~ p(x_i | z)^(1/tau) at each block position, confidence
c_i = p(x^_i | z) at masked positions.

* Slow phase: ``k_exploration_steps`` calls.  Each estimates the span end est = clamp(e + d, 1, L), with d = 1 +
  the largest scope offset (from e) whose confidence is >= ``cycle_threshold`` (d = 1 if none; certainty and
  position), and keeps the last ``stability_window`` estimates; once that many are kept, the span end is the
  last estimate when their population std is < ``stability_std`` (convergence: the estimate is frozen) and their
  floored mean otherwise (frozen at the last slow call).  Each slow call also commits, in [e, L), every masked
  proposal with c_i >= ``high_threshold`` when there are more than one, else the most confident one.
* Fast phase: while [e, end) has a mask, a call commits, in [e, end), every masked proposal with c_i >=
  ``high_threshold`` when there are more than one, else the most confident one.  Then e = end.

Departures: upstream runs the fast phase until every sequence of the batch has filled its span (and writes a token
over a revealed one in the sequences that already have); here each sequence stops on its own.  Its safety cap of
256 sub-cycles is not needed (every sub-cycle commits a token).  Ties: the lower position.  Upstream's prefix
truncation of fast calls is a cache; every call counts.  NFE = calls, counted per sequence (adaptive).
Randomness: proposals from Stream.TOKEN uniforms at (the sequence's call count, position).
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.samplers.base import NFECountingSampler
from dllm_lit.samplers.draws import StepUniforms, tempered_draw
from dllm_lit.samplers.wino import stable_ranks

__all__ = ["SlowFast"]


class SlowFast(NFECountingSampler):
    """SlowFast: per sub-cycle, slow calls that estimate a span end by confidence, fast calls that fill the span.

    Args:
        denoiser: frozen denoiser (None: the world's exact oracle).
        steps: keys the randomness only (a grid gives replicates); the step count is adaptive.
        block_length: block size (None: one block of length T); must divide T.
        k_exploration_steps: slow calls per sub-cycle (upstream 6).
        cycle_threshold: confidence that extends the span estimate (upstream ``cycle_len_confidence_threshold``,
            0.3).
        stability_window: estimates kept for the convergence test (upstream 2).
        stability_std: population std below which the estimate is frozen (upstream 1.0).
        high_threshold: confidence of a parallel commit (upstream 0.9).
        temperature: proposal temperature (upstream 0, argmax).
    """

    sampler_name = "slowfast"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, block_length: int | None = None,
                 k_exploration_steps: int = 6, cycle_threshold: float = 0.3, stability_window: int = 2,
                 stability_std: float = 1.0, high_threshold: float = 0.9, temperature: float = 1.0) -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.block_length = checks.optional_integer("block_length", block_length)
        self.k_exploration_steps = checks.integer("k_exploration_steps", k_exploration_steps)
        self.cycle_threshold = checks.real("cycle_threshold", cycle_threshold, 0.0, 1.0)
        self.stability_window = checks.integer("stability_window", stability_window)
        self.stability_std = checks.real("stability_std", stability_std, 0.0)
        self.high_threshold = checks.real("high_threshold", high_threshold, 0.0, 1.0)
        self.temperature = checks.real("temperature", temperature, 0.0)

    def check_run(self, seq_len: int, steps: int | None) -> None:
        checks.divides("block_length", self.block_length, seq_len)

    def generate_with_nfe(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int):
        self.check_run(seq_len, steps)
        B, T, dev = indices.numel(), seq_len, indices.device
        L = self.block_length or T
        M, nb, K, W = self.mask_id, T // L, self.k_exploration_steps, self.stability_window
        z = torch.full((B, T), M, dtype=torch.long, device=dev)
        blk = torch.zeros(B, dtype=torch.long, device=dev)
        start = torch.zeros(B, dtype=torch.long, device=dev)       # e: the offset the last sub-cycle reached
        end = torch.full((B,), L, dtype=torch.long, device=dev)    # the span end of the current sub-cycle
        kstep = torch.zeros(B, dtype=torch.long, device=dev)       # slow calls made in this sub-cycle (K: fast)
        hist = torch.zeros(B, W, dtype=torch.float64, device=dev)  # the last W estimates (newest last)
        count = torch.zeros(B, dtype=torch.long, device=dev)
        fixed = torch.zeros(B, dtype=torch.bool, device=dev)       # span end frozen
        nfe = torch.zeros(B, dtype=torch.long, device=dev)
        tok_u = StepUniforms(seed, indices, steps)
        col = torch.arange(L, device=dev)
        while True:
            # a fast phase whose span is full ends the sub-cycle; a full block moves on to the next block
            masked_blk = self._block_masks(z, blk, col, L, nb)
            span = (col[None, :] >= start[:, None]) & (col[None, :] < end[:, None])
            over = (blk < nb) & (kstep >= K) & ~(masked_blk & span).any(1)
            start = torch.where(over, end, start)
            kstep[over], count[over], fixed[over] = 0, 0, False
            full = over & ~masked_blk.any(1)
            blk[full] += 1
            start[full], end[full] = 0, L
            rows = torch.nonzero(blk < nb).squeeze(1)
            if rows.numel() == 0:
                break
            R = rows.numel()
            pos = blk[rows, None] * L + col[None, :]
            bb = rows[:, None].expand(R, L)
            zb = z[bb, pos]
            masked = zb == M
            probs = self._masked_rows(z, bb, pos, masked)
            step = nfe[rows, None].expand(R, L)
            x0 = tempered_draw(probs.view(R * L, -1), tok_u.at(step.reshape(-1), bb.reshape(-1), pos.reshape(-1)),
                               self.temperature).view(R, L)
            conf = torch.where(masked, probs.gather(2, x0[..., None]).squeeze(2), float("-inf"))
            e, slow = start[rows], kstep[rows] < K
            scope = col[None, :] >= e[:, None]
            # slow: the span-end estimate (only while not frozen)
            est_new = self._estimate(conf, scope, e, L)
            upd = slow & ~fixed[rows]
            h = torch.where(upd[:, None], torch.cat([hist[rows, 1:], est_new[:, None].double()], 1), hist[rows])
            c = torch.where(upd, (count[rows] + 1).clamp(max=W), count[rows])
            mean = h.mean(1).floor().long().clamp(1, L)
            stable = h.std(1, unbiased=False) < self.stability_std if W > 1 else torch.ones_like(upd)
            last_call = kstep[rows] == K - 1
            judged = upd & (c >= W)
            new_end = torch.where(judged, torch.where(stable, est_new, mean), end[rows])
            new_fixed = fixed[rows] | (judged & (stable | last_call))
            # fallback after the last slow call with fewer than W estimates: their mean, or L // 2 with none
            short = slow & last_call & ~new_fixed
            kept = torch.arange(W, device=dev)[None, :] >= (W - c)[:, None]
            short_mean = (h * kept).sum(1).div(c.clamp(min=1)).floor().long().clamp(1, L)
            new_end = torch.where(short, torch.where(c > 0, short_mean, L // 2), new_end)
            hist[rows], count[rows], end[rows], fixed[rows] = h, c, new_end, new_fixed | short
            # commits: in [e, L) for a slow call, in [e, end) for a fast one
            region = scope & (slow[:, None] | (col[None, :] < end[rows][:, None])) & masked
            score = torch.where(region, conf, float("-inf"))
            high = region & (score >= self.high_threshold)
            top = (stable_ranks(score, descending=True) == 0) & region
            commit = torch.where((high.sum(1) > 1)[:, None], high, top)
            z[bb, pos] = torch.where(commit, x0, zb)
            kstep[rows] = torch.where(slow, kstep[rows] + 1, kstep[rows])
            nfe[rows] += 1
        return z, nfe.to(torch.float64)

    def _masked_rows(self, z: torch.Tensor, bb: torch.Tensor, pos: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
        """float64 [R, L, V]: p(x_i | z) at the masked block positions, uniform rows at revealed ones (unused)."""
        V = self.vocab_size
        out = torch.full((*masked.shape, V), 1.0 / V, dtype=torch.float64, device=z.device)
        if masked.any():
            out[masked] = self.denoiser.probs_at(z, bb[masked], pos[masked]).to(torch.float64)
        return out

    def _block_masks(self, z: torch.Tensor, blk: torch.Tensor, col: torch.Tensor, L: int, nb: int) -> torch.Tensor:
        """[B, L]: which positions of each sequence's current block are masked (none once past the last block)."""
        pos = blk.clamp(max=nb - 1)[:, None] * L + col[None, :]
        return (z.gather(1, pos) == self.mask_id) & (blk < nb)[:, None]

    def _estimate(self, conf: torch.Tensor, scope: torch.Tensor, e: torch.Tensor, L: int) -> torch.Tensor:
        """Span end est = clamp(e + d, 1, L): d = 1 + the farthest scope offset with confidence >= the cycle
        threshold, 1 if none, 0 for an empty scope [e, L)."""
        col = torch.arange(L, device=conf.device)
        hit = scope & (conf >= self.cycle_threshold)
        far = torch.where(hit, col[None, :], -1).amax(1)
        d = torch.where(hit.any(1), far + 1 - e, torch.where(e < L, 1, 0))
        return (e + d).clamp(1, L)
