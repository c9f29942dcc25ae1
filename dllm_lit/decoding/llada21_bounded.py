"""LLaDA 2.1's calls with proposals drawn only where they can commit or edit (:class:`BoundedRefinement`): the same
commits, edits and NFE as the direct call of :class:`~dllm_lit.samplers.llada21.LLaDA21`, which draws at every
masked position and every revealed one its row lets reach the editing threshold (``tests/test_llada21_bounded.py``).

Every position keeps its leave-one-out row across calls (:class:`~dllm_lit.decoding.tracked_rows.TrackedRows`) and,
from that row, with c(v) = law(v) / sum the confidence of a proposal v (law(v) at temperature 0):

* masked i: the bound u_i = max_v c(v) (IEEE division is monotone, so c(x) <= u_i for every proposal x);
* revealed i: whether it can be edited, e_i: max_{v != z_i} c(v) > ``editing_threshold`` (the second largest law
  entry where z_i is the row's first argmax, else the largest).

A call of a sequence that must commit k tokens (LLaDA's transfer count) then draws

1. at every masked position with u_i > ``threshold`` (no other can exceed it), so the set H of proposals above the
   threshold is known exactly; if |H| >= k the fill is H (the direct call's rule);
2. otherwise, for the min(k, #masked) most confident: best bounds first, in rounds of 4x growing size, until the
   n-th best drawn confidence is strictly above every undrawn bound - then no undrawn position can reach or tie it,
   and the top set, ties to the lower position included, is that of drawing every masked position;
3. at every revealed position with e_i (no other can be edited).

The proposals never drawn would have been discarded, and each draw has its own uniform (keyed by the sequence's
call count and the position), so no other draw moves.  On the English chain at 1024 steps a call draws at a few
positions per sequence instead of about 1,000.
"""
from __future__ import annotations

import torch

from dllm_lit.util.indices import flat_nonzero, nonzero_pairs
from dllm_lit.samplers.draws import StepUniforms
from dllm_lit.decoding.row_providers import draw_stored
from dllm_lit.samplers.selection import topk_stable_mask
from dllm_lit.decoding.tracked_rows import TrackedRows

__all__ = ["BoundedRefinement", "FIRST_DRAWS"]

#: masked positions drawn first (best bounds) by a sequence that ranks its fill
FIRST_DRAWS = 16


class BoundedRefinement:
    """The bounds of one LLaDA 2.1 run on state ``z`` (module docstring); :meth:`call` makes one call."""

    def __init__(self, sampler, z: torch.Tensor, tok_u: StepUniforms) -> None:
        self.s, self.tok_u, self.M = sampler, tok_u, sampler.mask_id
        self.edit_on = sampler.editing_threshold is not None
        self.rows = TrackedRows(sampler.denoiser, self._derive, z)
        self.ub = torch.empty(z.shape, dtype=torch.float64, device=z.device)
        self.editable = torch.zeros(z.shape, dtype=torch.bool, device=z.device)
        self.changed(z, torch.arange(z.numel(), device=z.device), look_up=False)

    def _derive(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """The sampler's row features, and for the editing bound the first argmax and the second largest
        confidence."""
        f = self.s.row_features(rows)
        law = f["law"]
        second = law.topk(2, dim=-1).values[:, 1] if law.shape[1] > 1 else torch.full_like(f["cmax"], -torch.inf)
        f["arg"], f["cmax2"] = law.argmax(-1), second / f["sum"] if "sum" in f else second
        return f

    def changed(self, z: torch.Tensor, flat: torch.Tensor, look_up: bool = True) -> None:
        """After the tokens at the flat positions ``flat`` changed: new rows and bounds where they may differ."""
        if look_up:
            flat = self.rows.update(z, flat)
        if flat.numel() == 0:
            return
        f, slot = self.rows.features, self.rows.at(flat)
        tok = z.view(-1).index_select(0, flat)
        masked = tok == self.M
        cmax = f["cmax"].index_select(0, slot)
        self.ub.view(-1)[flat] = torch.where(masked, cmax, -torch.inf)
        if self.edit_on:
            other = torch.where(tok == f["arg"].index_select(0, slot), f["cmax2"].index_select(0, slot), cmax)
            self.editable.view(-1)[flat] = ~masked & (other > self.s.editing_threshold)

    def _draw(self, r: torch.Tensor, c: torch.Tensor, call: tuple) -> tuple[torch.Tensor, torch.Tensor]:
        """Proposals and confidences at the entries (r, c) of the call's [R, L] block grid."""
        rows, start, T, nfe_h = call
        b = rows.index_select(0, r)
        p = start.index_select(0, r) + c
        f, slot = self.rows.features, self.rows.at(b * T + p)
        tok = draw_stored(f, slot, self.tok_u.at_sequences(nfe_h, b, p))
        conf = f["law"].view(-1).index_select(0, slot * f["law"].shape[1] + tok)
        return tok, (conf / f["sum"].index_select(0, slot) if "sum" in f else conf)

    def call(self, z: torch.Tensor, rows: torch.Tensor, start: torch.Tensor, L: int, has_mask: torch.Tensor,
             k: torch.Tensor, n_masked: torch.Tensor, nfe: torch.Tensor):
        """One call of the sequences ``rows`` at their blocks [start, start + L) (as the direct call):
        (flat positions, their new tokens, whether each sequence edited, tokens filled per sequence)."""
        B, T = z.shape
        call = (rows, start, T, nfe)
        whole = rows.numel() == B and L == T
        ub = self.ub if whole else self._block(self.ub, rows, start, L)
        # one draw: masked positions above the threshold, the m best bounds (for a ranked fill) and editable ones
        m = min(L, max(FIRST_DRAWS, 2 * int(k.max())))
        top = ub.topk(min(L, m + 1), dim=1)
        cand = ub > self.s.threshold
        cand.scatter_(1, top.indices[:, :m], top.values[:, :m] > -torch.inf)
        if self.edit_on:
            cand |= self.editable if whole else self._block(self.editable, rows, start, L)
        r, c = nonzero_pairs(cand)
        tok, conf = self._draw(r, c, call)
        masked = ub[r, c] > -torch.inf
        sc = torch.full_like(ub, -torch.inf)
        x0 = torch.zeros(ub.shape, dtype=torch.long, device=z.device)
        x0[r, c] = tok
        sc[r[masked], c[masked]] = conf[masked]
        fill = sc > self.s.threshold
        ranked = flat_nonzero((fill.sum(1) < k) & has_mask)
        if ranked.numel():
            fill[ranked] = self._ranked(ranked, torch.minimum(k, n_masked)[ranked], ub, sc, x0, call, top, m)
        rf, cf = nonzero_pairs(fill)
        idx, new = rows[rf] * T + start[rf] + cf, x0[rf, cf]
        edited = torch.zeros_like(has_mask)
        if self.edit_on:
            rev = ~masked
            r, c, tok, conf = r[rev], c[rev], tok[rev], conf[rev]
            flat = rows[r] * T + start[r] + c
            e = (tok != z.view(-1).index_select(0, flat)) & (conf > self.s.editing_threshold)
            idx, new = torch.cat([idx, flat[e]]), torch.cat([new, tok[e]])
            edited[r[e]] = True
        return idx, new, edited, fill.sum(1)

    @staticmethod
    def _block(a: torch.Tensor, rows: torch.Tensor, start: torch.Tensor, L: int) -> torch.Tensor:
        """The [R, L] block entries of a per-position array."""
        return a.index_select(0, rows).gather(1, start[:, None] + torch.arange(L, device=a.device)[None, :])

    def _ranked(self, ranked: torch.Tensor, kk: torch.Tensor, ub: torch.Tensor, sc: torch.Tensor, x0: torch.Tensor,
                call: tuple, top, m: int) -> torch.Tensor:
        """The top-kk confidences of the sequences ``ranked`` (indices into the call's rows) as a bool [R2, L],
        given the drawn m best bounds ``top``: the top kk of those where the kk-th is above the (m + 1)-th bound,
        else after drawing every position whose bound reaches the kk-th drawn confidence."""
        L = ub.shape[1]
        cols = top.indices[ranked, :m]
        scores = sc[ranked[:, None], cols]  # -inf at revealed columns
        nth = scores.topk(int(kk.max()), dim=1).values.gather(1, (kk - 1)[:, None])[:, 0]
        rest = top.values[ranked, m] if m < L else torch.full_like(nth, -torch.inf)
        out = torch.zeros(ranked.numel(), L, dtype=torch.bool, device=ub.device)
        settled = nth > rest
        if bool(settled.any()):  # the top kk of the m drawn columns, ties to the lower position
            sr = flat_nonzero(settled)
            cs, order = cols[sr].sort(1)
            ranks = scores[sr].gather(1, order).sort(dim=1, descending=True, stable=True).indices
            take = torch.arange(m, device=ub.device)[None, :] < kk[sr, None]
            out[sr[:, None].expand_as(ranks)[take], cs.gather(1, ranks)[take]] = True
        if not bool(settled.all()):  # every other position whose bound reaches the kk-th drawn confidence
            un = flat_nonzero(~settled)
            ru = ranked.index_select(0, un)
            cand = (ub[ru] >= nth[un, None]) & (sc[ru] == -torch.inf)
            cand.scatter_(1, cols[un], False)
            r2, c = nonzero_pairs(cand)
            r = ru.index_select(0, r2)
            x0[r, c], sc[r, c] = self._draw(r, c, call)
            out[un] = topk_stable_mask(sc[ru], kk[un])
        return out
