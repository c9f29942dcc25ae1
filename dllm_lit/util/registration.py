"""The one registration habit: samplers, sources, worlds and metrics each keep a registry with a ``register()``
that refuses a key already taken, with a one-line error naming the key."""
from __future__ import annotations

from collections.abc import Container


def refuse_clash(what: str, key: str, taken: Container[str]) -> None:
    """Raise ``ValueError`` (one line, naming ``key``) if ``key`` is in ``taken``."""
    if key in taken:
        raise ValueError(f"{what} {key!r} is already registered; choose another name")
