"""A sampler written as a rule: four plain-torch hooks; the engine owns the loop, the randomness and the posteriors.

A ranked parallel-decoding rule (LLaDA's low-confidence remasking, a left-to-right decoder, the user's own) does, at
step i of each block [lo, hi) of the sequence, over the block's masked positions:

    probs = p(x0_i | x)                       rows [n, V], from the engine's posterior provider
    law   = rule.propose(probs)               the proposal law (unnormalised; None: the argmax)
    tok   = draw(law, u)                      the engine's: inverse CDF with uniforms keyed by (seed, sequence,
                                              step, position); argmax when law is None
    s     = rule.score(probs, tok, pos)       float64 [n], higher commits first
    k     = rule.counts(n_block, S)[i]        how many commit at this step (S = steps per block)
    the k best scores commit their proposal (equal scores: ``tie_rule``); the other proposals are discarded.

:func:`reference_decode` is this loop, line for line, on ``Denoiser.probs_at`` (the dense direct provider);
:func:`dllm_lit.samplers.providers.decode_rule` runs the same rule through the provider the denoiser allows (the
exact oracle's neighbourhood cache, compact columns and bounded draws) with identical draws (tested).

Declaring a bound.  ``bound = "pmax"`` states score(probs, tok, pos) <= max_v probs[v] for every row and every
proposal (LLaDA's confidence p(tok) is; 1 - p(tok) is not).  The engine then draws proposals only where a score
can reach the k-th best (the large fast path).  The declaration is checked wherever a score is computed: a score
above its row's maximum is refused in one line instead of silently changing the draws.
"""
from __future__ import annotations

from abc import abstractmethod

import torch

from dllm_lit import checks, rng
from dllm_lit.indices import nonzero_pairs
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.confidence_decoding import TIE_SLOT
from dllm_lit.samplers.draws import StepUniforms, categorical, drawn_log_prob
from dllm_lit.samplers.selection import TIE_RULES, rank_positions, topk_mask_by_rule, transfer_schedule

__all__ = ["RuleSampler", "BOUNDS", "reference_decode", "check_bound", "draw"]

#: score bounds a rule may declare: None, or "pmax" (score <= max_v p(x0 = v | x) at every position)
BOUNDS = (None, "pmax")


class RuleSampler(Sampler):
    """A sampler defined by its rule (module docstring): override :meth:`score`, and where needed :meth:`propose`,
    :meth:`counts`, :meth:`blocks`, ``bound`` and ``tie_rule``.  ``log_q_reason`` returning None (the commit order
    does not depend on the drawn tokens) makes the engine record log q."""

    #: a declared upper bound of the score (:data:`BOUNDS`); enables bounded draws, checked at run time
    bound: str | None = None
    #: order of equal scores: "lowest" position first, "highest", or "random" (Stream.ORDER uniforms)
    tie_rule: str = "lowest"
    no_log_q_reason = "the commit order depends on the scores of the drawn proposals"

    # ------------------------------------------------------------------ the rule
    def propose(self, probs: torch.Tensor) -> torch.Tensor | None:
        """The law proposals are drawn from at rows ``probs`` [n, V] (unnormalised), or None for the argmax."""
        return probs

    @abstractmethod
    def score(self, probs: torch.Tensor, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Float64 [n] ranking score of proposal ``tok`` [n] at absolute positions ``pos`` [n]."""

    def counts(self, n: int, steps: int) -> list[int]:
        """Commits at each of the ``steps`` steps of a block of ``n`` masked positions (sum n): the even split."""
        return transfer_schedule(n, steps)

    def blocks(self, seq_len: int) -> list[tuple[int, int]]:
        """[lo, hi) of the blocks decoded left to right (default: one block)."""
        return [(0, seq_len)] if seq_len > 0 else []

    def initial_state(self, indices: torch.Tensor, seq_len: int, seed: int,
                      log_q: torch.Tensor | None = None) -> torch.Tensor:
        """The state decoding starts from: all MASK [B, T]."""
        return torch.full((indices.numel(), seq_len), self.mask_id, dtype=torch.long, device=indices.device)

    # ------------------------------------------------------------------ what the engine derives from it
    def schedule(self, seq_len: int, steps: int) -> tuple[list[tuple[int, int]], list[list[int]]]:
        """The blocks and, per block, its commit counts (``steps`` split evenly over the blocks)."""
        blocks = self.blocks(seq_len)
        S = steps // len(blocks) if blocks else 0
        return blocks, [self.counts(hi - lo, S) for lo, hi in blocks]

    def check_run(self, seq_len: int, steps: int | None) -> None:
        """``steps`` divides into the blocks and the counts commit every position of each block."""
        if steps is None:
            return
        blocks = self.blocks(seq_len)
        if blocks and steps % len(blocks):
            raise ValueError(f"steps={steps} must be divisible by the number of blocks ({len(blocks)}) "
                             f"for seq_len={seq_len}")
        for (lo, hi), c in zip(*self.schedule(seq_len, steps)):
            if sum(c) != hi - lo or min(c, default=0) < 0:
                raise ValueError(f"counts of block [{lo}, {hi}) must be >= 0 and sum to {hi - lo}, got {c}")

    def check_options(self) -> None:
        checks.choice("bound", self.bound, BOUNDS)
        checks.choice("tie_rule", self.tie_rule, TIE_RULES)

    def nfe(self, seq_len: int, steps: int | None) -> float | None:
        """Steps that commit at least one token."""
        if steps is None:
            return None
        return float(sum(1 for c in self.schedule(seq_len, steps)[1] for k in c if k > 0))

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int,
                 log_q: torch.Tensor | None = None) -> torch.Tensor:
        """Samples by the engine-chosen provider (:func:`~dllm_lit.samplers.providers.decode_rule`)."""
        from dllm_lit.samplers.providers import decode_rule

        if log_q is not None and self.log_q_reason(steps) is not None:
            raise ValueError(f"{type(self).__name__} records no log q: {self.log_q_reason(steps)}")
        x = self.initial_state(indices, seq_len, seed, log_q=log_q)
        decode_rule(self, self.denoiser, x, indices, steps, seed, log_q=log_q)
        return x

    def generate_with_stats(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int):
        if self.log_q_reason(steps) is not None:
            return super().generate_with_stats(indices, seq_len, steps, seed)
        log_q = self._log_q_buffer(indices, seq_len)
        x = self.generate(indices, seq_len, steps, seed, log_q=log_q)
        return x, self._stats(self.nfe(seq_len, steps), log_q, indices.numel())


def check_bound(rule: RuleSampler, probs: torch.Tensor, scores: torch.Tensor) -> None:
    """Refuse, in one line, a NaN score or a score above the bound its rule declares (at rows ``probs``)."""
    if bool(scores.isnan().any()):
        raise ValueError(f"{type(rule).__name__}.score returned NaN: scores must be numbers (-inf for never)")
    if rule.bound == "pmax":
        over = scores > probs.amax(-1).to(torch.float64)
        if bool(over.any()):
            i = int(over.nonzero()[0, 0])
            raise ValueError(f"{type(rule).__name__} declares bound='pmax' but scored {float(scores[i]):.6g} where "
                             f"max_v p = {float(probs[i].amax()):.6g}: fix score() or set bound = None")


def draw(law: torch.Tensor | None, probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The engine's draw: the first argmax of ``probs`` when ``law`` is None, else the inverse CDF of ``law`` at ``u``."""
    return probs.argmax(-1) if law is None else categorical(law, u)


@torch.no_grad()
def reference_decode(rule: RuleSampler, den, x: torch.Tensor, indices: torch.Tensor, steps: int, seed: int,
                     log_q: torch.Tensor | None = None) -> None:
    """The rule's loop on ``den.probs_at`` (the dense direct provider): decodes the masked positions of x in place."""
    B, M = x.shape[0], den.mask_id
    tok_u = StepUniforms(seed, indices, steps)
    tie_u = StepUniforms(seed, indices, steps, stream=rng.Stream.ORDER)
    j = 0  # global step index (steps that commit nothing count too: the uniforms' key)
    for (lo, hi), counts in zip(*rule.schedule(x.shape[1], steps)):
        for k in counts:
            j += 1
            if k == 0:
                continue
            b, p = nonzero_pairs(x[:, lo:hi] == M)
            p = p + lo
            probs = den.probs_at(x, b, p)
            law = rule.propose(probs)
            tok = draw(law, probs, tok_u.at(j - 1, b, p))
            s = rule.score(probs, tok, p).to(torch.float64)
            check_bound(rule, probs, s)
            scores = torch.full((B, hi - lo), -torch.inf, dtype=torch.float64, device=x.device)
            scores[b, p - lo] = s
            proposal = torch.zeros((B, hi - lo), dtype=torch.long, device=x.device)
            proposal[b, p - lo] = tok
            if rule.tie_rule == "random":
                order = rank_positions(scores, "random", tie_u.block(j - 1, lo, hi, slot=TIE_SLOT))
                commit = torch.zeros_like(scores, dtype=torch.bool).scatter_(1, order[:, :k], True)
            else:
                commit = topk_mask_by_rule(scores, k, rule.tie_rule)
            if log_q is not None:
                lq = torch.zeros((B, hi - lo), dtype=torch.float64, device=x.device)
                lq[b, p - lo] = torch.zeros_like(s) if law is None else drawn_log_prob(law, tok)
                log_q[:, lo:hi] = torch.where(commit, lq, log_q[:, lo:hi])
            x[:, lo:hi] = torch.where(commit, proposal, x[:, lo:hi])
