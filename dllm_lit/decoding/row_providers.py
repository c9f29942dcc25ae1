"""The engine's posterior providers for samplers outside the rule interface (:mod:`.providers` serves the rules).

The provider is chosen from what the denoiser declares; the sampler sees rows (or row-wise features of them), never
which provider runs, and the draws are identical (``tests/test_row_providers.py`` and the contract suite's
``generic`` item).  Sampler modules therefore never test the denoiser's type.

**Leave-one-out rows** (LLaDA 2.1, WINO, P2), :class:`LeaveOneOutRows`: p(x_i | z) at a masked position and the
leave-one-out p(x_i | z_{-i}) at a revealed one - one query, since a masked position's own evidence is empty
(:mod:`dllm_lit.denoisers.channels`).

==============  ==========================================================  ========================================
provider        chosen when the denoiser                                    a call costs
==============  ==========================================================  ========================================
``dense``       is not a :class:`~dllm_lit.denoisers.LocalDenoiser` and      ``posterior(z, leave_one_out=True)`` on
                answers ``supports(ABSORBING, leave_one_out=True)``          the sequences involved
``memo``        is local and names few neighbourhood keys, on the CPU       O(n) key lookups; a row (and its features)
                (:class:`~dllm_lit.decoding.neighbourhood_rows.              only for a neighbourhood not met before in
                NeighbourhoodRows`: the English chain's oracle)              the run
``neighbour``   is any other local denoiser (or ``cache=False``)            one row per distinct neighbourhood key
                                                                            among the call's positions (every
                                                                            position's row with ``cache=False``)
==============  ==========================================================  ========================================

A local denoiser's row at i is a function of the nearest revealed tokens strictly left and right of i (the
position itself excluded), so the fast providers compute exactly the rows that ``LocalDenoiser.posterior`` (the
dense query) computes: the same neighbour queries into the same ``probs_given_neighbours``.  With the memo a row is
recomputed only where a position's nearest revealed neighbourhood (x_a, i - a, x_b, b - i) is new to the run; a
position whose neighbourhood did not change reads the row it read before.

**Draft-extended rows** (ASSD's verify), :func:`draft_rows`: p(x_{W_i} | z, d_0..d_{i-1}), from the nearest revealed
neighbours among z and the earlier drafts (local), else one stacked state per verified position.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from dllm_lit.denoisers.channels import ABSORBING
from dllm_lit.denoisers.local import LocalDenoiser, nearest_revealed, revealed_neighbours_at
from dllm_lit.samplers.draws import categorical_from_cdf, neighbour_queries, row_chunks
from dllm_lit.decoding.neighbourhood_rows import NeighbourhoodRows, rows_by_key

__all__ = ["LOO_PROVIDERS", "LeaveOneOutRows", "check_leave_one_out", "draft_rows", "draw_stored"]

LOO_PROVIDERS = ("dense", "memo", "neighbour")

#: a sampler's row features: float64 rows [n, V] -> named tensors with leading dimension n
Derive = Callable[[torch.Tensor], dict[str, torch.Tensor]]

#: stacked draft states (rows x T tokens) per call of a non-local denoiser in :func:`draft_rows`
STACK_ELEMENTS = 2**22


def check_leave_one_out(denoiser, sampler: str) -> None:
    """One-line error unless ``denoiser`` answers leave-one-out posteriors under absorbing masks."""
    if not denoiser.supports(ABSORBING, leave_one_out=True):
        raise ValueError(f"{sampler} needs leave-one-out posteriors at revealed positions; "
                         f"{type(denoiser).__name__} does not answer them (supports(ABSORBING, leave_one_out=True))")


class LeaveOneOutRows:
    """Leave-one-out rows for one sampling run, as features: ``derive(rows)`` of the float64 rows.

    ``rows(z, b, p)`` returns (features, index): a dict of tables and, per query (b, p), the index of its row in
    them (the module table says which provider answers).  ``cache=False`` computes every call's rows afresh (the
    uncached computation the cache is tested against)."""

    def __init__(self, denoiser, derive: Derive, device: torch.device, cache: bool = True) -> None:
        self.den, self.derive, self.cache = denoiser, derive, cache
        self.provider = self.provider_for(denoiser, device, cache)
        use_memo = self.provider == "memo"
        self.memo = NeighbourhoodRows(denoiser, self._derive, device=device) if use_memo else None

    @staticmethod
    def provider_for(denoiser, device: torch.device, cache: bool = True) -> str:
        """The provider (:data:`LOO_PROVIDERS`, module table) that answers ``denoiser``'s rows on ``device``."""
        if not isinstance(denoiser, LocalDenoiser):
            return "dense"
        memo = cache and torch.device(device).type == "cpu" and NeighbourhoodRows.applies(denoiser)
        return "memo" if memo else "neighbour"

    def _derive(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.derive(rows.to(torch.float64))

    def rows(self, z: torch.Tensor, b: torch.Tensor, p: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """(features, index) of p(x_p | z) at masked and p(x_p | z_{-p}) at revealed positions (b, p) of z [B, T]."""
        if self.provider == "dense":
            seqs, inv = torch.unique(b, return_inverse=True)
            rows = self.den.posterior(z[seqs], ABSORBING, leave_one_out=True)[inv, p]
            return self._derive(rows), torch.arange(b.numel(), device=b.device)
        query = self._queries(z, b, p)  # nearest revealed strictly left / right: the position itself excluded
        got = rows_by_key(self.den, query, self._derive, self.memo) if self.cache else None
        if got is not None:
            return got
        return self._derive(self.den.probs_given_neighbours(*query)), torch.arange(b.numel(), device=b.device)

    def grid(self, z: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """:meth:`rows` at every position of z [B, T], row-major (the index has B T entries)."""
        if self.provider != "memo":
            B, T = z.shape
            flat = torch.arange(B * T, device=z.device)
            return self.rows(z, torch.div(flat, T, rounding_mode="floor"), flat % T)
        keys, query = self.den.grid_keys(z)
        if query is None:  # the queries of the new keys' positions only
            T = z.shape[1]

            def query(at: torch.Tensor) -> tuple[torch.Tensor, ...]:
                b = torch.div(at, T, rounding_mode="floor")
                return neighbour_queries(self.den, z, b, at - b * T)
        return self.memo.features, self.memo.slots(query, keys)

    def _queries(self, z: torch.Tensor, b: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Neighbour queries at (b, p): by the two scans of :func:`nearest_revealed` when the call covers at least an
        eighth of z (7x faster than the binary search for all positions on the CPU), else by the binary search."""
        if 8 * b.numel() < z.numel():
            return neighbour_queries(self.den, z, b, p)
        left, right = nearest_revealed(z, self.den.mask_id)
        flat = b * z.shape[1] + p
        return self.den.neighbour_query(z, b, p, left.view(-1)[flat].long(), right.view(-1)[flat].long())


def draw_stored(features: dict[str, torch.Tensor], index: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Proposals at rows ``index`` of the features: the stored ``argmax``, or the inverse-CDF draw with uniforms ``u``
    from the stored float64 ``cdf`` (gathered in chunks and searched: :func:`categorical` of the law, draw for draw)."""
    if "cdf" not in features:
        return features["argmax"].index_select(0, index)
    cdf = features["cdf"]
    out = torch.empty_like(index)
    for sl in row_chunks(index.numel(), cdf.shape[1], index.device):
        out[sl] = categorical_from_cdf(cdf.index_select(0, index[sl]), u[sl])
    return out


def draft_rows(den, z: torch.Tensor, rows: torch.Tensor, W: torch.Tensor, d: torch.Tensor,
               valid: torch.Tensor) -> torch.Tensor:
    """p(x_{W_i} | z, d_0..d_{i-1}) for i = 1..k-1 of each of the R sequences ``rows`` of z: float64 [R, k - 1, V]
    (ones where ``valid`` [R, k] is False); W [R, k] the window's positions (-1 past the end), d [R, k] the drafts."""
    R, k = W.shape
    T = z.shape[1]
    out = torch.ones(R, k - 1, den.vocab_size, dtype=torch.float64, device=z.device)
    v1 = valid[:, 1:]
    Wc = W.clamp(min=0)
    if isinstance(den, LocalDenoiser):  # nearest revealed neighbours among z and the earlier drafts
        zd = z.clone()
        zd[rows[:, None].expand(R, k)[valid], Wc[valid]] = d[valid]
        bb = rows[:, None].expand(R, k - 1)[v1]
        p = Wc[:, 1:][v1]
        a, c = revealed_neighbours_at(z.contiguous(), den.mask_id, bb, p)
        Wj = torch.where(valid, W, -1)[:, None, :]                             # [R, 1, k]
        Wi = Wc[:, 1:, None]                                                   # [R, k-1, 1]
        ar = torch.arange(k, device=z.device)
        earlier = ar[None, None, :] < ar[1:][None, :, None]  # draft j precedes verified position i
        left = torch.where(earlier & (Wj >= 0) & (Wj < Wi), Wj, -1).amax(2)[v1]
        right = torch.where(earlier & (Wj > Wi), Wj, T).amin(2)[v1]
        out[v1] = den.probs_from_neighbours(zd, bb, p, torch.maximum(a, left),
                                            torch.minimum(c, right)).to(torch.float64)
        return out
    # any denoiser: one stacked state per verified position (state i = z plus drafts 0..i-1)
    per_row = max(1, STACK_ELEMENTS // max(1, (k - 1) * T))
    lower = torch.arange(k, device=z.device)[None, :] < torch.arange(1, k, device=z.device)[:, None]
    for lo in range(0, R, per_row):
        sl = slice(lo, min(R, lo + per_row))
        r = rows[sl]
        Rs = r.numel()
        st = z[r][:, None, :].repeat(1, k - 1, 1)                              # [Rs, k-1, T]
        put = lower[None] & valid[sl][:, None, :]  # [Rs, k-1, k]
        ri, si, j = torch.nonzero(put, as_tuple=True)
        st[ri, si, Wc[sl][ri, j]] = d[sl][ri, j]
        vv = v1[sl]
        flat = st.reshape(Rs * (k - 1), T)
        idx = torch.arange(Rs * (k - 1), device=z.device).view(Rs, k - 1)
        block = out[sl]
        block[vv] = den.probs_at(flat, idx[vv], Wc[sl][:, 1:][vv]).to(torch.float64)
        out[sl] = block
    return out
