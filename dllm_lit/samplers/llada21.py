"""LLaDA 2.1 block refinement with token editing; see ``docs/samplers/llada21.md``.

LLaDA 2.1's decoding as diffusers runs it: ``BlockRefinementScheduler.step`` (``threshold``, ``editing_threshold``)
in ``schedulers/scheduling_block_refinement.py`` and the loop of ``pipelines/llada2/pipeline_llada2.py``
(``max_post_steps``).

Blocks of ``block_length`` left to right, S = steps / blocks steps per block with LLaDA's transfer counts k_j.  One
call scores every position of the block: a token x^_i is drawn from p^(1/tau) (argmax at tau = 0) with confidence
c_i = its probability under that law, where p is p(x_i | z) at a masked position and the leave-one-out
p(x_i | z_{-i}) at a revealed one (what an editing model is trained to predict; :mod:`.row_providers` answers it).  Then

* mask filling (while the block has masks, step j): commit every masked i with c_i > ``threshold`` if there are at
  least k_j of them, else the min(k_j, #masked) most confident;
* editing (``editing_threshold`` not None): replace every revealed token with x^_i when x^_i differs from it and
  c_i > ``editing_threshold``;
* once the block has no mask, up to ``max_post_steps`` more calls edit it; the first call that edits nothing ends
  the block (and a block without masks ends at once when editing is off).

Ties: the lower position first.  NFE = calls, per sequence (adaptive: threshold commits end the mask phase early,
edits extend the post phase).  Randomness: Stream.TOKEN uniforms at (the sequence's call count, position).
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.decoding import BoundedRefinement, LeaveOneOutRows, check_blocks, check_leave_one_out, draw_stored
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.util.indices import flat_nonzero
from dllm_lit.samplers.base import NFECountingSampler
from dllm_lit.samplers.draws import StepUniforms, tempered_law
from dllm_lit.samplers.selection import topk_stable_mask, transfer_schedule

__all__ = ["LLaDA21"]


class LLaDA21(NFECountingSampler):
    """Threshold block refinement with token editing (T2T) from leave-one-out confidences.

    Args:
        denoiser: frozen denoiser answering leave-one-out posteriors (None: the world's exact oracle).
        steps: mask-filling steps in all (a grid: one row each); must be divisible by the number of blocks.
        block_length: block size; None = one block of length T.
        threshold: commit masked proposals above this confidence (diffusers / LLaDA 2.1 default 0.7).
        editing_threshold: replace revealed tokens whose proposal beats this confidence (default 0.5); None: off.
        max_post_steps: editing calls allowed per block once it has no mask (default 16).
        temperature: proposal temperature (diffusers' default 0, argmax).
    """

    sampler_name = "llada21"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, block_length: int | None = None,
                 threshold: float = 0.7, editing_threshold: float | None = 0.5, max_post_steps: int = 16,
                 temperature: float = 1.0) -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.block_length = checks.optional_integer("block_length", block_length)
        self.threshold = checks.real("threshold", threshold, 0.0, 1.0)
        self.editing_threshold = None if editing_threshold is None else \
            checks.real("editing_threshold", editing_threshold, 0.0, 1.0, low_open=True)
        self.max_post_steps = checks.integer("max_post_steps", max_post_steps, 0)
        self.temperature = checks.real("temperature", temperature, 0.0)

    @property
    def name(self) -> str:
        return self.sampler_name if self.editing_threshold is not None else f"{self.sampler_name}_noedit"

    def check_options(self) -> None:
        check_leave_one_out(self.denoiser, "LLaDA21")

    def check_run(self, seq_len: int, steps: int | None) -> None:
        check_blocks(seq_len, 0, self.block_length, steps)

    def row_features(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """What a call reads of a float64 row: the proposal's cdf, its law and the law's sum (the confidence is
        law[x] / sum); at tau = 0 the argmax and the row itself.  ``cmax`` = max law / sum bounds every confidence
        of the row (division is monotone in IEEE arithmetic), so a revealed position whose ``cmax`` does not exceed
        the editing threshold cannot be edited and draws no proposal (its uniform is its own: no other draw moves)."""
        law = tempered_law(rows, self.temperature)
        if law is None:
            return {"argmax": rows.argmax(-1), "law": rows, "cmax": rows.amax(-1)}
        total = law.sum(-1)
        return {"cdf": law.cumsum(-1), "law": law, "sum": total, "cmax": law.amax(-1) / total}

    def generate_with_nfe(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int, cache: bool = True):
        """Samples and NFE; ``cache=False`` computes every call's rows afresh (identical draws, tested).  Where the
        engine memoises rows by neighbourhood key (the exact oracle on the CPU) a call draws only where a proposal
        can commit or edit (:mod:`.llada21_bounded`: the same draws, tested)."""
        B, T, dev, M = indices.numel(), seq_len, indices.device, self.mask_id
        L = self.block_length or T
        nb = T // L
        S = steps // nb
        k_of = torch.tensor(transfer_schedule(L, S), dtype=torch.long, device=dev)
        z = torch.full((B, T), M, dtype=torch.long, device=dev)
        blk = torch.zeros(B, dtype=torch.long, device=dev)
        j = torch.zeros(B, dtype=torch.long, device=dev)        # mask-filling steps in the block
        post = torch.zeros(B, dtype=torch.long, device=dev)     # post-mask calls in the block
        left = torch.full((B,), L, dtype=torch.long, device=dev)  # masks left in the block
        nfe = torch.zeros(B, dtype=torch.long, device=dev)
        tok_u = StepUniforms(seed, indices, steps)
        col = torch.arange(L, device=dev)
        memo = LeaveOneOutRows.provider_for(self.denoiser, dev, cache) == "memo"
        bounded = BoundedRefinement(self, z, tok_u) if memo else None
        loo = None if memo else LeaveOneOutRows(self.denoiser, self.row_features, dev, cache=cache)
        while True:
            rows = flat_nonzero(blk < nb)
            if rows.numel() == 0:
                break
            has_mask = left[rows] > 0  # read before the call, as the pipeline's masks_remaining
            post[rows] += (~has_mask).long()
            edited = torch.zeros_like(has_mask)
            if self.editing_threshold is not None or bool(has_mask.any()):  # else a call changes nothing
                k = k_of[j[rows].clamp(max=S - 1)]
                if bounded is None:
                    pos = blk[rows, None] * L + col[None, :]
                    idx, tok, edited, filled = self._direct_call(loo, z, rows, pos, has_mask, k, nfe, tok_u)
                else:
                    idx, tok, edited, filled = bounded.call(z, rows, blk[rows] * L, L, has_mask, k, left[rows], nfe)
                z.view(-1)[idx] = tok
                left[rows] -= filled
                if bounded is not None:
                    bounded.changed(z, idx)
            nfe[rows] += 1
            j[rows] += has_mask.long()
            # the pipeline's check_block_should_continue: a filling call ends the block if it was the S-th; a
            # post-mask call if it edited nothing (always, editing off) or was the (max_post_steps + 1)-th
            done = torch.where(has_mask, j[rows] >= S, ~edited | (post[rows] > self.max_post_steps))
            which = torch.zeros_like(blk, dtype=torch.bool).index_fill_(0, rows[done], True)
            self._next_block(which, blk, j, post)
            left.masked_fill_(which, L)
        return z, nfe.to(torch.float64)

    def _direct_call(self, loo: LeaveOneOutRows, z: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor,
                     has_mask: torch.Tensor, k: torch.Tensor, nfe: torch.Tensor, tok_u: StepUniforms):
        """One call of the sequences ``rows`` at their block positions ``pos`` [R, L], scoring every position:
        (flat positions, their new tokens, whether each sequence edited, tokens filled per sequence)."""
        bb = rows[:, None].expand_as(pos)
        zb = z[bb, pos]
        masked = zb == self.mask_id
        x0, conf = self._proposals(loo, z, zb, bb, pos, masked, nfe, tok_u, self.editing_threshold is not None)
        score = torch.where(masked, conf, float("-inf"))
        fill = (score > self.threshold) & masked
        ranked = flat_nonzero((fill.sum(1) < k) & has_mask)  # the most confident min(k, #masked): where needed
        if ranked.numel():
            fill[ranked] = topk_stable_mask(score[ranked], torch.minimum(k, masked.sum(1))[ranked]) & masked[ranked]
        edit = torch.zeros_like(masked)
        if self.editing_threshold is not None:
            edit = ~masked & (x0 != zb) & (conf > self.editing_threshold)
        change = fill | edit
        return (bb * z.shape[1] + pos)[change], x0[change], edit.any(1), fill.sum(1)

    def _proposals(self, loo: LeaveOneOutRows, z: torch.Tensor, zb: torch.Tensor, bb: torch.Tensor, pos: torch.Tensor,
                   masked: torch.Tensor, nfe: torch.Tensor, tok_u: StepUniforms,
                   edit_on: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """One call's proposals x^ and confidences [R, L] at the block positions ``pos`` of rows ``bb``: drawn at
        masked positions and at revealed ones that can be edited; any other revealed position keeps its token."""
        bf, pf = bb.reshape(-1), pos.reshape(-1)
        feat, row = loo.rows(z, bf, pf)
        drawn = masked.reshape(-1)
        if edit_on:
            drawn = drawn | (feat["cmax"][row] > self.editing_threshold)
        at = flat_nonzero(drawn)
        x0 = zb.reshape(-1).clone()
        x0[at] = draw_stored(feat, row[at], tok_u.at(nfe.index_select(0, bf[at]), bf[at], pf[at]))
        conf = feat["law"][row, x0]
        if "sum" in feat:
            conf = conf / feat["sum"][row]
        return x0.view_as(zb), conf.view_as(zb)

    @staticmethod
    def _next_block(which: torch.Tensor, blk: torch.Tensor, j: torch.Tensor, post: torch.Tensor) -> None:
        blk += which.long()
        j.masked_fill_(which, 0)
        post.masked_fill_(which, 0)
