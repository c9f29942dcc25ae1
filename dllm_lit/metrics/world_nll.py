"""Exact per-token NLL of the samples under the world's law (forward algorithm; any world).

``world_nll`` = mean_n -log p(x_n) / T (:mod:`dllm_lit.metrics.functional.world`); percentile bootstrap
interval over sequences.  Exact samples give the world's entropy rate (up to the start-up term H(X_0..)/T - H).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from dllm_lit.metrics.bootstrap import PERCENTILE
from dllm_lit.metrics.functional.world import LOG_FLOOR
from dllm_lit.metrics.world_samples import WorldSampleMetric

__all__ = ["WorldNLL"]


def _nll(world: Any, x: Tensor) -> Tensor:
    return -world.log_prob(x).clamp_min(torch.log(torch.tensor(LOG_FLOOR)) * x.shape[1]) / x.shape[1]


class WorldNLL(WorldSampleMetric):
    """``compute() -> {"world_nll": float}``."""

    interval_policy = PERCENTILE

    def compute(self) -> dict[str, float]:
        x, _ = self.ordered()
        return {"world_nll": float(_nll(self.world, x).mean())}

    def sequence_statistics(self) -> dict[str, Tensor]:
        x, _ = self.samples()
        return {"nll": _nll(self.world, x)}

    def resampling_statistic(self, statistics: Mapping[str, Tensor]):
        v = statistics["nll"].to(torch.float64)
        return lambda w: {"world_nll": (w * v).sum(-1) / w.sum(-1)}
