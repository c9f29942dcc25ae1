"""Corpora for the ground-truth Markov chains: text8-style characters (:mod:`.charlevel`), byte-level BPE for
OWT (:mod:`.bpe`), text input -- dataset documents and plain text files (:mod:`.documents`) --, the bundled
English (King James Bible) character counts, and a checksummed build cache (:mod:`.cache`).  The chain
sources built from these corpora live in :mod:`dllm_lit.sources`.

Names are re-exported lazily (PEP 562), so ``from dllm_lit.corpus import SettingsCache`` imports only the
cache module (not tokenizers or datasets).
"""

# ruff: noqa: F401  (the TYPE_CHECKING imports below exist for static analysers only)
from __future__ import annotations

from typing import TYPE_CHECKING

from dllm_lit.util.lazy_exports import lazy_exports

_EXPORTS: dict[str, str] = {
    # charlevel
    "TEXT8_ALPHABET": "charlevel",
    "TEXT8_VOCAB_SIZE": "charlevel",
    "TEXT8_SPACE_ID": "charlevel",
    "CHAR_BIGRAM_FORMAT": "charlevel",
    "normalize_text8": "charlevel",
    "encode_chars": "charlevel",
    "decode_chars": "charlevel",
    "CharDecoder": "charlevel",
    "count_char_bigrams": "charlevel",
    "load_char_bigram_counts": "charlevel",
    "char_bigram_counts_payload": "charlevel",
    "load_english_counts": "charlevel",
    "english_counts_metadata": "charlevel",
    # bpe
    "SPECIAL_TOKENS": "bpe",
    "MIN_BPE_VOCAB_SIZE": "bpe",
    "clean_document": "bpe",
    "clean_documents": "bpe",
    "take_until_bytes": "bpe",
    "train_bytelevel_bpe": "bpe",
    "save_tokenizer": "bpe",
    "load_tokenizer": "bpe",
    "count_token_bigrams": "bpe",
    "BPEDecoder": "bpe",
    # documents
    "TEXT8_HF_DATASET": "documents",
    "OWT_HF_DATASET": "documents",
    "PACKAGED_BUILDERS": "documents",
    "DatasetUnavailableError": "documents",
    "iter_documents": "documents",
    "read_text_file": "documents",
    # cache
    "CACHE_FORMAT_VERSION": "cache",
    "MANIFEST_NAME": "cache",
    "CacheEntryError": "cache",
    "SettingsCache": "cache",
}

__all__ = list(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:  # pragma: no cover - for static analysers and IDEs
    from dllm_lit.corpus.bpe import (
        MIN_BPE_VOCAB_SIZE,
        SPECIAL_TOKENS,
        BPEDecoder,
        clean_document,
        clean_documents,
        count_token_bigrams,
        load_tokenizer,
        save_tokenizer,
        take_until_bytes,
        train_bytelevel_bpe,
    )
    from dllm_lit.corpus.cache import (
        CACHE_FORMAT_VERSION,
        MANIFEST_NAME,
        CacheEntryError,
        SettingsCache,
    )
    from dllm_lit.corpus.charlevel import (
        CHAR_BIGRAM_FORMAT,
        TEXT8_ALPHABET,
        TEXT8_SPACE_ID,
        TEXT8_VOCAB_SIZE,
        CharDecoder,
        char_bigram_counts_payload,
        count_char_bigrams,
        decode_chars,
        encode_chars,
        english_counts_metadata,
        load_char_bigram_counts,
        load_english_counts,
        normalize_text8,
    )
    from dllm_lit.corpus.documents import (
        OWT_HF_DATASET,
        PACKAGED_BUILDERS,
        TEXT8_HF_DATASET,
        DatasetUnavailableError,
        iter_documents,
        read_text_file,
    )
