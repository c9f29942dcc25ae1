"""The one allow-list of what a config may instantiate: each entry point accepts only the classes it documents.

A config or a results file names a class by ``class_path`` (``dllm_lit.samplers.MDLM``, a user's own sampler
class ``my_pkg.mod.MySampler``).  Before anything is built, :func:`documented_class` checks that the name is
a class and a subclass of what the entry point documents (:data:`KINDS`: a sampler for ``predict``,
``conform``, ``decompose`` and ``sweep``; the denoiser training module for ``fit``; a chain source for a
world read back from a run), and refuses anything else - a function such as ``os.system``, another library's
class - in one line naming the field.  Nothing but the named class's module is imported (importing is how a
class is found, as jsonargparse does); nothing is called before the check.
"""
from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any
from dllm_lit.cli.messages import missing_module_hint

__all__ = ["KINDS", "documented_class", "instantiate", "class_path_of"]

#: kind -> (module, class name, what the entry point calls it); the base is imported only when a check runs
KINDS: dict[str, tuple[str, str, str]] = {
    "sampler": ("dllm_lit.samplers.base", "Sampler", "a sampler (a subclass of dllm_lit.samplers.Sampler)"),
    "training": ("dllm_lit.training.module", "DenoiserTraining",
                 "dllm_lit.training.DenoiserTraining (fit trains a denoiser; run samplers with predict)"),
    "source": ("dllm_lit.sources.base", "ChainSource", "a chain source (a subclass of dllm_lit.sources.ChainSource)"),
}
#: where a bare class name (``MDLM``) is looked up, per kind (the CLI accepts a sampler by its class name)
_BARE_NAMES = {"sampler": "dllm_lit.samplers", "source": "dllm_lit.sources"}


def _base(kind: str) -> tuple[type, str]:
    if kind not in KINDS:
        raise ValueError(f"unknown class kind {kind!r}; one of {', '.join(KINDS)}")
    module, name, what = KINDS[kind]
    return getattr(importlib.import_module(module), name), what


def documented_class(class_path: Any, kind: str, field: str) -> type:
    """The class ``class_path`` names, if it is a subclass of ``kind``'s base; else a one-line ValueError."""
    base, what = _base(kind)
    if isinstance(class_path, type):
        cls: Any = class_path
    else:
        if not isinstance(class_path, str) or not class_path.strip():
            raise ValueError(f"{field} must name {what}, got {class_path!r}")
        module, _, name = class_path.rpartition(".")
        module = module or _BARE_NAMES.get(kind, "")
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise ValueError(f"{field}: cannot import {class_path!r} ({type(exc).__name__}: {first})"
                             f"{missing_module_hint(first)}") from None
    if not (inspect.isclass(cls) and issubclass(cls, base)):
        shown = class_path if isinstance(class_path, str) else getattr(cls, "__qualname__", repr(cls))
        raise ValueError(f"{field}: {shown!r} is not {what}; only such classes are accepted here "
                         "(a config never runs other code), nothing was run")
    return cls


def class_path_of(block: Any, field: str) -> tuple[str, dict[str, Any]]:
    """``(class_path, init_args)`` of a ``{class_path: ..., init_args: {...}}`` block (or a bare class path)."""
    if isinstance(block, str):
        return block, {}
    if not isinstance(block, Mapping) or "class_path" not in block:
        raise ValueError(f"{field} must be a block {{class_path: ..., init_args: {{...}}}}, got {block!r}")
    init = block.get("init_args") or {}
    if not isinstance(init, Mapping):
        raise ValueError(f"{field}.init_args must be a mapping, got {init!r}")
    return block["class_path"], dict(init)


def instantiate(block: Any, kind: str, field: str, **extra: Any) -> Any:
    """Build the object a config block describes, after :func:`documented_class` accepted its class."""
    class_path, init = class_path_of(block, field)
    return documented_class(class_path, kind, f"{field}.class_path")(**{**init, **extra})
