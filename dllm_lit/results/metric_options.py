"""The options of a configurable metric, as one frozen dataclass per metric (``MetricSpec.options``).

A metric owns its options: its spec names the dataclass, ``build`` reads ``context.options`` (an
instance), and every field is part of the run's identity unless declared ``field(metadata=NOT_IDENTITY)``
(a device, a cache folder: things that cannot change a value).  The run store compares that identity
before keeping rows on disk, so a rerun with another value of any option recomputes the rows: no list of
options is kept by hand anywhere else.

Option names form one flat namespace over the registry (``max_text_length`` is shared by GenPPL and
MAUVE, one cap for both language models); they are set as ``results.<name>`` (the writer's constructor
keeps the historical options) or ``results.metric_options: {<name>: value}``.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dllm_lit import checks

__all__ = ["ForwardKLOptions", "GenPPLOptions", "GreedyOptions", "IDENTITY_IF_SET", "MauveOptions", "NOT_IDENTITY",
           "SandwichOptions", "identity", "make_options", "option_names"]

#: field metadata of an option that cannot change a metric's values (left out of the run identity)
NOT_IDENTITY = {"identity": False}

#: field metadata of an option added after runs were stored: in the identity only when set to another value than its
#: default (the default is the behaviour before the option existed, so stored rows keep matching)
IDENTITY_IF_SET = {"identity": "if set"}


def option_names(options_cls: type | None) -> tuple[str, ...]:
    """The field names of an options dataclass (none for a metric without options)."""
    return () if options_cls is None else tuple(f.name for f in dataclasses.fields(options_cls))


def make_options(options_cls: type, values: Mapping[str, Any]) -> Any:
    """``options_cls`` with the fields found in ``values`` (the others keep their defaults)."""
    return options_cls(**{k: values[k] for k in option_names(options_cls) if k in values})


def identity(options: Any) -> dict[str, Any]:
    """``{field: value}`` of the fields that change a metric's values, in declaration order."""
    return {f.name: getattr(options, f.name) for f in dataclasses.fields(options)
            if f.metadata.get("identity", True) is True
            or (f.metadata.get("identity") == "if set" and getattr(options, f.name) != f.default)}


def merged_identity(instances: Iterable[Any]) -> dict[str, Any]:
    """The identities of several metrics' options in one flat dict (a shared name has one value)."""
    out: dict[str, Any] = {}
    for options in instances:
        out.update(identity(options))
    return out


@dataclass(frozen=True)
class GenPPLOptions:
    """GenPPL: ``genppl_model`` (a Hugging Face causal LM; the paper used ``gpt2-large``; None disables),
    texts per forward pass, and the token cap of a text."""

    genppl_model: str | None = None
    genppl_batch_size: int = 8
    max_text_length: int = 1024


@dataclass(frozen=True)
class MauveOptions:
    """MAUVE: featurizer (paper: ``gpt2-large``; None disables), reference texts (default N), k-means buckets
    (paper: 25, or ``"auto"``), k-means seeds it is repeated over, the token cap, and the reference-feature
    cache (default ``<the data module's cache_dir>/mauve``)."""

    mauve_featurizer: str | None = None
    mauve_num_reference: int | None = None
    mauve_num_buckets: int | str = 25
    mauve_num_seeds: int = 3
    max_text_length: int = 1024
    cache_dir: str | None = field(default=None, metadata=NOT_IDENTITY)

    def __post_init__(self) -> None:
        if self.mauve_num_buckets != "auto":
            checks.integer("mauve_num_buckets", self.mauve_num_buckets, minimum=2)
        checks.integer("mauve_num_seeds", self.mauve_num_seeds)
        if self.mauve_num_reference is not None:
            checks.integer("mauve_num_reference", self.mauve_num_reference)

    def check_run(self, num_sequences: int) -> None:
        """k-means needs at least as many texts per row as buckets."""
        if not self.mauve_featurizer or self.mauve_num_buckets == "auto":
            return
        n = min(int(num_sequences), int(self.mauve_num_reference or num_sequences))
        if n < int(self.mauve_num_buckets):
            raise ValueError(f"results.mauve_num_buckets={self.mauve_num_buckets} needs at least that many texts per "
                             f"row, but rows have {n}: raise data.num_sequences (and results.mauve_num_reference) or "
                             "set results.mauve_num_buckets to auto or a smaller number")


@dataclass(frozen=True)
class ForwardKLOptions:
    """Forward sequence KL ``seq_kl_fwd``: opt-in, since scoring the exact reference samples under each
    random-order sampler's per-order law is a second decoding pass (docs/theory.md)."""

    forward_kl: bool = False


@dataclass(frozen=True)
class GreedyOptions:
    """Exact greedy scores (``greedy_*``): opt-in (an exact mode search per distinct prompt), the length of the
    k-best list that ranks the outputs, and the prompt length P (each output's first P tokens are its prompt:
    LLaDA's ``prompt`` / ``prompt_mode`` rows, ExternalSampler's ``prompt_length``)."""

    greedy: bool = False
    greedy_rank_limit: int = 20
    greedy_prompt_length: int = 0

    def __post_init__(self) -> None:
        checks.boolean("greedy", self.greedy)
        checks.integer("greedy_rank_limit", self.greedy_rank_limit, minimum=1, maximum=10_000)
        checks.integer("greedy_prompt_length", self.greedy_prompt_length, minimum=0)


@dataclass(frozen=True)
class SandwichOptions:
    """Sequence KL: ``sandwich_paths`` K, the fresh orders of the importance-weighted path sandwich
    (``seq_kl_iw_lower`` / ``seq_kl_iw_upper``, :mod:`dllm_lit.samplers.path_sandwich`; 0: off, the default); each
    order rescores every sample once along it, so a row costs about K more passes of its sampler's ordered decode.
    ``sandwich_method``: "orders" (the default) or "smc", K particles of the sequential Monte Carlo over reveal
    states (:mod:`dllm_lit.samplers.path_smc`; paper-MDLM and LLaDA's low-confidence remasking, whose path laws are
    implemented; other samplers keep "orders"), much tighter on many-step samplers (docs/metrics.md)."""

    sandwich_paths: int = 0
    sandwich_method: str = field(default="orders", metadata=IDENTITY_IF_SET)

    def __post_init__(self) -> None:
        checks.integer("sandwich_paths", self.sandwich_paths, minimum=0)
        checks.choice("sandwich_method", self.sandwich_method, ("orders", "smc"))
