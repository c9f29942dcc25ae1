"""Chain sources built from text corpora: the paper's text8 and OpenWebText oracles, and local text files.

Every source here builds its :class:`~dllm_lit.markov.MarkovChain` through the checksummed, settings-keyed
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
import hashlib
import logging
import math
import shutil
import tempfile
import time
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import torch

from dllm_lit.data.sources import ChainSource, TextDecoder
from dllm_lit.markov import MarkovChain, load_chain, save_chain
from dllm_lit.atomic import atomic_torch_save
from dllm_lit.markov.io import READABLE_VERSIONS

__all__ = [
    "CORPUS_CHAIN_FORMAT",
    "CorpusChainSource",
    "Text8Chars",
    "LocalTextChars",
    "OpenWebTextBPE",
]

logger = logging.getLogger(__name__)

#: Version of the corpus-chain construction in this module; part of every cache key.  Bump it whenever a
#: change here (cleaning, counting, K rule, file layout) would change what an entry contains.
CORPUS_CHAIN_FORMAT = 1

_CHAIN_FILE = "chain.pt"
_COUNTS_FILE = "counts.pt"
_TOKENIZER_FILE = "tokenizer.json"
_PACKAGED_BUILDERS = ("text", "json", "csv", "parquet", "arrow")
_HASH_LIMIT = 1 << 30  # files larger than this are fingerprinted by (path, size, mtime) instead of content


# ---------------------------------------------------------------------------------------------- validation
def _opt_pos_int(name: str, v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive integer or None, got {v!r}")
    return int(v)


def _pos_int(name: str, v: Any) -> int:
    if v is None:
        raise ValueError(f"{name} must be a positive integer, got None")
    return _opt_pos_int(name, v)  # type: ignore[return-value]


def _check_chain_options(top_k: Any, target_mass: Any, k_percentile: Any, eps: Any) -> None:
    _opt_pos_int("top_k", top_k)
    if top_k is not None and (target_mass is not None or k_percentile is not None):
        raise ValueError("give either top_k (fixed K) or target_mass/k_percentile (the mass-percentile K rule), not both")
    if target_mass is not None and not (isinstance(target_mass, (int, float)) and 0.0 < target_mass <= 1.0):
        raise ValueError(f"target_mass must be a float in (0, 1] or None, got {target_mass!r}")
    if k_percentile is not None and not (isinstance(k_percentile, (int, float)) and 0.0 <= k_percentile <= 100.0):
        raise ValueError(f"k_percentile must be a float in [0, 100] or None, got {k_percentile!r}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or not 0.0 <= eps < 1.0:
        raise ValueError(f"eps (teleport weight) must be a float in [0, 1), got {eps!r}")


def _check_data_files(data_files: Any) -> None:
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
def _file_fingerprint(path: Path) -> str:
    st = path.stat()
    if st.st_size > _HASH_LIMIT:
        return f"stat:{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


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
            return {"dir": [[f.relative_to(root).as_posix(), _file_fingerprint(f)] for f in files]}
        return [_file_fingerprint(f) for f in files]
    if isinstance(spec, Mapping):
        return {str(k): _fingerprint_files(v) for k, v in sorted(spec.items())}
    return [_fingerprint_files(s) for s in spec]


def _is_local(dataset: str) -> bool:
    return dataset in _PACKAGED_BUILDERS or Path(dataset).expanduser().exists()


def _input_identity(dataset: str, data_files: Any) -> dict[str, Any]:
    if _is_local(dataset):
        ident: dict[str, Any] = {"local": True}
        if dataset in _PACKAGED_BUILDERS:
            ident["builder"] = dataset
        else:
            ident["path"] = _fingerprint_files(dataset)
        if data_files is not None:
            ident["data_files"] = _fingerprint_files(data_files)
        return ident
    return {"hub": dataset, "data_files": data_files}


# ---------------------------------------------------------------------------------------------- counts files
def _save_counts(path: Path, counts: torch.Tensor, unigram: torch.Tensor | None) -> None:
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
        self._chain = load_chain(entry / _CHAIN_FILE)
        self._counts = _load_counts(entry / _COUNTS_FILE)
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


def _char_chain(counts: torch.Tensor, source: CorpusChainSource, metadata: dict[str, Any]) -> MarkovChain:
    return MarkovChain.from_counts(
        counts, top_k=source.top_k, target_mass=source.target_mass, k_percentile=source.k_percentile,
        eps=source.eps, metadata={"alphabet": "abcdefghijklmnopqrstuvwxyz ", **metadata},
    )


def _write_char_entry(directory: Path, counts: torch.Tensor, source: CorpusChainSource, metadata: dict[str, Any]) -> None:
    chain = _char_chain(counts, source, {"num_characters": int(counts.sum().item()) + 1, **metadata})
    save_chain(chain, directory / _CHAIN_FILE)
    _save_counts(directory / _COUNTS_FILE, counts, None)


class _CharDecoderMixin:
    def decoder(self) -> TextDecoder:
        from dllm_lit.corpus.charlevel import CharDecoder

        return CharDecoder()


# ---------------------------------------------------------------------------------------------- text8
class Text8Chars(_CharDecoderMixin, CorpusChainSource):
    """The paper's text8 character oracle (App. "Experimental Setup and Oracle Construction", *Text8*;
    reference ``build_text8_char_gt_k27_eps0.py``).

    Paper settings (the defaults): the first ``max_chars = 5,000,000`` characters of text8 as ONE stream
    (word boundaries crossed), vocabulary a-z and space (V = 27, space = 26), bigram counts C,
    P = row_normalise(C + 1e-8), K = V = 27 (no sparsification), eps = 0 (no teleport).

    Args:
        dataset: Hugging Face Hub id (default ``"afmck/text8"``: one row holding the whole split, already
            normalised), or, for offline use, a local path (an unpacked ``text8`` file, a ``.txt``/``.jsonl``/
            ``.parquet`` file or a directory) or a packaged builder name (``"text"``, ``"parquet"``, ...)
            together with ``data_files``.
        split: dataset split (``"train"`` holds the first 90M characters of text8).
        max_chars: keep the first ``max_chars`` normalised characters (None: all).
        top_k / target_mass / k_percentile / eps: chain options of
            :meth:`dllm_lit.markov.MarkovChain.from_counts` (paper: all None / eps = 0).
        data_files: file(s) for a packaged builder or inside a hub repository.
        text_field: the column holding the text.

    Local ``.txt`` files are read whole (one document per file); several documents are joined with one
    space into the single stream (text8 normalisation: everything outside a-z becomes a space).
    """

    cache_kind = "chain-text8"

    def __init__(
        self,
        dataset: str = "afmck/text8",
        split: str = "train",
        max_chars: int | None = 5_000_000,
        top_k: int | None = None,
        target_mass: float | None = None,
        k_percentile: float | None = None,
        eps: float = 0.0,
        data_files: str | list[str] | dict[str, str | list[str]] | None = None,
        text_field: str = "text",
    ) -> None:
        if not isinstance(dataset, str) or not dataset:
            raise ValueError(f"dataset must be a non-empty str (hub id, local path or builder name), got {dataset!r}")
        _check_chain_options(top_k, target_mass, k_percentile, eps)
        _check_data_files(data_files)
        self.dataset, self.split, self.data_files, self.text_field = dataset, split, data_files, text_field
        self.max_chars = _opt_pos_int("max_chars", max_chars)
        self.top_k, self.target_mass, self.k_percentile, self.eps = top_k, target_mass, k_percentile, eps

    def cache_settings(self) -> dict[str, Any]:
        return {
            "input": _input_identity(self.dataset, self.data_files), "split": self.split, "text_field": self.text_field,
            "max_chars": self.max_chars, "top_k": self.top_k, "target_mass": self.target_mass,
            "k_percentile": self.k_percentile, "eps": self.eps,
        }

    def _build_into(self, directory: Path) -> None:
        from dllm_lit.corpus.charlevel import count_char_bigrams
        from dllm_lit.corpus.documents import iter_documents

        local = _is_local(self.dataset)
        docs = iter_documents(
            self.dataset, split=self.split, text_field=self.text_field, data_files=self.data_files,
            streaming=local, sample_by="document",
        )
        counts = count_char_bigrams(docs, max_chars=self.max_chars)
        _write_char_entry(directory, counts, self, {"source": "text8_chars", "dataset": self.dataset, "split": self.split, "max_chars": self.max_chars})


class LocalTextChars(_CharDecoderMixin, CorpusChainSource):
    """A character chain from a local plain-text file with the text8 conventions.

    The file is read whole (:func:`dllm_lit.corpus.read_text_file`), normalised with
    :func:`dllm_lit.corpus.normalize_text8` (letters lower-cased, everything else a space, runs of spaces
    collapsed) and counted as ONE stream; the first ``max_chars`` normalised characters are used (None:
    all).  Chain options as in :class:`Text8Chars` (defaults: the paper's text8 rule, K = V = 27, eps = 0).
    The cache is keyed by the file's content, not its path.
    """

    cache_kind = "chain-local-text"

    def __init__(
        self,
        path: str,
        max_chars: int | None = None,
        top_k: int | None = None,
        target_mass: float | None = None,
        k_percentile: float | None = None,
        eps: float = 0.0,
        encoding: str = "utf-8",
    ) -> None:
        if not isinstance(path, str) or not path:
            raise ValueError(f"path must be a non-empty str naming a local text file, got {path!r}")
        _check_chain_options(top_k, target_mass, k_percentile, eps)
        self.path, self.encoding = path, encoding
        self.max_chars = _opt_pos_int("max_chars", max_chars)
        self.top_k, self.target_mass, self.k_percentile, self.eps = top_k, target_mass, k_percentile, eps

    def cache_settings(self) -> dict[str, Any]:
        p = Path(self.path).expanduser()
        if not p.is_file():
            raise FileNotFoundError(f"LocalTextChars: text file not found: {p} (set data.source.init_args.path)")
        return {
            "file": _file_fingerprint(p), "encoding": self.encoding, "max_chars": self.max_chars, "top_k": self.top_k,
            "target_mass": self.target_mass, "k_percentile": self.k_percentile, "eps": self.eps,
        }

    def _build_into(self, directory: Path) -> None:
        from dllm_lit.corpus.charlevel import count_char_bigrams
        from dllm_lit.corpus.documents import read_text_file

        counts = count_char_bigrams(read_text_file(self.path, encoding=self.encoding), max_chars=self.max_chars)
        _write_char_entry(directory, counts, self, {"source": "local_text_chars", "path": str(Path(self.path).expanduser()), "max_chars": self.max_chars})


# ---------------------------------------------------------------------------------------------- OWT BPE
class OpenWebTextBPE(CorpusChainSource):
    """The paper's OpenWebText byte-level BPE oracle (App. "Experimental Setup and Oracle Construction",
    *OpenWebText*; reference ``train_owt_bytebpe_tokenizer.py`` and ``build_owt_bpe_gt.py``).

    Pipeline (defaults = the paper's settings):

    1. documents of ``stanford-cs336/owt-sample`` (split train, streamed; one document per line, as the
       hub's text files are read), cleaned by :func:`dllm_lit.corpus.clean_documents` (drop ``\\r``, strip
       newlines, collapse spaces/tabs, cut to ``max_doc_chars = 4096`` characters);
    2. a byte-level BPE tokenizer (vocab 4096, min_frequency 2, specials ``<pad> <unk> <bos> <eos>`` = ids
       0..3, all 256 bytes in the alphabet) trained on the first ``tokenizer_max_bytes = 200 MB`` of them;
    3. within-document bigram counts (no transition across documents) over the first
       ``count_max_tokens = 2,000,000`` tokens; rows without counts take the unigram;
       P_mle = row_normalise(C + 1e-8);
    4. K by the mass-percentile rule: K*_i = smallest k with top-k mass >= ``target_mass = 0.99``,
       K = floor(``k_percentile = 90``-th percentile of K*_i) (206 in the paper); top-K kept, renormalised;
    5. teleport ``eps = 1e-4`` to nu = the empirical token unigram: P' = (1 - eps) P_topK + eps 1 nu^T.

    ``top_k`` (default None) fixes K instead of the rule (target_mass / k_percentile are then ignored).
    ``dataset`` may be a local path or a packaged builder (``"text"``, ``"json"``, ...) with ``data_files``
    for offline use; ``sample_by`` says what a document of a local ``.txt`` is (``"line"`` as on the hub).
    ``streaming`` only matters for hub datasets (True needs the network; False can read a pre-filled
    datasets cache offline); it does not change the result and is not part of the cache key.
    The tokenizer is cached with the chain; :meth:`decoder` is a :class:`dllm_lit.corpus.BPEDecoder` of it.
    """

    cache_kind = "chain-owt-bpe"

    def __init__(
        self,
        dataset: str = "stanford-cs336/owt-sample",
        split: str = "train",
        streaming: bool = True,
        data_files: str | list[str] | dict[str, str | list[str]] | None = None,
        vocab_size: int = 4096,
        min_frequency: int = 2,
        tokenizer_max_bytes: int | None = 200_000_000,
        count_max_tokens: int | None = 2_000_000,
        max_doc_chars: int | None = 4096,
        target_mass: float | None = 0.99,
        k_percentile: float | None = 90,
        eps: float = 1e-4,
        top_k: int | None = None,
        text_field: str = "text",
        sample_by: Literal["line", "paragraph", "document"] = "line",
    ) -> None:
        from dllm_lit.corpus.bpe import check_vocab_size

        if not isinstance(dataset, str) or not dataset:
            raise ValueError(f"dataset must be a non-empty str (hub id, local path or builder name), got {dataset!r}")
        check_vocab_size(vocab_size)
        if top_k is not None:
            target_mass, k_percentile = None, None
        _check_chain_options(top_k, target_mass, k_percentile, eps)
        _check_data_files(data_files)
        if sample_by not in ("line", "paragraph", "document"):
            raise ValueError(f"sample_by must be 'line', 'paragraph' or 'document', got {sample_by!r}")
        self.dataset, self.split, self.streaming, self.data_files = dataset, split, bool(streaming), data_files
        self.vocab_size = vocab_size
        self.min_frequency = _pos_int("min_frequency", min_frequency)
        self.tokenizer_max_bytes = _opt_pos_int("tokenizer_max_bytes", tokenizer_max_bytes)
        self.count_max_tokens = _opt_pos_int("count_max_tokens", count_max_tokens)
        self.max_doc_chars = _opt_pos_int("max_doc_chars", max_doc_chars)
        self.target_mass, self.k_percentile, self.eps, self.top_k = target_mass, k_percentile, eps, top_k
        self.text_field, self.sample_by = text_field, sample_by

    def cache_settings(self) -> dict[str, Any]:
        return {
            "input": _input_identity(self.dataset, self.data_files), "split": self.split, "text_field": self.text_field,
            "sample_by": self.sample_by, "vocab_size": self.vocab_size, "min_frequency": self.min_frequency,
            "tokenizer_max_bytes": self.tokenizer_max_bytes, "count_max_tokens": self.count_max_tokens,
            "max_doc_chars": self.max_doc_chars, "target_mass": self.target_mass, "k_percentile": self.k_percentile,
            "top_k": self.top_k, "eps": self.eps,
        }

    def _documents(self) -> Any:
        from dllm_lit.corpus.bpe import clean_documents
        from dllm_lit.corpus.documents import iter_documents

        streaming = True if _is_local(self.dataset) else self.streaming
        raw = iter_documents(
            self.dataset, split=self.split, text_field=self.text_field, streaming=streaming,
            data_files=self.data_files, sample_by=self.sample_by,
        )
        return clean_documents(raw, max_chars=self.max_doc_chars)

    def _build_into(self, directory: Path) -> None:
        from dllm_lit.corpus.bpe import count_token_bigrams, save_tokenizer, train_bytelevel_bpe

        tok = train_bytelevel_bpe(self._documents(), vocab_size=self.vocab_size, min_frequency=self.min_frequency,
                                  max_bytes=self.tokenizer_max_bytes)
        save_tokenizer(tok, directory / _TOKENIZER_FILE)
        C, unigram = count_token_bigrams(tok, self._documents(), max_tokens=self.count_max_tokens)
        nu = unigram.to(torch.float64) / unigram.sum()
        n_tokens = int(unigram.sum().item())
        chain = MarkovChain.from_counts(
            C, top_k=self.top_k, target_mass=self.target_mass, k_percentile=self.k_percentile, eps=self.eps, nu=nu,
            unigram=unigram,
            metadata={
                "source": "owt_bpe", "dataset": self.dataset, "split": self.split, "teleport_law": "token_unigram",
                "tokenizer_vocab_size": int(tok.get_vocab_size()), "num_tokens": n_tokens,
                "num_documents": n_tokens - int(C.sum().item()),
            },
        )
        save_chain(chain, directory / _CHAIN_FILE)
        _save_counts(directory / _COUNTS_FILE, C, unigram)

    def _load_extras(self, entry: Path) -> None:
        from dllm_lit.corpus.bpe import load_tokenizer

        self._tokenizer = load_tokenizer(entry / _TOKENIZER_FILE)

    @property
    def tokenizer(self) -> Any:
        """The ``tokenizers.Tokenizer`` of the last build."""
        tok = getattr(self, "_tokenizer", None)
        if tok is None:
            raise RuntimeError("OpenWebTextBPE: call build(cache_dir) first (the tokenizer is part of the build)")
        return tok

    def decoder(self) -> TextDecoder:
        from dllm_lit.corpus.bpe import BPEDecoder

        return BPEDecoder(self.tokenizer)
