"""The rows of a run and the work items that produce them.

A run samples ``num_sequences`` sequences of length ``seq_len`` for every *row*: one row per
value of the sampler's steps grid, plus (optionally, first) the *reference row* of exact chain
samples drawn by :class:`dllm_lit.samplers.AR` - the baseline every table and figure compares
against.  The plan is built once, at wiring time (:func:`dllm_lit.engine.connect`), and handed to
the data module (which serves its work items), the sampler (which runs them) and the results
writer (which accumulates and writes them).

Work items cut each row into chunks of ``chunk_size`` consecutive sequence indices.  Every draw is
keyed by (seed, sequence index), so results do not depend on the chunking or the process count.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dllm_lit import checks

if TYPE_CHECKING:
    from dllm_lit.samplers.base import Sampler

__all__ = ["Row", "RunPlan", "WorkItem", "REFERENCE_NAME"]

#: row name of the exact chain samples (the AR baseline)
REFERENCE_NAME = "ar"


@dataclass(frozen=True)
class Row:
    """One row of the results: ``sampler`` run with ``steps`` steps (None for samplers without steps)."""

    name: str
    steps: int | None
    sampler: "Sampler" = field(compare=False, repr=False)
    reference: bool = False

    @property
    def key(self) -> str:
        """Unique label, e.g. ``mdlm@64`` or ``ar@ar``."""
        return f"{self.name}@{'ar' if self.steps is None else self.steps}"

    def settings(self) -> dict[str, Any]:
        """The sampler's options (for run metadata and resume checks)."""
        return self.sampler.settings()


@dataclass(frozen=True)
class WorkItem:
    """Sequences ``start .. end - 1`` of row ``row``."""

    row: int
    start: int
    end: int


@dataclass
class RunPlan:
    """Rows of one run and its shared settings (N, T, seed, chunking)."""

    rows: list[Row]
    num_sequences: int
    seq_len: int
    seed: int
    chunk_size: int = 128

    def __post_init__(self) -> None:
        checks.integer("num_sequences", self.num_sequences)
        checks.integer("seq_len", self.seq_len, minimum=2)
        checks.integer("chunk_size", self.chunk_size)
        checks.integer("seed", self.seed, minimum=0)
        keys = [r.key for r in self.rows]
        if len(set(keys)) != len(keys):
            raise ValueError(f"a run's rows must be distinct, got {keys}")

    @classmethod
    def build(cls, sampler: "Sampler", num_sequences: int, seq_len: int, seed: int, chunk_size: int = 128,
              reference: bool = True) -> "RunPlan":
        """The reference row (exact chain samples, if ``reference``) followed by the sampler's rows."""
        rows = list(sampler.rows())
        if reference and not any(r.reference for r in rows):
            from dllm_lit.samplers.ar import AR

            ref = AR()
            if sampler.chain is not None:
                ref.connect(sampler.chain)
            rows = [Row(REFERENCE_NAME, None, ref, reference=True)] + rows
        return cls(rows, num_sequences, seq_len, seed, chunk_size)

    def work(self) -> list[WorkItem]:
        """Every (row, chunk) item, rows in order."""
        return [WorkItem(i, start, min(start + self.chunk_size, self.num_sequences))
                for i in range(len(self.rows)) for start in range(0, self.num_sequences, self.chunk_size)]

    def describe(self) -> dict[str, Any]:
        """N, T, seed and the rows' names and steps, for run metadata."""
        return {"num_sequences": self.num_sequences, "seq_len": self.seq_len, "seed": self.seed,
                "rows": [{"sampler": r.name, "steps": r.steps, "reference": r.reference} for r in self.rows]}
