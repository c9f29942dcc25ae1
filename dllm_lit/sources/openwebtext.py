"""The paper's OpenWebText oracle: byte-level BPE (vocab 4096) over cleaned OWT documents, within-document
bigram counts, K by the mass-percentile rule, eps = 1e-4 teleport to the token unigram."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch

from dllm_lit import checks
from dllm_lit.markov import save_chain
from dllm_lit.sources.base import TextDecoder
from dllm_lit.sources.corpus_chain import (
    CHAIN_FILE,
    corpus_documents,
    COUNTS_FILE,
    TOKENIZER_FILE,
    CorpusChainSource,
    check_data_files,
    input_identity,
    is_local,
    save_counts,
)
from dllm_lit.sources.options import SparsityOptions

__all__ = ["OpenWebTextBPE"]


class OpenWebTextBPE(CorpusChainSource):
    """The paper's OpenWebText byte-level BPE oracle (App. "Experimental Setup and Oracle Construction",
    *OpenWebText*; the construction is described in docs/oracle.md).

    Pipeline (defaults = the paper's settings):

    1. documents of ``stanford-cs336/owt-sample`` (split train, streamed; one document per line, as the
       hub's text files are read), cleaned by :func:`dllm_lit.corpus.clean_documents` (drop ``\\r``, strip
       newlines, collapse spaces/tabs, cut to ``max_doc_chars = 4096`` characters);
    2. a byte-level BPE tokenizer (vocab 4096, min_frequency 2, specials ``<pad> <unk> <bos> <eos>`` = ids
       0..3, all 256 bytes in the alphabet) trained on the first ``tokenizer_max_bytes = 200 MB`` of them;
    3. within-document bigram counts (no transition across documents) over the first
       ``count_max_tokens = 2,000,000`` tokens; rows without counts take the unigram;
       P_mle = row_normalise(C + 1e-8);
    4. K by the mass-percentile rule: K*_i = smallest k with top-k mass >= ``sparsity.target_mass = 0.99``,
       K = floor(``sparsity.k_percentile = 90``-th percentile of K*_i) (206 in the paper); top-K kept,
       renormalised;
    5. teleport ``sparsity.eps = 1e-4`` to nu = the empirical token unigram: P' = (1 - eps) P_topK + eps 1 nu^T.

    ``sparsity.top_k`` fixes K instead of the rule (with ``target_mass`` and ``k_percentile`` set to None).
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
        sparsity: SparsityOptions = SparsityOptions(target_mass=0.99, k_percentile=90, eps=1e-4),
        text_field: str = "text",
        sample_by: Literal["line", "paragraph", "document"] = "line",
    ) -> None:
        from dllm_lit.corpus.bpe import check_vocab_size

        checks.nonempty_str("dataset", dataset)
        check_vocab_size(vocab_size)
        check_data_files(data_files)
        checks.choice("sample_by", sample_by, ("line", "paragraph", "document"))
        self.dataset, self.split, self.streaming, self.data_files = dataset, split, bool(streaming), data_files
        self.vocab_size = vocab_size
        self.min_frequency = checks.integer("min_frequency", min_frequency)
        self.tokenizer_max_bytes = checks.optional_integer("tokenizer_max_bytes", tokenizer_max_bytes)
        self.count_max_tokens = checks.optional_integer("count_max_tokens", count_max_tokens)
        self.max_doc_chars = checks.optional_integer("max_doc_chars", max_doc_chars)
        self.sparsity = SparsityOptions.coerce(sparsity)
        self.text_field, self.sample_by = text_field, sample_by

    def cache_settings(self) -> dict[str, Any]:
        return {
            "input": input_identity(self.dataset, self.data_files), "split": self.split, "text_field": self.text_field,
            "sample_by": self.sample_by, "vocab_size": self.vocab_size, "min_frequency": self.min_frequency,
            "tokenizer_max_bytes": self.tokenizer_max_bytes, "count_max_tokens": self.count_max_tokens,
            "max_doc_chars": self.max_doc_chars, **self.sparsity.as_dict(),
        }

    def _documents(self) -> Any:
        from dllm_lit.corpus.bpe import clean_documents
        streaming = True if is_local(self.dataset) else self.streaming
        raw = corpus_documents(
            self.dataset, split=self.split, text_field=self.text_field, streaming=streaming,
            data_files=self.data_files, sample_by=self.sample_by,
        )
        return clean_documents(raw, max_chars=self.max_doc_chars)

    def _build_into(self, directory: Path) -> None:
        from dllm_lit.corpus.bpe import count_token_bigrams, save_tokenizer, train_bytelevel_bpe

        tok = train_bytelevel_bpe(self._documents(), vocab_size=self.vocab_size, min_frequency=self.min_frequency,
                                  max_bytes=self.tokenizer_max_bytes)
        save_tokenizer(tok, directory / TOKENIZER_FILE)
        C, unigram = count_token_bigrams(tok, self._documents(), max_tokens=self.count_max_tokens)
        nu = unigram.to(torch.float64) / unigram.sum()
        n_tokens = int(unigram.sum().item())
        chain = self.sparsity.chain_from_counts(
            C, nu=nu, unigram=unigram,
            metadata={
                "source": "owt_bpe", "dataset": self.dataset, "split": self.split, "teleport_law": "token_unigram",
                "tokenizer_vocab_size": int(tok.get_vocab_size()), "num_tokens": n_tokens,
                "num_documents": n_tokens - int(C.sum().item()),
            },
        )
        save_chain(chain, directory / CHAIN_FILE)
        save_counts(directory / COUNTS_FILE, C, unigram)

    def _load_extras(self, entry: Path) -> None:
        from dllm_lit.corpus.bpe import load_tokenizer

        self._tokenizer = load_tokenizer(entry / TOKENIZER_FILE)

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
