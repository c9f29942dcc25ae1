"""Transition-level metrics against the known kernel P' (definitions in
:mod:`dllm_lit.metrics.functional.transition`).

The state is the count matrix, summed across processes, so DDP gives exactly the single-process
values.  Memory: a dense int64 [V, V] state, 8 V^2 bytes (5.8 KB for V = 27, 134 MB for V = 4096).
"""
from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor
from torchmetrics import Metric

from dllm_lit import checks
from dllm_lit.markov.chain import MarkovChain
from dllm_lit.metrics.bootstrap import SequenceBootstrapMixin
from dllm_lit.metrics.distributed import TypedCatStateMixin, cat_state, synced_cat_states
from dllm_lit.metrics.functional.transition import (
    METRIC_KEYS,
    TRANSITION_INTERVALS,
    ResampledTransitionMetrics,
    transition_codes,
    transition_counts,
    transition_metrics_from_counts,
    transition_metrics_from_pairs,
)

__all__ = ["METRIC_KEYS", "TransitionMetrics"]


class TransitionMetrics(SequenceBootstrapMixin, TypedCatStateMixin, Metric):
    """torchmetrics wrapper: ``update(samples[N, T])`` accumulates transitions; ``compute()`` returns
    a dict over :data:`METRIC_KEYS`.

    State: for V <= ``dense_max_vocab`` a dense int64 [V, V] count matrix summed across processes
    (8 V^2 bytes); above it, the transition codes themselves (8 N_local (T - 1) bytes, gathered
    across processes), so memory never exceeds min(8 V^2, 8 N (T - 1)) bytes per row.  With
    ``per_sequence`` the codes are kept in either case (all sequences then need one length T), and
    :meth:`bootstrap_ci` resamples sequences.

    Intervals: one policy per key (:data:`~dllm_lit.metrics.functional.transition.TRANSITION_INTERVALS`
    says which and why): centred for the plug-in functionals, percentile for the linear ones, none
    for support_frac.
    """

    full_state_update = False
    higher_is_better = False
    is_differentiable = False
    _cat_state_specs = {"codes": (torch.int64, ())}
    interval_policy = TRANSITION_INTERVALS

    def __init__(self, chain: MarkovChain, dense_max_vocab: int = 1024, per_sequence: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.chain = chain
        V = chain.vocab_size
        self.dense = V <= dense_max_vocab
        self.per_sequence = checks.boolean("per_sequence", per_sequence)
        if self.dense:
            self.add_state("counts", default=torch.zeros(V, V, dtype=torch.int64), dist_reduce_fx="sum")
        if not self.dense or self.per_sequence:
            self.add_state("codes", default=[], dist_reduce_fx="cat")
        if self.per_sequence:  # T - 1 of every sequence (0 before the first update; max over processes)
            self.add_state("transitions_per_sequence", default=torch.tensor(0, dtype=torch.int64), dist_reduce_fx="max")

    def update(self, samples: torch.Tensor) -> None:
        if samples.dim() != 2 or samples.shape[1] < 2:
            raise ValueError(f"samples must have shape [N, T] with T >= 2, got {tuple(samples.shape)}")
        x = samples.long()
        V = self.chain.vocab_size
        if x.numel() and (x.min() < 0 or x.max() >= V):
            raise ValueError(f"samples must hold token ids in [0, V={V}) with no MASK left")
        if self.per_sequence:
            seen = int(self.transitions_per_sequence)
            if seen and seen != x.shape[1] - 1:
                raise ValueError(f"per-sequence transition statistics need one length T, got {seen + 1} and {x.shape[1]}")
            self.transitions_per_sequence.fill_(x.shape[1] - 1)
        if self.dense:
            self.counts += transition_counts(x, V).to(self.counts.device)
        if not self.dense or self.per_sequence:
            self.codes.append(transition_codes(x, V).reshape(-1).to(self.device))

    def compute(self) -> dict[str, float]:
        if self.dense:
            return transition_metrics_from_counts(self.counts.cpu(), self.chain)
        uniq, cnt = torch.unique(cat_state(self.codes, torch.int64).cpu(), return_counts=True)
        return transition_metrics_from_pairs(uniq, cnt, self.chain)

    def sequence_statistics(self) -> dict[str, Tensor]:
        """``{"codes": int64 [N, T - 1]}``: every sequence's transition codes (needs ``per_sequence``)."""
        if not self.per_sequence:
            raise ValueError("intervals need per-sequence states: construct TransitionMetrics(..., per_sequence=True)")
        with synced_cat_states(self, {"codes": torch.int64}) as states:
            codes, length = states["codes"].cpu(), int(self.transitions_per_sequence)
        return {"codes": codes.reshape(-1, max(length, 1))}

    def resampling_statistic(self, statistics: Mapping[str, Tensor]) -> ResampledTransitionMetrics:
        return ResampledTransitionMetrics(statistics["codes"], self.chain)
