"""The engine's choice of posterior provider for a :class:`~dllm_lit.samplers.rule.RuleSampler`, from what the
denoiser declares; the rule never sees which one runs (identical draws, tested).

=====================  ===========================================================  ==============================
provider               when                                                         what a step costs
=====================  ===========================================================  ==============================
``dense``              any :class:`~dllm_lit.denoisers.Denoiser` that is not local  ``probs_at`` at the block's
                       (a learned model, the HMM oracle): :func:`reference_decode`  masked positions
``cache``              a :class:`~dllm_lit.denoisers.LocalDenoiser` (the exact      rows only where a nearest
                       oracle) and a rule without a declared bound                  revealed neighbour changed
``bounded``            a local denoiser and a rule that declares ``bound``, fixed   rows only where a score can
                       schedule or ``count_decided`` (with a row-free max-          reach the k-th best (or the
                       probability bound and a proposal law: compact columns and    adaptive count); compact
                       the neighbourhood memo)                                      columns, one row per key
=====================  ===========================================================  ==============================

An adaptive rule (``adaptive_count``) with a declared bound takes the bounded provider when it also says when its
count is decided by its best scores and a bound of the rest (``count_decided``: Fast-dLLM's threshold and factor
rules): positions are scored best bound first until the count and the commits are certain
(:mod:`~dllm_lit.decoding.bounded_counts`); any other adaptive rule takes the cache provider.

The fast providers are :func:`dllm_lit.decoding.confidence_decoding.decode_blocks` and the caches under it; this
module only translates the rule's hooks into its ``propose`` / ``score`` callables, checks the declared bound
wherever a score is computed and records log q at the committed positions.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from dllm_lit import checks, rng
from dllm_lit.denoisers.local import LocalDenoiser, neighbour_distances
from dllm_lit.decoding.confidence_decoding import BlockDecoding, StepView, decode_blocks
from dllm_lit.samplers.draws import StepUniforms, categorical, drawn_log_prob, neighbour_queries, row_chunks
from dllm_lit.decoding.neighbourhood_rows import NeighbourhoodRows, rows_by_key
from dllm_lit.decoding.reference import GUMBEL_SLOT, check_bound, check_count, draw, reference_decode

if TYPE_CHECKING:
    from dllm_lit.samplers.rule import RuleSampler

__all__ = ["PROVIDERS", "choose_provider", "check_provider", "decode_rule", "decode_random_order",
           "decode_step_grid", "run_memo", "keyed_rows"]

PROVIDERS = ("dense", "cache", "bounded")


def choose_provider(rule: RuleSampler, den) -> str:
    """The provider :func:`decode_rule` runs ``rule`` with on ``den`` (:data:`PROVIDERS`, module table)."""
    if not isinstance(den, LocalDenoiser):
        return "dense"
    if not _bounded_rule(rule, den):
        return "cache"
    if rule.adaptive and (not rule.bounded_count or NeighbourhoodRows.applies(den)):
        return "cache"  # few neighbourhood keys: the cache's rows per key cost less than bounded rounds
    return "bounded"


def _bounded_rule(rule: RuleSampler, den: LocalDenoiser) -> bool:
    """Whether the rule's declared bound can serve: declared, no position temperature, and for a score of the row
    alone a denoiser bounding max p without rows whose keys are too many to store the score per key."""
    if rule.bound is None or rule.position_temperature:
        return False
    return rule.reads_tokens or (den.has_max_prob_bound and not NeighbourhoodRows.applies(den))


def check_provider(rule: RuleSampler, den, provider: str) -> None:
    """One-line error unless ``rule`` on ``den`` can run on ``provider`` (a choice other than
    :func:`choose_provider`'s, e.g. to test one provider against another)."""
    checks.choice("provider", provider, PROVIDERS)
    local = isinstance(den, LocalDenoiser)
    ok = {"dense": True, "cache": local,
          "bounded": local and rule.bound is not None and not rule.position_temperature
          and (not rule.adaptive or rule.bounded_count)}[provider]
    if not ok:
        raise ValueError(f"provider={provider!r} cannot run {type(rule).__name__} on {type(den).__name__}: "
                         f"it takes {choose_provider(rule, den)!r}")


def _greedy(rule: RuleSampler, V: int, device: torch.device) -> bool:
    """Whether the rule proposes the argmax (its ``propose`` returns None)."""
    return rule.propose(torch.full((1, V), 1.0 / V, device=device)) is None


def _rows(view: StepView, memo: NeighbourhoodRows | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Posterior rows at the positions a view covers, from whichever store the provider keeps, and their float64
    maxima where the store holds them (else None)."""
    if view.drawn_rows is not None:  # the rows the draw looked up (compact columns)
        table, maxima, index = view.drawn_rows
        return table.index_select(0, index), maxima.index_select(0, index)
    post = view.post
    if hasattr(post, "cache"):  # BlockPosteriors: the stored or recomputed ("fresh") rows
        return view.get("probs"), None
    # compact columns: the rows of the covered columns from their stored nearest revealed neighbours (one row per
    # neighbourhood key met in the run when the denoiser names few keys: the same numbers)
    x, T = post.x, post.x.shape[1]
    p, a, c = (t.view(-1).index_select(0, view.sel) for t in (post.pos, post.left, post.right))
    d1, d2 = neighbour_distances(p, a, c, T)
    query = (x[view.rows, a.clamp(min=0)], d1, x[view.rows, c.clamp(max=T - 1)], d2)
    if memo is not None:
        slots = memo.slots(query)  # first: it may add rows
        return memo.features["rows"].index_select(0, slots), None
    return post.den.probs_given_neighbours(*query), None


@torch.no_grad()
def decode_rule(rule: RuleSampler, x: torch.Tensor, indices: torch.Tensor, steps: int, seed: int,
                log_q: torch.Tensor | None = None, taken: torch.Tensor | None = None,
                provider: str | None = None) -> str:
    """Decode the masked positions of x [B, T] in place by ``rule`` on its denoiser through ``provider`` (None:
    :func:`choose_provider`'s); with ``log_q`` [B, T] also the log-probability of every committed proposal; an
    adaptive rule adds its steps per sequence to ``taken`` (float64 [B]) when given.  Returns the provider's name."""
    den = rule.denoiser
    if provider is None:
        provider = choose_provider(rule, den)
    check_provider(rule, den, provider)
    if provider == "dense":
        reference_decode(rule, x, indices, steps, seed, log_q=log_q, taken=taken)
        return provider
    V = den.vocab_size
    greedy = _greedy(rule, V, x.device)
    bounded = provider == "bounded"
    tok_u = StepUniforms(seed, indices, steps)
    memo = run_memo(den, lambda rows: {"rows": rows}, x.device) if bounded else None
    tie_u = StepUniforms(seed, indices, steps, stream=rng.Stream.ORDER)
    # bounded: rows recomputed where read (the compact draw hands them to the score), pmax the bound; cache: the
    # rows and the proposal law's cdf stored per neighbourhood key, proposals drawn from the stored cdf
    widths = {"probs": ((V,), None), "argmax": ((), torch.int64)}
    if rule.bound is not None:
        widths["pmax"] = ((), None)
    stored_score = not rule.reads_tokens and not bounded  # a score of the row alone, stored with the row
    at_commits = stored_score and rule.adaptive  # rows recomputed and the law drawn only where positions commit
    if not bounded and not greedy and not at_commits:
        widths["cdf"] = ((V,), torch.float64)
    if stored_score:
        widths["score"] = ((), torch.float64)

    def row_score(probs: torch.Tensor) -> torch.Tensor:
        s = rule.score(probs, None, None).to(torch.float64)
        check_bound(rule, probs, s)
        return s

    def features(probs: torch.Tensor) -> dict[str, torch.Tensor]:
        out = {"probs": probs, "argmax": probs.argmax(-1)}
        if rule.bound is not None:
            out["pmax"] = probs.amax(-1)
        if not bounded and not greedy and not at_commits:
            out["cdf"] = rule.propose(probs).to(torch.float64).cumsum(-1)
        if stored_score:
            out["score"] = row_score(probs)
        return out

    def propose(view: StepView) -> torch.Tensor:
        if greedy:
            return view.get("argmax")
        u = view.uniforms(tok_u)
        if "cdf" in view.post.names:
            return view.post.draw(u, "cdf", view.rows, view.p, view.sel)
        if view.post.draws_law and getattr(view.post, "cache", None) is not None and view.post.cache.bound:
            # bounded: the rows once per view (the score reads them again), the bound tightened to their maxima
            probs = view.get("probs")
            view.post.tighten(view, probs.amax(-1).to(torch.float64))
            chunks = row_chunks(probs.shape[0], probs.shape[-1], probs.device)  # row-wise: chunks stay in cache
            if len(chunks) <= 1:
                return categorical(rule.propose(probs), u)
            return torch.cat([categorical(rule.propose(probs[sl]), u[sl]) for sl in chunks])
        if view.post.draws_law:  # the provider draws from the rule's law where it keeps the rows
            tok, view.tok_prob = view.post.draw_law(view, u)
            return tok
        return categorical(rule.propose(view.get("probs")), u)

    def score(view: StepView) -> torch.Tensor:
        if stored_score:
            s = view.get("score")
        elif rule.scores_by_law and view.tok_prob is not None:  # the law's probability, from the draw
            s = view.tok_prob.to(torch.float64)
        elif rule.scores_by_prob and view.tok_prob is not None and log_q is None:  # of p(tok), from the draw's row
            s = rule.score_from_probability(view.tok_prob, view.tok, view.p)
        elif not rule.reads_tokens and view.drawn_rows is None and hasattr(view.post, "cache"):
            s = view.row_feature(row_score)  # rows recomputed once per distinct neighbourhood
        else:
            probs, pmax = _rows(view, memo)
            if pmax is None and rule.bound is not None and not bounded:  # the cache provider stores the row maxima
                pmax = view.get("pmax").to(torch.float64)
            s = rule.score(probs, view.tok, view.p).to(torch.float64)
            check_bound(rule, probs, s, pmax, view.p)
            if log_q is not None:  # overwritten at every proposal: a committed position keeps its last one's
                log_q[view.b, view.p] = 0.0 if greedy else drawn_log_prob(rule.propose(probs), view.tok)
        if rule.position_temperature:  # Gumbel top-k: positions drawn without replacement from softmax(s / t)
            s = s / rule.position_temperature - torch.log(-torch.log(view.uniforms(tie_u, slot=GUMBEL_SLOT)))
        return s

    plan = BlockDecoding(features, widths, propose, score, rule.tie_rule, tie_u, use_cache=rule.use_cache,
                         # greedy with a stored score reads only "argmax" and "score": no [B, L, V] store of rows
                         fresh=("probs",) if bounded or at_commits or (greedy and stored_score) else (),
                         law=rule.propose if (bounded or at_commits) and not greedy else None,
                         score_reads_tokens=rule.reads_tokens, law_scores=rule.scores_by_law and bounded and not greedy)
    if rule.adaptive:
        n = decode_blocks(den, x, rule.blocks(x.shape[1]), _adaptive(plan, rule, bounded))
        if taken is not None:
            taken += n.to(taken.device)
        return provider
    blocks, schedule = rule.block_schedule(x.shape[1], steps)
    decode_blocks(den, x, blocks, replace(plan, schedule=schedule, bound="pmax" if bounded else None,
                                          score_bound=_score_bound(rule, den) if bounded and rule.maps_bound else None))
    return provider


def _adaptive(plan: BlockDecoding, rule: RuleSampler, bounded: bool) -> BlockDecoding:
    """``plan`` with the rule's adaptive count (checked) and the count capabilities it declares."""
    def count(sorted_scores: torch.Tensor, n_masked: torch.Tensor) -> torch.Tensor:
        return check_count(rule, rule.adaptive_count(sorted_scores, n_masked), n_masked)

    return replace(plan, count=count, bound="pmax" if bounded else None,
                   count_decided=rule.count_decided if bounded else None,
                   count_prefix=rule.prefix_decides if rule.prefix_count else None)


def _score_bound(rule: RuleSampler, den):
    """The rule's ``score_bound``, with the reference-row bounds of its declared ``envelope`` on the exact oracle."""
    from dllm_lit.denoisers.oracle import OracleDenoiser

    if rule.envelope is None or not isinstance(den, OracleDenoiser):
        return rule.score_bound
    from dllm_lit.decoding.score_envelopes import ENVELOPE_SLACK, ReferenceScoreBounds

    def bound(pmax: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return rule.score_bound(pmax, pos)

    bound.from_neighbours = ReferenceScoreBounds(den, rule.envelope, ENVELOPE_SLACK)
    return bound


@torch.no_grad()
def decode_random_order(rule: RuleSampler, x: torch.Tensor, indices: torch.Tensor, steps: int, seed: int,
                        log_q: torch.Tensor | None = None) -> None:
    """Decode x [B, T] in place by a rule declaring ``order = "random"``: every position at its step of
    ``rule.decode_steps``, the denoiser queried only where positions commit (:func:`decode_in_order`), proposals
    ``rule.propose``'s draws with Stream.TOKEN uniforms at (step, position) in slot ``rule.token_slot``, and
    ``log_q`` their log q."""
    from dllm_lit.decoding.ordered_decoding import decode_in_order

    decode = rule.decode_steps(indices, x.shape[1], steps, seed)
    tok_u = StepUniforms(seed, indices, steps)

    def propose(j: int, b: torch.Tensor, p: torch.Tensor, probs: torch.Tensor):
        law = rule.propose(probs)
        tok = draw(law, probs, tok_u.at(j, b, p, rule.token_slot))
        if log_q is None:
            return tok
        return tok, torch.zeros(tok.shape, dtype=torch.float64, device=tok.device) if law is None \
            else drawn_log_prob(law, tok)

    x.copy_(decode_in_order(rule.denoiser, x, decode, steps - 1, propose, log_q=log_q))


@torch.no_grad()
def decode_step_grid(rule: RuleSampler, x: torch.Tensor, indices: torch.Tensor, steps: int, seed: int,
                     log_q: torch.Tensor | None = None, taken: torch.Tensor | None = None) -> None:
    """Decode x [B, T] in place by a random-order rule declaring per-block step grids (``rule.step_grid`` gives
    ``(slots, fill)``): ``rule.decode_steps`` is the global step block * slots + step within the block, so most
    global steps are empty in a sequence.  Each sequence is decoded by the dense ranks of its own steps (at most T
    loop steps, not one per distinct global step of the batch); the draws are keyed by the global step (Stream.TOKEN,
    slot ``rule.token_slot``); the positions at slot ``fill`` of their block (None: none) take the argmax (log q 0);
    ``taken`` (float64 [B]) adds the distinct steps of each sequence (one denoiser call each)."""
    from dllm_lit.decoding.ordered_decoding import decode_in_order, dense_ranks

    slots, fill = rule.step_grid(x.shape[1], steps)
    decode = rule.decode_steps(indices, x.shape[1], steps, seed)
    dense, distinct = dense_ranks(decode)
    tok_u = StepUniforms(seed, indices, steps)

    def propose(j: int, b: torch.Tensor, p: torch.Tensor, probs: torch.Tensor):
        g = decode[b, p]
        law = rule.propose(probs)
        tok = draw(law, probs, tok_u.at(g, b, p, rule.token_slot))
        lq = None if log_q is None else torch.zeros(tok.shape, dtype=torch.float64, device=tok.device) \
            if law is None else drawn_log_prob(law, tok)
        if fill is not None:
            at_fill = torch.as_tensor(g % slots == fill, device=tok.device)
            tok = torch.where(at_fill, probs.argmax(-1), tok)
            lq = None if lq is None else torch.where(at_fill, torch.zeros_like(lq), lq)
        return tok if lq is None else (tok, lq)

    x.copy_(decode_in_order(rule.denoiser, x, dense, int(distinct.max()) - 1 if x.numel() else -1, propose,
                            log_q=log_q))
    if taken is not None:
        taken += distinct.to(device=taken.device, dtype=taken.dtype)


def run_memo(den, derive, device: torch.device) -> NeighbourhoodRows | None:
    """A run-long memo of ``derive(rows)`` by neighbourhood key (:class:`NeighbourhoodRows`) where it pays: a local
    denoiser naming few keys, on the CPU (on CUDA large per-step kernels are faster); else None."""
    if torch.device(device).type == "cpu" and NeighbourhoodRows.applies(den):
        return NeighbourhoodRows(den, derive, device=device)
    return None


def keyed_rows(den, z: torch.Tensor, b: torch.Tensor, p: torch.Tensor, derive, memo: NeighbourhoodRows | None = None,
               max_rows: int | None = None):
    """(query, keyed) at the masked positions (b, p) of z: the neighbour queries when ``den`` is local (else None),
    and, on the CPU, :func:`~dllm_lit.decoding.neighbourhood_rows.rows_by_key`'s (features, index) of one row per
    neighbourhood key (else None: the caller computes rows per position, from ``query`` when there is one)."""
    if not isinstance(den, LocalDenoiser):
        return None, None
    query = neighbour_queries(den, z, b, p)
    if z.device.type != "cpu":
        return query, None
    return query, rows_by_key(den, query, derive, memo, max_rows=max_rows)
