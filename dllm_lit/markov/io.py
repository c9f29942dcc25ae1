"""Saving and loading chains: dllm_lit's versioned, checksummed chain artifact.

The artifact is a ``torch.save`` dict, written atomically::

    {"format": "dllm_lit.markov_chain", "version": 2, "nbr_idx", "nbr_prob", "eps", "nu",
     "stationary", "metadata", "sha256"}

``sha256`` covers the tensors and the settings (``eps``, ``metadata``, ``version``), so a damaged or
edited file is detected on load.  Version 2 computes it with :func:`dllm_lit.util.hashing.sha256_tensors`;
files written as version 1 (an earlier digest of the same fields) are still read and verified.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from dllm_lit.util.atomic import atomic_torch_save
from dllm_lit.util.hashing import sha256_tensors
from dllm_lit.markov.chain import ChainError, MarkovChain
from dllm_lit.util.safe_load import load_failure

__all__ = ["save_chain", "load_chain", "ARTIFACT_FORMAT", "ARTIFACT_VERSION", "READABLE_VERSIONS"]

ARTIFACT_FORMAT = "dllm_lit.markov_chain"
#: Version written by :func:`save_chain`.
ARTIFACT_VERSION = 2
#: Versions :func:`load_chain` reads (and verifies).
READABLE_VERSIONS = (1, 2)

_TENSORS = ("nbr_idx", "nbr_prob", "nu", "stationary")


def _settings(payload: dict[str, Any]) -> dict[str, Any]:
    return {"eps": payload["eps"], "metadata": payload["metadata"], "version": payload["version"]}


def _digest_v2(payload: dict[str, Any]) -> str:
    return sha256_tensors(((key, payload[key]) for key in _TENSORS), extra=_settings(payload))


def _digest_v1(payload: dict[str, Any]) -> str:
    """The version-1 checksum (kept to verify files written before version 2)."""
    h = hashlib.sha256()
    for key in _TENSORS:
        t = payload[key].contiguous().cpu()
        h.update(key.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes())
    h.update(json.dumps(_settings(payload), sort_keys=True, default=str).encode())
    return h.hexdigest()


_DIGESTS: dict[int, Callable[[dict[str, Any]], str]] = {1: _digest_v1, 2: _digest_v2}


def save_chain(chain: MarkovChain, path: str | Path) -> None:
    """Write ``chain`` as a versioned, checksummed artifact (atomic)."""
    payload: dict[str, Any] = {
        "format": ARTIFACT_FORMAT,
        "version": ARTIFACT_VERSION,
        "nbr_idx": chain.nbr_idx,
        "nbr_prob": chain.nbr_prob,
        "eps": chain.eps,
        "nu": chain.nu,
        "stationary": chain.stationary,
        "metadata": json.loads(json.dumps(chain.metadata, default=str)),
    }
    payload["sha256"] = _DIGESTS[ARTIFACT_VERSION](payload)
    atomic_torch_save(payload, path)


def load_chain(path: str | Path) -> MarkovChain:
    """Load a dllm_lit artifact, verifying format, version and checksum."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"chain artifact not found: {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # corrupt pickle / truncated file
        raise ChainError(f"cannot read chain artifact {path}: {load_failure(path, exc)}") from None
    if not isinstance(payload, dict) or payload.get("format") != ARTIFACT_FORMAT:
        raise ChainError(f"{path} is not a dllm_lit chain artifact (format field {payload.get('format') if isinstance(payload, dict) else None!r}); "
                         "use dllm_lit.sources.load_paper_artifact for the paper authors' files")
    version = payload.get("version")
    digest = _DIGESTS.get(version) if type(version) is int else None
    if digest is None:
        raise ChainError(f"{path}: artifact version {payload.get('version')!r} is not supported (this library reads versions "
                         f"{', '.join(map(str, READABLE_VERSIONS))})")
    if payload.get("sha256") != digest(payload):
        raise ChainError(f"{path}: checksum mismatch, the artifact is damaged or was edited")
    return MarkovChain(payload["nbr_idx"], payload["nbr_prob"], eps=payload["eps"], nu=payload["nu"],
                       stationary=payload["stationary"], metadata=payload["metadata"])
