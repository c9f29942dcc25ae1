"""Names a package re-exports, loaded on first use (PEP 562 module ``__getattr__``).

    _EXPORTS = {"LLaDA": "llada", ...}          # exported name -> submodule defining it
    __all__ = list(_EXPORTS)
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

Importing the package then imports none of its submodules; ``from package import LLaDA`` imports only
``package.llada`` (and caches the name in the package).
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` for ``exports`` (name -> submodule of ``package``, or a
    module's full dotted name when it lives elsewhere)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module if "." in module else f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
