"""The loop shared by confidence-ranked parallel decoding rules (LLaDA, Fast-dLLM, Dream, EB, PC-sampler).

Every such rule decodes blocks of positions left to right and, at each step of a block,

1. takes the posterior p_i = p(x0_i | x) at every masked position i of the block;
2. proposes a token x̂_i at each (argmax at temperature 0, else a draw from the rule's proposal law);
3. gives each position a score (a confidence p_i(x̂_i), a margin, a negative entropy, ...);
4. ranks the masked positions by score (ties by a :data:`~dllm_lit.samplers.selection.TIE_RULES` rule)
   and commits the proposals of the first n; every other proposal is discarded.

Rules differ only in the features they read from p_i, the score, and how n is chosen:

* a *fixed schedule* (LLaDA's ``get_num_transfer_tokens``, Dream's ``floor(#mask (1 - s/t))``): the
  counts are known in advance and every sequence steps together; the step index is global;
* an *adaptive count* (Fast-dLLM's threshold and factor rules, the EB-sampler): n is a function of
  the sorted scores of each sequence, a block runs until it has no mask left, and every sequence
  keeps its own step counter (what a batch of one would do upstream), which also counts its
  denoiser evaluations.

The posterior features of a block come from a :class:`~dllm_lit.decoding.posterior_cache.PosteriorCache`
when it fits in memory (refreshed only where a nearest revealed neighbour changed), else they are
computed from ``probs_at`` at every step; both give identical draws.

Randomness: the proposal at (step j, position i) uses ``tok_u`` (Stream.TOKEN) at (j, i); the
random tie rule uses ``tie_u`` (Stream.ORDER) at (j, i) in slot :data:`TIE_SLOT`.  So rules that
coincide (e.g. Fast-dLLM with a threshold no confidence reaches, and LLaDA with one token per step)
coincide draw for draw.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from dllm_lit import checks
from dllm_lit.denoisers.local import LocalDenoiser
from dllm_lit.util.indices import flat_nonzero, nonzero_pairs
from dllm_lit.decoding.bounded_counts import ScoringRounds, score_until_counted
from dllm_lit.decoding.compact_decoding import CompactBlock, compact_applies, compact_counts
from dllm_lit.decoding.gap_decoding import GapBlock, decode_gaps, gaps_apply
from dllm_lit.samplers.draws import StepUniforms, categorical, categorical_from_cdf, \
    sharpen, tempered_law
from dllm_lit.decoding.posterior_cache import CachedFeatures, PosteriorCache
from dllm_lit.samplers.selection import (TIE_RULES, rank_positions, top_n_mask, topk_mask_by_rule, topk_stable_mask,
                                         unique_top_n)
from dllm_lit.decoding.step_view import StepView

__all__ = ["BlockPosteriors", "BlockDecoding", "StepView", "decode_blocks", "proposal_features",
           "proposal_widths", "propose_tokens", "propose_step", "confidence", "posterior_entropy",
           "sub_batches", "in_sub_batches", "cache_width", "check_blocks", "block_bounds", "TIE_SLOT",
           "ranking_options", "with_tie_rule"]

#: slot of Stream.ORDER uniforms that break ties under tie_rule="random"
TIE_SLOT = 1

Features = Callable[[torch.Tensor], dict[str, torch.Tensor]]
Widths = dict[str, tuple[tuple[int, ...], torch.dtype | None]]


def proposal_features(probs: torch.Tensor, temperature: float, cdf: bool = True) -> dict[str, torch.Tensor]:
    """LLaDA's proposal: ``argmax`` of p and, at temperature > 0 with ``cdf``, the float64 ``cdf`` of p^(1/tau);
    ``probs`` = p.  Without ``cdf``, ``pmax`` = max_v p instead (an upper bound of the confidence, for
    :func:`decode_blocks`' ``bound``), and a draw computes the cdf of the rows it needs (same numbers, see
    :func:`propose_tokens`).

    ``probs`` keeps the posterior's dtype, so cached and recomputed confidences are the same numbers.
    """
    out = {"probs": probs, "argmax": probs.argmax(-1)}
    if not cdf:
        out["pmax"] = probs.amax(-1)
    elif temperature != 0:
        law = probs if temperature == 1 else sharpen(probs, 1.0 / temperature)
        out["cdf"] = law.to(torch.float64).cumsum(-1)
    return out


def proposal_widths(V: int, temperature: float, cdf: bool = True) -> Widths:
    """Allocation of :func:`proposal_features` in a :class:`PosteriorCache`."""
    w: Widths = {"probs": ((V,), None), "argmax": ((), torch.int64)}
    if not cdf:
        w["pmax"] = ((), None)
    elif temperature != 0:
        w["cdf"] = ((V,), torch.float64)
    return w


def posterior_entropy(probs: torch.Tensor) -> torch.Tensor:
    """H(p) = -sum_v p_v log p_v in float64 (0 log 0 = 0), per row."""
    p = probs.to(torch.float64)
    return -torch.special.xlogy(p, p).sum(-1)


def sub_batches(B: int, width: int, length: int, use_cache: bool = True) -> list[slice]:
    """Row slices of a batch of B sequences such that each slice's :class:`PosteriorCache` (``width`` numbers per
    position, ``length`` positions) fits the memory budget.  Sequences are independent (every draw is keyed by
    the sequence index), so running the slices apart gives identical draws.  One slice when the whole batch
    fits, when the cache is off, or when not even one sequence fits (then every step recomputes)."""
    if use_cache and not PosteriorCache.fits(B, width, length=length):
        sub = PosteriorCache.max_batch(width, length=length)
        if sub >= 1:
            return [slice(i, min(B, i + sub)) for i in range(0, B, sub)]
    return [slice(0, B)]


def in_sub_batches(run: Callable[[torch.Tensor], torch.Tensor | tuple[torch.Tensor, ...]], indices: torch.Tensor,
                   width: int, length: int, use_cache: bool = True):
    """``run(indices)`` in the :func:`sub_batches` of ``indices``, outputs concatenated along dim 0
    (tuples element-wise); None when one batch fits (the caller then runs it itself)."""
    slices = sub_batches(indices.numel(), width, length, use_cache)
    if len(slices) == 1:
        return None
    outs = [run(indices[sl]) for sl in slices]
    if isinstance(outs[0], tuple):
        return tuple(torch.cat(parts) for parts in zip(*outs))
    return torch.cat(outs)


def has_max_prob_bound(denoiser) -> bool:
    """Whether ``denoiser`` is a :class:`LocalDenoiser` that bounds max_v p(x0 = v | z) without posterior rows."""
    return isinstance(denoiser, LocalDenoiser) and denoiser.has_max_prob_bound


def cache_width(denoiser, widths: Widths, fresh: tuple[str, ...] = (), other: int | None = None) -> int:
    """Numbers per position a :class:`PosteriorCache` stores for ``widths`` (``fresh`` features of a local
    denoiser are recomputed where read, not stored); ``other``, if given, for a denoiser that is not local."""
    local = isinstance(denoiser, LocalDenoiser)
    if other is not None and not local:
        return other
    skip = set(fresh) if local else set()
    return sum(max(1, int(torch.tensor(shape).prod())) if shape else 1
               for name, (shape, _) in widths.items() if name not in skip)


class BlockPosteriors:
    """Posterior features at the masked positions of [lo, hi) of a [B, T] state, step after step.

    ``spec``: the features (:class:`CachedFeatures`).  With ``use_cache`` and enough memory they live in a
    :class:`PosteriorCache` (every position of the block, refreshed only where a nearest revealed neighbour
    changed); otherwise every :meth:`load` recomputes them with ``probs_at`` at the listed positions.  Same values
    either way.  ``row0``: index of the state's first row in the caller's batch (:attr:`StepView.b` adds it).
    ``spec.law``: the proposal law (posterior rows -> unnormalised law), for :meth:`PosteriorCache.draw`.  With a
    ``law`` and a denoiser that bounds max_v p without rows (:func:`has_max_prob_bound`), the feature
    ``spec.bound`` is that bound, refreshed from the neighbours alone, and no row features are computed at refresh.
    ``spec.law_scores``: drawn proposals come with their probability under the (normalised) proposal law instead
    of the posterior's (:meth:`PosteriorCache.draw`).
    """

    def __init__(self, denoiser, B: int, lo: int, hi: int, spec: CachedFeatures, device: torch.device,
                 use_cache: bool = True, row0: int = 0) -> None:
        self.den, self.lo, self.hi, self.features, self.row0 = denoiser, lo, hi, spec.features, row0
        self.names = set(spec.widths)
        width = cache_width(denoiser, spec.widths, spec.fresh) if spec.width is None else spec.width
        self.cache = None
        if use_cache and PosteriorCache.fits(B, width, length=hi - lo):
            if spec.law is not None and spec.bound is not None and has_max_prob_bound(denoiser):
                widths = {name: w for name, w in spec.widths.items() if name in spec.fresh}
                widths[spec.bound] = ((), torch.float64)
                self.cache = PosteriorCache(denoiser, B, lo, hi, replace(spec, features=None, widths=widths), device)
            else:
                self.cache = PosteriorCache(denoiser, B, lo, hi, replace(spec, bound=None), device, by_key=True)
        self._feats: dict[str, torch.Tensor] = {}

    def load(self, x: torch.Tensor, b: torch.Tensor | None, p: torch.Tensor | None) -> None:
        """Make the features of the masked positions (b, p) (rows of x, absolute positions) of state x
        available (with the cache: of every masked position of the block; b, p may then be None)."""
        if self.cache is not None:
            self.cache.refresh(x)
        else:
            self._feats = self.features(self.den.probs_at(x, b, p))

    def get(self, name: str, b: torch.Tensor, p: torch.Tensor, k: torch.Tensor | None = None,
            sel: torch.Tensor | None = None) -> torch.Tensor:
        """Feature ``name`` at positions (b, p) - without the cache, the loaded positions listed by ``sel``
        (None: all) -; with ``k``, only entry k of each row."""
        if self.cache is not None:
            return self.cache.get(name, b, p, k)
        v = self._feats[name] if sel is None else self._feats[name][sel]
        return v if k is None else v.gather(1, k[:, None]).squeeze(1)

    @property
    def draws_law(self) -> bool:
        """Whether proposals are drawn by :meth:`draw_law` (a cache with a proposal law)."""
        return self.cache is not None and self.cache.law is not None

    def draw_law(self, view: "StepView", u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Proposals from the proposal law at the view's positions and their posterior (or, with ``law_scores``,
        proposal-law) probabilities (:meth:`PosteriorCache.draw`)."""
        return self.cache.draw(view.rows, view.p, u)

    def tighten(self, view: "StepView", maxima: torch.Tensor) -> None:
        """Lower the stored row-free bound at the view's positions to their rows' exact float64 ``maxima`` (a cache
        with a proposal law and a bound; valid until a neighbour changes), as :meth:`draw_law` does."""
        cache = self.cache
        cache.store[cache.bound][view.rows, view.p - self.lo] = maxima

    def draw(self, u: torch.Tensor, name: str, b: torch.Tensor, p: torch.Tensor,
             sel: torch.Tensor | None = None) -> torch.Tensor:
        """Inverse-CDF draw (uniforms ``u``) from the stored float64 cdf ``name`` at positions (b, p) (see :meth:`get`)."""
        if self.cache is not None:
            return self.cache.draw_stored(name, b, p, u)
        cdf = self._feats[name] if sel is None else self._feats[name][sel]
        return categorical_from_cdf(cdf, u)


def propose_tokens(view: StepView, temperature: float, tok_u: StepUniforms, cdf: str = "cdf") -> torch.Tensor:
    """The proposals: feature ``argmax`` at temperature 0, else the inverse-CDF draw from p^(1/tau) with
    Stream.TOKEN uniforms at (step, position) - upstream's Gumbel race ``argmax(log p / tau + G)`` in law.

    The cdf is the stored feature ``cdf`` when there is one, else computed from the ``probs`` rows of the
    covered positions by the same float64 cumsum (identical draws); a cache with a proposal law draws with
    :meth:`PosteriorCache.draw` (the same numbers) and sets ``view.tok_prob``.
    """
    if temperature == 0:
        return view.get("argmax")
    u = view.uniforms(tok_u)
    if cdf in view.post.names:
        return view.post.draw(u, cdf, view.rows, view.p, view.sel)
    if view.post.draws_law:
        tok, view.tok_prob = view.post.draw_law(view, u)
        return tok
    return categorical(tempered_law(view.get("probs"), temperature), u)


def confidence(view: StepView) -> torch.Tensor:
    """c_i = p_i(x̂_i), the posterior's probability of the proposal (no temperature), as float64."""
    if view.tok_prob is not None:
        return view.tok_prob.to(torch.float64)
    return view.get("probs", view.tok).to(torch.float64)


def propose_step(post: BlockPosteriors, x: torch.Tensor, b: torch.Tensor, p: torch.Tensor, j: int,
                 temperature: float, tok_u: StepUniforms) -> StepView:
    """Load the posteriors at the masked (b, p) of x and draw LLaDA's proposals there (``view.tok``)."""
    post.load(x, b, p)
    view = StepView(post, b, p, j, post.lo, post.hi)
    view.tok = propose_tokens(view, temperature, tok_u)
    return view


Score = Callable[[StepView], torch.Tensor]
#: (bound feature values, absolute positions) -> upper bounds of the score there (float64, same shape); an object
#: with an attribute ``from_neighbours(x_left, d_left, x_right, d_right)`` (masked positions -> float64
#: upper bounds, +inf where none) has the fixed-schedule bounded steps over a cache also take the smaller of both
ScoreBound = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
#: adaptive count: (scores sorted descending [B, L] with -inf where no masked position, masked count [B]) -> n [B]
Count = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
#: (top [B, L], known [B], rest [B], masked count [B]) -> bool [B] (:meth:`~dllm_lit.samplers.rule.RuleSampler.count_decided`)
CountDecided = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
#: (first scores of each row sorted descending [B, P]) -> bool [B]: the count of the prefix is the row's
CountPrefix = Callable[[torch.Tensor], torch.Tensor]


#: vocabularies from this size on make a posterior row costlier than a round of O(B L) bookkeeping
ROUNDS_MIN_VOCAB = 256


#: adaptive counts with a bound on a large vocabulary (:func:`~dllm_lit.decoding.bounded_counts.score_until_counted`):
#: positions scored first per sequence, and the growth of each later round.  Measured on the OWT-sized chain
#: (Fast-dLLM, threshold 0.9: about one commit per step, and on average 2.0 positions per step whose bound reaches
#: the best score): 1 then rounds of 2x scored 2.4 rows per sequence and step against 3.8 for 3 then 4x, and took
#: 20 % less CPU time; the commits are the same for any sizes
ADAPTIVE_FIRST, ADAPTIVE_GROWTH = 1, 2


def first_draws(k: int, vocab_size: int) -> int:
    """With a score bound, proposals are first drawn at this many positions of largest bound per sequence:
    a few more than k, so that the k-th score found is rarely far below the k-th bound.  Measured: on the
    OWT-sized chain (V = 4096, rows dear) 2k + 1 with later rounds of 4x growing size drew fewest rows and
    was fastest; on the English chain (V = 27, rows cheap, the per-round bookkeeping dominates) 4k + 16
    followed by one round over every remaining candidate was fastest."""
    return 2 * k + 1 if vocab_size >= ROUNDS_MIN_VOCAB else 4 * k + 16


@dataclass(frozen=True)
class BlockDecoding:
    """What :func:`decode_blocks` reads of a rule, derived once from its declarations by the provider
    (:func:`~dllm_lit.decoding.providers.decode_rule`): the hooks over a :class:`StepView` (``features`` of the
    posterior rows and their ``widths``, ``propose``, ``score``), the count (a fixed ``schedule`` or an adaptive
    ``count`` with its optional ``count_prefix`` / ``count_decided``) and the declared capabilities (``bound``,
    ``score_bound``, ``law``, ``fresh``, ``score_reads_tokens``, ``law_scores``, ``tie_rule``; see
    :func:`decode_blocks`).  ``width``: numbers per position of the cache (None: from ``widths``)."""

    features: Features
    widths: Widths
    propose: Callable[[StepView], torch.Tensor]
    score: Score
    tie_rule: str = "lowest"
    tie_u: StepUniforms | None = None
    schedule: list[list[int]] | None = None
    count: Count | None = None
    use_cache: bool = True
    width: int | None = None
    bound: str | None = None
    fresh: tuple[str, ...] = ()
    law: Callable[[torch.Tensor], torch.Tensor] | None = None
    score_reads_tokens: bool = True
    score_bound: ScoreBound | None = None
    law_scores: bool = False
    count_prefix: CountPrefix | None = None
    count_decided: CountDecided | None = None


def decode_blocks(den, x: torch.Tensor, blocks: list[tuple[int, int]], plan: BlockDecoding) -> torch.Tensor:
    """Decode the masked positions of ``blocks`` in x [B, T] (in place), block after block, by ``plan`` (the
    names below are its fields: :class:`BlockDecoding`).

    Fixed schedule: ``schedule[blk][i]`` positions commit at step i of block blk (global step
    index = the earlier blocks' step counts + i; steps with 0 commits are skipped).
    Adaptive: ``count`` gives n per sequence at every step until the block has no mask; each
    sequence's step index is the number of steps it has taken.  ``propose(view)`` returns the
    proposals at the positions the view covers (``view.tok`` is not yet set), ``score(view)`` their
    float64 scores.  Returns the per-sequence number of steps taken under an adaptive count (float64 [B]:
    the denoiser evaluations of the adaptive rules; zeros for a fixed schedule).

    ``bound`` (fixed schedule only): a feature whose value (as float64) bounds the score from above at
    every position, whatever the proposal.  Then proposals are drawn only where they can be committed:
    first at the positions of largest bound (:func:`first_draws`), then wherever the bound reaches the k-th
    largest score found so far (a lower bound of the final k-th score) - for large vocabularies in rounds of
    4x growing size, best bounds first - until no undrawn bound reaches it.  Every other position scores
    strictly below the k-th, so it is never committed and its proposal would be discarded; proposals are
    keyed by (step, position), so the commits are identical.

    ``fresh``: features equal to the posterior rows that a cache over a local denoiser recomputes where
    read instead of storing them (see :class:`PosteriorCache`).  ``law``: the proposal law; with it and a
    denoiser that bounds max_v p without rows, the ``bound`` feature comes from that bound (see
    :class:`BlockPosteriors`).  The batch runs in :func:`sub_batches` that fit the cache (identical draws).
    With the cache, a ``bound``, a ``law``, a fixed schedule, tie rule "lowest" or "highest" and a local
    denoiser with a row-free bound, a block whose sequences all hold the same number of masked positions is
    decoded over those positions only (:mod:`~dllm_lit.decoding.compact_decoding`; identical draws).

    ``score_reads_tokens=False`` declares that ``score(view)`` reads posterior features only, never ``view.tok``
    (entropy, margin): the positions are then ranked first and proposals drawn only at the committed ones.
    Every other proposal would be discarded and proposals are keyed by (step, position), so the draws are
    identical; a step then draws k proposals instead of one per masked position.  With a ``bound`` as well, the
    scores themselves are computed only where the bound reaches the k-th score found (rounds as above; the
    compact path serves token-reading scores only).

    ``score_bound(bound, pos)``: maps the ``bound`` feature's values (float64, any shape) at absolute positions
    ``pos`` (same shape) to upper bounds of the score (None: the bound feature bounds the score itself).  With
    ``law_scores``, ``view.tok_prob`` of a drawn proposal is its probability under the proposal law ``law``
    (which must then be normalised) instead of the posterior's.

    ``count_prefix(prefix)`` (adaptive count, tie rule "lowest" or "highest"): given the first
    :data:`COUNT_PREFIX` scores of each sequence sorted descending, whether ``count`` of that prefix is ``count``
    of the whole sorted row (per sequence).  Where it is for every sequence, a step takes a partial selection
    (``torch.topk``) instead of a full sort and commits the stable top-n set by its n-th value (the same
    positions as the first n of the sorted order under the tie rule); else the full sort.

    ``count_decided`` with ``bound`` (adaptive count): the bounded draws of an adaptive count - positions scored best
    bound first until the count and the committed set are certain (:mod:`~dllm_lit.decoding.bounded_counts`;
    identical commits).
    """
    B, dev = x.shape[0], x.device
    width = cache_width(den, plan.widths, plan.fresh) if plan.width is None else plan.width
    L = max((hi - lo for lo, hi in blocks), default=0)
    taken = torch.zeros(B, dtype=torch.long, device=dev)
    for sl in sub_batches(B, width, L, plan.use_cache):
        _decode(den, x[sl], sl.start, taken[sl], blocks, plan, plan.tie_u.rows(sl) if plan.tie_u is not None else None)
    return taken.to(torch.float64)


def _decode(den, x: torch.Tensor, row0: int, taken: torch.Tensor, blocks: list[tuple[int, int]], plan: BlockDecoding,
            tie_u: StepUniforms | None) -> None:
    """:func:`decode_blocks` on rows row0.. of the caller's batch (``x``, ``taken`` and ``tie_u`` are these rows)."""
    features, widths, propose, score, tie_rule = plan.features, plan.widths, plan.propose, plan.score, plan.tie_rule
    schedule, count, use_cache, bound, fresh, law = plan.schedule, plan.count, plan.use_cache, plan.bound, plan.fresh, \
        plan.law
    score_reads_tokens, score_bound, law_scores = plan.score_reads_tokens, plan.score_bound, plan.law_scores
    count_prefix, count_decided = plan.count_prefix, plan.count_decided
    spec = CachedFeatures(features, widths, fresh, law, bound if schedule is not None or count_decided is not None
                          else None, law_scores, plan.width)
    B, dev = x.shape[0], x.device
    M = den.mask_id
    rows = torch.arange(B, device=dev)
    base = 0
    for blk, (lo, hi) in enumerate(blocks):
        den.block_start(lo, hi)
        L = hi - lo
        if (bound is not None and schedule is not None and law is not None and use_cache and tie_rule != "random"
                and score_reads_tokens and compact_applies(den, x, lo, hi, schedule[blk])):
            block = CompactBlock(den, x, lo, hi, law, row0, exact_bounds=den.vocab_size < ROUNDS_MIN_VOCAB,
                                 law_scores=law_scores)
            _decode_compact(block, schedule[blk], base, propose, score, tie_rule, score_bound)
            base += len(schedule[blk])
            continue
        if (schedule is None and count_prefix is not None and not score_reads_tokens and bound is None and use_cache
                and tie_rule in ("lowest", "highest") and gaps_apply(den, x, lo, hi, COUNT_PREFIX)):
            block = GapBlock(den, x, lo, hi, spec, row0)
            decode_gaps(block, taken, propose, score, count, count_prefix, tie_rule, COUNT_PREFIX)
            continue
        post = BlockPosteriors(den, B, lo, hi, spec, dev, use_cache, row0)
        # a fixed schedule ranked by features alone over a by-key cache, every sequence holding the same number of
        # masked positions: score every column from the slots (no position lists), commit the stable top-k columns
        ranked_dense = (schedule is not None and bound is None and not score_reads_tokens and tie_rule != "random"
                        and post.cache is not None and post.cache.memo is not None
                        and compact_counts(x, den.mask_id, lo, hi, schedule[blk]))
        if ranked_dense:
            all_b, all_p = rows.repeat_interleave(L), torch.arange(lo, hi, device=dev).repeat(B)
        i = 0
        while True:
            if schedule is not None:
                if i >= len(schedule[blk]):
                    break
                k = schedule[blk][i]
                j: int | torch.Tensor = base + i
                i += 1
                if k == 0:
                    continue
            masked = x[:, lo:hi] == M
            if schedule is None and not bool(masked.any()):
                break
            if ranked_dense:  # every position scored from its key's features, the k best drawn
                post.load(x, None, None)
                scores = torch.where(masked, score(StepView(post, all_b, all_p, j, lo, hi)).view(B, L), -torch.inf)
                rr = rows[:, None].expand(B, k).reshape(-1)
                cc = _commit_cols(scores, k, tie_rule).reshape(-1) + lo
                x[rr, cc] = propose(StepView(post, rr, cc, j, lo, hi))
                continue
            n_counted = None
            if bound is not None and schedule is not None:
                scores, proposal = _score_bounded(post, x, masked, j, k, plan)
                if not score_reads_tokens:  # ranked by features: proposals drawn where they commit
                    b, p = nonzero_pairs(masked) if post.cache is None else (None, None)
                    proposal = _LazyProposals(post, masked, b, None if p is None else p + lo, j, propose, proposal)
            elif bound is not None and count_decided is not None:
                ub, scores, proposal, fill = _bounded_scores(post, x, masked, taken, plan, True)
                large = den.vocab_size >= ROUNDS_MIN_VOCAB
                sizes = ScoringRounds(ADAPTIVE_FIRST if large else first_draws(1, den.vocab_size), ADAPTIVE_GROWTH,
                                      large)
                n_counted = score_until_counted(ub, masked, scores, fill, count, count_decided, sizes)
            else:
                b, p = nonzero_pairs(masked)
                p = p + lo
                post.load(x, b, p)
                view = StepView(post, b, p, j if schedule is not None else taken[b], lo, hi)
                scores = torch.full((B, L), -torch.inf, dtype=torch.float64, device=dev)
                proposal = torch.zeros((B, L), dtype=torch.long, device=dev)
                if score_reads_tokens:
                    view.tok = propose(view)
                    proposal[b, p - lo] = view.tok
                    scores[b, p - lo] = score(view)
                else:  # rank first, draw at the committed positions only (see decode_blocks)
                    scores[b, p - lo] = score(view)
                    proposal = _LazyProposals(post, masked, b, p, view.j, propose, proposal,
                                              None if schedule is not None else taken.clone())
            keys = None
            if tie_rule == "random":
                keys = tie_u.block(j if schedule is not None else taken, lo, hi, slot=TIE_SLOT)
            if schedule is not None and tie_rule != "random":
                # the stable top-k set by a k-th-value threshold (no full sort)
                sel = topk_mask_by_rule(scores, k, tie_rule)
                if isinstance(proposal, _LazyProposals):
                    proposal = proposal.at_mask(sel)
                x[:, lo:hi] = torch.where(sel, proposal, x[:, lo:hi])
                continue
            if schedule is None and count_prefix is not None and tie_rule != "random" and L > COUNT_PREFIX:
                top, top_cols = torch.topk(scores, COUNT_PREFIX, dim=1)  # the sorted order's first scores
                if bool(count_prefix(top).all()):
                    active = masked.any(1)
                    n = count(top, masked.sum(1)).long() * active
                    taken += active.long()
                    first = torch.arange(COUNT_PREFIX, device=dev)[None, :] < n[:, None]
                    if bool(unique_top_n(top, n).all()):  # no tie at the n-th score: topk's first n columns
                        rr, cc = rows[:, None].expand_as(first)[first], top_cols[first]
                    else:
                        rr, cc = nonzero_pairs(top_n_mask(scores, top, n, tie_rule))
                    x[rr, cc + lo] = proposal.at(rr, cc) if isinstance(proposal, _LazyProposals) else proposal[rr, cc]
                    continue
            order = rank_positions(scores, tie_rule, keys)
            if schedule is not None:
                n = torch.full((B,), k, dtype=torch.long, device=dev)
                kmax = k
            else:
                active = masked.any(1)
                n = (count(scores.gather(1, order), masked.sum(1)) if n_counted is None else n_counted).long() * active
                taken += active.long()
                kmax = int(n.max())
            if kmax == 0:
                continue
            sel = order[:, :kmax]
            keep = torch.arange(kmax, device=dev)[None, :] < n[:, None]
            rr = rows[:, None].expand(B, kmax)[keep]
            cc = sel[keep]
            if isinstance(proposal, _LazyProposals):
                x[rr, cc + lo] = proposal.at(rr, cc)
            else:
                x[rr, cc + lo] = proposal[rr, cc]
        base += len(schedule[blk]) if schedule is not None else 0


#: sorted scores an adaptive count reads first (``count_prefix`` of :func:`decode_blocks`)
COUNT_PREFIX = 8


class _LazyProposals:
    """The proposals of one step drawn on demand at the positions that commit (``score_reads_tokens=False``):
    ``propose`` on a :class:`StepView` of those positions of the block of ``post``, with the step index ``j`` of the
    full view (an int, or one per loaded position; ``j_rows``: the same, one per row of the state), and without the
    cache the loaded positions' indices as ``sel``."""

    def __init__(self, post: BlockPosteriors, masked: torch.Tensor, b: torch.Tensor, p: torch.Tensor, j,
                 propose, dense: torch.Tensor, j_rows: torch.Tensor | None = None) -> None:
        self.post, self.masked, self.lo, self.j, self.propose, self.dense = post, masked, post.lo, j, propose, dense
        self.j_rows = j_rows if post.cache is not None else None
        self.index = None
        if post.cache is None or not (isinstance(j, int) or self.j_rows is not None):  # index of every masked (b, p)
            self.index = torch.full(dense.shape, -1, dtype=torch.long, device=dense.device)
            self.index[b, p - self.lo] = torch.arange(b.numel(), device=dense.device)

    def at(self, rb: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """Proposals at block columns q of rows rb (masked positions)."""
        sel = None if self.index is None else self.index[rb, q]
        j = self.j if isinstance(self.j, int) else self.j_rows[rb] if self.j_rows is not None else self.j[sel]
        view = StepView(self.post, rb, q + self.lo, j, self.lo, self.post.hi,
                        sel if self.post.cache is None else None)
        return self.propose(view)

    def at_mask(self, mask: torch.Tensor) -> torch.Tensor:
        """[B, L] tensor holding the proposals where ``mask`` and a masked position (0 elsewhere)."""
        rb, q = nonzero_pairs(mask & self.masked)
        self.dense[rb, q] = self.at(rb, q)
        return self.dense


def _decode_compact(block: CompactBlock, counts: list[int], base: int, propose, score, tie_rule: str,
                    score_bound: ScoreBound | None = None) -> None:
    """Decode ``block`` with ``counts[i]`` commits at step ``base + i``, as :func:`_score_bounded` and the stable
    top-k of :func:`_decode` over the block's masked columns (identical commits; see
    :mod:`~dllm_lit.decoding.compact_decoding`): after an uncapped round every bound that reaches the k-th
    score has been drawn, so no further round is checked."""
    B, dev = block.pos.shape[0], block.pos.device
    V = block.den.vocab_size
    rows = torch.arange(B, device=dev)
    for i, k in enumerate(counts):
        if k == 0:
            continue
        j, n = base + i, block.n
        scores = torch.full((B, n), -torch.inf, dtype=torch.float64, device=dev)
        proposal = torch.zeros((B, n), dtype=torch.long, device=dev)

        def fill(sel: torch.Tensor) -> torch.Tensor:
            view = StepView(block, torch.div(sel, n, rounding_mode="floor"), block.pos.view(-1).index_select(0, sel),
                            j, block.lo, block.hi, sel)
            view.tok = propose(view)
            s = score(view)
            scores.view(-1)[sel] = s
            proposal.view(-1)[sel] = view.tok
            return s

        size = min(first_draws(k, V), n)
        # draws only tighten the bounds of drawn columns, which are never candidates again: one map per step
        ub = block.bound if score_bound is None else score_bound(block.bound, block.pos)
        drawn = [(torch.topk(ub, size, dim=1).indices + (rows * n)[:, None]).view(-1)]
        first = fill(drawn[0]).view(B, size)
        # <= the final k-th score
        kth = first.amax(1, keepdim=True) if k == 1 else torch.topk(first, k, dim=1).values[:, -1:]
        capped = True
        while capped:
            cand = ub >= kth
            for sel in drawn:
                cand.view(-1)[sel] = False
            if not bool(cand.any()):
                break
            size *= 4
            capped = size < n and V >= ROUNDS_MIN_VOCAB
            if capped:
                cand &= topk_stable_mask(torch.where(cand, ub, -torch.inf), size)
            drawn.append(flat_nonzero(cand))
            fill(drawn[-1])
            if capped:
                kth = torch.topk(scores, k, dim=1).values[:, -1:]
        block.commit(*_commits(scores, proposal, k, tie_rule))


#: up to this many commits per step, :func:`_commits` takes the stable top-k by k argmax rounds (no topk, no tie pass)
ARGMAX_COMMITS = 4


def _commits(scores: torch.Tensor, proposal: torch.Tensor, k: int, tie_rule: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Columns [B, k] (ascending) of the stable top-k of ``scores`` [B, n] under ``tie_rule`` ("lowest" /
    "highest") and their proposals: for k <= ARGMAX_COMMITS by k rounds of first (last) maxima; else the columns
    of ``torch.topk`` when no row has more than k scores at or above its k-th (no tie at the boundary, so the set
    is unique), else :func:`topk_stable_mask`."""
    cols = _commit_cols(scores, k, tie_rule)
    return cols, proposal.gather(1, cols)


def _commit_cols(scores: torch.Tensor, k: int, tie_rule: str) -> torch.Tensor:
    """The columns of :func:`_commits`."""
    B, n = scores.shape
    if k <= ARGMAX_COMMITS and tie_rule in ("lowest", "highest"):
        # argmax returns the first maximal index (documented): k rounds of it, each taking its column out, give
        # the stable top-k (mirrored for "highest")
        s = scores if tie_rule == "lowest" else scores.flip(1)
        s = s.clone() if k > 1 else s
        taken, finite = [], True
        for r in range(k):
            col = s.argmax(1, keepdim=True)
            taken.append(col)
            finite = finite and bool((s.gather(1, col) > -torch.inf).all())
            if r + 1 < k:
                s.scatter_(1, col, -torch.inf)
        cols = torch.cat(taken, 1) if tie_rule == "lowest" else (n - 1) - torch.cat(taken, 1)
        cols = cols.sort(1).values if k > 1 else cols
        if finite:  # else a row has fewer than k finite scores (a taken column could come back): general path
            return cols
    top = torch.topk(scores, k, dim=1)
    if bool(((scores >= top.values[:, -1:]).sum(1) == k).all()):
        return top.indices.sort(1).values
    return nonzero_pairs(topk_mask_by_rule(scores, k, tie_rule))[1].view(B, k)


def _score_bounded(post: BlockPosteriors, x: torch.Tensor, masked: torch.Tensor, j: int, k: int,
                   plan: BlockDecoding) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores and proposals [B, L] of the block, computed only where a proposal can be among the k best
    (see :func:`decode_blocks`); -inf scores elsewhere.  Without ``plan.score_reads_tokens`` only the scores are
    computed (the proposals stay 0: the caller draws them where they commit)."""
    B, L = masked.shape
    ub, scores, proposal, fill = _bounded_scores(post, x, masked, j, plan, plan.score_reads_tokens)
    V = post.den.vocab_size
    tighten = _tightener(post, ub, plan.score_bound)
    # with neighbourhood bounds the k positions of largest cheap bound are most often the k best already (measured
    # on the OWT-sized chain, Dream entropy at 256 steps: 2,045 rows per sequence against 3,314 with first_draws)
    size = first_draws(k, V) if tighten is None else k
    drawn = topk_stable_mask(ub, min(size, L)) & masked
    fill(drawn)
    # bounds from neighbourhoods, asked only where the cheap bound would admit a position (each costs about a row)
    tight = drawn.clone()
    while True:  # rounds of growing size, best bounds first, until no undrawn bound reaches the k-th score
        kth = torch.topk(scores, min(k, L), dim=1).values[:, -1:]  # <= the final k-th largest score
        cand = (ub >= kth) & masked & ~drawn
        if tighten is not None and bool((cand & ~tight).any()):
            tighten(cand & ~tight)
            tight |= cand
            cand &= ub >= kth
        if not bool(cand.any()):
            return scores, proposal
        size *= 4
        if size < L and V >= ROUNDS_MIN_VOCAB:
            cand &= topk_stable_mask(torch.where(cand, ub, -torch.inf), size)
        fill(cand)
        drawn |= cand


def _bounded_scores(post: BlockPosteriors, x: torch.Tensor, masked: torch.Tensor, j: int | torch.Tensor,
                    plan: BlockDecoding, score_reads_tokens: bool):
    """(ub, scores, proposal, fill) of a block step: the bounds [B, L] of ``plan.score`` at the masked positions (-inf
    elsewhere: the feature ``plan.bound``, mapped by ``plan.score_bound``), the scores and proposals [B, L] (-inf / 0
    until filled) and ``fill(where)``, which proposes and scores at the masked positions ``where`` [B, L] (scores only
    without ``score_reads_tokens``); ``j``: the step index, or one per row of the state."""
    bound, propose, score, score_bound = plan.bound, plan.propose, plan.score, plan.score_bound
    B, L = masked.shape
    lo, dev = post.lo, x.device
    index = None
    if post.cache is not None:  # bounds read straight from the cache's [B, L] store
        post.load(x, None, None)
        ub = torch.where(masked, post.cache.column(bound).to(torch.float64), -torch.inf)
    else:
        b, p = nonzero_pairs(masked)
        post.load(x, b, p + lo)
        ub = torch.full((B, L), -torch.inf, dtype=torch.float64, device=dev)
        ub[b, p] = post.get(bound, b, p + lo).to(torch.float64)
        index = torch.full((B, L), -1, dtype=torch.long, device=dev)
        index[b, p] = torch.arange(b.numel(), device=dev)
    if score_bound is not None:
        ub = torch.where(masked, score_bound(ub, torch.arange(lo, post.hi, device=dev).expand(B, L)), -torch.inf)
    scores = torch.full((B, L), -torch.inf, dtype=torch.float64, device=dev)
    proposal = torch.zeros((B, L), dtype=torch.long, device=dev)

    def fill(where: torch.Tensor) -> None:
        rb, q = nonzero_pairs(where)
        view = StepView(post, rb, q + lo, j if isinstance(j, int) else j[rb], lo, post.hi,
                        None if index is None else index[rb, q])
        if score_reads_tokens:
            view.tok = propose(view)
            proposal[rb, q] = view.tok
        scores[rb, q] = score(view)

    return ub, scores, proposal, fill


def _tightener(post: BlockPosteriors, ub: torch.Tensor, score_bound: ScoreBound | None):
    """``tighten(where)``: lower ``ub`` at the masked positions ``where`` [B, L] to the smaller of it and the bound
    ``score_bound.from_neighbours`` gives from their neighbourhoods (see :data:`ScoreBound`); None without one."""
    envelope = getattr(score_bound, "from_neighbours", None)
    if envelope is None or post.cache is None or post.cache.z is None:
        return None

    def tighten(where: torch.Tensor) -> None:
        b, q = nonzero_pairs(where)
        ub[b, q] = torch.minimum(ub[b, q], envelope(*post.cache.neighbour_query(b, q + post.lo)))

    return tighten


def block_bounds(seq_len: int, prompt_length: int, block_length: int | None) -> list[tuple[int, int]]:
    """[lo, hi) of each block of the generated part (one block when ``block_length`` is None)."""
    G = seq_len - prompt_length
    bl = block_length if block_length is not None else G
    if bl <= 0 or G <= 0:
        return []
    return [(prompt_length + k * bl, prompt_length + (k + 1) * bl) for k in range(G // bl)]


def check_blocks(seq_len: int, prompt_length: int, block_length: int | None, steps: int | None) -> None:
    """Upstream's assertions: the prompt fits, ``block_length`` divides the generated length, and
    ``steps`` is divisible by the number of blocks (ValueError naming the field)."""
    if prompt_length > seq_len:
        raise ValueError(f"prompt (length {prompt_length}) is longer than seq_len={seq_len}")
    G = seq_len - prompt_length
    if block_length is not None and G > 0 and G % block_length:
        raise ValueError(f"block_length={block_length} must divide the generated length "
                         f"seq_len - len(prompt) = {G}")
    nb = len(block_bounds(seq_len, prompt_length, block_length))
    if steps is not None and nb > 0 and steps % nb:
        raise ValueError(f"steps={steps} must be divisible by the number of blocks ({nb}) for seq_len={seq_len}")


def ranking_options(sampler, temperature: float, tie_rule: str, block_length: int | None = None) -> None:
    """Check and set the options the confidence-ranked samplers share - ``temperature`` >= 0, ``tie_rule``,
    ``block_length`` (None or >= 1) - and switch the exact posterior cache on (``sampler.use_cache``)."""
    sampler.temperature = checks.real("temperature", temperature, 0.0)
    sampler.tie_rule = checks.choice("tie_rule", tie_rule, TIE_RULES)
    sampler.block_length = checks.optional_integer("block_length", block_length)
    #: reuse posterior features between steps (exact; see dllm_lit.decoding.posterior_cache)
    sampler.use_cache = True


def with_tie_rule(name: str, tie_rule: str) -> str:
    """Row name: ``name``, suffixed ``_tie_<rule>`` for a tie rule other than the default "lowest"."""
    return name if tie_rule == "lowest" else f"{name}_tie_{tie_rule}"
