"""Task accuracy: the fraction of samples a task world gives positive probability (a correct answer to its prompt).

``task_accuracy`` = mean_n 1[p(x_n) > 0], decided exactly by the world's ``in_support`` (the unique state path of a
:class:`~dllm_lit.markov.finite_support.SupportWorld`; no float compared).  Interval: Clopper-Pearson (the exact
binomial interval of a proportion; coverage at least its level by construction).  Exact samples read 1.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from scipy.stats import beta
from torch import Tensor

from dllm_lit.metrics.bootstrap import IntervalPolicy
from dllm_lit.metrics.world_samples import WorldSampleMetric

__all__ = ["TaskAccuracy", "clopper_pearson"]


def clopper_pearson(successes: int, trials: int, confidence: float) -> tuple[float, float]:
    """The exact two-sided binomial interval for a proportion at level ``confidence``."""
    a = (1.0 - confidence) / 2
    low = 0.0 if successes == 0 else float(beta.ppf(a, successes, trials - successes + 1))
    high = 1.0 if successes == trials else float(beta.ppf(1 - a, successes + 1, trials - successes))
    return low, high


class TaskAccuracy(WorldSampleMetric):
    """``compute() -> {"task_accuracy": float}``; ``update(samples, stats)`` as every world metric."""

    interval_policy = {"task_accuracy": IntervalPolicy("clopper_pearson")}
    higher_is_better = True

    def _correct(self) -> Tensor:
        x, _ = self.ordered()
        return self.world.in_support(x)

    def compute(self) -> dict[str, float]:
        return {"task_accuracy": float(self._correct().double().mean())}

    def own_intervals(self, confidence: float) -> dict[str, tuple[float, float]]:
        ok = self._correct()
        return {"task_accuracy": clopper_pearson(int(ok.sum()), ok.numel(), confidence)}

    def sequence_statistics(self) -> dict[str, Tensor]:
        return {"correct": self._correct().double()}

    def resampling_statistic(self, statistics: Mapping[str, Tensor]):
        """Nothing is resampled: the interval is the metric's own (:meth:`own_intervals`)."""
        return lambda weights: {}
