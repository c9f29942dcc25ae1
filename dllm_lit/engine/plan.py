"""The rows of a run and the work items that produce them.

A run samples ``num_sequences`` sequences of length ``seq_len`` for every *row*: one row per
value of the sampler's steps grid, plus (optionally, first) the *reference row* of exact chain
samples - the baseline every table and figure compares against, drawn by the reference sampler that
the wiring step supplies (:class:`dllm_lit.samplers.AR`; the plan imports no sampler).  The plan is built once, at wiring time (:func:`dllm_lit.engine.connect`), and handed to
the data module (which serves its work items), the sampler (which runs them) and the results
writer (which accumulates and writes them).

Work items cut each row into chunks of ``chunk_size`` consecutive sequence indices.  Every draw is
keyed by (seed, sequence index), so results do not depend on the chunking or the process count.

A row's *label* (:func:`row_label`) names it uniquely and informatively: the sampler's name plus
the options that differ from the sampler class's defaults, e.g. ``remdm_conf[top_p=1]``,
``sedd[beta=10]``, ``llada[prompt_mode=pi_head,temperature=0]`` or ``mdlm[denoiser=my-ckpt]``.
Rows already on disk for the same settings are marked :attr:`RunPlan.done` by the results writer
(resume); :meth:`RunPlan.pending_work` then serves only the rest.
"""
from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dllm_lit import checks

if TYPE_CHECKING:
    from dllm_lit.samplers.base import Sampler

__all__ = ["Row", "RunPlan", "WorkItem", "WorkList", "REFERENCE_NAME", "jsonable", "row_label", "sampler_settings"]

#: row name of the exact chain samples (the AR baseline)
REFERENCE_NAME = "ar"


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: chains by their fingerprint, tensors as lists, NaN as None."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "fingerprint") and hasattr(value, "vocab_size"):  # a MarkovChain
        return {"chain": value.fingerprint}
    if hasattr(value, "tolist"):
        return value.tolist()
    return repr(value)


def sampler_settings(sampler: "Sampler") -> dict[str, Any]:
    """``sampler.settings()`` as JSON data, without the steps grid (a row has one steps value)."""
    return {k: jsonable(v) for k, v in sampler.settings().items() if k != "steps"}


def _default_settings(cls: type) -> dict[str, Any]:
    """Settings of ``cls()`` (its constructor defaults, normalised as the class stores them)."""
    try:
        return {k: jsonable(v) for k, v in cls().settings().items()}
    except Exception:  # a class with required options: fall back to the signature's defaults
        params = inspect.signature(cls.__init__).parameters
        return {k: jsonable(p.default) for k, p in params.items() if p.default is not inspect.Parameter.empty}


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return "-".join(_short(v) for v in value) or "none"
    if isinstance(value, dict):
        return ",".join(f"{k}:{_short(v)}" for k, v in value.items())
    return str(value)


def _empty(value: Any) -> bool:
    return value is None or value == {} or value == [] or value == ""


def row_label(sampler: "Sampler") -> str:
    """The sampler's name plus ``[option=value,...]`` for every option that differs from the class defaults.

    Options already spelled in the name (``remdm_loop`` for variant loop, ``ar_beta2`` for beta 2), those a sampler
    lists in ``label_skip`` and empty values where the default is empty too are left out; a denoiser other than the exact oracle adds ``denoiser=<model or class>``.
    """
    name = sampler.name
    tokens = set(name.split("_"))
    settings = sampler_settings(sampler)
    defaults = _default_settings(type(sampler))
    parts = []
    skip = ("class", "steps", "denoiser", "chain", "code", *getattr(sampler, "label_skip", ()))
    for key, value in settings.items():
        if key in skip or key not in defaults or defaults[key] == value or (_empty(value) and _empty(defaults[key])):
            continue
        text = _short(value)
        if text in tokens or f"{key}{text}" in tokens:
            continue
        parts.append(f"{key}={text}")
    den = settings.get("denoiser")
    if isinstance(den, dict) and den.get("denoiser") not in (None, "oracle", "hmm_oracle"):  # the exact oracles
        ident = den.get("model_name_or_path") or den.get("path") or den.get("denoiser")
        parts.append(f"denoiser={str(ident).rstrip('/').rsplit('/', 1)[-1]}")
    return f"{name}[{','.join(parts)}]" if parts else name


@dataclass(frozen=True)
class Row:
    """One row of the results: ``sampler`` run with ``steps`` steps (None for samplers without steps)."""

    name: str
    steps: int | None
    sampler: "Sampler" = field(compare=False, repr=False)
    reference: bool = False

    @property
    def label(self) -> str:
        """The row's sampler name with its non-default options, e.g. ``remdm_conf[top_p=1]`` (:func:`row_label`)."""
        return row_label(self.sampler)

    @property
    def key(self) -> str:
        """Unique key, e.g. ``mdlm@64``, ``remdm_conf[top_p=1]@64`` or ``ar@ar``."""
        return f"{self.label}@{'ar' if self.steps is None else self.steps}"

    def settings(self) -> dict[str, Any]:
        """The sampler's options as JSON data, without the steps grid (for run metadata and resume checks)."""
        return sampler_settings(self.sampler)


@dataclass(frozen=True)
class WorkItem:
    """Sequences ``start .. end - 1`` of row ``row``."""

    row: int
    start: int
    end: int


class WorkList(Sequence):
    """The work items of some rows, each row cut into chunks of ``chunk_size`` sequences: item k is computed
    when asked for, so a list of millions of items costs no memory."""

    def __init__(self, rows: list[int], num_sequences: int, chunk_size: int) -> None:
        self.rows, self.num_sequences, self.chunk_size = rows, num_sequences, chunk_size
        self.per_row = -(-num_sequences // chunk_size)

    def __len__(self) -> int:
        return len(self.rows) * self.per_row

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(f"work item {k} of {len(self)}")
        row, chunk = divmod(k, self.per_row)
        start = chunk * self.chunk_size
        return WorkItem(self.rows[row], start, min(start + self.chunk_size, self.num_sequences))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    def __repr__(self) -> str:
        return f"WorkList(rows={self.rows}, num_sequences={self.num_sequences}, chunk_size={self.chunk_size})"


@dataclass
class RunPlan:
    """Rows of one run and its shared settings (N, T, seed, chunking)."""

    rows: list[Row]
    num_sequences: int
    seq_len: int
    seed: int
    chunk_size: int = 128
    #: indices of rows already complete on disk (resume): not served again
    done: set[int] = field(default_factory=set)

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
              reference: "Sampler | None" = None) -> "RunPlan":
        """The reference row (exact chain samples drawn by ``reference``, unless ``sampler``'s own rows hold
        one) followed by the sampler's rows; no reference row when ``reference`` is None (or False)."""
        if reference is True:
            raise ValueError("reference must be the reference row's sampler (dllm_lit.engine.connect passes "
                             "dllm_lit.samplers.AR()), or None for a plan without one; got True")
        rows = list(sampler.rows())
        if reference is not None and reference is not False and not any(r.reference for r in rows):
            rows = [Row(REFERENCE_NAME, None, reference, reference=True)] + rows
        return cls(rows, num_sequences, seq_len, seed, chunk_size)

    def work(self) -> "WorkList":
        """Every (row, chunk) item, rows in order (computed on access, not stored)."""
        return WorkList(list(range(len(self.rows))), self.num_sequences, self.chunk_size)

    def pending_work(self) -> "WorkList":
        """The work items of the rows not yet :attr:`done`, rows in plan order."""
        return WorkList([i for i in range(len(self.rows)) if i not in self.done], self.num_sequences, self.chunk_size)

    def describe(self) -> dict[str, Any]:
        """N, T, seed and the rows' names, labels and steps, for run metadata."""
        return {"num_sequences": self.num_sequences, "seq_len": self.seq_len, "seed": self.seed,
                "rows": [{"sampler": r.name, "label": r.label, "steps": r.steps, "reference": r.reference}
                         for r in self.rows]}
