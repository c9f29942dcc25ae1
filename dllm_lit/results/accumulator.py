"""Metric accumulation over the work items of a run: one metric per enabled registry entry and row.

Every metric is wrapped with its bootstrap interval (:class:`~dllm_lit.metrics.bootstrap.SequenceBootstrapper`,
resample weights drawn from the run's seed); metrics that are compared with the reference row
(``MetricSpec.pairs_with_reference``) are paired with it.  Samples and the denoiser evaluations (NFE) of every
sequence are kept by index until the row is finished; a finished row is one ``metrics.json`` row and its samples
``[N, T]`` in index order (gathered over processes in a multi-process run, where finishing is collective: every
process finishes a row once it has run its own items of it, :meth:`MetricAccumulator.finished_here`).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from dllm_lit.engine.plan import RunPlan
from dllm_lit.metrics.bootstrap import SequenceBootstrapper
from dllm_lit.results.registry import MetricContext, MetricSpec

__all__ = ["MetricAccumulator"]


class MetricAccumulator:
    """Per-row metrics of the rows of ``plan`` not yet done, fed by the sampler's outputs.

    Args:
        plan: the run's plan (rows in ``plan.done`` get no metrics).
        specs: the enabled metrics, in table order.
        contexts: what each spec's ``build`` reads (one per spec).
        resamples, confidence: of the bootstrap intervals (0 resamples: no interval).
        decoder: the chain's text decoder (for metrics that read texts).
        distributed: rows are finished collectively, as each process runs past them (:meth:`finished_here`).
    """

    def __init__(self, plan: RunPlan, specs: Sequence[MetricSpec], contexts: Sequence[MetricContext],
                 resamples: int, confidence: float, decoder: Any = None, distributed: bool = False) -> None:
        self.plan, self.specs, self.resamples, self.distributed = plan, list(specs), resamples, distributed
        self.reads_texts = any(spec.reads == "texts" for spec in self.specs)
        self.decoder = decoder
        n = len(plan.rows)
        self.metrics: list[list[SequenceBootstrapper] | None] = [
            None if i in plan.done else
            [SequenceBootstrapper(spec.build(ctx), resamples, confidence, int(plan.seed), policy=spec.interval)
             for spec, ctx in zip(self.specs, contexts)] for i in range(n)]
        ref = next((i for i, r in enumerate(plan.rows) if r.reference), None)
        for s, spec in enumerate(self.specs):  # metrics compared with the reference row's
            if spec.pairs_with_reference:
                for row in self.metrics:
                    if row is not None:
                        row[s].metric.pair_with(None if ref is None or self.metrics[ref] is None
                                                else self.metrics[ref][s].metric)
        self._chunks: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in range(n)]
        self._nfe: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in range(n)]
        self._count = [0] * n

    def policies(self) -> list[Any] | None:
        """The interval policy of every spec as the metrics use it (None before any row has metrics)."""
        built = next((row for row in self.metrics if row is not None), None)
        return None if built is None else [m.policy for m in built]

    def update(self, row: int, outputs: dict[str, Any]) -> bool:
        """Add one work item's ``{"samples", "index", "nfe", "stats"}`` to row ``row``; True once the row has
        all its sequences in a single-process run (then :meth:`finish` it)."""
        x, index = outputs["samples"], outputs["index"]
        texts = self.decoder.decode_batch(x.long()) if self.reads_texts else None
        stats = {**outputs.get("stats", {}), "index": index}
        for spec, metric in zip(self.specs, self.metrics[row]):
            if spec.reads == "stats":
                metric.update(x, stats, index=index)
            else:
                metric.update(x if spec.reads == "ids" else texts, index=index)
        self._chunks[row].append((index, x))
        nfe = outputs.get("nfe")
        self._nfe[row].append((index, torch.full((len(index),), float("nan"), dtype=torch.float64)
                               if nfe is None else nfe.to(torch.float64).reshape(-1)))
        self._count[row] += len(index)
        return not self.distributed and self._count[row] >= self.plan.num_sequences

    def finished_here(self, row: int, start: int, world: int) -> list[int]:
        """Multi-process: the pending rows all of whose work items this process has run, once it has run the item
        of ``row`` that starts at sequence ``start``.  Items are dealt round robin (``WorkShards``): this process's
        next item is ``world`` items further on, so every row that ends before it is done here, and each process
        finishes the rows in plan order (each :meth:`finish` is a collective)."""
        pending = [i for i in range(len(self.plan.rows)) if i not in self.plan.done]
        per_row = -(-self.plan.num_sequences // self.plan.chunk_size)
        k = pending.index(row) * per_row + start // self.plan.chunk_size
        return [i for p, i in enumerate(pending) if (p + 1) * per_row <= k + world]

    def _gather(self, chunks: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor | None:
        if self.distributed and dist.is_available() and dist.is_initialized():
            gathered: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, chunks)
            chunks = [c for part in gathered for c in part]
        chunks = sorted(chunks, key=lambda c: int(c[0][0]))
        return torch.cat([x for _, x in chunks]) if chunks else None

    def finish(self, i: int, label: str, settings: dict[str, Any]) -> tuple[dict[str, Any], torch.Tensor | None]:
        """Row ``i``'s values (collective in a multi-process run) and its samples in index order."""
        plan_row = self.plan.rows[i]
        nfe = self._gather(self._nfe[i])
        finite = nfe[~torch.isnan(nfe)] if nfe is not None else torch.zeros(0)
        row: dict[str, Any] = {"sampler": plan_row.name, "label": label, "steps": plan_row.steps,
                               "seed": int(self.plan.seed),
                               "nfe": float(finite.mean()) if finite.numel() else None,
                               "nfe_std": float(finite.std(unbiased=False)) if finite.numel() else None,
                               "settings": settings}
        for spec, metric in zip(self.specs, self.metrics[i]):
            row.update(spec.values(metric.compute()))
        if self.resamples:
            for spec, metric in zip(self.specs, self.metrics[i]):
                row.update(spec.intervals(metric.interval()))
        samples = self._gather(self._chunks[i])
        self._chunks[i], self._nfe[i] = [], []
        return row, samples
