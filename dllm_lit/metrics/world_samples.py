"""Shared state of the every-world metrics: the samples and their global indices, paired with the run's
reference row (exact samples with the same indices), gathered over processes and ordered by index."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from dllm_lit.metrics.bootstrap import SequenceBootstrapMixin
from dllm_lit.metrics.distributed import EmptyMetricError, TypedCatStateMixin, synced_cat_states

__all__ = ["WorldSampleMetric"]

_STATES = {"x": torch.int64, "index": torch.int64}


class WorldSampleMetric(SequenceBootstrapMixin, TypedCatStateMixin, Metric):
    """``update(samples[n, T], stats)`` (``stats["index"]``: global indices); memory 8 N T bytes per row."""

    full_state_update = False
    higher_is_better = False
    is_differentiable = False
    _cat_state_specs = {"x": (torch.int64, ()), "index": (torch.int64, ())}

    def __init__(self, world: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.world = world
        self.reference: WorldSampleMetric | None = None
        self.add_state("x", default=[], dist_reduce_fx="cat")
        self.add_state("index", default=[], dist_reduce_fx="cat")
        self.add_state("length", default=torch.tensor(0, dtype=torch.int64), dist_reduce_fx="max")

    def pair_with(self, reference: "WorldSampleMetric | None") -> None:
        """The same metric on the run's reference row (exact samples, same indices); may be self."""
        if reference is not None and not isinstance(reference, type(self)):
            raise ValueError(f"the reference must be a {type(self).__name__}, got {type(reference).__name__}")
        self.reference = reference

    def update(self, samples: Tensor, stats: Mapping[str, Tensor]) -> None:
        if samples.dim() != 2 or samples.shape[1] < 2:
            raise ValueError(f"samples must have shape [N, T] with T >= 2, got {tuple(samples.shape)}")
        if "index" not in stats:
            raise ValueError(f"{type(self).__name__} needs the global sequence index in stats['index']")
        T = samples.shape[1]
        if int(self.length) and int(self.length) != T:
            raise ValueError(f"{type(self).__name__} needs one sequence length, got {int(self.length)} and {T}")
        self.length.fill_(T)
        self.x.append(samples.long().cpu().reshape(-1).to(self.device))
        self.index.append(torch.as_tensor(stats["index"]).reshape(-1).to(device=self.device, dtype=torch.int64))

    def samples(self) -> tuple[Tensor, Tensor]:
        """(x [N, T], index [N]) over all processes, in gathered order (collective)."""
        with synced_cat_states(self, _STATES) as s:
            x, index, T = s["x"].cpu(), s["index"].cpu(), int(self.length)
        if index.numel() == 0:
            raise EmptyMetricError(f"{type(self).__name__}: no sequence was seen")
        return x.reshape(-1, T), index

    def ordered(self) -> tuple[Tensor, Tensor]:
        x, index = self.samples()
        order = torch.argsort(index, stable=True)
        return x[order], index[order]

    def reference_aligned(self, index: Tensor) -> Tensor | None:
        """The reference row's samples at ``index`` (None without a reference row)."""
        if self.reference is None:
            return None
        rx, rindex = (self.samples() if self.reference is self else self.reference.samples())
        order = torch.argsort(rindex, stable=True)
        rx, rindex = rx[order], rindex[order]
        pos = torch.searchsorted(rindex, index).clamp(max=max(rindex.numel() - 1, 0))
        if rindex.numel() != index.numel() or not torch.equal(rindex[pos], index):
            raise ValueError("the reference row must hold the same sequence indices as the row it is paired with")
        return rx[pos]
