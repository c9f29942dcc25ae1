r"""Within-sequence n-gram diversity (paper Appendix "Formal Definitions of Evaluation Metrics";
see ``docs/metrics.md``).

.. math::
   \mathrm{Div}_n = \frac{\sum_{s=1}^{N} D_s}{\sum_{s=1}^{N} (T_s-n+1)}, \qquad
   D_s = \bigl|\{x^{(s)}_{t:t+n-1} : 1 \le t \le T_s-n+1\}\bigr| ,

i.e. per sequence the number of distinct n-grams, summed over sequences, divided by the total
number of n-grams :math:`N(T-n+1)` (the paper uses ``n in {2, 3}``).  Counting is exact
(:mod:`dllm_lit.metrics.functional.ngram`).  Exact under DDP: the states are sums, and the
per-sequence states are gathered.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from dllm_lit import checks
from dllm_lit.metrics.bootstrap import PERCENTILE, RatioOfSums, SequenceBootstrapMixin
from dllm_lit.metrics.distributed import EmptyMetricError, TypedCatStateMixin, synced_cat_states
from dllm_lit.metrics.functional.ngram import distinct_ngrams_per_sequence

__all__ = ["NgramDiversity"]


class NgramDiversity(SequenceBootstrapMixin, TypedCatStateMixin, Metric):
    r"""Within-sequence n-gram diversity :math:`\mathrm{Div}_n` (see the module docstring).

    ``update(samples)`` takes ``LongTensor[N, T]`` token ids (``T`` may differ between calls).
    ``compute()`` returns a float64 scalar in ``(0, 1]``.

    Args:
        n: n-gram order (``>= 1``).
        per_sequence: also keep the per-sequence numerators :math:`D_s` and denominators
            :math:`T_s-n+1` (cat states, gathered over processes) so that
            :meth:`bootstrap_ci` can resample sequences.
        **kwargs: forwarded to :class:`torchmetrics.Metric`.

    States: ``distinct`` and ``total`` (int64, ``dist_reduce_fx="sum"``); with ``per_sequence``
    also ``seq_distinct`` and ``seq_total`` (int64 lists, ``dist_reduce_fx="cat"``).

    Interval: percentile bootstrap of the ratio of sums :math:`\sum_s w_s D_s / \sum_s w_s (T_s-n+1)`.
    """

    is_differentiable = False
    higher_is_better: bool | None = None
    full_state_update = False
    interval_policy = PERCENTILE

    distinct: Tensor
    total: Tensor

    _cat_state_specs = {"seq_distinct": (torch.int64, ()), "seq_total": (torch.int64, ())}

    def __init__(self, n: int = 2, per_sequence: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.n = checks.integer("`n`", n)
        self.per_sequence = checks.boolean("per_sequence", per_sequence)
        self.add_state("distinct", default=torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")
        if self.per_sequence:
            self.add_state("seq_distinct", default=[], dist_reduce_fx="cat")
            self.add_state("seq_total", default=[], dist_reduce_fx="cat")

    def update(self, samples: Tensor) -> None:
        """Add a batch ``LongTensor[N, T]`` of token ids (``T >= n``)."""
        counts = distinct_ngrams_per_sequence(samples, self.n).to(self.device)
        num_windows = samples.shape[1] - self.n + 1
        self.distinct += counts.sum()
        self.total += counts.numel() * num_windows
        if self.per_sequence:
            self.seq_distinct.append(counts)
            self.seq_total.append(torch.full_like(counts, num_windows))

    def compute(self) -> Tensor:
        """Return :math:`\\mathrm{Div}_n` (float64 scalar)."""
        if int(self.total) == 0:
            raise EmptyMetricError(f"{type(self).__name__}(n={self.n}).compute() called before any sequence was seen")
        return self.distinct.double() / self.total.double()

    def sequence_statistics(self) -> dict[str, Tensor]:
        """``{"distinct": D_s, "windows": T_s - n + 1}`` per sequence (needs ``per_sequence``)."""
        if not self.per_sequence:
            raise ValueError("bootstrap_ci needs per-sequence states: construct NgramDiversity(..., per_sequence=True)")
        with synced_cat_states(self, {"seq_distinct": torch.int64, "seq_total": torch.int64}) as states:
            return {"distinct": states["seq_distinct"], "windows": states["seq_total"]}

    def resampling_statistic(self, statistics: Mapping[str, Tensor]) -> RatioOfSums:
        return RatioOfSums(statistics["distinct"], statistics["windows"])
