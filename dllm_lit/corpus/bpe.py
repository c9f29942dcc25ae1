"""Byte-level BPE corpus handling for the OWT ground-truth chain (seed paper, App. "Experimental Setup and
Oracle Construction", paragraph *OpenWebText*; the construction, step by step, as the paper authors' released
code ran it, is described in docs/oracle.md).

Pipeline as the paper ran it::

    docs = clean_documents(iter_documents("stanford-cs336/owt-sample", streaming=True))  # <= 4096 chars each
    tok = train_bytelevel_bpe(docs, vocab_size=4096, min_frequency=2, max_bytes=200_000_000)
    C, unigram = count_token_bigrams(tok, clean_documents(iter_documents(...)), max_tokens=2_000_000)

On the hub OWT sample (plain-text files read by the datasets ``text`` builder) a "document" is one line of
text, so "within-document" bigrams are within-line bigrams; see :mod:`dllm_lit.corpus.documents`.

One deliberate difference from the authors' code: the trainer is given ``initial_alphabet =
ByteLevel.alphabet()`` (all 256 byte symbols), so every byte sequence is encodable and nothing maps to
``<unk>``; the authors' code left it out, so any byte unseen in training became ``<unk>`` (and decoded to
nothing).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from dllm_lit import checks

__all__ = [
    "SPECIAL_TOKENS",
    "MIN_BPE_VOCAB_SIZE",
    "check_vocab_size",
    "clean_document",
    "clean_documents",
    "take_until_bytes",
    "train_bytelevel_bpe",
    "save_tokenizer",
    "load_tokenizer",
    "count_token_bigrams",
    "BPEDecoder",
]

#: Special tokens, ids 0..3 in this order.
SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<unk>", "<bos>", "<eos>")
#: 256 byte symbols plus the 4 special tokens.
MIN_BPE_VOCAB_SIZE: int = 256 + len(SPECIAL_TOKENS)

_SPACES_TABS_RE = re.compile(r"[ \t]+")


def check_vocab_size(vocab_size: object, name: str = "vocab_size") -> int:
    """``vocab_size`` if it is an int >= :data:`MIN_BPE_VOCAB_SIZE` (every byte symbol plus the specials)."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < MIN_BPE_VOCAB_SIZE:
        raise ValueError(
            f"{name} must be an int >= {MIN_BPE_VOCAB_SIZE} (256 byte symbols + {len(SPECIAL_TOKENS)} special "
            f"tokens), got {vocab_size!r}"
        )
    return vocab_size


def clean_document(text: str, max_chars: int | None = 4096) -> str:
    """Clean one OWT document the way the paper authors' streaming loader did (whitespace stripping and
    normalisation on, then a length cap), in this order:

    1. delete every carriage return ``'\\r'`` (so ``\\r\\n`` becomes ``\\n``);
    2. strip leading and trailing newlines ``'\\n'`` only (``str.strip("\\n")``; leading/trailing spaces are
       kept, and newlines *inside* the document are kept);
    3. replace each tab by a space and collapse every run of spaces/tabs to a single space (newlines are
       not touched by this step);
    4. keep the first ``max_chars`` characters (code points, not bytes); ``None`` keeps everything.

    A document that is empty or whitespace-only after cleaning is returned as ``""``;
    :func:`clean_documents` drops such documents, as the authors' loader did.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    max_chars = checks.optional_integer("max_chars", max_chars)
    text = text.replace("\r", "").strip("\n")
    text = _SPACES_TABS_RE.sub(" ", text)
    if max_chars is not None:
        text = text[:max_chars]
    return text if text.strip() else ""


def clean_documents(texts: Iterable[str], max_chars: int | None = 4096) -> Iterator[str]:
    """Apply :func:`clean_document` lazily and drop documents that are empty after cleaning."""
    max_chars = checks.optional_integer("max_chars", max_chars)
    for text in texts:
        cleaned = clean_document(text, max_chars=max_chars)
        if cleaned:
            yield cleaned


def take_until_bytes(texts: Iterable[str], max_bytes: int | None) -> Iterator[str]:
    """Yield documents until the next one would push the UTF-8 byte total past ``max_bytes``.

    Rule of the authors' tokenizer training: documents with zero bytes are skipped; the stream stops at
    the first document that does not fit (it is not skipped in favour of a shorter later one). ``None``
    means no budget.
    """
    max_bytes = checks.optional_integer("max_bytes", max_bytes)
    total = 0
    for text in texts:
        n = len(text.encode("utf-8", errors="ignore"))
        if n == 0:
            continue
        if max_bytes is not None and total + n > max_bytes:
            return
        total += n
        yield text


def _new_bytelevel_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def train_bytelevel_bpe(
    texts: Iterable[str],
    vocab_size: int = 4096,
    min_frequency: int = 2,
    max_bytes: int | None = 200_000_000,
) -> Tokenizer:
    """Train the paper's byte-level BPE tokenizer on ``texts`` (already cleaned; see :func:`clean_documents`).

    Model ``BPE(unk_token="<unk>")``, ``NFKC`` normaliser, ``ByteLevel(add_prefix_space=False)``
    pre-tokeniser, ``ByteLevel`` decoder; ``BpeTrainer(vocab_size, min_frequency, special_tokens=
    ["<pad>", "<unk>", "<bos>", "<eos>"])`` so the specials get ids 0..3, **plus** ``initial_alphabet =
    ByteLevel.alphabet()`` so all 256 byte symbols are in the vocabulary (ids 4..259) and no input ever maps
    to ``<unk>`` (fixes a defect of the authors' tokenizer). Training reads documents until ``max_bytes`` UTF-8 bytes
    (paper: 200 MB; :func:`take_until_bytes`). The resulting vocabulary can be smaller than ``vocab_size``
    when the corpus runs out of pairs with at least ``min_frequency`` occurrences.

    Raises ``ValueError`` for ``vocab_size < 260`` (256 bytes + 4 specials), ``min_frequency < 1``,
    ``max_bytes <= 0``, or an empty corpus.
    """
    check_vocab_size(vocab_size)
    min_frequency = checks.integer("min_frequency", min_frequency)
    if isinstance(texts, str):
        raise TypeError("texts must be an iterable of documents (str), not a single str")

    n_docs = 0

    def counted() -> Iterator[str]:
        nonlocal n_docs
        for text in take_until_bytes(texts, max_bytes):
            n_docs += 1
            yield text

    tok = _new_bytelevel_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=int(vocab_size),
        min_frequency=int(min_frequency),
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(counted(), trainer=trainer)
    if n_docs == 0:
        raise ValueError(
            "texts is an empty corpus: no non-empty document within max_bytes "
            f"(max_bytes={max_bytes!r}); cannot train a tokenizer"
        )
    for i, special in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(special) != i:  # guaranteed by BpeTrainer; checked because ids 0..3 are relied on
            raise RuntimeError(f"special token {special} got id {tok.token_to_id(special)}, expected {i}")
    return tok


def save_tokenizer(tokenizer: Tokenizer, path: str | Path) -> Path:
    """Write ``tokenizer`` as ``tokenizer.json``-style JSON to ``path`` atomically (temp file + rename)."""
    from dllm_lit.util.atomic import atomic_write_text

    return atomic_write_text(path, tokenizer.to_str())


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load a tokenizer JSON written by :func:`save_tokenizer` (or any ``tokenizers`` JSON file)."""
    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file not found: {path}")
    return Tokenizer.from_file(str(path))


def count_token_bigrams(
    tokenizer: Tokenizer,
    documents: Iterable[str],
    max_tokens: int | None = None,
    batch_size: int = 256,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Within-document token bigram and unigram counts (the rule of the authors' streaming counter).

    Documents are encoded in batches with ``tokenizer.encode_batch`` (no special tokens are added). Rule:
    documents are taken in order; empty encodings are skipped; a document that would exceed the
    ``max_tokens`` budget is truncated to the remaining budget and counting stops once the budget is
    reached (paper: most likely 2M tokens). ``C[i, j]`` counts adjacent pairs ``(i, j)`` *inside* each
    document (no transition from the last token of one document to the first of the next); ``unigram[v]``
    counts every counted token. So ``C.sum() == unigram.sum() - number_of_documents_counted``.

    Returns ``(C: LongTensor[V, V], unigram: LongTensor[V])`` with ``V = tokenizer.get_vocab_size()``.
    Counting is vectorised (``numpy.bincount`` on ``i * V + j`` over buffered batches).
    Raises ``ValueError`` for ``max_tokens <= 0``, ``batch_size <= 0`` or when no token was counted.
    """
    max_tokens = checks.optional_integer("max_tokens", max_tokens)
    batch_size = checks.integer("batch_size", batch_size)
    if isinstance(documents, str):
        raise TypeError("documents must be an iterable of str, not a single str")
    V = int(tokenizer.get_vocab_size())
    bigram = np.zeros(V * V, dtype=np.int64)
    unigram = np.zeros(V, dtype=np.int64)
    pending: list[np.ndarray] = []
    pending_len = 0
    flush_at = 1 << 22
    total = 0
    done = False

    def flush() -> None:
        nonlocal pending, pending_len
        if pending:
            flat = np.concatenate(pending)
            bigram[:] += np.bincount(flat, minlength=V * V)
            pending, pending_len = [], 0

    def process(batch: list[str]) -> None:
        nonlocal total, done, pending_len
        docs: list[np.ndarray] = []
        for enc in tokenizer.encode_batch(batch, add_special_tokens=False):
            ids = np.asarray(enc.ids, dtype=np.int64)
            if ids.size == 0:
                continue
            if max_tokens is not None:
                ids = ids[: max_tokens - total]
            docs.append(ids)
            total += int(ids.size)
            if max_tokens is not None and total >= max_tokens:
                done = True
                break
        if not docs:
            return
        flat = np.concatenate(docs)
        unigram[:] += np.bincount(flat, minlength=V)
        starts = np.zeros(flat.size, dtype=bool)
        starts[np.cumsum([0] + [d.size for d in docs[:-1]])] = True
        within = ~starts[1:]  # pair (t-1, t) is valid unless t starts a document
        pairs = flat[:-1][within] * V + flat[1:][within]
        pending.append(pairs)
        pending_len += int(pairs.size)
        if pending_len >= flush_at:
            flush()

    batch: list[str] = []
    for doc in documents:
        if not isinstance(doc, str):
            raise TypeError(f"documents must yield str, got {type(doc).__name__}")
        batch.append(doc)
        if len(batch) >= batch_size:
            process(batch)
            batch = []
            if done:
                break
    if batch and not done:
        process(batch)
    flush()
    if total == 0:
        raise ValueError("documents is an empty corpus: no token was counted")
    return torch.from_numpy(bigram.reshape(V, V)), torch.from_numpy(unigram)


class BPEDecoder:
    """Decoder from BPE token ids to text (same interface as :class:`dllm_lit.corpus.charlevel.CharDecoder`).

    ``tokenizer`` is a ``tokenizers.Tokenizer`` or a path to its JSON. Decoding goes through
    ``tokenizer.decode`` (ByteLevel decoder: byte sequences that are not valid UTF-8, which chain samples
    can produce, become U+FFFD). ``skip_special_tokens`` (default True) omits ``<pad>``/``<unk>``/... .
    """

    def __init__(self, tokenizer: Tokenizer | str | Path, skip_special_tokens: bool = True) -> None:
        if isinstance(tokenizer, (str, Path)):
            tokenizer = load_tokenizer(tokenizer)
        self.tokenizer: Tokenizer = tokenizer
        self.skip_special_tokens = bool(skip_special_tokens)

    @classmethod
    def from_file(cls, path: str | Path, skip_special_tokens: bool = True) -> BPEDecoder:
        return cls(load_tokenizer(path), skip_special_tokens=skip_special_tokens)

    @property
    def vocab_size(self) -> int:
        """Number of token ids (chain states), ``tokenizer.get_vocab_size()``."""
        return int(self.tokenizer.get_vocab_size())

    def _check(self, arr: np.ndarray, ndim: int) -> np.ndarray:
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"ids must hold integer token ids, got dtype {arr.dtype}")
        if arr.ndim != ndim:
            shape = "1-D" if ndim == 1 else "2-D [N, T]"
            raise ValueError(f"ids must be {shape}, got shape {tuple(arr.shape)}")
        if arr.size:
            bad = (arr < 0) | (arr >= self.vocab_size)
            if bool(bad.any()):
                raise ValueError(f"ids must lie in [0, {self.vocab_size}); got {int(arr[bad][0])}")
        return arr.astype(np.int64, copy=False)

    @staticmethod
    def _to_numpy(ids: torch.Tensor | np.ndarray | Sequence) -> np.ndarray:
        if isinstance(ids, torch.Tensor):
            return ids.detach().cpu().numpy()
        return np.asarray(ids)

    def decode(self, ids: torch.Tensor | np.ndarray | Sequence[int]) -> str:
        """Decode one 1-D id sequence to text."""
        arr = self._check(self._to_numpy(ids), 1)
        return self.tokenizer.decode(arr.tolist(), skip_special_tokens=self.skip_special_tokens)

    def decode_batch(self, ids: torch.Tensor | np.ndarray | Sequence[Sequence[int]]) -> list[str]:
        """Decode a batch ``[N, T]`` of id sequences to ``N`` strings."""
        arr = self._check(self._to_numpy(ids), 2)
        return list(self.tokenizer.decode_batch(arr.tolist(), skip_special_tokens=self.skip_special_tokens))

    def __repr__(self) -> str:
        return f"BPEDecoder(vocab_size={self.vocab_size}, skip_special_tokens={self.skip_special_tokens})"
