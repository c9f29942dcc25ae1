"""Options shared by the sources that build a chain from bigram counts.

:class:`SparsityOptions` is the one group of settings that turns counts into the chain's kernel
(:meth:`dllm_lit.markov.MarkovChain.from_counts`): the top-K rule and the teleport weight.  Every counting
source takes it as its ``sparsity`` argument, so a config sets it as one nested group::

    source:
      class_path: dllm_lit.sources.EnglishChars
      init_args:
        sparsity: {top_k: null, target_mass: null, k_percentile: null, eps: 0.0}

and the command line as ``--data.source.init_args.sparsity.eps 1e-4``.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from dllm_lit import checks
from dllm_lit.markov import MarkovChain

__all__ = ["SparsityOptions"]


@dataclass(frozen=True)
class SparsityOptions:
    """How counts become the kernel P' = (1 - eps) P_topK + eps 1 nu^T (paper Sec. 3.1, App. E).

    Args:
        top_k: fixed K, the neighbours kept per row (None: no fixed K).
        target_mass: the mass-percentile K rule: K*_i = smallest k whose top-k mass reaches
            ``target_mass`` (in (0, 1]; None: 0.99 when ``k_percentile`` is given) ...
        k_percentile: ... and K = floor of the ``k_percentile``-th percentile of K*_i (in [0, 100];
            None: 90 when ``target_mass`` is given).
        eps: teleport weight in [0, 1) (0: no teleport).

    With all three K settings None the chain keeps every neighbour (K = V).  ``top_k`` and the
    mass-percentile rule exclude each other.  Values are kept as given (they are part of cache keys).
    """

    top_k: int | None = None
    target_mass: float | None = None
    k_percentile: float | None = None
    eps: float = 0.0

    def __post_init__(self) -> None:
        checks.optional_integer("top_k", self.top_k)
        if self.top_k is not None and (self.target_mass is not None or self.k_percentile is not None):
            raise ValueError("give either top_k (fixed K) or target_mass/k_percentile (the mass-percentile K rule), not both")
        checks.optional_real("target_mass", self.target_mass, 0.0, 1.0, low_open=True)
        checks.optional_real("k_percentile", self.k_percentile, 0.0, 100.0)
        checks.real("eps (teleport weight)", self.eps, 0.0, 1.0, high_open=True)

    @classmethod
    def coerce(cls, value: Any, name: str = "sparsity") -> SparsityOptions:
        """``value`` as options: an instance as is, or a dict of its fields (as in a config)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - {f.name for f in dataclasses.fields(cls)})
            if unknown:
                raise ValueError(f"{name} has no option {', '.join(map(repr, unknown))}; its options are top_k, target_mass, k_percentile, eps")
            return cls(**value)
        raise ValueError(f"{name} must be a SparsityOptions or a dict of its fields, got {value!r}")

    def as_dict(self) -> dict[str, Any]:
        """The four settings as a plain dict (cache keys, run metadata)."""
        return dataclasses.asdict(self)

    def chain_from_counts(self, counts: torch.Tensor, **kwargs: Any) -> MarkovChain:
        """:meth:`MarkovChain.from_counts` with these settings; ``kwargs`` are its other arguments."""
        return MarkovChain.from_counts(counts, **self.as_dict(), **kwargs)
