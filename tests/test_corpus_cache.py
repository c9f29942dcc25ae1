"""SettingsCache: keys, hits, verification (corrupt / partial / stale entries), crashes and concurrent builders."""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dllm_lit.corpus.cache import CACHE_FORMAT_VERSION, MANIFEST_NAME, CacheEntryError, SettingsCache

SETTINGS = {"vocab_size": 300, "corpus": "toy", "max_bytes": None, "ratios": [0.5, 0.25]}


class Builder:
    """A real build callback that writes two files (one nested) and counts its calls."""

    def __init__(self, payload: str = "counts") -> None:
        self.calls = 0
        self.payload = payload

    def __call__(self, tmp: Path) -> None:
        self.calls += 1
        assert tmp.is_dir() and not any(tmp.iterdir())
        (tmp / "data.txt").write_text(self.payload, encoding="utf-8")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "table.bin").write_bytes(bytes(range(256)))


def leftovers(cache: SettingsCache, kind: str) -> list[str]:
    d = cache.root / kind
    return sorted(p.name for p in d.iterdir() if p.name.startswith(".")) if d.exists() else []


# ---------------------------------------------------------------- keys


def test_key_is_canonical_and_sensitive(tmp_path):
    cache = SettingsCache(tmp_path)
    k = cache.key("bpe", {"a": 1, "b": [1, 2]})
    assert len(k) == 64 and int(k, 16) >= 0
    assert k == cache.key("bpe", {"b": [1, 2], "a": 1})  # key order irrelevant
    assert k == cache.key("bpe", {"a": 1, "b": (1, 2)})  # tuple == list
    assert k != cache.key("bpe", {"a": 2, "b": [1, 2]})
    assert k != cache.key("counts", {"a": 1, "b": [1, 2]})
    assert k != cache.key("bpe", {"a": 1.0000001, "b": [1, 2]})
    assert cache.key("p", {"path": Path("/x/y")}) == cache.key("p", {"path": "/x/y"})
    doc = {"format": CACHE_FORMAT_VERSION, "kind": "bpe", "settings": {"a": 1, "b": [1, 2]}}
    canon = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    assert k == hashlib.sha256(canon.encode()).hexdigest()


@pytest.mark.parametrize(
    "kind, settings, match",
    [
        ("", {}, "kind"),
        ("../evil", {}, "kind"),
        (".hidden", {}, "kind"),
        ("ok", {"f": object()}, "JSON-serialisable"),
        ("ok", {"f": float("nan")}, "non-finite"),
        ("ok", {1: "int key"}, "keys must be str"),
        ("ok", ["not", "a", "dict"], "settings must be a dict"),
    ],
)
def test_key_rejects_bad_input(tmp_path, kind, settings, match):
    with pytest.raises(ValueError, match=match):
        SettingsCache(tmp_path).key(kind, settings)


# ---------------------------------------------------------------- build and hit


def test_build_once_then_hit(tmp_path):
    cache = SettingsCache(tmp_path / "cache")
    build = Builder()
    entry = cache.get_or_build("bpe", SETTINGS, build)
    assert entry == cache.path("bpe", SETTINGS) and entry.is_dir()
    assert (entry / "data.txt").read_text() == "counts"
    assert build.calls == 1
    again = cache.get_or_build("bpe", dict(reversed(list(SETTINGS.items()))), build)
    assert again == entry and build.calls == 1
    assert cache.lookup("bpe", SETTINGS) == entry
    assert leftovers(cache, "bpe") == []


def test_manifest_contents(tmp_path):
    cache = SettingsCache(tmp_path)
    entry = cache.get_or_build("bpe", SETTINGS, Builder())
    m = cache.manifest(entry)
    assert m["format"] == CACHE_FORMAT_VERSION and m["kind"] == "bpe" and m["key"] == entry.name
    assert m["settings"] == SETTINGS
    assert abs(m["created_unix"] - time.time()) < 60 and m["created"].endswith("Z")
    assert set(m["files"]) == {"data.txt", "sub/table.bin"}
    for rel, digest in m["files"].items():
        assert hashlib.sha256((entry / rel).read_bytes()).hexdigest() == digest


def test_changed_settings_give_a_new_entry(tmp_path):
    cache = SettingsCache(tmp_path)
    build = Builder()
    e1 = cache.get_or_build("bpe", SETTINGS, build)
    e2 = cache.get_or_build("bpe", {**SETTINGS, "vocab_size": 512}, build)
    assert e1 != e2 and e1.is_dir() and e2.is_dir() and build.calls == 2
    assert cache.lookup("bpe", {**SETTINGS, "vocab_size": 1024}) is None


# ---------------------------------------------------------------- invalid entries are detected and rebuilt


def corrupt_file(entry: Path) -> None:
    (entry / "sub" / "table.bin").write_bytes(b"\x00" * 256)


def delete_manifest(entry: Path) -> None:
    (entry / MANIFEST_NAME).unlink()


def truncate_manifest(entry: Path) -> None:
    text = (entry / MANIFEST_NAME).read_text()
    (entry / MANIFEST_NAME).write_text(text[: len(text) // 2])


def delete_file(entry: Path) -> None:
    (entry / "data.txt").unlink()


def add_file(entry: Path) -> None:
    (entry / "stray.tmp").write_text("half-written")


def stale_settings(entry: Path) -> None:
    m = json.loads((entry / MANIFEST_NAME).read_text())
    m["settings"]["vocab_size"] = 999
    (entry / MANIFEST_NAME).write_text(json.dumps(m))


def stale_format(entry: Path) -> None:
    m = json.loads((entry / MANIFEST_NAME).read_text())
    m["format"] = CACHE_FORMAT_VERSION - 1
    (entry / MANIFEST_NAME).write_text(json.dumps(m))


@pytest.mark.parametrize(
    "damage, reason",
    [
        (corrupt_file, "checksum mismatch for sub/table.bin"),
        (delete_manifest, "partial entry"),
        (truncate_manifest, "corrupt manifest.json"),
        (delete_file, "missing files ['data.txt']"),
        (add_file, "unexpected files ['stray.tmp']"),
        (stale_settings, "stale entry: settings"),
        (stale_format, "stale entry: cache format"),
    ],
)
def test_invalid_entry_is_logged_and_rebuilt(tmp_path, caplog, damage, reason):
    cache = SettingsCache(tmp_path)
    build = Builder()
    entry = cache.get_or_build("bpe", SETTINGS, build)
    damage(entry)
    with pytest.raises(CacheEntryError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        cache.verify(entry, "bpe", SETTINGS)
    with caplog.at_level(logging.WARNING, logger="dllm_lit.corpus.cache"):
        rebuilt = cache.get_or_build("bpe", SETTINGS, build)
    assert rebuilt == entry and build.calls == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(entry) in w and reason in w for w in warnings), warnings
    cache.verify(entry, "bpe", SETTINGS)  # valid again
    assert (entry / "sub" / "table.bin").read_bytes() == bytes(range(256))
    assert leftovers(cache, "bpe") == []


# ---------------------------------------------------------------- crashes


def test_exception_mid_build_leaves_no_entry(tmp_path):
    cache = SettingsCache(tmp_path)

    def failing(tmp: Path) -> None:
        (tmp / "data.txt").write_text("half")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        cache.get_or_build("bpe", SETTINGS, failing)
    assert not cache.path("bpe", SETTINGS).exists()
    assert leftovers(cache, "bpe") == []
    build = Builder()
    entry = cache.get_or_build("bpe", SETTINGS, build)
    assert build.calls == 1 and (entry / "data.txt").read_text() == "counts"


def test_killed_process_mid_build_leaves_no_entry(tmp_path):
    # A real hard crash: the builder process dies (os._exit) after writing part of its output.
    code = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from dllm_lit.corpus.cache import SettingsCache\n"
        "def build(tmp):\n"
        "    (Path(tmp) / 'data.txt').write_text('half-written')\n"
        "    os._exit(17)\n"
        f"SettingsCache(sys.argv[1]).get_or_build('bpe', {SETTINGS!r}, build)\n"
    )
    res = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 17, res.stderr
    cache = SettingsCache(tmp_path)
    assert not cache.path("bpe", SETTINGS).exists()
    assert len(leftovers(cache, "bpe")) == 1 and leftovers(cache, "bpe")[0].startswith(".tmp-")
    assert cache.lookup("bpe", SETTINGS) is None
    build = Builder()
    entry = cache.get_or_build("bpe", SETTINGS, build)
    assert build.calls == 1 and cache.verify(entry, "bpe", SETTINGS)
    assert cache.purge_temporaries(older_than_s=3600) == 0  # too recent
    assert cache.purge_temporaries(older_than_s=0) == 1
    assert leftovers(cache, "bpe") == [] and entry.is_dir()


def test_bad_build_callbacks(tmp_path):
    cache = SettingsCache(tmp_path)
    with pytest.raises(ValueError, match="wrote no files"):
        cache.get_or_build("bpe", SETTINGS, lambda tmp: None)
    with pytest.raises(ValueError, match="must not write manifest.json"):
        cache.get_or_build("bpe", SETTINGS, lambda tmp: (tmp / MANIFEST_NAME).write_text("{}"))
    with pytest.raises(ValueError, match="build must be a callable"):
        cache.get_or_build("bpe", SETTINGS, "not callable")  # type: ignore[arg-type]
    assert not cache.path("bpe", SETTINGS).exists() and leftovers(cache, "bpe") == []


# ---------------------------------------------------------------- concurrency


def test_concurrent_builders_agree_on_one_complete_entry(tmp_path):
    cache = SettingsCache(tmp_path)
    n = 8
    barrier = threading.Barrier(n)
    results: list[Path] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    calls = [0]

    def worker(i: int) -> None:
        def build(tmp: Path) -> None:
            with lock:
                calls[0] += 1
            (tmp / "data.txt").write_text(f"builder {i}")
            time.sleep(0.05)  # keep the builds overlapping
            (tmp / "more.txt").write_text("x" * 10_000)

        try:
            barrier.wait()
            path = cache.get_or_build("race", SETTINGS, build)
            with lock:
                results.append(path)
        except BaseException as exc:  # pragma: no cover - reported below
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert len(results) == n and len(set(results)) == 1
    assert calls[0] >= 2  # the race really happened: several builders, one winner
    entry = results[0]
    cache.verify(entry, "race", SETTINGS)
    assert (entry / "data.txt").read_text().startswith("builder ")
    assert (entry / "more.txt").read_text() == "x" * 10_000
    assert leftovers(cache, "race") == []
    assert sorted(p.name for p in (cache.root / "race").iterdir()) == [entry.name]


def test_unwritable_cache_root_is_named(tmp_path: Path) -> None:
    """A cache root that cannot be created reports the directory and the OS reason, not a missing temp file."""
    from dllm_lit.corpus.cache import CacheUnwritableError, SettingsCache

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    cache = SettingsCache(blocker / "cache")
    with pytest.raises(CacheUnwritableError, match=r"cannot write the cache directory .*a-file/cache .*data.cache_dir"):
        cache.get_or_build("kind", {"x": 1}, lambda tmp: (tmp / "f").write_text("x"))
