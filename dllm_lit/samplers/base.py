"""Base LightningModule for reverse-diffusion samplers driven by a frozen denoiser.

A sampler's ``predict_step`` receives a chunk of sequence indices (from
:class:`dllm_lit.data.MarkovDataModule`) and runs the reverse diffusion once per value of its
``steps`` grid.  All randomness is keyed by (seed, sequence index, steps, step, position), so a
sequence's sample does not depend on the batch or the number of processes.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import lightning as L
import torch

from dllm_lit import rng
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.markov.chain import MarkovChain

__all__ = ["Sampler", "compact_dtype"]


def compact_dtype(vocab_size: int) -> torch.dtype:
    """Smallest integer dtype holding ids in [0, V] (uint8 / int16 / int32)."""
    if vocab_size < 256:
        return torch.uint8
    if vocab_size < 2**15:
        return torch.int16
    return torch.int32


def _check_steps(steps: int | Sequence[int]) -> list[int]:
    values = [steps] if isinstance(steps, int) else list(steps)
    if not values:
        raise ValueError("steps must be a positive integer or a non-empty list of positive integers")
    for s in values:
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise ValueError(f"steps must be positive integers (>= 1), got {s!r}")
    return values


class Sampler(L.LightningModule, ABC):
    """Common machinery: denoiser wiring, step grid, seeding, predict_step and ``sample``.

    Args:
        denoiser: any :class:`Denoiser`; if None, an :class:`OracleDenoiser` for the data
            module's chain is built at setup (the usual case from the command line).
        steps: number of sampling steps, or a grid of them for ``predict``.
        ar_baseline: also emit exact chain samples (the AR row of every results table).
    """

    #: name written in result rows; subclasses override or derive it from options
    sampler_name: str = "sampler"
    #: False for samplers that draw from the chain itself (AR) and need no denoiser
    requires_denoiser: bool = True

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, ar_baseline: bool = True) -> None:
        super().__init__()
        self.steps_grid = _check_steps(steps)
        self.ar_baseline = bool(ar_baseline)
        self.denoiser = denoiser
        self.chain: MarkovChain | None = getattr(denoiser, "chain", None)
        if denoiser is not None:
            denoiser.requires_grad_(False).eval()

    # ------------------------------------------------------------------ wiring
    @property
    def name(self) -> str:
        return self.sampler_name

    def attach_chain(self, chain: MarkovChain) -> None:
        """Use ``chain`` for the AR baseline and, if no denoiser was given, build its oracle."""
        from dllm_lit.denoisers.oracle import OracleDenoiser

        if self.denoiser is None:
            self.denoiser = OracleDenoiser(chain).to(self.device)
        elif self.denoiser.vocab_size != chain.vocab_size:
            raise ValueError(
                f"denoiser vocabulary ({self.denoiser.vocab_size}) differs from the chain's ({chain.vocab_size}); "
                "they must be equal"
            )
        self.chain = chain

    def setup(self, stage: str) -> None:
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        chain = getattr(dm, "chain", None)
        if chain is not None:
            self.attach_chain(chain)
        if self.denoiser is None and self.requires_denoiser:
            raise ValueError("no denoiser: pass denoiser= or use a data module that provides a chain")
        self.validate_settings()

    def validate_settings(self, seq_len: int | None = None) -> None:
        """Check option combinations before sampling (subclasses extend)."""

    @property
    def vocab_size(self) -> int:
        assert self.denoiser is not None
        return self.denoiser.vocab_size

    @property
    def mask_id(self) -> int:
        return self.vocab_size

    # ------------------------------------------------------------------ sampling
    @abstractmethod
    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        """Run the reverse diffusion for sequences ``indices``; returns LongTensor[B, T] in [0, V)."""

    @torch.no_grad()
    def sample(
        self,
        num_sequences: int,
        seq_len: int,
        steps: int | None = None,
        generator: torch.Generator | None = None,
        *,
        seed: int | None = None,
        start_index: int = 0,
    ) -> torch.Tensor:
        """Draw ``num_sequences`` samples of length ``seq_len`` with ``steps`` steps (first grid value if None).

        Sequence ``start_index + n`` depends only on (seed, its index): without ``seed`` one is drawn
        from ``generator`` (torch's global RNG if None).
        """
        if self.denoiser is None and self.requires_denoiser:
            raise ValueError("no denoiser: pass denoiser= to the constructor or call attach_chain(chain)")
        if int(num_sequences) < 1:
            raise ValueError(f"num_sequences must be >= 1, got {num_sequences}")
        if int(seq_len) < 1:
            raise ValueError(f"seq_len must be >= 1, got {seq_len}")
        steps = self.steps_grid[0] if steps is None else _check_steps(int(steps))[0]
        self.validate_settings(seq_len)
        if seed is None:
            seed = rng.seed_from_generator(generator)
        idx = torch.arange(start_index, start_index + int(num_sequences), device=self.device)
        return self.generate(idx, int(seq_len), steps, seed)

    def runs(self) -> list[tuple[str, int | None]]:
        """The (sampler, steps) rows a predict chunk produces, AR baseline first."""
        out: list[tuple[str, int | None]] = [("ar", None)] if self.ar_baseline else []
        return out + [(self.name, s) for s in self.steps_grid]

    @torch.no_grad()
    def run(self, indices: torch.Tensor, seq_len: int, steps: int | None, seed: int) -> torch.Tensor:
        """Samples of one row of the results: the AR baseline when ``steps`` is None."""
        if steps is None:
            if self.chain is None:
                raise ValueError("the AR baseline needs the chain: set ar_baseline=False or use MarkovDataModule")
            start = int(indices[0])
            if not torch.equal(indices.cpu(), torch.arange(start, start + indices.numel())):
                raise ValueError("AR baseline chunks must hold consecutive sequence indices")
            return self.chain.sample(indices.numel(), seq_len, seed=seed, start_index=start, device=self.device)
        return self.generate(indices, seq_len, steps, seed)

    @torch.no_grad()
    def predict_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> dict[str, Any]:
        """One work item {"index", "seq_len", "seed", "sampler", "steps"} -> its samples (compact dtype)."""
        idx = batch["index"].to(self.device)
        T, seed, steps = int(batch["seq_len"]), int(batch["seed"]), batch["steps"]
        steps = None if steps is None else int(steps)
        self.validate_settings(T)
        x = self.run(idx, T, steps, seed)
        return {"index": idx.cpu(), "seed": seed, "sampler": batch["sampler"], "steps": steps,
                "samples": x.to(compact_dtype(self.vocab_size)).cpu()}

    def configure_optimizers(self) -> None:  # sampling only: nothing to train
        return None
