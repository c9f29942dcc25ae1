"""The oracle model's rows in an HMM world (order-k, switching, hidden-state): exact forward-backward per key set.

Beyond the first-order chain a revealed token does not cut the dependence between its two sides, so a query's row
needs every revealed key it may attend to.  For each batch row the sequence tokens are laid on a canvas over their
chain positions (gaps are unobserved positions; the canvas starts at the row's first position: the world is
stationary), and each distinct set of visible revealed keys (one per row without a 4-D mask; one per block under a
block-causal mask) is solved by one leave-one-out forward-backward in float64
(:func:`~dllm_lit.denoisers.hmm_posterior.hmm_posterior`): a query's row is p(x_i | the keys it sees, i excluded),
which is its posterior when i is masked.  A canvas is as long as its row's own extent (from its first to its last
token): trailing unobserved positions sum out in exact arithmetic but move a float64 row by an ulp, so canvases of
each length go through their own batched call, and a row's numbers do not depend on the rows padded beside it
(nor, the forward-backward being batch-invariant, on how many canvases share a call).
"""
from __future__ import annotations

import torch

from dllm_lit.denoisers.hmm_posterior import hmm_posterior
from dllm_lit.markov.hmm import HMMWorld

__all__ = ["world_query_rows"]


@torch.no_grad()
def world_query_rows(world: HMMWorld, ids: torch.Tensor, token: torch.Tensor, revealed: torch.Tensor,
                     allowed: torch.Tensor | None, pos: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows float64 [u, V], inv [n]): the exact rows of the flat query indices ``q`` (module docstring), one per
    distinct (canvas, query position), and the row of each query."""
    B, L = ids.shape
    V = world.vocab_size
    dev = ids.device
    b, i = q // L, q % L
    keys = revealed[b] if allowed is None else revealed[b] & allowed[b, i]  # [n, L] visible revealed keys
    keys = keys.clone()
    keys[torch.arange(q.numel(), device=dev), i] = False  # leave the query out (its own token is handled outside)
    start = torch.where(token, pos, torch.iinfo(torch.int64).max).amin(1)  # first chain position of each row
    rel = (pos - start[:, None]).clamp_min(0)
    extent = torch.where(token, rel, 0).amax(1) + 1  # each row's own canvas length
    # one canvas per distinct (batch row, visible key set)
    sets, which = torch.unique(torch.cat([b[:, None], keys.long()], 1), dim=0, return_inverse=True)
    sb, sk = sets[:, 0], sets[:, 1:].bool()
    length, target = extent[sb], rel[b, i]
    rows = torch.empty(q.numel(), V, dtype=torch.float64, device=dev)
    for n in torch.unique(length).tolist():  # one batched call per canvas length (module docstring)
        own = (length == n).nonzero()[:, 0]
        canvas = torch.full((own.numel(), n), V, dtype=torch.long, device=dev)
        r, c = sk[own].nonzero(as_tuple=True)
        canvas[r, rel[sb[own[r]], c]] = ids[sb[own[r]], c].long()
        post = hmm_posterior(world, canvas.cpu(), leave_one_out=True).to(dev)  # [own, n, V]
        slot = torch.empty(sets.shape[0], dtype=torch.long, device=dev)
        slot[own] = torch.arange(own.numel(), device=dev)
        hit = length[which] == n
        rows[hit] = post[slot[which[hit]], target[hit]]
    return torch.unique(rows, dim=0, return_inverse=True)
