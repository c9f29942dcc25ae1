"""Training and validation streams of exact chain samples for denoiser training.

Training batch k of a run is ``chain.sample(B, T, seed, start_index=TRAIN_BASE + k B)``: fresh
counter-seeded sequences, never the same batch twice.  Process r of W takes batches k = r, r + W,
r + 2W, ... (rank-aware; the stream restarts at the trainer's step after a resume).  Validation
uses the fixed sequences ``VAL_BASE .. VAL_BASE + n - 1``, disjoint from training and from the
indices a predict run uses (0 .. 2N - 1).
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Dataset, IterableDataset

from dllm_lit.markov.chain import MarkovChain

__all__ = ["TrainStream", "ValidationChunks", "TRAIN_BASE", "VAL_BASE"]

#: first sequence index of the training stream (far beyond any predict run's indices)
TRAIN_BASE = 2**40
#: first sequence index of the validation set (disjoint from the training stream for < 2^40 sequences)
VAL_BASE = 2**41


def _rank_world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class TrainStream(IterableDataset):
    """Endless batches {"x": LongTensor[B, T], "index": LongTensor[B]} of exact chain samples (see module docstring)."""

    def __init__(self, chain: MarkovChain, seq_len: int, batch_size: int, seed: int, first_batch: int = 0) -> None:
        self.chain, self.seq_len, self.batch_size, self.seed = chain, seq_len, batch_size, seed
        self.first_batch = first_batch

    def batch(self, k: int) -> dict[str, Any]:
        start = TRAIN_BASE + k * self.batch_size
        x = self.chain.sample(self.batch_size, self.seq_len, seed=self.seed, start_index=start)
        return {"x": x, "index": torch.arange(start, start + self.batch_size)}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        rank, world = _rank_world()
        k = self.first_batch * world + rank
        while True:
            yield self.batch(k)
            k += world


class ValidationChunks(Dataset):
    """The validation sequences in chunks of ``batch_size`` (a map-style dataset, sharded by Lightning)."""

    def __init__(self, chain: MarkovChain, seq_len: int, num_sequences: int, batch_size: int, seed: int) -> None:
        self.chain, self.seq_len, self.seed = chain, seq_len, seed
        self.num_sequences, self.batch_size = num_sequences, batch_size

    def __len__(self) -> int:
        return -(-self.num_sequences // self.batch_size)

    def __getitem__(self, i: int) -> dict[str, Any]:
        start = VAL_BASE + i * self.batch_size
        n = min(self.batch_size, self.num_sequences - i * self.batch_size)
        x = self.chain.sample(n, self.seq_len, seed=self.seed, start_index=start)
        return {"x": x, "index": torch.arange(start, start + n)}
