r"""Within-sequence n-gram counts, exact and vectorised.

The n-grams of a row are encoded as int64 keys with the polynomial code
:math:`k = \sum_j x_{t+j} B^{n-1-j}` (``B`` = the batch's largest token id + 1) when
:math:`B^n \le 2^{63}`.  Otherwise the first ``k`` tokens that fit are encoded, the keys are
replaced by their per-row *dense rank* (``< T``), and the next tokens are appended to the rank with
the same polynomial code -- repeated until all ``n`` tokens are consumed.  Each step is injective,
so distinct n-grams get distinct keys: there are no collisions at all (this is stronger than a
64-bit mixing hash, whose collision probability would be :math:`\le m(m-1)/2^{65}` per row with
:math:`m=T-n+1` n-grams).  Distinct keys per row are counted by sorting each row and counting value
changes; everything is vectorised over rows and positions (the only Python loops run over the
``n`` offsets and over row chunks bounding memory).
"""
from __future__ import annotations

import torch
from torch import Tensor

from dllm_lit import checks
from dllm_lit.metrics.functional.tokens import check_token_ids

__all__ = ["distinct_ngrams_per_sequence"]

_INT63 = 1 << 63
_CHUNK_ELEMENTS = 1 << 23  # rows are processed in chunks of at most this many n-gram keys


def _max_tokens_that_fit(prefix_size: int, base: int) -> int:
    """Largest ``k`` with ``prefix_size * base**k <= 2**63`` (keys stay below ``2**63``)."""
    k, size = 0, prefix_size
    while size * base <= _INT63:
        size *= base
        k += 1
    return k


def _dense_rank_rows(keys: Tensor) -> tuple[Tensor, Tensor]:
    """Per-row dense rank of ``keys`` ([R, m]) and the number of distinct values per row."""
    sorted_keys, order = keys.sort(dim=1)
    change = sorted_keys[:, 1:] != sorted_keys[:, :-1]
    rank_sorted = torch.zeros_like(keys)
    rank_sorted[:, 1:] = change.cumsum(dim=1)
    ranks = torch.empty_like(keys).scatter_(1, order, rank_sorted)
    return ranks, rank_sorted[:, -1] + 1


def _distinct_ngrams_chunk(x: Tensor, n: int, base: int) -> Tensor:
    num_windows = x.shape[1] - n + 1
    keys = torch.zeros(x.shape[0], num_windows, dtype=torch.int64, device=x.device)
    consumed, prefix_size = 0, 1
    while True:
        take = min(n - consumed, _max_tokens_that_fit(prefix_size, base))
        if take < 1:  # cannot happen for base <= 2**32 and prefix_size <= 2**31 (validated)
            raise RuntimeError("internal error: n-gram key does not fit in 63 bits")
        for j in range(consumed, consumed + take):
            keys = keys * base + x[:, j : j + num_windows]
        consumed += take
        if consumed == n:
            return _dense_rank_rows(keys)[1]
        keys, _ = _dense_rank_rows(keys)
        prefix_size = num_windows  # ranks lie in [0, num_windows)


def distinct_ngrams_per_sequence(samples: Tensor, n: int) -> Tensor:
    r"""Number of distinct n-grams in each row of ``samples`` (exact, vectorised).

    Args:
        samples: ``LongTensor[N, T]`` of token ids in ``[0, 2**32)``, ``T >= n``.
        n: n-gram order, ``n >= 1``.

    Returns:
        ``LongTensor[N]``: :math:`|\{x^{(s)}_{t:t+n-1}: 1\le t\le T-n+1\}|` for every row ``s``.
    """
    checks.integer("`n`", n)
    x = check_token_ids(samples, min_length=n)
    base = max(int(x.max()) + 1, 2)
    num_windows = x.shape[1] - n + 1
    rows_per_chunk = max(1, _CHUNK_ELEMENTS // num_windows)
    return torch.cat(
        [_distinct_ngrams_chunk(chunk, n, base) for chunk in x.split(rows_per_chunk, dim=0)]
    )
