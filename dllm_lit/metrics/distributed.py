"""Helpers that make ``torchmetrics`` list ("cat") states safe under DDP.

Two problems are solved here.

1. **Typed empty list states.** When a process never called ``update`` (e.g. the last rank of an
   uneven split), torchmetrics replaces each of its empty list states with
   ``torch.tensor([], dtype=metric.dtype)`` -- a *float32* tensor -- before the all-gather.  For an
   int64 state (sequence hashes, per-sequence counts) ``torch.cat`` then silently promotes the
   gathered result to float32, which corrupts 64-bit hashes.  :class:`TypedCatStateMixin` fills
   empty list states with an empty tensor of the declared dtype and trailing shape instead.
2. **Reading the synchronised per-item states** (for the bootstrap) outside ``compute``:
   :func:`synced_cat_states` gathers the states across processes (a no-op without
   ``torch.distributed``), concatenates them and restores the local states afterwards.

:class:`EmptyMetricError` is what every metric of :mod:`dllm_lit.metrics` raises when ``compute``
is called although no process has seen any item, instead of returning NaN.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Callable

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_cat
from torchmetrics.utilities.distributed import gather_all_tensors

__all__ = ["EmptyMetricError", "TypedCatStateMixin", "cat_state", "synced_cat_states"]


class EmptyMetricError(RuntimeError):
    """Raised by ``compute`` when no item was seen by any process (the value would be NaN)."""


class TypedCatStateMixin:
    """Mixin for :class:`torchmetrics.Metric` subclasses with typed list states.

    Subclasses declare ``_cat_state_specs: dict[str, tuple[torch.dtype, tuple[int, ...]]]``
    mapping a list-state name to its dtype and trailing shape (the shape of one item without the
    leading ``0``-th dimension). Before synchronisation, an empty list state is replaced by
    ``torch.empty((0, *trailing_shape), dtype=dtype)``, so the gathered concatenation keeps the
    declared dtype whichever ranks saw data.
    """

    _cat_state_specs: dict[str, tuple[torch.dtype, tuple[int, ...]]] = {}

    def _sync_dist(self, dist_sync_fn: Callable = gather_all_tensors, process_group: Any | None = None) -> None:
        metric: Metric = self  # type: ignore[assignment]
        for name, (dtype, trailing) in self._cat_state_specs.items():
            if name not in metric._defaults:  # optional state not registered by this instance
                continue
            value = getattr(metric, name)
            if isinstance(value, list) and len(value) == 0:
                setattr(metric, name, [torch.empty((0, *trailing), dtype=dtype, device=metric.device)])
        super()._sync_dist(dist_sync_fn, process_group=process_group)  # type: ignore[misc]


def cat_state(value: Tensor | Sequence[Tensor], dtype: torch.dtype) -> Tensor:
    """Concatenate a (possibly already synchronised) list state along dim 0, keeping ``dtype``.

    Args:
        value: the state: a list of tensors (local, un-synchronised) or one tensor (after sync).
        dtype: dtype of the result (used for the empty case and guarded against promotion).
    """
    if isinstance(value, Tensor):
        return value.to(dtype)
    if len(value) == 0:
        return torch.empty(0, dtype=dtype)
    return dim_zero_cat(list(value)).to(dtype)


@contextmanager
def synced_cat_states(metric: Metric, specs: dict[str, torch.dtype]) -> Iterator[dict[str, Tensor]]:
    """Yield the named list states gathered over all processes and concatenated.

    Uses ``metric.sync_context`` (the same mechanism ``compute`` uses), so it is a no-op when
    ``torch.distributed`` is not initialised, and the local states are restored on exit.
    Must be called on every process of the group (it performs collective operations).

    Args:
        metric: the metric whose states to read.
        specs: mapping state name -> dtype of the concatenated result.
    """
    already_synced = bool(getattr(metric, "_is_synced", False))
    with metric.sync_context(
        dist_sync_fn=metric.dist_sync_fn, should_sync=not already_synced, should_unsync=not already_synced
    ):
        yield {name: cat_state(getattr(metric, name), dtype) for name, dtype in specs.items()}
