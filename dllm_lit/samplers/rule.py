"""A sampler written as a rule: four plain-torch hooks; the engine owns the loop, the randomness and the posteriors.

A ranked parallel-decoding rule (LLaDA's low-confidence remasking, a left-to-right decoder, the user's own) does, at
step i of each block [lo, hi) of the sequence, over the block's masked positions:

    probs = p(x0_i | x)                       rows [n, V], from the engine's posterior provider
    law   = rule.propose(probs)               the proposal law (unnormalised; None: the argmax)
    tok   = draw(law, u)                      the engine's: inverse CDF with uniforms keyed by (seed, sequence,
                                              step, position); argmax when law is None
    s     = rule.score(probs, tok, pos)       float64 [n], higher commits first
    k     = rule.counts(n_block, S)[i]        how many commit at this step (S = steps per block), or, for a rule
                                              that overrides ``adaptive_count``, per sequence from its sorted scores
    the k best scores commit their proposal (equal scores: ``tie_rule``); the other proposals are discarded.

Adaptive counts.  A rule overriding ``adaptive_count(sorted_scores, n_masked)`` (Fast-dLLM's threshold: every
proposal at least as confident as tau, at least one) decides at each step, per sequence, how many commit from the
step's scores sorted descending.  A block then runs until it has no mask left; each sequence keeps its own step
counter, which keys its uniforms and counts its denoiser evaluations (NFE per sequence); ``steps`` only keys the
randomness.

:func:`reference_decode` is this loop, line for line, on ``Denoiser.probs_at`` (the dense direct provider);
:func:`dllm_lit.decoding.providers.decode_rule` runs the same rule through the provider the denoiser allows (the
exact oracle's neighbourhood cache, compact columns and bounded draws) with identical draws (tested).

Declaring a bound.  ``bound = "pmax"`` states score(probs, tok, pos) <= max_v probs[v] for every row and every
proposal (LLaDA's confidence p(tok) is; 1 - p(tok) is not), or with ``score_bound`` overridden, score <=
score_bound(max_v probs, pos) (the PC-sampler's position-weighted score).  The engine then draws proposals only where a score
can reach the k-th best (the large fast path).  The declaration is checked wherever a score is computed: a score
above its row's maximum is refused in one line instead of silently changing the draws.  An adaptive rule with a
bound that also overrides ``count_decided`` (Fast-dLLM's rules) is scored the same way: best bounds first, until
its count and its committed set are certain (:mod:`dllm_lit.decoding.bounded_counts`).
"""
from __future__ import annotations

from abc import abstractmethod

import torch

from dllm_lit import checks
from dllm_lit.decoding import GUMBEL_SLOT, decode, random_order_steps
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.selection import TIE_RULES, transfer_schedule

__all__ = ["RuleSampler", "BOUNDS", "ORDERS", "GUMBEL_SLOT", "posterior_probability_score", "law_probability_score"]

#: score bounds a rule may declare: None, or "pmax" (score <= max_v p(x0 = v | x) at every position)
BOUNDS = (None, "pmax")
#: commit orders a rule may declare: "score" (the k best scores), or "random" (drawn up front by ``decode_steps``)
ORDERS = ("score", "random")


def posterior_probability_score(score):
    """Mark a rule's ``score`` as a function of the proposal's posterior probability p(tok) alone, namely
    ``score_from_probability(p(tok), tok, pos)`` (LLaDA's confidence, PC-Sampler's calibrated one), so that the engine
    may read p(tok) from the row the draw computed instead of computing the row again."""
    score.posterior_probability = True
    return score


def law_probability_score(when=lambda rule: True):
    """Mark a rule's ``score`` as the proposal's probability under the normalised proposal law (MaskGIT's
    confidence) for the rules where ``when(rule)`` holds (Dream: ``alg`` maskgit_plus), so that the engine may read it
    from the draw where its provider computes the law anyway."""
    def mark(score):
        score.law_probability = when
        return score

    return mark


class RuleSampler(Sampler):
    """A sampler defined by its rule (module docstring): override :meth:`score`, and where needed :meth:`propose`,
    :meth:`counts`, :meth:`blocks`, ``bound`` and ``tie_rule``.  ``log_q_reason`` returning None (the commit order
    does not depend on the drawn tokens) makes the engine record log q."""

    #: a declared upper bound of the score (:data:`BOUNDS`); enables bounded draws, checked at run time
    bound: str | None = None
    #: order of equal scores: "lowest" position first, "highest", or "random" (Stream.ORDER uniforms)
    tie_rule: str = "lowest"
    no_log_q_reason = "the commit order depends on the scores of the drawn proposals"
    #: "random": the step of every position is drawn up front by :meth:`decode_steps` and ``score`` is never read
    #: (LLaDA's random remasking: uniformly random k-subsets); the engine queries the denoiser only where a position
    #: commits, drawing its proposal with Stream.TOKEN uniforms in slot ``token_slot``
    order: str = "score"
    token_slot: int = 0
    #: False: ``score(probs, None, None)`` reads the posterior row only (an entropy, a margin), never the proposal or
    #: the position; the engine may store it per row, ranks first and draws proposals only where positions commit
    reads_tokens: bool = True
    #: > 0: the k committed positions are drawn without replacement from softmax(score / position_temperature)
    #: (Gumbel top-k with Stream.ORDER keys at (step, position), slot GUMBEL_SLOT); a declared bound is then unused
    position_temperature: float | None = None
    #: "entropy" / "topk_margin": the score is sum_v q log(q + 1e-10) / q_(1) - q_(2) of the normalised proposal law q
    #: (Dream's), so on the exact oracle the engine may also bound it from reference rows (score_envelopes)
    envelope: str | None = None
    #: reuse posterior rows between steps where the provider can (exact: False recomputes them, same draws)
    use_cache: bool = True
    #: False for a rule whose counts ignore ``steps`` (one row, steps "-", NFE from its counts; ``counts(n, None)``)
    uses_steps: bool = True
    announces_blocks = True  # the engine tells the denoiser each block's start (Denoiser.block_start)

    @property
    def scores_by_prob(self) -> bool:
        """Whether ``score`` is marked :func:`posterior_probability_score` (p(tok) exactly): the engine then reads the
        score from the draw's row.  A subclass that overrides ``score`` drops the mark."""
        return getattr(type(self).score, "posterior_probability", False)

    @property
    def scores_by_law(self) -> bool:
        """Whether ``score`` is marked :func:`law_probability_score` and the mark's condition holds for this rule: the
        engine then reads the score from the draw.  A subclass that overrides ``score`` drops the mark."""
        when = getattr(type(self).score, "law_probability", None)
        return when is not None and bool(when(self))

    def score_from_probability(self, p_tok: torch.Tensor, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """A score marked :func:`posterior_probability_score` from p(tok) [n] (the row's dtype), the proposals ``tok``
        and their positions ``pos``: float64 [n], the same bits as ``score``.  The default: p(tok) itself."""
        return p_tok.to(torch.float64)

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

    def adaptive_count(self, sorted_scores: torch.Tensor, n_masked: torch.Tensor) -> torch.Tensor:
        """Override for adaptive counts (module docstring): commits now per sequence [B] (>= 1 and <= n_masked where
        n_masked > 0), from its scores sorted descending [B, L] (-inf past its ``n_masked`` [B] masked positions)."""
        raise TypeError(f"{type(self).__name__} has a fixed schedule: the engine asks its counts(), never "
                        f"adaptive_count (override adaptive_count to decide counts from the step's scores)")

    @property
    def adaptive(self) -> bool:
        """Whether the rule decides its counts at each step (it overrides :meth:`adaptive_count`)."""
        return type(self).adaptive_count is not RuleSampler.adaptive_count

    def count_decided(self, top: torch.Tensor, known: torch.Tensor, rest: torch.Tensor,
                      n_masked: torch.Tensor) -> torch.Tensor:
        """Override (an adaptive rule with a declared ``bound``) to let the engine score only some positions: per
        sequence [B], whether :meth:`adaptive_count` is the same for every sorted row that begins with the exact
        ``known`` [B] first entries of ``top`` [B, L] (descending, -inf after them) and whose other scores are all
        <= ``rest`` [B] (<= the last known one) - and then equal to ``adaptive_count(top, n_masked)``.  False where
        unsure only costs rows; True where the count could differ changes the draws."""
        raise TypeError(f"{type(self).__name__} declares no count_decided: the engine scores every masked position")

    @property
    def bounded_count(self) -> bool:
        """Whether the adaptive rule decides its counts from the best scores and a bound of the rest
        (it overrides :meth:`count_decided`)."""
        return type(self).count_decided is not RuleSampler.count_decided

    def prefix_decides(self, prefix: torch.Tensor) -> torch.Tensor:
        """Override (adaptive rule): per sequence, whether :meth:`adaptive_count` of the first sorted scores
        ``prefix`` [B, P] is the whole row's; the engine then selects partially (True when unsure: wrong draws)."""
        raise TypeError(f"{type(self).__name__} declares no prefix_decides: the engine sorts every step's scores")

    @property
    def prefix_count(self) -> bool:
        """Whether the adaptive rule's count is decided by a prefix of its sorted scores (:meth:`prefix_decides`)."""
        return type(self).prefix_decides is not RuleSampler.prefix_decides

    def score_bound(self, pmax: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """With ``bound = "pmax"``: an upper bound (float64) of the score at absolute positions ``pos`` where
        max_v p <= ``pmax`` (float64, same shape), non-decreasing in ``pmax``.  Default ``pmax`` itself (score <=
        max_v p); override for a score bounded by a function of max_v p and the position (the PC-sampler's)."""
        return pmax

    @property
    def maps_bound(self) -> bool:
        """Whether the rule overrides :meth:`score_bound`."""
        return type(self).score_bound is not RuleSampler.score_bound

    # ------------------------------------------------------------------ stability (KLASS)
    #: H >= 1: the engine keeps each masked position's previous posterior row; a position is ``stable`` when its last
    #: H ``divergence`` values are below ``stability_threshold``, and :meth:`stable_commits` picks the commits
    #: (:mod:`dllm_lit.decoding.stability_decoding`).  0: off
    stability_history: int = 0
    stability_threshold: float = 0.0

    def divergence(self, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """Float64 [n]: rows ``p`` [n, V] against the previous call's ``q`` (zeros before the first); 0 at p = q."""
        raise TypeError(f"{type(self).__name__} declares stability_history but no divergence")

    def stability_read(self, scores: torch.Tensor) -> torch.Tensor:
        """Bool [B, L]: where :meth:`stable_commits` reads ``stable`` (divergences are computed there only)."""
        return torch.ones_like(scores, dtype=torch.bool)

    def stable_commits(self, scores: torch.Tensor, stable: torch.Tensor, masked: torch.Tensor, k: int,
                       last: bool) -> torch.Tensor:
        """Bool [B, L] commits from the scores (-inf where revealed), ``stable``, ``masked``, k and the last step."""
        raise TypeError(f"{type(self).__name__} declares stability_history but no stable_commits")

    def blocks(self, seq_len: int) -> list[tuple[int, int]]:
        """[lo, hi) of the blocks decoded left to right (default: one block)."""
        return [(0, seq_len)] if seq_len > 0 else []

    def decode_steps(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        """With ``order = "random"``: the step of every position [B, T] (-1 where revealed at the start): each
        block's positions in a uniformly random order (Stream.ORDER keys), cut into the block's counts."""

        blocks, counts = self.block_schedule(seq_len, steps)
        if not blocks:
            return torch.full((indices.numel(), seq_len), -1, dtype=torch.long, device=indices.device)
        lo, bl = blocks[0][0], blocks[0][1] - blocks[0][0]
        return random_order_steps(seed, indices, steps, seq_len, lo, bl, len(blocks), counts=counts)

    def step_grid(self, seq_len: int, steps: int | None) -> tuple[int, int | None] | None:
        """With ``order = "random"``, per-block step grids (BD3): ``(slots, fill)`` when :meth:`decode_steps` gives
        the global step block * slots + j; slot ``fill``'s positions (None: none) take the argmax; NFE per sequence."""
        return None

    def remasked(self, n: int, step: int, steps: int, masked: torch.Tensor | int) -> torch.Tensor | int:
        """Override to decode by cuts (MaskGIT, :mod:`dllm_lit.decoding.cut_decoding`): how many of the ``masked``
        positions ([B] or int) stay masked after step < steps - 1 of a run begun with ``n``."""
        raise TypeError(f"{type(self).__name__} does not decode by cuts (override remasked)")

    cuts = property(lambda self: type(self).remasked is not RuleSampler.remasked, doc="Whether it overrides remasked.")

    def confidence_score(self, conf: torch.Tensor) -> torch.Tensor:
        """A cut's score of a proposal of posterior probability ``conf`` (float64; non-decreasing in it)."""
        return conf

    def gumbel_scale(self, step: int, steps: int) -> float:
        """A cut's scale c >= 0 of the Gumbel noise added to the scores at ``step`` (default 0: none)."""
        return 0.0

    def initial_state(self, indices: torch.Tensor, seq_len: int, seed: int,
                      log_q: torch.Tensor | None = None) -> torch.Tensor:
        """The state decoding starts from: all MASK [B, T]."""
        return torch.full((indices.numel(), seq_len), self.mask_id, dtype=torch.long, device=indices.device)

    # ------------------------------------------------------------------ what the engine derives from it
    def rows(self) -> list:
        """One row per steps value; one row without steps for a rule that ignores them (``uses_steps`` False)."""
        if self.uses_steps:
            return super().rows()
        from dllm_lit.engine.plan import Row

        return [Row(self.name, None, self)]

    def block_schedule(self, seq_len: int, steps: int | None) -> tuple[list[tuple[int, int]], list[list[int]]]:
        """The blocks and, per block, its commit counts (``steps`` split evenly over the blocks; None for a rule
        that ignores them)."""
        blocks = self.blocks(seq_len)
        S = None if steps is None else steps // len(blocks) if blocks else 0
        return blocks, [self.counts(hi - lo, S) for lo, hi in blocks]

    def check_run(self, seq_len: int, steps: int | None) -> None:
        """``steps`` divides into the blocks and the counts commit every position of each block."""
        blocks = self.blocks(seq_len)
        if self.adaptive or (steps is None and self.uses_steps):  # adaptive: steps only keys the randomness
            return
        if steps is not None and blocks and steps % len(blocks):
            raise ValueError(f"steps={steps} must be divisible by the number of blocks ({len(blocks)}) "
                             f"for seq_len={seq_len}")
        for (lo, hi), c in zip(*self.block_schedule(seq_len, steps)):
            if sum(c) != hi - lo or min(c, default=0) < 0:
                raise ValueError(f"counts of block [{lo}, {hi}) must be >= 0 and sum to {hi - lo}, got {c}")

    def check_options(self) -> None:
        checks.choice("bound", self.bound, BOUNDS)
        checks.choice("tie_rule", self.tie_rule, TIE_RULES)
        checks.choice("order", self.order, ORDERS)

    def nfe(self, seq_len: int, steps: int | None) -> float | None:
        """Steps that commit at least one token (adaptive rules: None, counted per sequence by the run)."""
        if (steps is None and self.uses_steps) or self.adaptive or self.stability_history:
            return None
        return float(sum(1 for c in self.block_schedule(seq_len, steps)[1] for k in c if k > 0))

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int,
                 log_q: torch.Tensor | None = None) -> torch.Tensor:
        """Samples by the path the declarations choose (:func:`dllm_lit.decoding.decode`)."""
        return self._decode(indices, seq_len, steps, seed, log_q)[0]

    def _decode(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int,
                log_q: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Samples and the denoiser evaluations of each sequence (float64 [B])."""
        if not self.uses_steps:
            steps = None  # counts(n, None); the uniforms are keyed by step 0
        if log_q is not None and self.log_q_reason(steps) is not None:
            raise ValueError(f"{type(self).__name__} records no log q: {self.log_q_reason(steps)}")
        x = self.initial_state(indices, seq_len, seed, log_q=log_q)
        taken = decode(self, x, indices, seq_len, steps, seed, log_q=log_q)
        if taken is None:
            taken = torch.full((indices.numel(),), float(self.nfe(seq_len, steps)), dtype=torch.float64,
                               device=indices.device)
        return x, taken

    def generate_with_nfe(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int):
        return self._decode(indices, seq_len, steps, seed)

    def generate_with_stats(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int):
        if self.log_q_reason(steps) is not None:
            return super().generate_with_stats(indices, seq_len, steps, seed)
        log_q = self._log_q_buffer(indices, seq_len)
        x, nfe = self._decode(indices, seq_len, steps, seed, log_q)
        return x, self._stats(nfe, log_q, indices.numel())
