"""A character chain (text8 conventions) counted from a local plain-text file."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from dllm_lit import checks
from dllm_lit.sources.corpus_chain import CharCorpusChainSource, file_fingerprint
from dllm_lit.sources.options import SparsityOptions

__all__ = ["LocalTextChars"]


class LocalTextChars(CharCorpusChainSource):
    """A character chain from a local plain-text file with the text8 conventions.

    The file is read whole (:func:`dllm_lit.corpus.read_text_file`), normalised with
    :func:`dllm_lit.corpus.normalize_text8` (letters lower-cased, everything else a space, runs of spaces
    collapsed) and counted as ONE stream; the first ``max_chars`` normalised characters are used (None:
    all).  Chain options as in :class:`Text8Chars` (defaults: the paper's text8 rule, K = V = 27, eps = 0).
    The cache is keyed by the file's content, not its path.
    """

    cache_kind = "chain-local-text"

    example_init_args = {"path": "corpus.txt"}

    def __init__(
        self,
        path: str,
        max_chars: int | None = None,
        sparsity: SparsityOptions = SparsityOptions(),
        encoding: str = "utf-8",
    ) -> None:
        checks.nonempty_str("path", path)
        self.path, self.encoding = path, encoding
        self.max_chars = checks.optional_integer("max_chars", max_chars)
        self.sparsity = SparsityOptions.coerce(sparsity)

    def cache_settings(self) -> dict[str, Any]:
        p = Path(self.path).expanduser()
        if not p.is_file():
            raise FileNotFoundError(f"LocalTextChars: text file not found: {p} (set data.source.init_args.path)")
        return {
            "file": file_fingerprint(p), "encoding": self.encoding, "max_chars": self.max_chars, **self.sparsity.as_dict(),
        }

    def _build_into(self, directory: Path) -> None:
        from dllm_lit.corpus.charlevel import count_char_bigrams
        from dllm_lit.corpus.documents import read_text_file

        counts = count_char_bigrams(read_text_file(self.path, encoding=self.encoding), max_chars=self.max_chars)
        self._write_char_entry(directory, counts, {"source": "local_text_chars", "path": str(Path(self.path).expanduser()), "max_chars": self.max_chars})
