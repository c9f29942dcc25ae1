"""The dense direct provider of a :class:`~dllm_lit.samplers.rule.RuleSampler`: the rule's loop on
``Denoiser.probs_at``, line for line as the rule's module docstring states it, and the checks every provider applies
to a rule's scores and adaptive counts."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from dllm_lit import rng
from dllm_lit.decoding.confidence_decoding import TIE_SLOT
from dllm_lit.util.indices import nonzero_pairs
from dllm_lit.samplers.draws import StepUniforms, categorical, drawn_log_prob
from dllm_lit.samplers.selection import rank_positions

if TYPE_CHECKING:
    from dllm_lit.samplers.rule import RuleSampler

__all__ = ["reference_decode", "check_bound", "check_count", "draw", "GUMBEL_SLOT"]

#: the uniform slot of a rule's Gumbel keys (position_temperature), beside the tie keys' TIE_SLOT
GUMBEL_SLOT = 2


def check_bound(rule: RuleSampler, probs: torch.Tensor, scores: torch.Tensor, pmax: torch.Tensor | None = None,
                pos: torch.Tensor | None = None) -> None:
    """Refuse, in one line, a NaN score or a score above the bound its rule declares (at rows ``probs``, whose
    float64 maxima ``pmax`` are computed when not given, at absolute positions ``pos``)."""
    if rule.bound == "pmax":
        pmax = probs.amax(-1).to(torch.float64) if pmax is None else pmax
        if rule.maps_bound:
            pmax = rule.score_bound(pmax, pos)
        if bool((scores <= pmax).all()):  # one pass: NaN compares False
            return
    if bool(scores.isnan().any()):
        raise ValueError(f"{type(rule).__name__}.score returned NaN: scores must be numbers (-inf for never)")
    if rule.bound == "pmax":
        i = int((scores > pmax).nonzero()[0, 0])
        what = "score_bound(max_v p)" if rule.maps_bound else "max_v p"
        raise ValueError(f"{type(rule).__name__} declares bound='pmax' but scored {float(scores[i]):.6g} where "
                         f"{what} = {float(pmax[i]):.6g}: fix score() or set bound = None")


def draw(law: torch.Tensor | None, probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The engine's draw: the first argmax of ``probs`` when ``law`` is None, else the inverse CDF of ``law`` at ``u``."""
    return probs.argmax(-1) if law is None else categorical(law, u)


def check_count(rule: RuleSampler, n: torch.Tensor, n_masked: torch.Tensor) -> torch.Tensor:
    """The adaptive count ``n`` [B] as long, refused in one line unless 1 <= n <= n_masked where n_masked > 0."""
    n = torch.as_tensor(n, device=n_masked.device).long()
    bad = (n_masked > 0) & ((n < 1) | (n > n_masked))
    if n.shape != n_masked.shape or bool(bad.any()):
        i = int(bad.nonzero()[0, 0]) if n.shape == n_masked.shape else 0
        raise ValueError(f"{type(rule).__name__}.adaptive_count must give one count per sequence in "
                         f"[1, masked positions]: got {n.tolist()[i] if n.dim() else n.item()} with "
                         f"{int(n_masked[i])} masked")
    return n * (n_masked > 0)


@torch.no_grad()
def reference_decode(rule: RuleSampler, x: torch.Tensor, indices: torch.Tensor, steps: int, seed: int,
                     log_q: torch.Tensor | None = None, taken: torch.Tensor | None = None,
                     steps_out: torch.Tensor | None = None) -> None:
    """The rule's loop on its denoiser's ``probs_at`` (the dense direct provider): decodes the masked positions of x
    in place; an adaptive rule adds its steps per sequence to ``taken`` (float64 [B]) when given; ``steps_out`` (long
    [B, T]) receives the step index of every committed position (the decoding path)."""
    den = rule.denoiser
    B, M = x.shape[0], den.mask_id
    tok_u = StepUniforms(seed, indices, steps)
    tie_u = StepUniforms(seed, indices, steps, stream=rng.Stream.ORDER)
    if rule.adaptive:  # each sequence's own step counter; a block runs until it has no mask left
        blocks, schedules = rule.blocks(x.shape[1]), None
    else:
        blocks, schedules = rule.block_schedule(x.shape[1], steps)
    j = torch.zeros(B, dtype=torch.long, device=x.device)  # the step index of every sequence (the uniforms' key)
    for blk, (lo, hi) in enumerate(blocks):
        den.block_start(lo, hi)
        i = 0
        while True:
            masked = x[:, lo:hi] == M
            if schedules is None and not bool(masked.any()):
                break
            if schedules is not None:
                if i == len(schedules[blk]):
                    break
                k, i = schedules[blk][i], i + 1
                if k == 0:
                    j += 1
                    continue
            b, p = nonzero_pairs(masked)
            p = p + lo
            probs = den.probs_at(x, b, p)
            law = rule.propose(probs)
            tok = draw(law, probs, tok_u.at(j[b], b, p))
            s = rule.score(probs, *((tok, p) if rule.reads_tokens else (None, None))).to(torch.float64)
            check_bound(rule, probs, s, pos=p)
            if rule.position_temperature:
                s = s / rule.position_temperature - torch.log(-torch.log(tie_u.at(j[b], b, p, GUMBEL_SLOT)))
            scores = torch.full((B, hi - lo), -torch.inf, dtype=torch.float64, device=x.device)
            scores[b, p - lo] = s
            proposal = torch.zeros((B, hi - lo), dtype=torch.long, device=x.device)
            proposal[b, p - lo] = tok
            keys = tie_u.block(j, lo, hi, slot=TIE_SLOT) if rule.tie_rule == "random" else None
            order = rank_positions(scores, rule.tie_rule, keys)
            if schedules is None:
                n = check_count(rule, rule.adaptive_count(scores.gather(1, order), masked.sum(1)), masked.sum(1))
                if taken is not None:
                    taken += (n > 0).to(taken.dtype)
            else:
                n = torch.full((B,), k, dtype=torch.long, device=x.device)
            commit = torch.zeros_like(masked).scatter_(1, order, torch.arange(hi - lo, device=x.device) < n[:, None])
            if log_q is not None:
                lq = torch.zeros((B, hi - lo), dtype=torch.float64, device=x.device)
                lq[b, p - lo] = torch.zeros_like(s) if law is None else drawn_log_prob(law, tok)
                log_q[:, lo:hi] = torch.where(commit, lq, log_q[:, lo:hi])
            x[:, lo:hi] = torch.where(commit, proposal, x[:, lo:hi])
            if steps_out is not None:
                steps_out[:, lo:hi] = torch.where(commit, j[:, None], steps_out[:, lo:hi])
            j += 1 if schedules is not None else (n > 0).long()
