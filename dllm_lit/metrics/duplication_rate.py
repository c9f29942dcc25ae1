r"""Duplication rate across all sequences of all processes (paper Appendix "Formal Definitions of
Evaluation Metrics", "Duplication Rate"; see ``docs/metrics.md``).

.. math::
   \mathrm{Dup} = 1 - \frac{\bigl|\{x^{(s)}_{1:T} : 1 \le s \le N\}\bigr|}{N}

Exact under DDP: the state is the list of per-sequence 64-bit hashes, gathered from every process
(distinct values cannot be summed), so duplicates straddling two processes are counted.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from dllm_lit.metrics.bootstrap import IntervalPolicy
from dllm_lit.metrics.distributed import EmptyMetricError, TypedCatStateMixin, cat_state
from dllm_lit.metrics.functional.duplication import duplication_rate, sequence_hashes

__all__ = ["DuplicationRate"]


class DuplicationRate(TypedCatStateMixin, Metric):
    r"""Duplication rate :math:`\mathrm{Dup}` (see the module docstring).

    Sequences are identified by 64-bit hashes (:func:`~dllm_lit.metrics.functional.duplication.sequence_hashes`);
    the probability that any two distinct sequences among ``N`` collide is at most
    :math:`N(N-1)/2^{65}`.  Sequences of different lengths are always distinct.

    ``update(samples)`` takes ``LongTensor[N, T]``; ``compute()`` returns a float64 scalar in
    ``[0, 1)``.  State: ``hashes`` (int64 list, ``dist_reduce_fx="cat"``), gathered over processes,
    so duplicates on different processes are found.

    Interval: none (see :attr:`interval_policy`).
    """

    is_differentiable = False
    higher_is_better = False
    full_state_update = False
    interval_policy = IntervalPolicy(
        None,
        reason="drawing sequences with replacement creates duplicates by construction (a resample holds only "
        "~63% distinct items), so the bootstrap distribution of the duplication rate lies far above the estimate",
    )

    _cat_state_specs = {"hashes": (torch.int64, ())}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("hashes", default=[], dist_reduce_fx="cat")

    def update(self, samples: Tensor) -> None:
        """Add a batch ``LongTensor[N, T]`` of token ids."""
        self.hashes.append(sequence_hashes(samples).to(self.device))

    def compute(self) -> Tensor:
        """Return :math:`\\mathrm{Dup}` (float64 scalar)."""
        hashes = cat_state(self.hashes, torch.int64)  # already gathered by torchmetrics under DDP
        if hashes.numel() == 0:
            raise EmptyMetricError(f"{type(self).__name__} has no sequences: call update() first")
        return torch.tensor(duplication_rate(hashes), dtype=torch.float64, device=hashes.device)
