"""What every chain source is: ``build(cache_dir) -> MarkovChain`` and ``decoder() -> TextDecoder``.

A chain source says where a ground-truth chain comes from (bundled counts, a corpus, a file, a random
generator) and how its token ids read as text.  Sources are plain classes, so LightningCLI configs pick
them by ``class_path`` (see ``configs/data/``).
"""
from __future__ import annotations

import dataclasses
import inspect
import json
from abc import ABC, abstractmethod
from pathlib import Path
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol

import torch

from dllm_lit.util.hashing import canonical_json
from dllm_lit.markov import MarkovChain

__all__ = ["ChainSource", "TextDecoder", "IdDecoder"]


class TextDecoder(Protocol):
    """Turns token ids into text: ``decode_batch(ids[N, T]) -> N strings``."""

    vocab_size: int

    def decode_batch(self, ids: torch.Tensor) -> list[str]: ...


class IdDecoder:
    """Fallback decoder for chains without a text vocabulary: ids joined by spaces ("17 4 230")."""

    def __init__(self, vocab_size: int, itos: list[str] | None = None) -> None:
        self.vocab_size = vocab_size
        self.itos = itos

    def decode(self, ids: torch.Tensor) -> str:
        if self.itos is not None:
            return "".join(self.itos[i] for i in ids.tolist())
        return " ".join(str(i) for i in ids.tolist())

    def decode_batch(self, ids: torch.Tensor) -> list[str]:
        return [self.decode(row) for row in ids]


class ChainSource(ABC):
    """Base class: ``build(cache_dir) -> MarkovChain`` and ``decoder() -> TextDecoder``.

    A subclass keeps each ``__init__`` argument as an attribute of the same name (that is what
    :meth:`describe` reports); option groups are frozen dataclasses (e.g. ``SparsityOptions``).  A source whose
    ``__init__`` has an argument without a default names one value for it in :attr:`example_init_args` (the
    tests build ``cls(**example_init_args)`` for every exported source and check that it describes itself).
    """

    #: ``__init__`` arguments of one instance (nothing is read before ``build``); ``{}`` when every argument has a default
    example_init_args: ClassVar[Mapping[str, Any]] = {}

    @abstractmethod
    def build(self, cache_dir: Path | None = None) -> MarkovChain:
        """Build (or load from ``cache_dir``) the chain."""

    def decoder(self) -> TextDecoder:
        chain = getattr(self, "_chain", None)
        return IdDecoder(chain.vocab_size if chain is not None else 0)

    def describe(self) -> dict[str, Any]:
        """The source's class and options, JSON-serialisable (run metadata), in the shape of its config entry:
        ``{"class_path": "dllm_lit.sources.EnglishChars", "init_args": {"sparsity": {"eps": 0.0, ...}}}``."""
        cls = type(self)
        init_args: dict[str, Any] = {}
        for name, param in inspect.signature(cls.__init__).parameters.items():
            if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            if not hasattr(self, name):
                raise TypeError(f"{cls.__name__}.describe(): option {name!r} is not kept as an attribute of the same name; "
                                "store it in __init__ or override describe()")
            value = getattr(self, name)
            init_args[name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else value
        return {"class_path": _class_path(cls), "init_args": json.loads(canonical_json(init_args))}


def _class_path(cls: type) -> str:
    """``dllm_lit.sources.<Name>`` for the sources exported there, else the defining module's path."""
    import dllm_lit.sources as package

    if getattr(package, cls.__name__, None) is cls:
        return f"{package.__name__}.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"
