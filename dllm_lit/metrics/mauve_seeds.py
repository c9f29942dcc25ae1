"""MAUVE repeated over several k-means seeds: the value at the paper's seed, and the mean and spread.

A MAUVE value depends on the k-means quantisation, hence on its seed; a single value moves with it.
:class:`MauveOverSeeds` computes MAUVE (:class:`~dllm_lit.metrics.mauve.MauveScore`, same features)
for the seeds ``seed, seed + 1, ..., seed + num_seeds - 1`` and returns

    mauve           = MAUVE at ``seed`` (mauve's default 25: the value the paper reports),
    mauve_seed_mean = mean over the seeds,
    mauve_seed_std  = sample standard deviation over the seeds (ddof 1; 0 with one seed).

The features are computed once; only the quantisation and the divergence curve are repeated.
"""
from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from dllm_lit import checks
from dllm_lit.metrics.functional.mauve import mauve_from_features
from dllm_lit.metrics.mauve import MauveScore

__all__ = ["MauveOverSeeds"]


class MauveOverSeeds(MauveScore):
    """:class:`MauveScore` over ``num_seeds`` k-means seeds (see the module docstring).

    Args:
        num_seeds: number of k-means seeds (>= 1; default 3).
        *args, **kwargs: as :class:`MauveScore`.

    After ``compute``, ``seed_values`` holds the MAUVE value of each seed and ``last_result`` mauve's
    full output at the first seed.  Interval: none (as :class:`MauveScore`); the spread over seeds is
    reported as its own value.
    """

    def __init__(self, *args: Any, num_seeds: int = 3, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.num_seeds = checks.integer("`num_seeds`", num_seeds)
        self.seed_values: list[float] = []

    def compute(self) -> dict[str, float]:  # type: ignore[override]
        p, q = self.feature_arrays()
        values = []
        for k in range(self.num_seeds):
            out = mauve_from_features(p, q, self.num_buckets, self.seed + k, **self.mauve_kwargs)
            if k == 0:
                self.last_result = out
            values.append(float(out.mauve))
        self.seed_values = values
        return {"mauve": values[0], "mauve_seed_mean": float(np.mean(values)),
                "mauve_seed_std": statistics.stdev(values) if len(values) > 1 else 0.0}
