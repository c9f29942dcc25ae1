"""A settings-keyed, checksummed, crash- and race-safe on-disk build cache.

Used for expensive corpus products (trained tokenizers, bigram count tables, oracle artifacts): an entry is the
directory ``<root>/<kind>/<key>`` where ``key`` is the SHA-256 of the canonical JSON of
``{"format": CACHE_FORMAT_VERSION, "kind": kind, "settings": settings}``.

Build protocol (:meth:`SettingsCache.get_or_build`):

1. If the entry exists, verify it: ``manifest.json`` present and parseable, same cache format, kind, key and
   canonical settings, exactly the listed files present and every file's SHA-256 equal to the manifest's.
   A valid entry is returned without building.
2. Otherwise (missing, or corrupt / partial / stale -- logged with a warning naming the path, then removed)
   the ``build(tmp_dir)`` callback writes its files into a fresh temporary directory *in the same parent*
   (``<root>/<kind>/.tmp-...``), the cache writes ``manifest.json`` (settings, creation time, per-file
   SHA-256), fsyncs, and atomically renames the directory into place with ``os.replace``.
3. If the callback raises (or the process dies), the temporary directory is removed (or left as an
   ignored ``.tmp-*`` directory, see :meth:`SettingsCache.purge_temporaries`): no entry, no half-written
   entry, ever. If the rename loses a race against a concurrent builder of the same key, the winner's entry
   is verified and used and the loser's files are discarded.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dllm_lit.util.hashing import canonical_json, sha256_file, sha256_text

__all__ = ["CACHE_FORMAT_VERSION", "MANIFEST_NAME", "CacheEntryError", "CacheUnwritableError", "SettingsCache"]

logger = logging.getLogger(__name__)

#: Bump when the layout of entries or the key derivation changes: every old entry becomes stale.
CACHE_FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
_KIND_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_TMP_PREFIX = ".tmp-"
_TRASH_PREFIX = ".trash-"


class CacheUnwritableError(PermissionError):
    """The cache root cannot be created or written (the message names the directory and the OS reason)."""


class CacheEntryError(Exception):
    """An existing cache entry failed verification (the message says why)."""


def _list_files(directory: Path) -> list[str]:
    """Relative POSIX paths of all regular files below ``directory`` (sorted); symlinks/others rejected."""
    out: list[str] = []
    for p in sorted(directory.rglob("*")):
        if p.is_symlink():
            raise CacheEntryError(f"symbolic link {p} is not allowed in a cache entry")
        if p.is_file():
            out.append(p.relative_to(directory).as_posix())
        elif not p.is_dir():
            raise CacheEntryError(f"{p} is not a regular file")
    return out


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class SettingsCache:
    """On-disk cache of builds keyed by ``(kind, settings)``; see the module docstring for the protocol.

    >>> cache = SettingsCache("/tmp/dllm_cache")                                  # doctest: +SKIP
    >>> d = cache.get_or_build("bpe", {"vocab_size": 4096}, lambda tmp: train_into(tmp))  # doctest: +SKIP
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser()

    # ------------------------------------------------------------------ keys and paths
    @staticmethod
    def _check_kind(kind: str) -> str:
        if not isinstance(kind, str) or not _KIND_RE.match(kind):
            raise ValueError(
                "kind must be a non-empty str of letters, digits, '_', '.', '-' (not starting with '.' or '-'), "
                f"got {kind!r}"
            )
        return kind

    @staticmethod
    def _check_settings(settings: Mapping[str, Any]) -> Mapping[str, Any]:
        if not isinstance(settings, Mapping):
            raise ValueError(f"settings must be a dict (str -> JSON value), got {type(settings).__name__}")
        return settings

    def key(self, kind: str, settings: Mapping[str, Any]) -> str:
        """SHA-256 hex digest of the canonical JSON of ``{format, kind, settings}``."""
        self._check_kind(kind)
        self._check_settings(settings)
        doc = {"format": CACHE_FORMAT_VERSION, "kind": kind, "settings": settings}
        return sha256_text(canonical_json(doc))

    def path(self, kind: str, settings: Mapping[str, Any]) -> Path:
        """Directory where the entry for ``(kind, settings)`` lives (whether or not it exists)."""
        return self.root / self._check_kind(kind) / self.key(kind, settings)

    # ------------------------------------------------------------------ verification
    def verify(self, entry: Path, kind: str, settings: Mapping[str, Any]) -> dict[str, Any]:
        """Verify an entry directory; return its manifest or raise :class:`CacheEntryError` saying why."""
        entry = Path(entry)
        manifest_path = entry / MANIFEST_NAME
        if not manifest_path.is_file():
            raise CacheEntryError(f"partial entry: {MANIFEST_NAME} is missing")
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CacheEntryError(f"corrupt {MANIFEST_NAME}: {exc}") from exc
        if not isinstance(manifest, dict):
            raise CacheEntryError(f"corrupt {MANIFEST_NAME}: not a JSON object")
        if manifest.get("format") != CACHE_FORMAT_VERSION:
            raise CacheEntryError(f"stale entry: cache format {manifest.get('format')!r} != {CACHE_FORMAT_VERSION}")
        if manifest.get("kind") != kind or manifest.get("key") != self.key(kind, settings):
            raise CacheEntryError("stale entry: kind/key in the manifest do not match")
        try:
            same_settings = canonical_json(manifest.get("settings")) == canonical_json(settings)
        except ValueError:
            same_settings = False
        if not same_settings:
            raise CacheEntryError("stale entry: settings in the manifest differ from the requested settings")
        files = manifest.get("files")
        if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
            raise CacheEntryError(f"corrupt {MANIFEST_NAME}: 'files' must map relative paths to sha256 digests")
        present = set(_list_files(entry)) - {MANIFEST_NAME}
        listed = set(files)
        if present != listed:
            missing, extra = sorted(listed - present), sorted(present - listed)
            raise CacheEntryError(f"corrupt entry: missing files {missing}, unexpected files {extra}")
        for rel, digest in sorted(files.items()):
            actual = sha256_file(entry / rel)
            if actual != digest:
                raise CacheEntryError(
                    f"corrupt entry: checksum mismatch for {rel} ({actual[:12]}... != {digest[:12]}...)"
                )
        return manifest

    def lookup(self, kind: str, settings: Mapping[str, Any]) -> Path | None:
        """Path of a valid existing entry, or None (an invalid entry is logged, not removed)."""
        entry = self.path(kind, settings)
        if not entry.exists():
            return None
        try:
            self.verify(entry, kind, settings)
        except CacheEntryError as exc:
            logger.warning("cache entry %s is invalid: %s", entry, exc)
            return None
        return entry

    def manifest(self, entry: str | os.PathLike[str]) -> dict[str, Any]:
        """The parsed ``manifest.json`` of an entry directory."""
        return json.loads((Path(entry) / MANIFEST_NAME).read_text(encoding="utf-8"))

    # ------------------------------------------------------------------ building
    def _discard(self, entry: Path) -> None:
        """Move an invalid entry out of the way atomically, then delete it (tolerates concurrent removal)."""
        trash = entry.parent / f"{_TRASH_PREFIX}{entry.name[:16]}-{uuid.uuid4().hex}"
        try:
            os.replace(entry, trash)
        except FileNotFoundError:
            return
        shutil.rmtree(trash, ignore_errors=True)

    def get_or_build(
        self,
        kind: str,
        settings: Mapping[str, Any],
        build: Callable[[Path], None],
    ) -> Path:
        """Return the directory of the entry for ``(kind, settings)``, building it with ``build(tmp_dir)``
        if it is missing or invalid.

        ``build`` must write at least one file into the given (empty) directory and must not write
        ``manifest.json``; its return value is ignored. Exceptions from ``build`` propagate after the
        temporary directory is removed.
        """
        self._check_kind(kind)
        self._check_settings(settings)
        if not callable(build):
            raise ValueError(f"build must be a callable taking the temporary directory, got {build!r}")
        key = self.key(kind, settings)
        parent = self.root / kind
        entry = parent / key

        for _attempt in range(3):
            if entry.exists():
                try:
                    self.verify(entry, kind, settings)
                    return entry
                except CacheEntryError as exc:
                    logger.warning("cache entry %s is invalid (%s); rebuilding it", entry, exc)
                    self._discard(entry)

            try:
                parent.mkdir(parents=True, exist_ok=True)
                tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{key[:16]}-", dir=parent))
            except OSError as exc:
                raise CacheUnwritableError(
                    f"cannot write the cache directory {self.root} ({exc.strerror or exc}): set data.cache_dir "
                    "(or DLLM_LIT_CACHE) to a writable directory") from exc
            try:
                build(tmp)
                self._write_manifest(tmp, kind, key, settings)
                try:
                    os.replace(tmp, entry)
                except OSError:
                    if not entry.exists():
                        raise
                    # Lost the race: another builder installed the entry first; use the winner's.
                    logger.info("cache entry %s was built concurrently; using the existing one", entry)
                    continue
                _fsync_dir(parent)
                return entry
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
        # Three rounds of losing races against entries that then fail verification: give up loudly.
        raise RuntimeError(f"could not obtain a valid cache entry at {entry} after 3 attempts (concurrent corruption?)")

    def _write_manifest(self, tmp: Path, kind: str, key: str, settings: Mapping[str, Any]) -> None:
        if (tmp / MANIFEST_NAME).exists():
            raise ValueError(f"build callback must not write {MANIFEST_NAME}; the cache writes it")
        try:
            files = _list_files(tmp)
        except CacheEntryError as exc:
            raise ValueError(f"build callback produced an invalid entry: {exc}") from exc
        if not files:
            raise ValueError(f"build callback wrote no files into {tmp}")
        digests = {}
        for rel in files:
            with open(tmp / rel, "rb") as fh:
                os.fsync(fh.fileno())
            digests[rel] = sha256_file(tmp / rel)
        manifest = {
            "format": CACHE_FORMAT_VERSION,
            "kind": kind,
            "key": key,
            "settings": json.loads(canonical_json(settings)),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "created_unix": time.time(),
            "files": digests,
        }
        mpath = tmp / MANIFEST_NAME
        with open(mpath, "w", encoding="utf-8") as fh:
            json.dump(manifest, fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_dir(tmp)

    # ------------------------------------------------------------------ housekeeping
    def purge_temporaries(self, older_than_s: float = 3600.0) -> int:
        """Delete leftover ``.tmp-*`` / ``.trash-*`` directories (from killed builders) older than
        ``older_than_s`` seconds; return how many were removed. Entries are never touched."""
        if older_than_s < 0:
            raise ValueError(f"older_than_s must be >= 0, got {older_than_s!r}")
        if not self.root.is_dir():
            return 0
        now = time.time()
        removed = 0
        for kind_dir in self.root.iterdir():
            if not kind_dir.is_dir():
                continue
            for p in kind_dir.iterdir():
                if p.name.startswith((_TMP_PREFIX, _TRASH_PREFIX)) and p.is_dir():
                    try:
                        age = now - p.stat().st_mtime
                    except FileNotFoundError:
                        continue
                    if age >= older_than_s:
                        shutil.rmtree(p, ignore_errors=True)
                        removed += 1
        return removed
