"""Which positions commit at a step: LLaDA's transfer schedule, a stable top-k and the tie rules."""
from __future__ import annotations

import torch

__all__ = ["transfer_schedule", "topk_stable", "topk_stable_mask", "topk_mask_by_rule", "TIE_RULES", "rank_positions",
           "unique_top_n", "top_n_mask"]

#: how equal scores are ordered when positions are ranked (upstream uses torch.topk / argsort, whose
#: order among ties is implementation-defined): lowest position first, highest first, or uniformly
#: at random (an independent uniform per (step, position) orders the tied positions)
TIE_RULES = ("lowest", "highest", "random")


def transfer_schedule(n: int, steps: int) -> list[int]:
    """Tokens committed per step for n masked positions in ``steps`` steps (LLaDA's
    ``get_num_transfer_tokens``): base = n // steps, the first n % steps steps get one extra."""
    base, rem = divmod(int(n), int(steps))
    return [base + (1 if i < rem else 0) for i in range(int(steps))]


def topk_stable(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Column indices [B, k] of the k largest scores per row, ties -> lower column first."""
    return torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]


def rank_positions(scores: torch.Tensor, tie_rule: str = "lowest", tie_keys: torch.Tensor | None = None) -> torch.Tensor:
    """Columns [B, L] of ``scores`` [B, L] by score descending, equal scores ordered by ``tie_rule``.

    "lowest": lower column first (a stable sort; the first k columns are :func:`topk_stable`);
    "highest": higher column first; "random": by ``tie_keys`` [B, L] ascending (i.i.d. uniforms, so
    every order of a tied group is equally likely): a stable sort by score of the key order.
    """
    if tie_rule == "lowest":
        return torch.sort(scores, dim=1, descending=True, stable=True).indices
    L = scores.shape[1]
    if tie_rule == "highest":
        return L - 1 - torch.sort(scores.flip(1), dim=1, descending=True, stable=True).indices
    if tie_rule == "random":
        if tie_keys is None:
            raise ValueError("tie_rule='random' needs tie_keys")
        first = torch.sort(tie_keys, dim=1, stable=True).indices
        return first.gather(1, torch.sort(scores.gather(1, first), dim=1, descending=True, stable=True).indices)
    raise ValueError(f"tie_rule must be one of {TIE_RULES}, got {tie_rule!r}")


def topk_stable_mask(scores: torch.Tensor, k: int | torch.Tensor) -> torch.Tensor:
    """Bool [B, n]: the set :func:`topk_stable` selects (k largest per row, ties -> lower column), without a full sort;
    ``k`` an int or a LongTensor [B] of per-row counts in [1, n] (rows holding NaN are not supported).

    The k-th largest value v_k (a partial selection) splits each row: every score > v_k is taken,
    then the leftmost scores == v_k until k are taken.
    """
    if isinstance(k, torch.Tensor):
        if k.numel() == 0:
            return torch.zeros_like(scores, dtype=torch.bool)
        kk = k.view(-1, 1)
        thr = torch.topk(scores, int(k.max()), dim=1).values.gather(1, kk - 1)
    else:
        if k <= 0:
            return torch.zeros_like(scores, dtype=torch.bool)
        kk = k
        thr = torch.topk(scores, k, dim=1).values[:, -1:]
    above = scores > thr
    tie = scores == thr
    need = kk - above.sum(1, keepdim=True)
    return above | (tie & (tie.cumsum(1) <= need))


def topk_mask_by_rule(scores: torch.Tensor, k: int, tie_rule: str) -> torch.Tensor:
    """Bool [B, n]: the k largest scores per row, equal scores at the boundary taken lowest column first
    (``tie_rule`` "lowest") or highest first ("highest", the mirror image)."""
    if tie_rule == "lowest":
        return topk_stable_mask(scores, k)
    if tie_rule == "highest":
        return topk_stable_mask(scores.flip(1), k).flip(1)
    raise ValueError(f"tie_rule must be 'lowest' or 'highest' here, got {tie_rule!r}")


def unique_top_n(top: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """Per row of the P largest scores ``top`` sorted descending: whether exactly n[b] scores of the row are at or
    above its n-th (the n-th strictly above the (n+1)-th; n = 0 trivially), so the top-n set has no tie to break."""
    P = top.shape[1]
    nth = top.gather(1, (n - 1).clamp(min=0)[:, None])[:, 0]
    nxt = top.gather(1, n.clamp(max=P - 1)[:, None])[:, 0]
    return (n == 0) | ((n < P) & (nxt < nth))


def top_n_mask(scores: torch.Tensor, top: torch.Tensor, n: torch.Tensor, tie_rule: str) -> torch.Tensor:
    """Bool [B, L]: the first n[b] columns of row b in the descending order of ``scores`` with equal scores by
    ``tie_rule`` ("lowest" / "highest"), given ``top`` [B, P] (P >= max n), the row's P largest scores sorted:
    every score above the n-th, then the tied ones at the n-th, lowest (highest) column first."""
    s = scores if tie_rule == "lowest" else scores.flip(1)
    thr = top.gather(1, (n - 1).clamp(min=0)[:, None])
    above = s > thr
    tie = s == thr
    need = n[:, None] - above.sum(1, keepdim=True)
    sel = (above | (tie & (tie.cumsum(1) <= need))) & (n > 0)[:, None]
    return sel if tie_rule == "lowest" else sel.flip(1)
