"""The decoding engine: the speed paths behind the samplers.  Private: an algorithm module in
:mod:`dllm_lit.samplers` imports only the entry points below, from this package (``from dllm_lit.decoding import
decode_rule``), never a module of it (``tests/test_import_layering.py``).  A sampler written as a rule
(:class:`~dllm_lit.samplers.rule.RuleSampler`) needs none of them: its module imports nothing from here.

The rule engine
    :func:`decode_rule` runs a rule through the posterior provider its denoiser allows (dense, cache, bounded:
    :mod:`.providers`), :func:`decode_random_order` a rule that declares ``order = "random"`` (only committed
    positions are queried), :func:`decode_step_grid` one that also declares per-block step grids (``step_grid``),
    :func:`decode_cuts` one that decodes by cuts (``remasked``: MaskGIT);
    :func:`~.reference.reference_decode` is the dense loop, read top to bottom, and
    :data:`GUMBEL_SLOT` the uniform slot of a ``position_temperature``'s Gumbel keys.

Ordered decoding (MDLM, BD3, FHS, DUS, SEDD, LLaDA's random remasking: the positions of a step are known before the
posteriors)
    :func:`decode_in_order` (a step's positions, rows per nearest-neighbour key), :func:`coin_decode_steps` and
    :func:`random_order_steps` (the orders it takes), :func:`dense_ranks` (a sequence's steps of a sparse grid).

The confidence loop (LLaDA, Dream, EB, PC and, through :func:`decode_rule`, every rule)
    :func:`decode_blocks` with its callables' helpers :func:`proposal_features`, :func:`proposal_widths`,
    :func:`propose_tokens`, :func:`confidence`, :func:`posterior_entropy`, :func:`has_max_prob_bound`; the block
    shape :func:`block_bounds`, :func:`check_blocks`, the options :func:`ranking_options`, :func:`with_tie_rule`
    and the uniform slot of tie keys :data:`TIE_SLOT`.  KLASS drives its parts itself:
    :class:`BlockPosteriors`, :class:`StepView`, :func:`propose_step`, :func:`cache_width`, :func:`in_sub_batches`.

Rows of the exact oracle, memoised per neighbourhood key
    :class:`NeighbourhoodRows`, :func:`run_memo`, :func:`keyed_rows`; :class:`PosteriorCache` (rows refreshed only
    where a nearest revealed neighbour changed); :class:`ReferenceScoreBounds` (score envelopes for Dream) and their slack
    :data:`ENVELOPE_SLACK`.

Truncated proposal laws (ReMDM, Dream, BD3)
    :func:`top_p_filter` (the strict nucleus cut: sort-free bucket and compiled paths, the full sort's float64
    additions), :func:`top_k_filter`, :func:`check_top_p`; ``top_p_filter`` is also public as
    ``dllm_lit.samplers.top_p_filter``.

Leave-one-out and draft rows (WINO, LLaDA 2.1, P2, ASSD)
    :class:`LeaveOneOutRows`, :func:`check_leave_one_out`, :func:`draw_stored`, :func:`draft_rows`, and the bounded
    variants :class:`BoundedRefinement` (LLaDA 2.1), :class:`BoundedPlanning` (P2).

These entry points shrink as hand-wired samplers become rules.  Every path draws the same samples as the direct
computation (``torch.equal``, tested); see ``docs/exactness.md`` and ``docs/performance.md``.
"""
from __future__ import annotations

from dllm_lit.decoding.confidence_decoding import (TIE_SLOT, BlockPosteriors, block_bounds, cache_width,
                                                   check_blocks, confidence, decode_blocks, has_max_prob_bound,
                                                   in_sub_batches, posterior_entropy, proposal_features,
                                                   proposal_widths, propose_step, propose_tokens, ranking_options,
                                                   with_tie_rule)
from dllm_lit.decoding.cut_decoding import decode_cuts
from dllm_lit.decoding.llada21_bounded import BoundedRefinement
from dllm_lit.decoding.neighbourhood_rows import NeighbourhoodRows
from dllm_lit.decoding.nucleus import check_top_p, top_k_filter, top_p_filter
from dllm_lit.decoding.ordered_decoding import coin_decode_steps, decode_in_order, dense_ranks, random_order_steps
from dllm_lit.decoding.p2_bounded import BoundedPlanning
from dllm_lit.decoding.posterior_cache import PosteriorCache
from dllm_lit.decoding.providers import decode_random_order, decode_rule, decode_step_grid, keyed_rows, run_memo
from dllm_lit.decoding.reference import GUMBEL_SLOT
from dllm_lit.decoding.row_providers import LeaveOneOutRows, check_leave_one_out, draft_rows, draw_stored
from dllm_lit.decoding.score_envelopes import ENVELOPE_SLACK, ReferenceScoreBounds
from dllm_lit.decoding.step_view import StepView

__all__ = [
    # the rule engine
    "decode_rule", "decode_random_order", "decode_step_grid", "decode_cuts", "GUMBEL_SLOT",
    # ordered decoding
    "decode_in_order", "coin_decode_steps", "random_order_steps", "dense_ranks",
    # the confidence loop and its parts
    "decode_blocks", "proposal_features", "proposal_widths", "propose_tokens", "confidence", "posterior_entropy",
    "has_max_prob_bound", "block_bounds", "check_blocks", "ranking_options", "with_tie_rule", "TIE_SLOT",
    "BlockPosteriors", "StepView", "propose_step", "cache_width", "in_sub_batches",
    # rows of the exact oracle
    "NeighbourhoodRows", "run_memo", "keyed_rows", "PosteriorCache", "ReferenceScoreBounds", "ENVELOPE_SLACK",
    # truncated proposal laws
    "top_p_filter", "top_k_filter", "check_top_p",
    # leave-one-out and draft rows
    "LeaveOneOutRows", "check_leave_one_out", "draw_stored", "draft_rows", "BoundedRefinement", "BoundedPlanning",
]
