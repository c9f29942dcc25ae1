"""LLaDA 2.1's refinement law (``edit_law = "refine"``): threshold fill and token editing, block by block (the
sampler and its sources: :mod:`dllm_lit.samplers.llada21`).

Blocks of ``block_length``, S = steps / blocks mask-filling steps each with LLaDA's transfer counts k_j.  One call
scores every block position: x^_i from the rule's tempered law of the row (p(x_i | z) masked, p(x_i | z_{-i})
revealed), confidence c_i its probability under that law.  Mask filling (while the block has masks, step j): every
masked i with c_i > ``threshold`` if at least k_j, else the min(k_j, #masked) most confident (ties: the lower
position); editing (``editing_threshold`` not None): every revealed token replaced by x^_i where it differs and
c_i > ``editing_threshold``.  A filling call ends the block if it was the S-th; a post-mask call if it edited
nothing or was the (``max_post_steps`` + 1)-th.  NFE = calls per sequence.  On a denoiser whose rows are memoised by
neighbourhood a call draws only where a proposal can commit or edit (:class:`~.llada21_bounded.BoundedRefinement`,
the same draws).
"""
from __future__ import annotations

import torch

from dllm_lit.decoding.llada21_bounded import BoundedRefinement
from dllm_lit.decoding.row_providers import LeaveOneOutRows, draw_stored
from dllm_lit.samplers.draws import StepUniforms
from dllm_lit.samplers.selection import topk_stable_mask, transfer_schedule
from dllm_lit.util.indices import flat_nonzero

__all__ = ["decode_refine"]


def decode_refine(rule, indices: torch.Tensor, seq_len: int, steps: int, seed: int,
                  cache: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples and NFE of the refinement rule ``rule`` (module docstring)."""
    B, T, dev, M = indices.numel(), seq_len, indices.device, rule.mask_id
    L = rule.block_length or T
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
    memo = LeaveOneOutRows.provider_for(rule.denoiser, dev, cache) == "memo"
    bounded = BoundedRefinement(rule, z, tok_u) if memo else None
    direct = None if memo else _DirectCalls(rule, LeaveOneOutRows(rule.denoiser, rule.row_features, dev, cache=cache),
                                            tok_u)
    while True:
        rows = flat_nonzero(blk < nb)
        if rows.numel() == 0:
            break
        has_mask = left[rows] > 0  # read before the call, as the pipeline's masks_remaining
        post[rows] += (~has_mask).long()
        edited = torch.zeros_like(has_mask)
        if rule.editing_threshold is not None or bool(has_mask.any()):  # else a call changes nothing
            k = k_of[j[rows].clamp(max=S - 1)]
            if bounded is None:
                pos = blk[rows, None] * L + col[None, :]
                idx, tok, edited, filled = direct.call(z, rows, pos, has_mask, k, nfe)
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
        done = torch.where(has_mask, j[rows] >= S, ~edited | (post[rows] > rule.max_post_steps))
        which = torch.zeros_like(blk, dtype=torch.bool).index_fill_(0, rows[done], True)
        blk += which.long()
        for counter in (j, post):
            counter.masked_fill_(which, 0)
        left.masked_fill_(which, L)
    return z, nfe.to(torch.float64)


class _DirectCalls:
    """The calls of ``rule`` scoring every block position, rows from ``loo``, proposals drawn with ``tok_u``."""

    def __init__(self, rule, loo: LeaveOneOutRows, tok_u: StepUniforms) -> None:
        self.rule, self.loo, self.tok_u = rule, loo, tok_u

    def call(self, z: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor, has_mask: torch.Tensor, k: torch.Tensor,
             nfe: torch.Tensor):
        """One call of the sequences ``rows`` at their block positions ``pos`` [R, L], scoring every position:
        (flat positions, their new tokens, whether each sequence edited, tokens filled per sequence)."""
        rule = self.rule
        bb = rows[:, None].expand_as(pos)
        zb = z[bb, pos]
        masked = zb == rule.mask_id
        x0, conf = self._proposals(z, zb, bb, pos, masked, nfe)
        score = torch.where(masked, conf, float("-inf"))
        fill = (score > rule.threshold) & masked
        ranked = flat_nonzero((fill.sum(1) < k) & has_mask)  # the most confident min(k, #masked): where needed
        if ranked.numel():
            fill[ranked] = topk_stable_mask(score[ranked], torch.minimum(k, masked.sum(1))[ranked]) & masked[ranked]
        edit = torch.zeros_like(masked)
        if rule.editing_threshold is not None:
            edit = ~masked & (x0 != zb) & (conf > rule.editing_threshold)
        change = fill | edit
        return (bb * z.shape[1] + pos)[change], x0[change], edit.any(1), fill.sum(1)

    def _proposals(self, z: torch.Tensor, zb: torch.Tensor, bb: torch.Tensor, pos: torch.Tensor, masked: torch.Tensor,
                   nfe: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One call's proposals x^ and confidences [R, L]: drawn at masked positions and at revealed ones that can be
        edited; any other revealed position keeps its token."""
        rule, tok_u = self.rule, self.tok_u
        bf, pf = bb.reshape(-1), pos.reshape(-1)
        feat, row = self.loo.rows(z, bf, pf)
        drawn = masked.reshape(-1)
        if rule.editing_threshold is not None:
            drawn = drawn | (feat["cmax"][row] > rule.editing_threshold)
        at = flat_nonzero(drawn)
        x0 = zb.reshape(-1).clone()
        x0[at] = draw_stored(feat, row[at], tok_u.at(nfe.index_select(0, bf[at]), bf[at], pf[at]))
        conf = feat["law"][row, x0]
        if "sum" in feat:
            conf = conf / feat["sum"][row]
        return x0.view_as(zb), conf.view_as(zb)
