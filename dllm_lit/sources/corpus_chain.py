"""The base of the chain sources built from text corpora (text8, OpenWebText, local text files): a chain
built once from the corpus, then loaded from a checksummed cache.

Every corpus source builds its :class:`~dllm_lit.markov.MarkovChain` through the checksummed, settings-keyed
build cache :class:`dllm_lit.corpus.cache.SettingsCache` rooted at the data module's ``cache_dir``:

* the cache *kind* names the construction (``chain-text8``, ``chain-local-text``, ``chain-owt-bpe``);
* the cache *settings* hold every argument that changes the chain (the input's identity, split, caps,
  tokenizer and K/eps rules) plus :data:`CORPUS_CHAIN_FORMAT` and the chain artifact version, so changing
  any of them gives a new entry, and bumping the format invalidates old entries;
* an entry holds ``chain.pt`` (:func:`dllm_lit.markov.save_chain`), ``counts.pt`` (the raw bigram and
  unigram counts before pseudocounts, see :meth:`CorpusChainSource.bigram_counts`) and, for BPE sources,
  ``tokenizer.json``.

A second ``build`` with the same settings verifies the entry (per-file SHA-256 in the manifest) and loads it
with :func:`dllm_lit.markov.load_chain` without touching the corpus; a damaged, partial or stale entry is
detected by the cache, discarded and rebuilt.  ``build(None)`` builds in a temporary directory and keeps
nothing on disk.

Input identity: a Hugging Face Hub dataset is keyed by its name (plus ``data_files`` as given); local
inputs (a file, a directory, or a packaged builder such as ``"text"`` with local ``data_files``) are keyed
by the SHA-256 of their contents (files over 1 GiB: path, size and modification time), so editing a local
corpus rebuilds the chain and moving it does not.  Local inputs are always read with
``datasets``' streaming mode (no Arrow copy is written); the result does not depend on streaming.
"""
from __future__ import annotations

import glob
import logging
import shutil
import tempfile
import time
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from dllm_lit.util.atomic import atomic_torch_save
from dllm_lit.corpus.documents import PACKAGED_BUILDERS
from dllm_lit.util.hashing import sha256_file
from dllm_lit.markov import MarkovChain, load_chain, save_chain
from dllm_lit.markov.io import READABLE_VERSIONS
from dllm_lit.sources.base import ChainSource, TextDecoder
from dllm_lit.sources.options import SparsityOptions

__all__ = ["CORPUS_CHAIN_FORMAT", "CorpusChainSource", "CharCorpusChainSource"]

logger = logging.getLogger(__name__)

#: Version of the corpus-chain construction (the corpus sources' cleaning, counting, K rule and file
#: layout); part of every cache key.  Bump it whenever a change would change what an entry contains.
CORPUS_CHAIN_FORMAT = 1

CHAIN_FILE = "chain.pt"
COUNTS_FILE = "counts.pt"
TOKENIZER_FILE = "tokenizer.json"
_HASH_LIMIT = 1 << 30  # files larger than this are fingerprinted by (path, size, mtime) instead of content


# ---------------------------------------------------------------------------------------------- validation
def corpus_documents(dataset: str, **options: Any):
    """:func:`~dllm_lit.corpus.documents.iter_documents` for a source's ``dataset``; a hub dataset that cannot be
    reached fails with one line naming the option that points at a local copy."""
    from dllm_lit.corpus.documents import DatasetUnavailableError, iter_documents

    try:
        return iter_documents(dataset, **options)
    except DatasetUnavailableError as exc:
        raise DatasetUnavailableError(
            f"cannot load dataset {dataset!r} from the Hugging Face Hub (offline or unreachable: {exc.reason}); set "
            "--data.source.init_args.dataset to a local copy (a file or folder; plain text files through "
            "--data.source.init_args.data_files), or build the chain once with network (it is cached)",
            reason=exc.reason) from None


def check_data_files(data_files: Any) -> None:
    if data_files is None or isinstance(data_files, str):
        return
    if isinstance(data_files, Mapping):
        vals = list(data_files.values())
        if all(isinstance(k, str) for k in data_files) and all(
            isinstance(v, str) or (isinstance(v, Sequence) and all(isinstance(x, str) for x in v)) for v in vals
        ):
            return
    elif isinstance(data_files, Sequence) and all(isinstance(x, str) for x in data_files):
        return
    raise ValueError(f"data_files must be a path, a list of paths or a {{split: path(s)}} mapping, got {data_files!r}")


# ---------------------------------------------------------------------------------------------- input identity
def file_fingerprint(path: Path) -> str:
    st = path.stat()
    if st.st_size > _HASH_LIMIT:
        return f"stat:{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    return "sha256:" + sha256_file(path)


def _local_files(pattern: str) -> list[Path] | None:
    """Local files named by ``pattern`` (a file, a directory or a glob), or None if it names nothing local."""
    p = Path(pattern).expanduser()
    if p.is_file():
        return [p]
    if p.is_dir():
        return sorted(q for q in p.rglob("*") if q.is_file() and not any(part.startswith(".") for part in q.relative_to(p).parts))
    matches = sorted(Path(m) for m in glob.glob(str(p), recursive=True) if Path(m).is_file())
    return matches or None


def _fingerprint_files(spec: Any) -> Any:
    """``data_files`` (or a local dataset path) with every local file replaced by its content fingerprint."""
    if spec is None:
        return None
    if isinstance(spec, str):
        files = _local_files(spec)
        if files is None:
            return spec  # not local (hub-relative path or URL): keyed as given
        if Path(spec).expanduser().is_dir():
            root = Path(spec).expanduser()
            return {"dir": [[f.relative_to(root).as_posix(), file_fingerprint(f)] for f in files]}
        return [file_fingerprint(f) for f in files]
    if isinstance(spec, Mapping):
        return {str(k): _fingerprint_files(v) for k, v in sorted(spec.items())}
    return [_fingerprint_files(s) for s in spec]


def is_local(dataset: str) -> bool:
    return dataset in PACKAGED_BUILDERS or Path(dataset).expanduser().exists()


def input_identity(dataset: str, data_files: Any) -> dict[str, Any]:
    if is_local(dataset):
        ident: dict[str, Any] = {"local": True}
        if dataset in PACKAGED_BUILDERS:
            ident["builder"] = dataset
        else:
            ident["path"] = _fingerprint_files(dataset)
        if data_files is not None:
            ident["data_files"] = _fingerprint_files(data_files)
        return ident
    return {"hub": dataset, "data_files": data_files}


# ---------------------------------------------------------------------------------------------- counts files
def save_counts(path: Path, counts: torch.Tensor, unigram: torch.Tensor | None) -> None:
    """Bigram counts stored sparsely (indices of non-zero pairs and their counts) plus the unigram counts."""
    counts = counts.to(torch.int64)
    nz = counts.nonzero().T.contiguous()
    payload: dict[str, Any] = {"shape": torch.tensor(list(counts.shape)), "indices": nz, "values": counts[nz[0], nz[1]].contiguous()}
    if unigram is not None:
        payload["unigram"] = unigram.to(torch.int64).contiguous()
    atomic_torch_save(payload, path)


def _load_counts(path: Path) -> tuple[torch.Tensor, torch.Tensor | None]:
    payload = torch.load(path, map_location="cpu", weights_only=True)
    shape = tuple(int(s) for s in payload["shape"].tolist())
    C = torch.zeros(shape, dtype=torch.int64)
    C[payload["indices"][0], payload["indices"][1]] = payload["values"]
    return C, payload.get("unigram")


# ---------------------------------------------------------------------------------------------- base class
class CorpusChainSource(ChainSource):
    """Base of the cached corpus sources: subclasses define :attr:`cache_kind`, :meth:`cache_settings` and
    :meth:`_build_into` (which writes ``chain.pt``, ``counts.pt`` and any extra files into a directory).

    After :meth:`build`, :attr:`cache_hit` says whether the chain came from an existing entry and
    :attr:`cache_entry` is the entry directory (None for ``build(None)``).
    """

    cache_kind: str = "chain-corpus"

    @abstractmethod
    def cache_settings(self) -> dict[str, Any]:
        """Every setting that changes the built chain (the cache key)."""

    @abstractmethod
    def _build_into(self, directory: Path) -> None:
        """Count, build and write ``chain.pt``, ``counts.pt`` and any extra files into ``directory``."""

    def _load_extras(self, entry: Path) -> None:
        """Load what the decoder needs besides the chain (BPE: the tokenizer)."""

    @property
    def cache_hit(self) -> bool | None:
        return getattr(self, "_cache_hit", None)

    @property
    def cache_entry(self) -> Path | None:
        return getattr(self, "_entry", None)

    def _full_settings(self) -> dict[str, Any]:
        # "artifact_version" is the oldest chain-artifact version load_chain still reads: entries written with
        # any readable version stay valid, and dropping a version renews every key.
        return {"corpus_chain_format": CORPUS_CHAIN_FORMAT, "artifact_version": min(READABLE_VERSIONS), **self.cache_settings()}

    def build(self, cache_dir: Path | str | None = None) -> MarkovChain:
        """Return the chain, from the cache under ``cache_dir`` if a valid entry exists, else building it
        from the corpus (and caching it).  ``cache_dir=None`` builds in a temporary directory."""
        from dllm_lit.corpus.cache import SettingsCache

        if cache_dir is None:
            with tempfile.TemporaryDirectory(prefix="dllm_lit-chain-") as tmp:
                self._entry = None
                self._cache_hit = False
                self._build_into(Path(tmp))
                return self._load_entry(Path(tmp), keep_entry=False)

        cache = SettingsCache(cache_dir)
        settings = self._full_settings()
        for attempt in range(2):
            built = False

            def build_fn(tmp: Path) -> None:
                nonlocal built
                built = True
                t0 = time.perf_counter()
                logger.info("building %s chain into %s", self.cache_kind, tmp)
                self._build_into(tmp)
                logger.info("built %s chain in %.1f s", self.cache_kind, time.perf_counter() - t0)

            entry = cache.get_or_build(self.cache_kind, settings, build_fn)
            try:
                self._cache_hit = not built
                return self._load_entry(entry, keep_entry=True)
            except Exception as exc:  # checksums matched but the files do not load (library change): rebuild
                if attempt == 1:
                    raise
                logger.warning("cache entry %s verified but failed to load (%s); rebuilding it", entry, exc)
                shutil.rmtree(entry, ignore_errors=True)
        raise AssertionError("unreachable")  # pragma: no cover

    def _load_entry(self, entry: Path, keep_entry: bool) -> MarkovChain:
        self._chain = load_chain(entry / CHAIN_FILE)
        self._counts = _load_counts(entry / COUNTS_FILE)
        self._load_extras(entry)
        self._entry = entry if keep_entry else None
        return self._chain

    def bigram_counts(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Raw counts of the last build, before pseudocounts and the empty-row rule: ``(C[V, V] int64,
        unigram[V] int64 or None)``.  Dense; for V = 4096 that is 128 MiB."""
        counts = getattr(self, "_counts", None)
        if counts is None:
            raise RuntimeError(f"{type(self).__name__}.bigram_counts(): call build(cache_dir) first")
        return counts

    @property
    def chain(self) -> MarkovChain:
        chain = getattr(self, "_chain", None)
        if chain is None:
            raise RuntimeError(f"{type(self).__name__}: call build(cache_dir) first")
        return chain


class CharCorpusChainSource(CorpusChainSource):
    """A corpus source over the text8 characters (a-z and space, V = 27): the chain is counted from one
    normalised character stream with :attr:`sparsity`, and ids decode with :class:`dllm_lit.corpus.CharDecoder`."""

    sparsity: SparsityOptions  # set by the subclass's __init__

    def _write_char_entry(self, directory: Path, counts: torch.Tensor, metadata: dict[str, Any]) -> None:
        """Build the chain from the character bigram ``counts`` and write ``chain.pt`` and ``counts.pt``."""
        chain = self.sparsity.chain_from_counts(
            counts, metadata={"alphabet": "abcdefghijklmnopqrstuvwxyz ", "num_characters": int(counts.sum().item()) + 1, **metadata},
        )
        save_chain(chain, directory / CHAIN_FILE)
        save_counts(directory / COUNTS_FILE, counts, None)

    def decoder(self) -> TextDecoder:
        from dllm_lit.corpus.charlevel import CharDecoder

        return CharDecoder()
