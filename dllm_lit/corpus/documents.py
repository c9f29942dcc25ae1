"""Text input for the corpus-built chains: documents of Hugging Face datasets (hub or local files) and plain
text files.  (The chain sources themselves live in :mod:`dllm_lit.sources`.)

Known public corpora (seed paper, App. "Experimental Setup and Oracle Construction"):

* text8 -- :data:`TEXT8_HF_DATASET` = ``"afmck/text8"``: parquet, column ``text``, splits ``train`` /
  ``validation`` / ``test`` with ONE row each holding the whole split as a single string (90M / 5M / 5M
  characters, the standard 90/5/5 cut of the 100M-character text8 file, so the first 5,000,000 characters of
  ``train`` are the first 5,000,000 of text8 used by the paper). It is already normalised (a-z and space).
* OpenWebText -- :data:`OWT_HF_DATASET` = ``"stanford-cs336/owt-sample"``, split ``train``, streamed by the
  paper. It is stored as plain-text files read by the datasets ``text`` builder, which yields one row per
  *line*: the paper's "documents" were therefore lines (paragraphs) of OWT, and within-document bigram
  counting means within-line. Use ``sample_by="line"`` (the default) on a local copy to reproduce that.

:func:`iter_documents` yields raw strings; apply :func:`dllm_lit.corpus.bpe.clean_documents` for the OWT
cleaning and :func:`dllm_lit.corpus.charlevel.count_char_bigrams` (which normalises) for text8.

Offline use: hub loading needs network access unless the dataset is already in the local datasets cache (and
``HF_DATASETS_OFFLINE=1`` / ``HF_HUB_OFFLINE=1`` is set) or a local path is given. When the hub cannot be
reached, :func:`iter_documents` raises :class:`DatasetUnavailableError` (a ``RuntimeError``) that names the
dataset and explains these options.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from dllm_lit import checks

__all__ = [
    "TEXT8_HF_DATASET",
    "OWT_HF_DATASET",
    "PACKAGED_BUILDERS",
    "DatasetUnavailableError",
    "iter_documents",
    "read_text_file",
]

TEXT8_HF_DATASET = "afmck/text8"
OWT_HF_DATASET = "stanford-cs336/owt-sample"

DataFiles = str | Sequence[str] | Mapping[str, str | Sequence[str]]

# Packaged datasets builders that read local (or URL) files given by ``data_files``.
PACKAGED_BUILDERS = ("text", "json", "csv", "parquet", "arrow")
_SUFFIX_TO_BUILDER = {
    ".txt": "text",
    ".text": "text",
    ".json": "json",
    ".jsonl": "json",
    ".csv": "csv",
    ".parquet": "parquet",
    ".arrow": "arrow",
}
_SAMPLE_BY = ("line", "paragraph", "document")


class DatasetUnavailableError(RuntimeError):
    """A dataset could not be loaded from the Hugging Face Hub (offline, unknown, gated or unreachable).

    ``reason`` is the cause in one line (the message adds the ways to use the dataset offline).
    """

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message.splitlines()[0]


#: seconds to wait for the Hub's host before a load is treated as offline
HUB_PROBE_TIMEOUT = 3.0


def _hub_unreachable(timeout: float = HUB_PROBE_TIMEOUT) -> bool:
    """Whether the Hub's host (``HF_ENDPOINT``, default huggingface.co) refuses or ignores a TCP connection.

    Without this, ``datasets`` spends 35-40 s in retries before it reports an offline machine.
    """
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout).close()
        return False
    except OSError:
        return True


class _OfflineMode:
    """Run ``datasets`` / ``huggingface_hub`` as with ``HF_HUB_OFFLINE=1`` (the local cache only) while active."""

    def __init__(self, active: bool) -> None:
        self.active, self.saved = active, []

    def __enter__(self) -> "_OfflineMode":
        if self.active:
            import datasets.config
            import huggingface_hub.constants

            for mod in (datasets.config, huggingface_hub.constants):
                self.saved.append((mod, mod.HF_HUB_OFFLINE))
                mod.HF_HUB_OFFLINE = True
        return self

    def __exit__(self, *exc: object) -> None:
        for mod, value in self.saved:
            mod.HF_HUB_OFFLINE = value


def _offline_help(name: str, split: str, config_name: str | None, streaming: bool) -> str:
    cfg = f", {config_name!r}" if config_name else ""
    lines = [
        f"To make dataset {name!r} available offline, either:",
        f"  (1) on a machine with internet access run `datasets.load_dataset({name!r}{cfg}, split={split!r})` "
        "(not streaming; this fills the datasets cache, ~/.cache/huggingface/datasets or $HF_DATASETS_CACHE), "
        "copy that cache to this machine and set HF_DATASETS_OFFLINE=1 (and HF_HUB_OFFLINE=1) so it is read "
        "from the cache;",
        f"  (2) or pre-download the files with `huggingface-cli download --repo-type dataset {name} "
        "--local-dir DIR` and pass a local path instead: iter_documents(DIR) or iter_documents('text'|'json'|"
        "'parquet', data_files=...), or a single .txt/.jsonl/.parquet file.",
    ]
    if streaming:
        lines.append("  Note: streaming=True always needs the network; use streaming=False with a cached copy.")
    return "\n".join(lines)


def _resolve(
    name_or_path: str, split: str, data_files: DataFiles | None, sample_by: str
) -> tuple[str, DataFiles | None, dict[str, Any], bool]:
    """Return ``(path_for_load_dataset, data_files, config_kwargs, is_hub)``."""
    local = Path(name_or_path).expanduser()
    if local.is_file():
        builder = _SUFFIX_TO_BUILDER.get(local.suffix.lower(), "text")
        kwargs = {"sample_by": sample_by} if builder == "text" else {}
        return builder, {split: str(local)}, kwargs, False
    if local.is_dir():
        return str(local), data_files, {}, False
    if name_or_path in PACKAGED_BUILDERS:
        if data_files is None:
            raise ValueError(
                f"name_or_path={name_or_path!r} is a packaged builder and needs data_files "
                "(a path, a list of paths or a {split: paths} mapping)"
            )
        kwargs = {"sample_by": sample_by} if name_or_path == "text" else {}
        return name_or_path, data_files, kwargs, False
    if local.suffix.lower() in _SUFFIX_TO_BUILDER or name_or_path.startswith((".", "/", "~")):
        raise FileNotFoundError(f"local data file or directory not found: {name_or_path}")
    return name_or_path, data_files, {}, True


def iter_documents(
    name_or_path: str,
    split: str = "train",
    text_field: str = "text",
    streaming: bool = False,
    config_name: str | None = None,
    data_files: DataFiles | None = None,
    max_documents: int | None = None,
    sample_by: Literal["line", "paragraph", "document"] = "line",
    cache_dir: str | os.PathLike[str] | None = None,
) -> Iterator[str]:
    """Yield the ``text_field`` strings of a dataset split, in order, through ``datasets.load_dataset``.

    ``name_or_path`` may be

    * a Hugging Face Hub dataset id (``"afmck/text8"``, ``"stanford-cs336/owt-sample"``), optionally with
      ``config_name`` and ``data_files``;
    * a local file: ``.txt``/``.text`` (or any unknown suffix) is read by the ``text`` builder with
      ``sample_by`` (``"line"``: one document per line, as the hub OWT sample is read; ``"paragraph"``;
      ``"document"``: the whole file), ``.json``/``.jsonl``/``.csv``/``.parquet``/``.arrow`` by the
      matching builder; the file becomes split ``split``;
    * a local directory (datasets infers the format), or a packaged builder name (``"text"``, ``"json"``,
      ``"csv"``, ``"parquet"``, ``"arrow"``) with ``data_files``.

    Rows whose field is ``None`` are skipped; no other filtering or cleaning is applied. ``max_documents``
    caps the number of yielded strings. ``cache_dir`` is passed to ``load_dataset`` (non-streaming loads
    write an Arrow cache there).

    Raises ``ValueError`` for bad arguments or a missing ``text_field`` (naming the available columns),
    ``FileNotFoundError`` for a missing local path, and :class:`DatasetUnavailableError` (a ``RuntimeError``)
    when a hub dataset cannot be reached, with instructions for offline use.
    """
    checks.nonempty_str("name_or_path", name_or_path)
    checks.choice("sample_by", sample_by, _SAMPLE_BY)
    max_documents = checks.optional_integer("max_documents", max_documents)
    path, files, config_kwargs, is_hub = _resolve(name_or_path, split, data_files, sample_by)

    # Import lazily: ``datasets`` is heavy and only needed here.
    import datasets

    offline = is_hub and not datasets.config.HF_HUB_OFFLINE and _hub_unreachable()

    def unavailable(exc: BaseException, during: str) -> DatasetUnavailableError:
        reason = (f"no network (the Hub did not answer within {HUB_PROBE_TIMEOUT:g} s) and not in the local datasets "
                  "cache" if offline else f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
        return DatasetUnavailableError(
            f"could not {during} dataset {name_or_path!r} (config {config_name!r}, split {split!r}, "
            f"streaming={streaming}) from the Hugging Face Hub: {reason}\n"
            + _offline_help(name_or_path, split, config_name, streaming), reason=reason)

    if offline and streaming:
        raise unavailable(ConnectionError("offline"), "stream")
    try:
        with _OfflineMode(offline):  # no network: read the cache at once instead of retrying for ~40 s
            ds = datasets.load_dataset(
                path,
                config_name,
                split=split,
                data_files=files,
                streaming=streaming,
                cache_dir=None if cache_dir is None else str(cache_dir),
                **config_kwargs,
            )
    except (ValueError, TypeError, KeyError):
        raise  # bad arguments (unknown split, invalid repo id, ...): not an availability problem
    except Exception as exc:
        if is_hub:
            raise unavailable(exc, "load") from exc
        raise

    columns = getattr(ds, "column_names", None)
    if columns is not None and text_field not in columns:
        raise ValueError(f"text_field={text_field!r} is not a column of {name_or_path!r}; available: {list(columns)}")

    return _iterate(ds, text_field, max_documents, is_hub, unavailable)


def _iterate(ds: Any, text_field: str, max_documents: int | None, is_hub: bool, unavailable: Any) -> Iterator[str]:
    n = 0
    iterator = iter(ds)
    while max_documents is None or n < max_documents:
        try:
            row = next(iterator)
        except StopIteration:
            return
        except (ConnectionError, TimeoutError, OSError) as exc:
            if is_hub:
                raise unavailable(exc, "stream") from exc
            raise
        if text_field not in row:
            raise ValueError(f"text_field={text_field!r} missing from a row; available: {sorted(row)}")
        value = row[text_field]
        if value is None:
            continue
        if not isinstance(value, str):
            raise ValueError(f"text_field={text_field!r} holds {type(value).__name__}, expected str")
        n += 1
        yield value


def read_text_file(path: str | os.PathLike[str], encoding: str = "utf-8", errors: str = "strict") -> str:
    """Read a plain local text file (e.g. an unpacked ``text8``) into one string.

    ``errors`` is passed to the decoder (``"strict"`` raises on invalid bytes; ``"replace"`` substitutes).
    Raises ``FileNotFoundError`` naming the path.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"text file not found: {p}")
    if not p.is_file():
        raise ValueError(f"path must be a regular file, got a directory or special file: {p}")
    with open(p, encoding=encoding, errors=errors, newline="") as fh:
        return fh.read()
