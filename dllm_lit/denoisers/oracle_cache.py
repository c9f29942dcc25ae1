"""The oracle's matrix-power table: built once per chain and settings, optionally cached on disk.

Layout.  One table ``[2 D V + 2, V]`` (float32 or float64): for each depth d = 1..D a block of
2V rows, first the rows of P'^d (``P'^d(x, .)`` at row ``2 (d-1) V + x``), then its columns
(``P'^d(., w)`` at row ``(2d - 1) V + w``); the last two rows are pi (the left factor when no token
is revealed on the left) and all ones (the right factor when none is revealed on the right).
Each block is final as soon as P'^d is known, so the build streams blocks out one by one and never
holds more than the current power: peak memory O(V^2) besides the table itself.

Powers are computed in float64 and stored at the table dtype; depth and certification follow
:class:`OracleDenoiser`.  A chain stores its kernel as P' = S + eps 1 nu^T with S = (1 - eps) P_topK
(K nonzeros per row), so for a sparse chain (K <= V / 8, V >= 1024)

    P'^(d+1) = P' P'^d = S P'^d + 1 (eps nu^T P'^d)

costs V^2 K flops per power instead of V^3 (a CSR product, column strip by column strip so that each
strip of P'^d stays in cache; ~3x less CPU at V = 4096, K = 206).  Dense or small chains keep the dense
BLAS product P'^(d+1) = P'^d P'.  All terms being nonnegative, both are accurate to float64 rounding:
at V = 4096, K = 206 they agree within 1e-13 relative and 22 of the 6.7e8 float32 entries differ by
one ulp (docs/oracle.md).

Disk cache.  ``load_or_build(..., cache_dir=...)`` keys the table by the chain's fingerprint
(:func:`chain_fingerprint`) and the oracle's settings.  The table file is written atomically
(:mod:`dllm_lit.util.atomic`) with a CRC-32 per block, then a small JSON record (depth, certified,
residual, checksums, and a SHA-256 over all of these) is written atomically: the record is the commit marker.  Processes on a node
take an exclusive ``flock`` on ``<key>.lock`` before building, so one builds while the others wait
and then read; readers memory-map the file (read-only pages shared by all processes on the node)
and verify every block's CRC (in parallel threads) before use.  A record or file that fails any
check is rebuilt.
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
import warnings
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import torch

from dllm_lit.util.atomic import atomic_write, atomic_write_text
from dllm_lit.engine.budget import check_memory
from dllm_lit.util.hashing import canonical_json, sha256_text
from dllm_lit.markov.chain import MarkovChain
from dllm_lit.markov.mixing import certification_depth, second_eigenvalue_modulus
from dllm_lit.markov.structure import chain_structure

log = logging.getLogger("dllm_lit.oracle")

__all__ = ["PowerTable", "build_power_table", "load_or_build", "chain_fingerprint", "table_key",
           "DISK_CACHE_MIN_BYTES", "FORMAT_VERSION"]

#: tables smaller than this are built in memory even when a cache directory is given (a few ms to build)
DISK_CACHE_MIN_BYTES = 32 * 2**20
#: 2: sparse chains' powers come from the sparse product (a few float32 entries one ulp off format 1's
#: dense build): a new key keeps every cache entry the output of one arithmetic and leaves format-1
#: entries to older code
FORMAT_VERSION = 2


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
    #: why the table stops short of the memory budget ('' when it does not; :func:`depth_limit`)
    problem: str = ""


def max_depth_for(vocab_size: int, max_cache_bytes: int, dtype: torch.dtype) -> int:
    itemsize = torch.finfo(dtype).bits // 8
    return max(1, int(max_cache_bytes // (2 * vocab_size * vocab_size * itemsize)) - 1)


#: table depth for a chain whose powers never converge (transient states, periodic or reducible), or converge
#: too slowly to be certified within the budget: distances beyond it are multiplied out exactly by the oracle,
#: so a deeper table would only cost memory and build time
NON_ERGODIC_MAX_DEPTH = 64
#: the most float64 operations a certified build may be expected to take (about 30 s at 1e10 per second);
#: a chain whose spectral lower bound on the certified depth costs more gets the exact fallback instead
BUILD_WORK_LIMIT = 3e11
#: per-depth cost of the build besides the product (copying the block, the residual, the interpreter),
#: in float64 operations: ~50 us per depth measured at V = 2
_DEPTH_OVERHEAD = 5e5


@dataclass(frozen=True)
class DepthLimit:
    """The deepest table the build may write, and why it is short of the memory budget's ('' if it is not)."""

    depth: int
    problem: str = ""


def _depth_work(chain: MarkovChain) -> float:
    """Float64 operations per depth of the build: the product (sparse or dense) plus the overhead."""
    V, K = chain.vocab_size, chain.top_k
    sparse = V >= SPARSE_MIN_VOCAB and K <= SPARSE_MAX_DENSITY * V
    return 2.0 * V * V * (K if sparse else V) + _DEPTH_OVERHEAD


def depth_limit(chain: MarkovChain, max_cache_bytes: int, dtype: torch.dtype, mixing_tol: float = 1e-8) -> DepthLimit:
    """The deepest table the build may write: the memory budget's depth, capped at :data:`NON_ERGODIC_MAX_DEPTH`
    when the chain's powers never converge to 1 pi^T (:func:`~dllm_lit.markov.structure.chain_structure`), or
    when the spectral lower bound on the certified depth (:func:`~dllm_lit.markov.mixing.certification_depth`)
    exceeds the memory budget's depth or costs more than :data:`BUILD_WORK_LIMIT` operations: either way no
    affordable depth would be certified, and the build would fill its budget for nothing (a
    [[1 - 1e-9, 1e-9], [1e-9, 1 - 1e-9]] kernel: 1.3e8 powers of the 4 GiB budget, hours)."""
    depth = max_depth_for(chain.vocab_size, max_cache_bytes, dtype)
    short = min(depth, NON_ERGODIC_MAX_DEPTH)
    structure = chain_structure(chain)
    if not structure.ergodic:
        return DepthLimit(short, f"the chain's powers never converge ({structure.problems()})")
    if depth <= NON_ERGODIC_MAX_DEPTH:  # the fallback's table would be as deep: nothing to decide
        return DepthLimit(depth)
    lam = second_eigenvalue_modulus(chain)
    need = math.inf if lam is None else certification_depth(lam, mixing_tol)
    if lam is None or need <= short or (need <= depth and need * _depth_work(chain) <= BUILD_WORK_LIMIT):
        return DepthLimit(depth)
    return DepthLimit(short, f"the chain mixes too slowly to certify the oracle's table: its second eigenvalue "
                             f"modulus is 1 - {1.0 - lam:.3g}, so mixing_tol={mixing_tol:g} needs at least "
                             f"{need:.3g} powers, beyond the {depth} of the memory budget or ~{BUILD_WORK_LIMIT:.0e} "
                             f"operations of build")


#: the sparse product is used from this vocabulary size on (below it a dense power takes milliseconds) ...
SPARSE_MIN_VOCAB = 1024
#: ... for chains with K <= SPARSE_MAX_DENSITY * V: on CPU the dense BLAS product runs ~7x more flops per
#: second than the sparse one, so the V / K flop saving must beat that (measured 1.2x faster at K = V / 8,
#: 2-3x at K = V / 16 .. V / 20, 0.6x at K = V / 4)
SPARSE_MAX_DENSITY = 1 / 8
#: columns of P'^d per sparse product: a [V, 128] float64 strip (4 MiB at V = 4096) stays in cache
_STRIP = 128


@dataclass(frozen=True)
class _SparseKernel:
    """P' = S + eps 1 nu^T with S = (1 - eps) P_topK as CSR [V, V] and eps_nu = eps nu (None when eps = 0)."""

    S: torch.Tensor
    eps_nu: torch.Tensor | None


def _sparse_kernel(chain: MarkovChain, force: bool = False) -> _SparseKernel | None:
    """The chain's kernel as sparse plus rank one, or None where the dense product is used instead.

    None for small or dense chains (see :data:`SPARSE_MIN_VOCAB`, :data:`SPARSE_MAX_DENSITY`; ``force``
    skips these two checks) and whenever the factors do not reproduce ``chain.kernel`` (max abs
    difference above 1e-15): the decomposition is exact, never assumed.
    """
    V, K = chain.vocab_size, chain.top_k
    if not force and (V < SPARSE_MIN_VOCAB or K > SPARSE_MAX_DENSITY * V):
        return None
    idx, val = chain.nbr_idx, chain.nbr_prob * (1.0 - chain.eps)  # the entries chain.kernel scatters
    eps_nu = chain.eps * chain.nu if chain.eps > 0 else None
    rebuilt = torch.zeros(V, V, dtype=torch.float64).scatter_(1, idx, val)
    if eps_nu is not None:
        rebuilt += eps_nu[None, :]
    err = (rebuilt - chain.kernel).abs().max().item()
    del rebuilt
    if not err <= 1e-15:
        log.warning("the chain's kernel is not (1 - eps) P_topK + eps 1 nu^T (max abs difference %.3g): "
                    "dense matrix powers", err)
        return None
    order = idx.argsort(dim=1)  # CSR: column indices sorted within each row
    itype = torch.int32 if V * K < 2**31 else torch.int64  # MKL's native index type where it fits
    crow = torch.arange(0, V * K + 1, K, dtype=itype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        S = torch.sparse_csr_tensor(crow, idx.gather(1, order).flatten().to(itype),
                                    val.gather(1, order).flatten(), (V, V))
    return _SparseKernel(S, eps_nu)


def _sparse_step(k: _SparseKernel, strips: list[torch.Tensor],
                 pool: ThreadPoolExecutor | None = None) -> list[torch.Tensor]:
    """P' cur = S cur + 1 (eps nu^T cur), strip by strip (a contiguous [V, w] strip stays in cache), on
    ``pool``'s threads if given (torch releases the GIL)."""
    def one(s: torch.Tensor) -> torch.Tensor:
        nxt = torch.sparse.mm(k.S, s)
        if k.eps_nu is not None:
            nxt += k.eps_nu @ s  # the row eps nu^T cur, added to every row
        return nxt

    return [one(s) for s in strips] if pool is None else list(pool.map(one, strips))


@contextlib.contextmanager
def _strip_threads(factors: _SparseKernel | None):
    """For a sparse build: torch's intra-op threads set to 1 (restored on exit), and a pool of as many
    Python threads as there were intra-op threads for the strip products (None when there was one, or
    for a dense build, which keeps BLAS's threads).

    Measured on a busy 2-core machine, V = 4096 build on 2 threads: 62 s of CPU with MKL threading the
    sparse products, 35 s with only OpenMP threading the many small per-strip operations (each parallel
    region waits for a descheduled thread), 31 s this way (27 s on 1 thread).  A queue of strips keeps
    free cores busy; each strip is computed on one thread whatever the thread count, so the result does
    not depend on it.
    """
    threads = torch.get_num_threads()
    if factors is None or threads == 1:
        yield None
        return
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            yield pool
    finally:
        torch.set_num_threads(threads)


def _residual(strips: list[torch.Tensor], pi: torch.Tensor) -> float:
    """r = max_{v,w} |P'^d(v, w) / pi(w) - 1|, from each column's extremes.

    x -> fl(fl(x / pi(w)) - 1) is nondecreasing, so its largest absolute value over a column is taken
    at the column's min or max: bit-identical to the elementwise formula, in two passes and O(V) memory.
    """
    hi = torch.cat([s.amax(0) for s in strips])
    lo = torch.cat([s.amin(0) for s in strips])
    return torch.maximum((hi / pi - 1.0).abs(), (lo / pi - 1.0).abs()).max().item()


def _powers(chain: MarkovChain, mixing_tol: float, max_depth: int, factors: _SparseKernel | None | str = "auto",
            pool: ThreadPoolExecutor | None = None):
    """Yield (d, strips, residual r_d or inf, certified) for d = 1.. until certified or max_depth.

    P'^d = torch.cat(strips, 1) in float64: column strips of width :data:`_STRIP` for the sparse
    product, one strip for the dense one.  ``factors``: the sparse factors to multiply with, None for
    the dense product, or "auto" for :func:`_sparse_kernel` (chain); ``pool``: see :func:`_strip_threads`.
    """
    pi = chain.stationary
    positive = bool((pi > 0).all())
    kernel = chain.kernel
    sk = _sparse_kernel(chain) if isinstance(factors, str) else factors
    V = chain.vocab_size
    strips = [kernel.clone()] if sk is None else [kernel[:, c:c + _STRIP].contiguous() for c in range(0, V, _STRIP)]
    for d in range(1, max_depth + 1):
        resid, certified = math.inf, False
        if positive:
            resid = _residual(strips, pi)
            certified = resid <= mixing_tol
        yield d, strips, resid, certified
        if certified or d == max_depth:
            return
        strips = [strips[0] @ kernel] if sk is None else _sparse_step(sk, strips, pool)


def _block(strips: list[torch.Tensor], dtype: torch.dtype, out: torch.Tensor | None = None) -> torch.Tensor:
    """[2V, V]: rows of the power, then its columns, at the table dtype (into ``out`` if given: reusing
    one buffer saves the page faults of a fresh 2 V^2 allocation per depth)."""
    V = strips[0].shape[0]
    blk = torch.empty(2 * V, V, dtype=dtype) if out is None else out
    c = 0
    for s in strips:
        w = s.shape[1]
        p = s.to(dtype)  # rounding commutes with transposition: the column half equals P'^d.T.to(dtype)
        blk[:V, c:c + w].copy_(p)
        blk[V + c:V + c + w].copy_(p.T)
        c += w
    return blk


def _tail(chain: MarkovChain, dtype: torch.dtype) -> torch.Tensor:
    V = chain.vocab_size
    return torch.stack([chain.stationary.to(dtype), torch.ones(V, dtype=dtype)])


def _strictly_positive(chain: MarkovChain) -> bool:
    """P' > 0 entrywise and pi > 0: no evidence has probability zero."""
    return bool((chain.kernel > 0).all()) and bool((chain.stationary > 0).all())


def build_power_table(chain: MarkovChain, mixing_tol: float, max_cache_bytes: int, dtype: torch.dtype) -> PowerTable:
    """Build the table in memory."""
    return _build(chain, mixing_tol, depth_limit(chain, max_cache_bytes, dtype, mixing_tol), dtype)


def _build(chain: MarkovChain, mixing_tol: float, limit: DepthLimit, dtype: torch.dtype) -> PowerTable:
    blocks, depth, certified, resid = [], 0, False, math.inf
    max_depth = limit.depth
    factors = _sparse_kernel(chain)
    with _strip_threads(factors) as pool:
        for d, strips, resid, certified in _powers(chain, mixing_tol, max_depth, factors, pool):
            blocks.append(_block(strips, dtype))
            depth = d
    blocks.append(_tail(chain, dtype))
    table = torch.cat(blocks)
    return PowerTable(table, depth, certified, resid, _strictly_positive(chain), limit.problem)


def table_key(chain: MarkovChain, mixing_tol: float, max_cache_bytes: int, dtype: torch.dtype,
              max_depth: int | None = None) -> str:
    if max_depth is None:
        max_depth = depth_limit(chain, max_cache_bytes, dtype, mixing_tol).depth
    settings = {"format": FORMAT_VERSION, "chain": chain_fingerprint(chain), "mixing_tol": float(mixing_tol),
                "max_depth": max_depth, "dtype": str(dtype)}
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


def _record_digest(record: dict) -> str:
    """SHA-256 of every field of a cache record but the digest itself: the flags (certified, residual,
    strictly_positive, depth) are covered as well as the blocks' CRCs."""
    return sha256_text(canonical_json({k: v for k, v in record.items() if k != "record_sha256"}))


def _record_intact(record: dict) -> bool:
    return record.get("record_sha256") == _record_digest(record)


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
    check_memory("vocab_size", V, (3 * 8 + 2 * itemsize) * float(V) ** 2,
                 "the exact oracle (the dense V x V float64 kernel, two powers being multiplied, one table block)")
    limit = depth_limit(chain, max_cache_bytes, dtype, mixing_tol)
    if cache_dir is None or 2 * V * V * itemsize * 2 < DISK_CACHE_MIN_BYTES:
        return _build(chain, mixing_tol, limit, dtype)
    root = Path(cache_dir) / "oracle"
    root.mkdir(parents=True, exist_ok=True)
    max_depth = limit.depth
    key = table_key(chain, mixing_tol, max_cache_bytes, dtype, max_depth)
    data, meta = root / f"{key}.bin", root / f"{key}.json"

    def cached() -> PowerTable | None:
        try:
            record = json.loads(meta.read_text())
            if record.get("key") != key or record.get("vocab_size") != V or not _record_intact(record):
                return None
            table = _read(data, record, V, dtype)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if table is None:
            return None
        resid = math.inf if record["residual"] is None else float(record["residual"])
        return PowerTable(table, int(record["depth"]), bool(record["certified"]), resid,
                          bool(record["strictly_positive"]), limit.problem)

    hit = cached()
    if hit is not None:
        return hit
    with _lock(root / f"{key}.lock"):
        hit = cached()  # another process may have built it while we waited
        if hit is not None:
            return hit
        info: dict = {"crc": []}
        started = time.perf_counter()
        factors = _sparse_kernel(chain)
        method = "dense" if factors is None else "sparse"
        log.info("building the oracle's power tables for V=%d (%s products) into %s (once per chain; later runs "
                 "load them)", V, method, root)

        def write(fh: IO[bytes]) -> None:
            blk = None
            with _strip_threads(factors) as pool:
                for d, strips, resid, certified in _powers(chain, mixing_tol, max_depth, factors, pool):
                    blk = _block(strips, dtype, out=blk)  # written out before the next depth overwrites it
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
                  "strictly_positive": _strictly_positive(chain), "product": method, "crc": info["crc"]}
        record["record_sha256"] = _record_digest(record)
        atomic_write_text(meta, json.dumps(record))
        log.info("built the oracle's power tables (depth %d) in %.0f s", info["depth"], time.perf_counter() - started)
        hit = cached()
    if hit is None:
        raise RuntimeError(f"the oracle table written to {data} failed verification on read-back")
    return hit
