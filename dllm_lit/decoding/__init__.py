"""The decoding engine: the speed paths behind the samplers.  Private: an algorithm module in
:mod:`dllm_lit.samplers` imports only the entry points below, from this package (``from dllm_lit.decoding import
decode_rule``), never a module of it (``tests/test_import_layering.py``).  A sampler written as a rule
(:class:`~dllm_lit.samplers.rule.RuleSampler`) needs none of them: its module imports nothing from here.

The rule engine
    :func:`decode` is its one entry: it reads a rule's declarations and picks the path below.  :func:`decode_rule`
    runs a rule through the posterior provider its denoiser allows (dense, cache, bounded: :mod:`.providers`),
    :func:`decode_random_order` a rule that declares ``order = "random"`` (only committed
    positions are queried), :func:`decode_step_grid` one that also declares per-block step grids (``step_grid``),
    :func:`decode_cuts` one that decodes by cuts (``remasked``: MaskGIT), :func:`decode_stable` one that declares
    ``stability_history`` (KLASS: the engine keeps the previous posterior rows); :func:`reference_decode` is the
    dense loop, read top to bottom (the path estimators replay a run with it), and
    :data:`GUMBEL_SLOT` the uniform slot of a ``position_temperature``'s Gumbel keys.

Ordered decoding (MDLM, BD3, FHS, DUS, SEDD, LLaDA's random remasking: the positions of a step are known before the
posteriors)
    :func:`decode_in_order` (a step's positions, rows per nearest-neighbour key), :func:`coin_decode_steps` and
    :func:`random_order_steps` (the orders it takes), :func:`dense_ranks` (a sequence's steps of a sparse grid).

The confidence loop (LLaDA, Dream, EB, PC and, through :func:`decode_rule`, every rule)
    :func:`decode_blocks` (a rule's hooks and capabilities as one :class:`BlockDecoding`) with its callables'
    helpers :func:`proposal_features`, :func:`proposal_widths`,
    :func:`propose_tokens`, :func:`confidence`, :func:`posterior_entropy`, :func:`has_max_prob_bound`; the block
    shape :func:`block_bounds`, :func:`check_blocks`, the options :func:`ranking_options`, :func:`with_tie_rule`
    and the uniform slot of tie keys :data:`TIE_SLOT`; the engine's own parts, exported for the tests' checks of
    the paths: :class:`BlockPosteriors`, :class:`StepView`, :func:`propose_step`, :func:`cache_width`,
    :func:`in_sub_batches`.

Rows of the exact oracle, memoised per neighbourhood key
    :class:`NeighbourhoodRows`; :class:`PosteriorCache` (the :class:`CachedFeatures` it keeps; rows refreshed only
    where a nearest revealed neighbour changed); :class:`ReferenceScoreBounds` (score envelopes for Dream) and their slack
    :data:`ENVELOPE_SLACK`.

Truncated proposal laws (ReMDM, Dream, BD3)
    :func:`top_p_filter` (the strict nucleus cut: sort-free bucket and compiled paths, the full sort's float64
    additions), :func:`top_k_filter`, :func:`check_top_p`; ``top_p_filter`` is also public as
    ``dllm_lit.samplers.top_p_filter``.  :class:`NucleusDraws` draws a step's tokens from the filtered posterior
    (ReMDM; rows once per neighbourhood key).

The editing loop (WINO, LLaDA 2.1, P2, SlowFast: rules that revisit revealed tokens)
    :func:`decode_edits` runs an editing rule (:class:`~dllm_lit.samplers.edit_rule.EditRule`) from its declared
    ``edit_law`` (:data:`EDIT_LAWS`: its own ``edit`` hook on an :class:`EditCall`, or the engine's "refine" /
    "plan" laws with their bounded paths); :func:`stable_ranks` and :func:`lowest` are its stable selections
    (:mod:`.editing`).

Leave-one-out and draft rows (ASSD)
    :class:`LeaveOneOutRows`, :func:`check_leave_one_out`, :func:`draw_stored`, :func:`draft_rows`.

These entry points shrink as hand-wired samplers become rules.  Every path draws the same samples as the direct
computation (``torch.equal``, tested); see ``docs/exactness.md`` and ``docs/performance.md``.
"""
from __future__ import annotations

from dllm_lit.decoding.confidence_decoding import (TIE_SLOT, BlockDecoding, BlockPosteriors, block_bounds,
                                                   cache_width, check_blocks, confidence, decode_blocks,
                                                   has_max_prob_bound, in_sub_batches, posterior_entropy,
                                                   proposal_features, proposal_widths, propose_step, propose_tokens,
                                                   ranking_options, with_tie_rule)
from dllm_lit.decoding.cut_decoding import decode_cuts
from dllm_lit.decoding.entry import decode
from dllm_lit.decoding.editing import EDIT_LAWS, EditCall, decode_edits
from dllm_lit.decoding.neighbourhood_rows import NeighbourhoodRows
from dllm_lit.decoding.nucleus import check_top_p, top_k_filter, top_p_filter
from dllm_lit.decoding.ordered_decoding import coin_decode_steps, decode_in_order, dense_ranks, random_order_steps
from dllm_lit.decoding.posterior_cache import CachedFeatures, PosteriorCache
from dllm_lit.decoding.nucleus_draws import NucleusDraws
from dllm_lit.decoding.providers import decode_random_order, decode_rule, decode_step_grid
from dllm_lit.decoding.reference import GUMBEL_SLOT, reference_decode
from dllm_lit.decoding.row_providers import LeaveOneOutRows, check_leave_one_out, draft_rows, draw_stored
from dllm_lit.decoding.selection_kernels import lowest, stable_ranks
from dllm_lit.decoding.stability_decoding import decode_stable
from dllm_lit.decoding.score_envelopes import ENVELOPE_SLACK, ReferenceScoreBounds
from dllm_lit.decoding.step_view import StepView

__all__ = [
    # the rule engine
    "decode", "decode_rule", "decode_random_order", "decode_step_grid", "decode_cuts", "decode_stable", "reference_decode",
    "GUMBEL_SLOT",
    # ordered decoding
    "decode_in_order", "coin_decode_steps", "random_order_steps", "dense_ranks",
    # the confidence loop and its parts
    "decode_blocks", "BlockDecoding", "proposal_features", "proposal_widths", "propose_tokens", "confidence",
    "posterior_entropy",
    "has_max_prob_bound", "block_bounds", "check_blocks", "ranking_options", "with_tie_rule", "TIE_SLOT",
    "BlockPosteriors", "StepView", "propose_step", "cache_width", "in_sub_batches",
    # rows of the exact oracle
    "NeighbourhoodRows", "PosteriorCache", "CachedFeatures", "ReferenceScoreBounds", "ENVELOPE_SLACK",
    # truncated proposal laws
    "top_p_filter", "top_k_filter", "check_top_p", "NucleusDraws",
    # the editing loop
    "decode_edits", "EditCall", "EDIT_LAWS", "stable_ranks", "lowest",
    # leave-one-out and draft rows
    "LeaveOneOutRows", "check_leave_one_out", "draw_stored", "draft_rows",
]
