"""LightningDataModule serving the Markov prior and the predict work.

Predict work is a list of items (run, chunk): for every (sampler, steps) row of the model's grid
(AR baseline first) and every chunk of ``chunk_size`` consecutive sequence indices.  Each item
carries the run's seed; every random draw is keyed by (seed, sequence index), so the samples do
not depend on ``chunk_size``, the batch or the number of processes (Lightning shards the items
across processes without repetition in predict).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from dllm_lit.markov import MarkovChain
from dllm_lit.sources import ChainSource, EnglishChars, TextDecoder

__all__ = ["MarkovDataModule", "PredictWork"]


class PredictWork(Dataset):
    """Items {"index": LongTensor[chunk], "seq_len", "seed", "sampler", "steps"}."""

    def __init__(self, runs: list[tuple[str, int | None]], num_sequences: int, chunk_size: int, seq_len: int, seed: int) -> None:
        self.items: list[dict[str, Any]] = []
        for sampler, steps in runs:
            for start in range(0, num_sequences, chunk_size):
                end = min(start + chunk_size, num_sequences)
                self.items.append({"start": start, "end": end, "seq_len": seq_len, "seed": seed, "sampler": sampler, "steps": steps})

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        it = self.items[i]
        return {**it, "index": torch.arange(it["start"], it["end"])}


def _positive_int(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return v


class MarkovDataModule(L.LightningDataModule):
    """Builds the chain from ``source`` and serves predict work and reference samples.

    Args:
        source: where the chain comes from (default: the bundled English character chain).
        num_sequences: N sequences per (sampler, steps) row.
        seq_len: sequence length T.
        chunk_size: sequences per predict item (memory knob only; results do not depend on it).
        seed: base seed; None takes Lightning's ``seed_everything`` value (PL_GLOBAL_SEED), else 0.
        cache_dir: where built chains and tokenizers are cached (default ~/.cache/dllm_lit).
    """

    def __init__(
        self,
        source: ChainSource | None = None,
        num_sequences: int = 512,
        seq_len: int = 1024,
        chunk_size: int = 128,
        seed: int | None = None,
        cache_dir: str | None = None,
    ) -> None:
        super().__init__()
        self.source = source if source is not None else EnglishChars()
        self.num_sequences = _positive_int("num_sequences", num_sequences)
        self.seq_len = _positive_int("seq_len", seq_len)
        self.chunk_size = _positive_int("chunk_size", chunk_size)
        if seq_len < 2:
            raise ValueError(f"seq_len must be >= 2 (transition metrics need one transition), got {seq_len}")
        self._seed = seed
        self.cache_dir = Path(cache_dir) if cache_dir else Path(os.environ.get("DLLM_LIT_CACHE", Path.home() / ".cache" / "dllm_lit"))
        self.chain: MarkovChain | None = None

    @property
    def seed(self) -> int:
        if self._seed is not None:
            return int(self._seed)
        return int(os.environ.get("PL_GLOBAL_SEED", 0))

    def prepare_data(self) -> None:
        """Build (and cache) the chain once per node before the processes set up."""
        self.source.build(self.cache_dir)

    def setup(self, stage: str | None = None) -> None:
        if self.chain is None:
            self.chain = self.source.build(self.cache_dir)

    def decoder(self) -> TextDecoder:
        if self.chain is None:
            self.setup()
        return self.source.decoder()

    def reference_samples(self, num_sequences: int | None = None, seq_len: int | None = None) -> torch.Tensor:
        """Exact chain samples [N, T] used as the reference set (e.g. for MAUVE).

        They are sequences ``num_sequences .. num_sequences + N - 1`` of the run's seed, so they
        are independent of the AR baseline row (sequences ``0 .. num_sequences - 1``).
        """
        if self.chain is None:
            self.setup()
        n = num_sequences or self.num_sequences
        return self.chain.sample(n, seq_len or self.seq_len, seed=self.seed, start_index=self.num_sequences)

    def predict_dataloader(self) -> DataLoader:
        model = self.trainer.lightning_module if self.trainer is not None else None
        runs = model.runs() if model is not None and hasattr(model, "runs") else [("ar", None)]
        work = PredictWork(runs, self.num_sequences, self.chunk_size, self.seq_len, self.seed)
        return DataLoader(work, batch_size=None, shuffle=False, num_workers=0)
