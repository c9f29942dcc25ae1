"""The paper's text8 character oracle: text8's first 5M characters as one stream, V = K = 27, eps = 0."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from dllm_lit import checks
from dllm_lit.sources.corpus_chain import (CharCorpusChainSource, check_data_files, corpus_documents, input_identity,
                                          is_local)
from dllm_lit.sources.options import SparsityOptions

__all__ = ["Text8Chars"]


class Text8Chars(CharCorpusChainSource):
    """The paper's text8 character oracle (App. "Experimental Setup and Oracle Construction", *Text8*;
    the construction is described in docs/oracle.md).

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
        sparsity: K rule and teleport (:class:`SparsityOptions`; paper: K = V, eps = 0).
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
        sparsity: SparsityOptions = SparsityOptions(),
        data_files: str | list[str] | dict[str, str | list[str]] | None = None,
        text_field: str = "text",
    ) -> None:
        checks.nonempty_str("dataset", dataset)
        check_data_files(data_files)
        self.dataset, self.split, self.data_files, self.text_field = dataset, split, data_files, text_field
        self.max_chars = checks.optional_integer("max_chars", max_chars)
        self.sparsity = SparsityOptions.coerce(sparsity)

    def cache_settings(self) -> dict[str, Any]:
        return {
            "input": input_identity(self.dataset, self.data_files), "split": self.split, "text_field": self.text_field,
            "max_chars": self.max_chars, **self.sparsity.as_dict(),
        }

    def _build_into(self, directory: Path) -> None:
        from dllm_lit.corpus.charlevel import count_char_bigrams
        local = is_local(self.dataset)
        docs = corpus_documents(
            self.dataset, split=self.split, text_field=self.text_field, data_files=self.data_files,
            streaming=local, sample_by="document",
        )
        counts = count_char_bigrams(docs, max_chars=self.max_chars)
        self._write_char_entry(directory, counts, {"source": "text8_chars", "dataset": self.dataset, "split": self.split, "max_chars": self.max_chars})
