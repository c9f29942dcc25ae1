"""Order-k character counts (text8 alphabet): C[context, next] over one normalised stream, and their files.

``count_char_ngrams(text, k)`` normalises with :func:`dllm_lit.corpus.normalize_text8` and counts every
(k + 1)-gram of the single stream (word boundaries crossed): context = the k previous characters as a base-27
number (oldest first), next = the following character.  Count files (``dllm_lit.char_ngram_counts/1``) store
the nonzero entries as ``[context, next, count]`` triples; the bundled order-2 and order-3 English files are
built by ``scripts/build_english_ngram_counts.py`` from the same text as the bigram table.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dllm_lit import checks
from dllm_lit.corpus.charlevel import RESOURCES, TEXT8_ALPHABET, TEXT8_VOCAB_SIZE, _normalised_id_stream

__all__ = ["count_char_ngrams", "ngram_counts_payload", "load_char_ngram_counts", "load_english_ngram_counts",
           "NGRAM_FORMAT"]

NGRAM_FORMAT = "dllm_lit.char_ngram_counts/1"


def count_char_ngrams(text: str, order: int) -> torch.Tensor:
    """Counts [27^order, 27] of (context, next) over ONE normalised stream (see module docstring)."""
    k = checks.integer("order (k)", order, 1)
    ids = np.concatenate(list(_normalised_id_stream(text)) or [np.zeros(0, dtype=np.uint8)]).astype(np.int64)
    V = TEXT8_VOCAB_SIZE
    if ids.size <= k:
        raise ValueError(f"the text must hold more than order = {k} characters after normalize_text8, got {ids.size}")
    code = np.zeros(ids.size - k, dtype=np.int64)
    for j in range(k + 1):
        code = code * V + ids[j: ids.size - k + j]
    return torch.from_numpy(np.bincount(code, minlength=V ** (k + 1)).reshape(V ** k, V))


def ngram_counts_payload(counts: torch.Tensor, order: int, **metadata: Any) -> dict[str, Any]:
    """The JSON payload: format, alphabet, order, metadata and the nonzero ``[context, next, count]`` triples."""
    nz = counts.nonzero()
    triples = [[int(c), int(n), int(counts[c, n])] for c, n in nz.tolist()]
    return {"format": NGRAM_FORMAT, "alphabet": TEXT8_ALPHABET, "order": int(order), **metadata, "counts": triples}


def _from_payload(payload: Any, origin: str) -> torch.Tensor:
    if not isinstance(payload, dict) or payload.get("format") != NGRAM_FORMAT:
        raise ValueError(f"{origin}: not a {NGRAM_FORMAT} file")
    if payload.get("alphabet") != TEXT8_ALPHABET:
        raise ValueError(f"{origin}: alphabet must be {TEXT8_ALPHABET!r}")
    k = checks.integer("order", payload.get("order"), 1)
    V = TEXT8_VOCAB_SIZE
    t = torch.tensor(payload["counts"], dtype=torch.int64).reshape(-1, 3)
    if t.numel() and ((t[:, 0] < 0).any() or (t[:, 0] >= V ** k).any() or (t[:, 1] < 0).any() or (t[:, 1] >= V).any()
                      or (t[:, 2] <= 0).any()):
        raise ValueError(f"{origin}: count triples out of range")
    C = torch.zeros(V ** k, V, dtype=torch.int64)
    C[t[:, 0], t[:, 1]] = t[:, 2]
    if "num_characters" in payload and int(C.sum()) != int(payload["num_characters"]) - k:
        raise ValueError(f"{origin}: counts sum to {int(C.sum())}, expected num_characters - order")
    return C


def load_char_ngram_counts(path: str | Path) -> torch.Tensor:
    """Counts [27^k, 27] from a count file."""
    return _from_payload(json.loads(Path(path).read_text(encoding="utf-8")), str(path))


def load_english_ngram_counts(order: int) -> torch.Tensor:
    """The bundled order-2 or order-3 English counts (same text as the bundled bigram table)."""
    k = checks.choice("order (bundled English counts)", order, (2, 3))
    name = f"english_char_order{k}.json"
    text = (RESOURCES / name).read_text(encoding="utf-8")
    return _from_payload(json.loads(text), name)
