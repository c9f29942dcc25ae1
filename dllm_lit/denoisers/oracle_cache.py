"""The oracle's matrix-power table: built once per chain and settings, optionally cached on disk.

Layout.  One table ``[2 D V + 2, V]`` (float32 or float64): for each depth d = 1..D a block of
2V rows, first the rows of P'^d (``P'^d(x, .)`` at row ``2 (d-1) V + x``), then its columns
(``P'^d(., w)`` at row ``(2d - 1) V + w``); the last two rows are pi (the left factor when no token
is revealed on the left) and all ones (the right factor when none is revealed on the right).
Each block is final as soon as P'^d is known, so the build streams blocks out one by one and never
holds more than the current power: peak memory O(V^2) besides the table itself.

Powers are P'^(d+1) = P'^d @ P' in dense float64 (BLAS), exactly the arithmetic the oracle always
used, stored at the table dtype; depth and certification follow :class:`OracleDenoiser`.

Disk cache.  ``load_or_build(..., cache_dir=...)`` keys the table by the chain's fingerprint
(:func:`chain_fingerprint`) and the oracle's settings.  The table file is written atomically
(:mod:`dllm_lit.atomic`) with a CRC-32 per block, then a small JSON record (depth, certified,
residual, checksums) is written atomically: the record is the commit marker.  Processes on a node
take an exclusive ``flock`` on ``<key>.lock`` before building, so one builds while the others wait
and then read; readers memory-map the file (read-only pages shared by all processes on the node)
and verify every block's CRC (in parallel threads) before use.  A record or file that fails any
check is rebuilt.
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import torch

from dllm_lit.atomic import atomic_write, atomic_write_text
from dllm_lit.hashing import canonical_json, sha256_text
from dllm_lit.markov.chain import MarkovChain

log = logging.getLogger("dllm_lit.oracle")

__all__ = ["PowerTable", "build_power_table", "load_or_build", "chain_fingerprint", "table_key",
           "DISK_CACHE_MIN_BYTES", "FORMAT_VERSION"]

#: tables smaller than this are built in memory even when a cache directory is given (a few ms to build)
DISK_CACHE_MIN_BYTES = 32 * 2**20
FORMAT_VERSION = 1


def chain_fingerprint(chain: MarkovChain) -> str:
    """The chain's fingerprint plus the tolerance its stationary law was solved to (both shape the table)."""
    return f"{chain.fingerprint}:{float(chain.stationary_tol)!r}"


@dataclass
class PowerTable:
    """The stacked power table and what the build found (see module docstring for the layout)."""

    table: torch.Tensor
    depth: int
    certified: bool
    residual: float
    strictly_positive: bool


def max_depth_for(vocab_size: int, max_cache_bytes: int, dtype: torch.dtype) -> int:
    itemsize = torch.finfo(dtype).bits // 8
    return max(1, int(max_cache_bytes // (2 * vocab_size * vocab_size * itemsize)) - 1)


def _powers(chain: MarkovChain, mixing_tol: float, max_depth: int):
    """Yield (d, P'^d float64, residual r_d or inf, certified) for d = 1.. until certified or max_depth."""
    pi = chain.stationary
    positive = bool((pi > 0).all())
    kernel = chain.kernel
    cur = kernel.clone()
    for d in range(1, max_depth + 1):
        resid, certified = math.inf, False
        if positive:
            resid = (cur / pi[None, :] - 1.0).abs().max().item()
            certified = resid <= mixing_tol
        yield d, cur, resid, certified
        if certified or d == max_depth:
            return
        cur = cur @ kernel  # dense BLAS: faster than the sparse product for V up to a few thousand


def _block(cur: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[2V, V]: rows of the power, then its columns, at the table dtype."""
    p = cur.to(dtype)
    return torch.cat([p, p.T])


def _tail(chain: MarkovChain, dtype: torch.dtype) -> torch.Tensor:
    V = chain.vocab_size
    return torch.stack([chain.stationary.to(dtype), torch.ones(V, dtype=dtype)])


def _strictly_positive(chain: MarkovChain) -> bool:
    """P' > 0 entrywise and pi > 0: no evidence has probability zero."""
    return bool((chain.kernel > 0).all()) and bool((chain.stationary > 0).all())


def build_power_table(chain: MarkovChain, mixing_tol: float, max_cache_bytes: int, dtype: torch.dtype) -> PowerTable:
    """Build the table in memory."""
    blocks, depth, certified, resid = [], 0, False, math.inf
    for d, cur, resid, certified in _powers(chain, mixing_tol, max_depth_for(chain.vocab_size, max_cache_bytes, dtype)):
        blocks.append(_block(cur, dtype))
        depth = d
    blocks.append(_tail(chain, dtype))
    table = torch.cat(blocks)
    return PowerTable(table, depth, certified, resid, _strictly_positive(chain))


def table_key(chain: MarkovChain, mixing_tol: float, max_cache_bytes: int, dtype: torch.dtype) -> str:
    settings = {"format": FORMAT_VERSION, "chain": chain_fingerprint(chain), "mixing_tol": float(mixing_tol),
                "max_depth": max_depth_for(chain.vocab_size, max_cache_bytes, dtype), "dtype": str(dtype)}
    return sha256_text(canonical_json(settings))


def _crc(buf: memoryview) -> int:
    return zlib.crc32(buf) & 0xFFFFFFFF


def _read(path: Path, record: dict, V: int, dtype: torch.dtype) -> torch.Tensor | None:
    """Memory-map the table file and verify size and block checksums; None if anything is off."""
    D = int(record["depth"])
    itemsize = torch.finfo(dtype).bits // 8
    rows = 2 * D * V + 2
    if not path.exists() or path.stat().st_size != rows * V * itemsize or len(record["crc"]) != D + 1:
        return None
    table = torch.from_file(str(path), shared=False, size=rows * V, dtype=dtype).view(rows, V)
    flat = table.view(-1)
    block = 2 * V * V
    spans = [(d * block, (d + 1) * block) for d in range(D)] + [(D * block, rows * V)]
    mv = memoryview(flat.numpy()).cast("B")

    def check(i: int) -> bool:
        lo, hi = spans[i]
        return _crc(mv[lo * itemsize:hi * itemsize]) == int(record["crc"][i])

    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:  # zlib releases the GIL
        ok = all(pool.map(check, range(len(spans))))
    return table if ok else None


def _lock(path: Path):
    import fcntl

    fh = open(path, "a+")
    fcntl.flock(fh, fcntl.LOCK_EX)
    return fh


def load_or_build(chain: MarkovChain, mixing_tol: float, max_cache_bytes: int, dtype: torch.dtype,
                  cache_dir: str | Path | None = None) -> PowerTable:
    """The power table from ``cache_dir`` if a verified entry exists, else built (and cached there).

    Without ``cache_dir``, or for tables below :data:`DISK_CACHE_MIN_BYTES`, the table is built in memory.
    """
    V = chain.vocab_size
    itemsize = torch.finfo(dtype).bits // 8
    if cache_dir is None or 2 * V * V * itemsize * 2 < DISK_CACHE_MIN_BYTES:
        return build_power_table(chain, mixing_tol, max_cache_bytes, dtype)
    root = Path(cache_dir) / "oracle"
    root.mkdir(parents=True, exist_ok=True)
    key = table_key(chain, mixing_tol, max_cache_bytes, dtype)
    data, meta = root / f"{key}.bin", root / f"{key}.json"

    def cached() -> PowerTable | None:
        try:
            record = json.loads(meta.read_text())
            if record.get("key") != key or record.get("vocab_size") != V:
                return None
            table = _read(data, record, V, dtype)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if table is None:
            return None
        resid = math.inf if record["residual"] is None else float(record["residual"])
        return PowerTable(table, int(record["depth"]), bool(record["certified"]), resid,
                          bool(record["strictly_positive"]))

    hit = cached()
    if hit is not None:
        return hit
    with _lock(root / f"{key}.lock"):
        hit = cached()  # another process may have built it while we waited
        if hit is not None:
            return hit
        info: dict = {"crc": []}
        started = time.perf_counter()
        log.info("building the oracle's power tables for V=%d into %s (once per chain; later runs load them)", V, root)

        def write(fh: IO[bytes]) -> None:
            max_depth = max_depth_for(V, max_cache_bytes, dtype)
            for d, cur, resid, certified in _powers(chain, mixing_tol, max_depth):
                blk = _block(cur, dtype)
                buf = memoryview(blk.numpy()).cast("B")
                fh.write(buf)
                info["crc"].append(_crc(buf))
                info.update(depth=d, certified=certified, residual=resid)
            tail = memoryview(_tail(chain, dtype).numpy()).cast("B")
            fh.write(tail)
            info["crc"].append(_crc(tail))

        meta.unlink(missing_ok=True)  # the record is the commit marker: drop a stale one first
        atomic_write(data, write)
        record = {"key": key, "format": FORMAT_VERSION, "vocab_size": V, "dtype": str(dtype),
                  "mixing_tol": float(mixing_tol), "depth": info["depth"], "certified": info["certified"],
                  "residual": info["residual"] if math.isfinite(info["residual"]) else None,
                  "strictly_positive": _strictly_positive(chain), "crc": info["crc"]}
        atomic_write_text(meta, json.dumps(record))
        log.info("built the oracle's power tables (depth %d) in %.0f s", info["depth"], time.perf_counter() - started)
        hit = cached()
    if hit is None:
        raise RuntimeError(f"the oracle table written to {data} failed verification on read-back")
    return hit
