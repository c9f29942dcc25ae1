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
Randomness: proposals from Stream.TOKEN uniforms at (the sequence's call count, position).  An editing rule that
reads masked rows only and revisits no token: the engine runs the calls (:func:`dllm_lit.decoding.decode_edits`),
:meth:`SlowFast.edit` decides each and ends a block once its last sub-cycle is over.
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.decoding import EditCall, stable_ranks
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.samplers.edit_rule import EditRule

__all__ = ["SlowFast"]


class SlowFast(EditRule):
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
    edit_law = None  # its own edit hook
    reads_revealed = False

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

    def begin(self, batch: int, block_length: int, device: torch.device) -> dict[str, torch.Tensor]:
        """At a block's start: e = 0, span end L, no slow call made, no estimate kept, nothing frozen."""
        zero = torch.zeros(batch, dtype=torch.long, device=device)
        return {"start": zero, "end": torch.full_like(zero, block_length), "kstep": zero.clone(),
                "hist": torch.zeros(batch, self.stability_window, dtype=torch.float64, device=device),
                "count": zero.clone(), "fixed": torch.zeros(batch, dtype=torch.bool, device=device)}

    def edit(self, call: EditCall, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """A slow call (estimate the span end, commit in [e, L)) or a fast one (commit in [e, end)); then a fast
        phase whose span is full ends the sub-cycle, and the block when the block is full too."""
        rows, masked, K, W = call.rows, call.masked, self.k_exploration_steps, self.stability_window
        R, L = masked.shape
        col = torch.arange(L, device=masked.device)
        start, end, kstep, hist, count, fixed = (state[k][rows] for k in ("start", "end", "kstep", "hist", "count",
                                                                          "fixed"))
        conf = torch.where(masked, call.prob, float("-inf"))
        e, slow = start, kstep < K
        scope = col[None, :] >= e[:, None]
        # slow: the span-end estimate (only while not frozen)
        est_new = self._estimate(conf, scope, e, L)
        upd = slow & ~fixed
        h = torch.where(upd[:, None], torch.cat([hist[:, 1:], est_new[:, None].double()], 1), hist)
        c = torch.where(upd, (count + 1).clamp(max=W), count)
        mean = h.mean(1).floor().long().clamp(1, L)
        stable = h.std(1, unbiased=False) < self.stability_std if W > 1 else torch.ones_like(upd)
        last_call = kstep == K - 1
        judged = upd & (c >= W)
        new_end = torch.where(judged, torch.where(stable, est_new, mean), end)
        new_fixed = fixed | (judged & (stable | last_call))
        # fallback after the last slow call with fewer than W estimates: their mean, or L // 2 with none
        short = slow & last_call & ~new_fixed
        kept = torch.arange(W, device=h.device)[None, :] >= (W - c)[:, None]
        short_mean = (h * kept).sum(1).div(c.clamp(min=1)).floor().long().clamp(1, L)
        end = torch.where(short, torch.where(c > 0, short_mean, L // 2), new_end)
        fixed = new_fixed | short
        # commits: in [e, L) for a slow call, in [e, end) for a fast one
        region = scope & (slow[:, None] | (col[None, :] < end[:, None])) & masked
        score = torch.where(region, conf, float("-inf"))
        high = region & (score >= self.high_threshold)
        top = (stable_ranks(score, descending=True) == 0) & region
        commit = torch.where((high.sum(1) > 1)[:, None], high, top)
        new = torch.where(commit, call.proposal, call.tokens)
        kstep = torch.where(slow, kstep + 1, kstep)
        # a fast phase whose span is full ends the sub-cycle; a full block ends the block
        left = new == self.mask_id
        span = (col[None, :] >= start[:, None]) & (col[None, :] < end[:, None])
        over = (kstep >= K) & ~(left & span).any(1)
        start = torch.where(over, end, start)
        kstep, count, fixed = torch.where(over, 0, kstep), torch.where(over, 0, c), fixed & ~over
        for k, v in (("start", start), ("end", end), ("kstep", kstep), ("hist", h), ("count", count),
                     ("fixed", fixed)):
            state[k][rows] = v
        return new, over & ~left.any(1)

    def _estimate(self, conf: torch.Tensor, scope: torch.Tensor, e: torch.Tensor, L: int) -> torch.Tensor:
        """Span end est = clamp(e + d, 1, L): d = 1 + the farthest scope offset with confidence >= the cycle
        threshold, 1 if none, 0 for an empty scope [e, L)."""
        col = torch.arange(L, device=conf.device)
        hit = scope & (conf >= self.cycle_threshold)
        far = torch.where(hit, col[None, :], -1).amax(1)
        d = torch.where(hit.any(1), far + 1 - e, torch.where(e < L, 1, 0))
        return (e + d).clamp(1, L)
