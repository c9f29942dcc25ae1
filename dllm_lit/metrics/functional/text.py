"""Decoded texts in and out of a Hugging Face tokenizer: validation, truncation, padded batches."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

__all__ = ["check_texts", "padded_batches", "tokenize"]


def check_texts(texts: Sequence[str], name: str = "texts", allow_empty: bool = False) -> list[str]:
    """``texts`` as a list of str (a bare string is refused; empty only with ``allow_empty``)."""
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Sequence):
        raise ValueError(f"`{name}` must be a list of strings, got {type(texts).__name__}")
    texts = list(texts)
    if not allow_empty and len(texts) == 0:
        raise ValueError(f"`{name}` is empty; pass at least one text")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"`{name}[{i}]` must be a str, got {type(text).__name__}")
    return texts


def tokenize(tokenizer: Any, texts: list[str], max_length: int, add_special_tokens: bool) -> list[list[int]]:
    """Token ids of each text, truncated to ``max_length`` (no padding)."""
    if not texts:
        return []
    enc = tokenizer(texts, add_special_tokens=add_special_tokens, truncation=True, max_length=max_length)
    return [list(ids) for ids in enc["input_ids"]]


def padded_batches(
    token_lists: list[list[int]], indices: list[int], batch_size: int, device: torch.device
) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor]]:
    """Yield ``(idx, input_ids, attention_mask)`` for right-padded batches, longest texts first."""
    order = sorted(indices, key=lambda i: -len(token_lists[i]))
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        seqs = [torch.tensor(token_lists[i], dtype=torch.long) for i in idx]
        lengths = torch.tensor([len(s) for s in seqs])
        ids = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=0)
        mask = (torch.arange(ids.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)).long()
        yield idx, ids.to(device), mask.to(device)
