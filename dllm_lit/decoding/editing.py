"""The editing loop: rules that revisit revealed tokens (WINO, LLaDA 2.1, P2, SlowFast), run from their declaration.

An editing rule (``edits = True``, :class:`~dllm_lit.samplers.edit_rule.EditRule`) decodes blocks of
``block_length`` (None: one block) left to right.  Each call of a sequence scores every position of its block: the
engine reads one row per position - p(x_i | z) where i is masked, the leave-one-out p(x_i | z_{-i}) where it is
revealed (``reads_revealed``; False: masked rows only, by ``probs_at``) - derives the rule's ``row_features`` of it,
draws a proposal x^_i at every masked position (and at a revealed one whose row's ``revisit`` feature is set) with
Stream.TOKEN uniforms keyed by (the sequence's call count, position), and counts the call in the sequence's NFE.
What happens with the proposals is the rule's declared ``edit_law``:

``None``
    the rule's own hook ``edit(call, state) -> (new block tokens [R, L], block done [R])``: any commit, re-mask or
    replacement, from the :class:`EditCall` (tokens, proposals, their probabilities, the held tokens' leave-one-out
    probabilities, calls made in the block) and the rule's per-sequence ``state`` (``begin``; reset when a block
    ends).  Every proposal is drawn.
``"refine"``
    LLaDA 2.1's threshold fill and token editing (:mod:`.refinement`), on a local denoiser drawing only where a
    proposal can commit or edit (:mod:`.llada21_bounded`).
``"plan"``
    P2's re-planning of the masked set by Gumbel-perturbed log-weights (:mod:`.planning`), on a local denoiser
    drawing only at masked positions that can be kept (:mod:`.p2_bounded`).

The bounded paths draw exactly what drawing every position draws (``tests/test_bounded_refinement.py``); the
golden samples of every shipped editing config are ``tests/test_golden_samplers.py``'s.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from dllm_lit.decoding.row_providers import LeaveOneOutRows, check_leave_one_out, draw_stored
from dllm_lit.samplers.draws import StepUniforms
from dllm_lit.util.indices import flat_nonzero

__all__ = ["EDIT_LAWS", "EditCall", "decode_edits"]

#: what an editing rule may declare as ``edit_law``: its own ``edit`` hook, or one of the engine's laws
EDIT_LAWS = (None, "refine", "plan")


@dataclass
class EditCall:
    """One call of the sequences ``rows`` [R] at their block positions ``pos`` [R, L] (``edit``'s argument)."""

    rows: torch.Tensor       #: the calling sequences [R]
    pos: torch.Tensor        #: absolute positions of their blocks [R, L]
    tokens: torch.Tensor     #: the tokens held before the call [R, L] (MASK where masked)
    masked: torch.Tensor     #: bool [R, L]
    proposal: torch.Tensor   #: x^ where drawn, the held token elsewhere [R, L]
    prob: torch.Tensor       #: the row's ``probs`` at ``proposal`` [R, L] (at a held token: its leave-one-out one)
    held: torch.Tensor       #: the row's ``probs`` at the held token [R, L] (token 0 where masked)
    in_block: torch.Tensor   #: calls made in the current block before this one [R]
    calls: torch.Tensor      #: calls made in all before this one [R] (the randomness key)


def decode_edits(rule, indices: torch.Tensor, seq_len: int, steps: int, seed: int,
                 cache: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Samples [B, T] and NFE per sequence (float64 [B]) of the editing rule (module docstring); ``cache=False``
    computes every call's rows afresh (the direct computation the fast paths are tested against)."""
    if rule.reads_revealed:
        check_leave_one_out(rule.denoiser, type(rule).__name__)
    if rule.edit_law == "plan":
        from dllm_lit.decoding.planning import decode_plan

        return decode_plan(rule, indices, seq_len, steps, seed, cache)
    if rule.edit_law == "refine":
        from dllm_lit.decoding.refinement import decode_refine

        return decode_refine(rule, indices, seq_len, steps, seed, cache)
    return _decode_own(rule, indices, seq_len, steps, seed, cache)


def _decode_own(rule, indices: torch.Tensor, T: int, steps: int, seed: int,
                cache: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The loop of a rule with its own ``edit`` hook: blocks end when the rule says so."""
    B, dev, M = indices.numel(), indices.device, rule.mask_id
    L = rule.block_length or T
    nb = T // L
    z = torch.full((B, T), M, dtype=torch.long, device=dev)
    blk = torch.zeros(B, dtype=torch.long, device=dev)
    in_block = torch.zeros(B, dtype=torch.long, device=dev)
    nfe = torch.zeros(B, dtype=torch.long, device=dev)
    state = rule.begin(B, L, dev)
    tok_u = StepUniforms(seed, indices, steps)
    col = torch.arange(L, device=dev)
    loo = LeaveOneOutRows(rule.denoiser, rule.row_features, dev, cache=cache) if rule.reads_revealed else None
    while True:
        rows = flat_nonzero(blk < nb)
        if rows.numel() == 0:
            break
        R = rows.numel()
        pos = blk[rows, None] * L + col[None, :]
        bb = rows[:, None].expand(R, L)
        zb = z[bb, pos]
        masked = zb == M
        bf, pf = bb.reshape(-1), pos.reshape(-1)
        feat, row = loo.rows(z, bf, pf) if loo is not None else _masked_rows(rule, z, bf, pf, masked.reshape(-1))
        drawn = masked.reshape(-1)
        if "revisit" in feat:
            drawn = drawn | feat["revisit"][row]
        at = flat_nonzero(drawn)
        x0 = zb.reshape(-1).clone()
        x0[at] = draw_stored(feat, row[at], tok_u.at(nfe.index_select(0, bf[at]), bf[at], pf[at]))
        probs = feat["probs"]
        call = EditCall(rows, pos, zb, masked, x0.view(R, L), probs[row, x0].view(R, L),
                        probs[row, torch.where(masked, 0, zb).reshape(-1)].view(R, L), in_block[rows], nfe[rows])
        new, done = rule.edit(call, state)
        z[bb, pos] = new
        nfe[rows] += 1
        in_block[rows] += 1
        ended = rows[done]
        if ended.numel():
            blk[ended] += 1
            in_block[ended] = 0
            for name, fresh in rule.begin(ended.numel(), L, dev).items():
                state[name][ended] = fresh
    return z, nfe.to(torch.float64)


def _masked_rows(rule, z: torch.Tensor, b: torch.Tensor, p: torch.Tensor,
                 masked: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Features of p(x_p | z) at the masked (b, p) by ``probs_at``; revealed ones read a uniform row (no
    proposal is drawn there)."""
    V = rule.vocab_size
    at = flat_nonzero(masked)
    rows = torch.full((at.numel() + 1, V), 1.0 / V, dtype=torch.float64, device=z.device)
    if at.numel():
        rows[:-1] = rule.denoiser.probs_at(z, b[at], p[at]).to(torch.float64)
    index = torch.full_like(b, at.numel())
    index[at] = torch.arange(at.numel(), device=z.device)
    return rule.row_features(rows), index
