"""Atomic file writes: write beside the target, fsync, then ``os.replace`` - never a half-written file.

Every file dllm_lit writes (chain artifacts, caches, tokenizers, results, figures) goes through
:func:`atomic_write`, so a crash or a concurrent writer leaves either the old file or the new one.
The file gets the permissions of an ordinary ``open(path, "w")``: ``0o666`` less the process umask
(``tempfile.mkstemp`` alone would leave it ``0o600``).
"""
from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["atomic_write", "atomic_write_text", "atomic_write_bytes", "atomic_torch_save", "file_mode"]


def file_mode() -> int:
    """Permissions of a newly created ordinary file: ``0o666`` less the current umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Call ``write(fh)`` on a temporary binary file in ``path``'s folder, fsync it and rename it to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    return atomic_write(path, lambda fh: fh.write(data))


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    return atomic_write_bytes(path, text.encode(encoding))


def atomic_torch_save(obj: Any, path: str | Path) -> Path:
    """``torch.save`` through an in-memory buffer, then an atomic write (torch loads here: the report and the
    command-line checks import this module without it)."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return atomic_write_bytes(path, buf.getvalue())
