"""Exact greedy scores of a row (:mod:`dllm_lit.metrics.functional.greedy`), in any world.

Keys: ``greedy_regret`` (mean per-token regret (log p(x* | c) - log p(x | c)) / G, 0 for a mode decoder),
``greedy_mode_frac`` (fraction of outputs that are a mode), ``greedy_rank`` (median rank among the exact k best;
``rank_limit + 1`` = beyond the list), ``greedy_nll`` / ``greedy_mode_nll`` (mean -log p(x | c) / G of the outputs
and of their modes).  Percentile bootstrap intervals over sequences (a weighted median for the rank).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from dllm_lit.metrics.bootstrap import PERCENTILE
from dllm_lit.metrics.functional.greedy import GreedyScores, greedy_scores, prefix_canvases
from dllm_lit.metrics.world_samples import WorldSampleMetric

__all__ = ["GREEDY_KEYS", "GreedyScore"]

GREEDY_KEYS = ("greedy_regret", "greedy_mode_frac", "greedy_rank", "greedy_nll", "greedy_mode_nll")


def _weighted_median(values: Tensor, weights: Tensor) -> Tensor:
    """Lower weighted median of ``values`` [N] under each row of ``weights`` [B, N]: [B]."""
    order = torch.argsort(values, stable=True)
    cum = weights[:, order].cumsum(-1)
    k = torch.searchsorted(cum, (cum[:, -1:] / 2).contiguous()).clamp(max=values.numel() - 1)
    return values[order][k.reshape(-1)]


class GreedyScore(WorldSampleMetric):
    """``update(samples, stats)``; ``compute() -> {key: float}`` over :data:`GREEDY_KEYS`."""

    interval_policy = PERCENTILE

    def __init__(self, world: Any, rank_limit: int = 20, prompt_length: int = 0, **kwargs: Any) -> None:
        super().__init__(world, **kwargs)
        self.rank_limit, self.prompt_length = int(rank_limit), int(prompt_length)
        self._scores: tuple[int, GreedyScores] | None = None

    def scores(self) -> GreedyScores:
        """The scores of the index-ordered samples (computed once per state)."""
        x, _ = self.ordered()
        if self._scores is None or self._scores[0] != x.shape[0]:
            if self.prompt_length >= x.shape[1]:
                raise ValueError(f"greedy_prompt_length ({self.prompt_length}) must be less than the sequence "
                                 f"length ({x.shape[1]})")
            canvas = prefix_canvases(x, self.prompt_length, self.world.vocab_size) if self.prompt_length else None
            self._scores = (x.shape[0], greedy_scores(self.world, x, canvas, self.rank_limit))
        return self._scores[1]

    def reset(self) -> None:
        super().reset()
        self._scores = None

    def compute(self) -> dict[str, float]:
        s = self.scores()
        G = s.free.to(torch.float64)
        rank = s.rank.to(torch.float64)
        return {"greedy_regret": float(s.regret.mean()), "greedy_mode_frac": float(s.is_mode.double().mean()),
                "greedy_rank": float(rank.sort().values[(rank.numel() - 1) // 2]),
                "greedy_nll": float((-s.log_p / G).mean()), "greedy_mode_nll": float((-s.mode_log_p / G).mean())}

    def sequence_statistics(self) -> dict[str, Tensor]:
        s = self.scores()
        G = s.free.to(torch.float64)
        return {"regret": s.regret, "mode": s.is_mode.double(), "rank": s.rank.to(torch.float64),
                "nll": -s.log_p / G, "mode_nll": -s.mode_log_p / G}

    def resampling_statistic(self, statistics: Mapping[str, Tensor]):
        st = {k: v.to(torch.float64) for k, v in statistics.items()}

        def stat(w: Tensor) -> dict[str, Tensor]:
            total = w.sum(-1)
            mean = {k: (w * st[k]).sum(-1) / total for k in ("regret", "mode", "nll", "mode_nll")}
            return {"greedy_regret": mean["regret"], "greedy_mode_frac": mean["mode"],
                    "greedy_rank": _weighted_median(st["rank"], w), "greedy_nll": mean["nll"],
                    "greedy_mode_nll": mean["mode_nll"]}

        return stat
