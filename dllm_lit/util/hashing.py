"""Content hashes used across dllm_lit: files, tensors and canonical JSON settings (SHA-256, hex)."""
from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

__all__ = ["canonical_json", "sha256_file", "sha256_tensors", "sha256_text"]


def _json_default(obj: Any) -> Any:
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", None) == 0:
        return obj.item()  # numpy / torch scalars
    raise ValueError(
        "settings must be JSON-serialisable (dict/list/str/int/float/bool/None, paths); "
        f"got {type(obj).__name__}: {obj!r}"
    )


def _check_finite(obj: Any, where: str = "settings") -> None:
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"{where} contains a non-finite float {obj!r}, which has no canonical JSON form")
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            if not isinstance(k, str):
                raise ValueError(f"{where} keys must be str, got {type(k).__name__} {k!r}")
            _check_finite(v, f"{where}[{k!r}]")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_finite(v, f"{where}[{i}]")


def canonical_json(obj: Any) -> str:
    """Canonical JSON: sorted keys, no whitespace, ASCII only; tuples as lists, paths as str."""
    _check_finite(obj)
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=_json_default, allow_nan=False)


def sha256_text(text: str) -> str:
    """SHA-256 of a UTF-8 string."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file's bytes, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def sha256_tensors(named: Iterable[tuple[str, torch.Tensor]], extra: Any = None) -> str:
    """SHA-256 over (name, shape, dtype, bytes) of each tensor, then ``canonical_json(extra)``."""
    h = hashlib.sha256()
    for name, t in named:
        t = t.detach().contiguous().cpu()
        h.update(name.encode())
        h.update(f"{tuple(t.shape)}{t.dtype}".encode())
        h.update(t.numpy().tobytes())
    if extra is not None:
        h.update(canonical_json(extra).encode("ascii"))
    return h.hexdigest()
