"""LightningDataModule serving the Markov prior and the predict work of a run plan.

The data module builds the ground-truth chain from its ``source`` and, once the run is wired
(:func:`dllm_lit.engine.connect`), serves the plan's work items: for every row of the plan and
every chunk of ``chunk_size`` consecutive sequence indices, one item carrying the run's seed.
Every random draw is keyed by (seed, sequence index), so the samples do not depend on
``chunk_size``, the batch or the number of processes (Lightning shards the items across
processes without repetition in predict).
"""
from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from dllm_lit import checks
from dllm_lit.util.console import log
from dllm_lit.engine.plan import RunPlan, WorkItem
from dllm_lit.markov import MarkovChain
from dllm_lit.sources import ChainSource, EnglishChars, TextDecoder

__all__ = ["MarkovDataModule", "PredictWork", "WorkShards", "IDLE"]


class PredictWork(Dataset):
    """Items {"row", "index": LongTensor[chunk], "seq_len", "seed"} of a plan's work list."""

    def __init__(self, items: Sequence[WorkItem], seq_len: int, seed: int) -> None:
        self.items = items
        self.seq_len, self.seed = seq_len, seed

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        it = self.items[i] if i < len(self.items) else IDLE
        return {"row": it.row, "index": torch.arange(it.start, it.end), "seq_len": self.seq_len, "seed": self.seed}


#: the work item of a process that has none (row -1, no sequences): keeps every process in the predict loop
IDLE = WorkItem(-1, 0, 0)


class WorkShards(DistributedSampler):
    """Process ``rank`` takes items rank, rank + world, ... without padding or repetition.

    A process left without any item gets one idle item (:data:`IDLE`), so that every process runs
    the predict hooks (the results are synchronised across processes at the end).  Lightning uses
    a sampler that is already distributed as it is.
    """

    def __init__(self, dataset: PredictWork, num_replicas: int, rank: int) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=False, drop_last=False)
        own = range(rank, len(dataset), num_replicas)
        self.own = own if len(own) else range(len(dataset), len(dataset) + 1)

    def __iter__(self):
        return iter(self.own)

    def __len__(self) -> int:
        return len(self.own)


class MarkovDataModule(L.LightningDataModule):
    """Builds the chain from ``source`` and serves predict work and reference samples.

    Args:
        source: where the chain comes from (default: the bundled English character chain).
        num_sequences: N sequences per (sampler, steps) row.
        seq_len: sequence length T.
        chunk_size: sequences per predict item (memory knob only; results do not depend on it).
        seed: base seed; None takes Lightning's ``seed_everything`` value (PL_GLOBAL_SEED), else 0.
        cache_dir: where built chains and tokenizers are cached (default ~/.cache/dllm_lit).
        batch_size: sequences per training / validation batch (``fit`` only).
        val_sequences: held-out validation sequences (``fit`` only; see :mod:`dllm_lit.training.data`).
    """

    def __init__(
        self,
        source: ChainSource | None = None,
        num_sequences: int = 512,
        seq_len: int = 1024,
        chunk_size: int = 128,
        seed: int | None = None,
        cache_dir: str | None = None,
        batch_size: int = 64,
        val_sequences: int = 512,
    ) -> None:
        super().__init__()
        self.source = source if source is not None else EnglishChars()
        self.num_sequences = checks.integer("num_sequences", num_sequences)
        self.seq_len = checks.integer("seq_len", seq_len, minimum=2)  # transition metrics need one transition
        self.chunk_size = checks.integer("chunk_size", chunk_size)
        self._seed = checks.optional_integer("seed", seed, minimum=0)
        self.cache_dir = Path(cache_dir) if cache_dir else Path(os.environ.get("DLLM_LIT_CACHE", Path.home() / ".cache" / "dllm_lit"))
        self.batch_size = checks.integer("batch_size", batch_size)
        self.val_sequences = checks.integer("val_sequences", val_sequences)
        self.chain: MarkovChain | None = None
        self.plan: RunPlan | None = None

    @property
    def seed(self) -> int:
        if self._seed is not None:
            return int(self._seed)
        return int(os.environ.get("PL_GLOBAL_SEED", 0))

    def prepare_data(self) -> None:
        """Build (and cache) the chain once per node before the processes set up."""
        self.source.build(self.cache_dir)

    def setup(self, stage: str | None = None) -> None:
        self.build_chain()

    def build_chain(self) -> MarkovChain:
        """The ground-truth chain (built once, cached on disk by the source where it is costly)."""
        if self.chain is None:
            start = time.perf_counter()
            self.chain = self.source.build(self.cache_dir)
            took = time.perf_counter() - start
            if took > 2.0:  # say so only when it was a real build, not a cache hit
                log.info("built the chain %r in %.1f s", self.chain, took)
        return self.chain

    def use_plan(self, plan: RunPlan) -> None:
        """Serve ``plan``'s work items in predict."""
        self.plan = plan

    def decoder(self) -> TextDecoder:
        self.build_chain()
        return self.source.decoder()

    def reference_samples(self, num_sequences: int | None = None, seq_len: int | None = None) -> torch.Tensor:
        """Exact chain samples [N, T] used as the reference set (e.g. for MAUVE).

        They are sequences ``num_sequences .. num_sequences + N - 1`` of the run's seed, so they
        are independent of the AR baseline row (sequences ``0 .. num_sequences - 1``).
        """
        self.build_chain()
        n = num_sequences or self.num_sequences
        return self.chain.sample(n, seq_len or self.seq_len, seed=self.seed, start_index=self.num_sequences)

    def predict_dataloader(self) -> DataLoader:
        if self.plan is None:
            raise ValueError("the data module has no run plan: wire the run with dllm_lit.engine.connect(...)")
        # rows already complete on disk (resume: RunPlan.done, set by the results writer) are not served
        work = PredictWork(self.plan.pending_work(), self.plan.seq_len, self.plan.seed)
        world = self.trainer.world_size if self.trainer is not None else 1
        sampler = WorkShards(work, world, self.trainer.global_rank) if world > 1 else None
        return DataLoader(work, batch_size=None, shuffle=False, sampler=sampler, num_workers=0)

    def train_dataloader(self) -> DataLoader:
        """Fresh exact chain samples, one batch per step, never repeated (rank-aware; resumes at the trainer's step)."""
        from dllm_lit.training.data import TrainStream

        trainer = getattr(self, "trainer", None)
        done = int(trainer.global_step * trainer.accumulate_grad_batches) if trainer is not None else 0
        stream = TrainStream(self.build_chain(), self.seq_len, self.batch_size, self.seed, first_batch=done)
        return DataLoader(stream, batch_size=None, num_workers=0)

    def val_dataloader(self) -> DataLoader:
        """The held-out validation sequences (fixed; disjoint from the training stream and predict runs)."""
        from dllm_lit.training.data import ValidationChunks

        chunks = ValidationChunks(self.build_chain(), self.seq_len, self.val_sequences, self.batch_size, self.seed)
        return DataLoader(chunks, batch_size=None, shuffle=False, num_workers=0)
