r"""Sequence-level surface metrics on token ids: n-gram diversity and duplication rate.

Definitions follow the paper's Appendix "Formal Definitions of Evaluation Metrics"
(``app:appendix_metrics``, subsection "Sequence-Level Surface Metrics") and the reference
implementation (``metrics_full.py``; see ``shared/reference/paper-reference-code.md`` section 4).
Let :math:`\{x^{(s)}_{1:T}\}_{s=1}^{N}` be the generated sequences.

* **n-gram diversity** (within-sequence type/token ratio, summed over sequences)

  .. math::
     \mathrm{Div}_n = \frac{\sum_{s=1}^{N} \bigl|\{x^{(s)}_{t:t+n-1} : 1 \le t \le T-n+1\}\bigr|}
                           {N\,(T-n+1)} .

* **duplication rate**

  .. math::
     \mathrm{Dup} = 1 - \frac{\bigl|\{x^{(s)}_{1:T} : 1 \le s \le N\}\bigr|}{N} .

Both are :class:`torchmetrics.Metric` subclasses and are exact under DDP: the diversity states are
sums, the duplication state is the list of per-sequence 64-bit hashes, gathered from every process
(distinct values cannot be summed), so duplicates straddling two processes are counted.

Implementation notes
--------------------
*n-gram counting is exact (no hashing).*  The n-grams of a row are encoded as int64 keys with the
polynomial code :math:`k = \sum_j x_{t+j} B^{n-1-j}` (``B`` = the batch's largest token id + 1)
when :math:`B^n \le 2^{63}`.  Otherwise the first ``k`` tokens that fit are encoded, the keys are
replaced by their per-row *dense rank* (``< T``), and the next tokens are appended to the rank with
the same polynomial code -- repeated until all ``n`` tokens are consumed.  Each step is injective,
so distinct n-grams get distinct keys: there are no collisions at all (this is stronger than a
64-bit mixing hash, whose collision probability would be :math:`\le m(m-1)/2^{65}` per row with
:math:`m=T-n+1` n-grams).  Distinct keys per row are counted by sorting each row and counting value
changes; everything is vectorised over rows and positions (the only Python loops run over the
``n`` offsets and over row chunks bounding memory).

*Sequence hashes.*  Sequence :math:`x_{1:T}` is hashed as
:math:`h = \mathrm{mix}\bigl(\sum_{t} \mathrm{mix}((t \ll 32) \,|\, x_t \oplus c) + T\cdot c'
\bmod 2^{64}\bigr)` with ``mix`` the SplitMix64 finaliser (a bijection of 64-bit words with full
avalanche).  Modelling ``mix`` as a random function, two different sequences collide with
probability :math:`2^{-64}`, so among :math:`N` sequences the probability that *any* pair of
distinct sequences collides (and the duplication rate is over-estimated by :math:`\ge 1/N`) is at
most :math:`N(N-1)/2^{65}` -- e.g. :math:`2.7\times10^{-10}` for :math:`N=10^5`.  Hash-equal
sequences are not re-checked for exact equality.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from dllm_lit.metrics.bootstrap import ratio_ci
from dllm_lit.metrics.distributed import EmptyMetricError, TypedCatStateMixin, cat_state, synced_cat_states

__all__ = [
    "DuplicationRate",
    "NgramDiversity",
    "distinct_ngrams_per_sequence",
    "mix64",
    "sequence_hashes",
]

_INT63 = 1 << 63
_MAX_TOKEN_ID = (1 << 32) - 1
_MAX_LENGTH = (1 << 31) - 1
_CHUNK_ELEMENTS = 1 << 23  # rows are processed in chunks of at most this many n-gram keys


def _signed(v: int) -> int:
    """Reinterpret an unsigned 64-bit constant as a signed int64 Python int."""
    return v - (1 << 64) if v >= _INT63 else v


_MIX_M1 = _signed(0xBF58476D1CE4E5B9)
_MIX_M2 = _signed(0x94D049BB133111EB)
_HASH_SALT = _signed(0x9E3779B97F4A7C15)
_HASH_LEN_MUL = 0xD6E8FEB86659FD93


def _shr(x: Tensor, k: int) -> Tensor:
    """Logical (unsigned) right shift of int64 words."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def mix64(x: Tensor) -> Tensor:
    """SplitMix64 finaliser on int64 tensors (arithmetic modulo :math:`2^{64}`, bijective)."""
    if x.dtype != torch.int64:
        raise ValueError(f"mix64 expects an int64 tensor, got dtype={x.dtype}")
    x = x ^ _shr(x, 30)
    x = x * _MIX_M1
    x = x ^ _shr(x, 27)
    x = x * _MIX_M2
    return x ^ _shr(x, 31)


def _check_samples(samples: Tensor, name: str = "samples", min_length: int = 1) -> Tensor:
    """Validate a ``LongTensor[N, T]`` of token ids and return it as int64."""
    if not isinstance(samples, Tensor):
        raise ValueError(f"`{name}` must be a torch.Tensor of token ids with shape [N, T], got {type(samples).__name__}")
    if samples.dtype.is_floating_point or samples.dtype.is_complex or samples.dtype == torch.bool:
        raise ValueError(f"`{name}` must have an integer dtype (token ids), got dtype={samples.dtype}")
    if samples.ndim != 2:
        raise ValueError(f"`{name}` must be 2-D with shape [N, T], got shape {tuple(samples.shape)}")
    n_seq, length = samples.shape
    if n_seq == 0:
        raise ValueError(f"`{name}` is empty (N = 0 sequences); pass at least one sequence")
    if length < min_length:
        raise ValueError(f"`{name}` has length T = {length}, but T >= {min_length} is required")
    if length > _MAX_LENGTH:
        raise ValueError(f"`{name}` has length T = {length} > {_MAX_LENGTH}")
    samples = samples.to(torch.int64)
    lo, hi = int(samples.min()), int(samples.max())
    if lo < 0 or hi > _MAX_TOKEN_ID:
        raise ValueError(f"`{name}` must hold token ids in [0, {_MAX_TOKEN_ID}], got values in [{lo}, {hi}]")
    return samples


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
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"`n` must be an integer >= 1, got {n!r}")
    x = _check_samples(samples, min_length=n)
    base = max(int(x.max()) + 1, 2)
    num_windows = x.shape[1] - n + 1
    rows_per_chunk = max(1, _CHUNK_ELEMENTS // num_windows)
    return torch.cat(
        [_distinct_ngrams_chunk(chunk, n, base) for chunk in x.split(rows_per_chunk, dim=0)]
    )


def sequence_hashes(samples: Tensor) -> Tensor:
    r"""64-bit hash of each row of ``samples`` (see the module docstring for the collision bound).

    .. math::
       h(x_{1:T}) = \mathrm{mix}\Bigl(T c' + \sum_{t=1}^{T} \mathrm{mix}\bigl(((t-1) \ll 32)
       \,|\, x_t \oplus c\bigr) \bmod 2^{64}\Bigr)

    Args:
        samples: ``LongTensor[N, T]`` of token ids in ``[0, 2**32)``.

    Returns:
        ``LongTensor[N]`` (int64 bit patterns of the unsigned hashes).
    """
    x = _check_samples(samples)
    length = x.shape[1]
    pos = torch.arange(length, dtype=torch.int64, device=x.device) << 32
    terms = mix64((pos.unsqueeze(0) | x) ^ _HASH_SALT)
    # int64 arithmetic wraps modulo 2**64; the length term is reduced in Python first
    total = terms.sum(dim=1) + _signed((length * _HASH_LEN_MUL) % (1 << 64))
    return mix64(total)


class NgramDiversity(TypedCatStateMixin, Metric):
    r"""Within-sequence n-gram diversity (paper Appendix ``app:appendix_metrics``, "n-gram diversity").

    .. math::
       \mathrm{Div}_n = \frac{\sum_{s=1}^{N} D_s}{\sum_{s=1}^{N} (T_s-n+1)}, \qquad
       D_s = \bigl|\{x^{(s)}_{t:t+n-1} : 1 \le t \le T_s-n+1\}\bigr| ,

    i.e. per sequence the number of distinct n-grams, summed over sequences, divided by the total
    number of n-grams :math:`N(T-n+1)` (``metrics_full.py``; the paper uses ``n in {2, 3}``).

    ``update(samples)`` takes ``LongTensor[N, T]`` token ids (``T`` may differ between calls).
    ``compute()`` returns a float64 scalar in ``(0, 1]``.

    Args:
        n: n-gram order (``>= 1``).
        per_sequence: also keep the per-sequence numerators :math:`D_s` and denominators
            :math:`T_s-n+1` (cat states, gathered over processes) so that
            :meth:`bootstrap_ci` can resample sequences.
        **kwargs: forwarded to :class:`torchmetrics.Metric`.

    States: ``distinct`` and ``total`` (int64, ``dist_reduce_fx="sum"``); with ``per_sequence``
    also ``seq_distinct`` and ``seq_total`` (int64 lists, ``dist_reduce_fx="cat"``).
    """

    is_differentiable = False
    higher_is_better: bool | None = None
    full_state_update = False

    distinct: Tensor
    total: Tensor

    _cat_state_specs = {"seq_distinct": (torch.int64, ()), "seq_total": (torch.int64, ())}

    def __init__(self, n: int = 2, per_sequence: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"`n` must be an integer >= 1, got {n!r}")
        self.n = n
        self.per_sequence = bool(per_sequence)
        self.add_state("distinct", default=torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0, dtype=torch.int64), dist_reduce_fx="sum")
        if self.per_sequence:
            self.add_state("seq_distinct", default=[], dist_reduce_fx="cat")
            self.add_state("seq_total", default=[], dist_reduce_fx="cat")

    def update(self, samples: Tensor) -> None:
        """Add a batch ``LongTensor[N, T]`` of token ids (``T >= n``)."""
        counts = distinct_ngrams_per_sequence(samples, self.n).to(self.device)
        num_windows = samples.shape[1] - self.n + 1
        self.distinct += counts.sum()
        self.total += counts.numel() * num_windows
        if self.per_sequence:
            self.seq_distinct.append(counts)
            self.seq_total.append(torch.full_like(counts, num_windows))

    def compute(self) -> Tensor:
        """Return :math:`\\mathrm{Div}_n` (float64 scalar)."""
        if int(self.total) == 0:
            raise EmptyMetricError(f"{type(self).__name__}(n={self.n}).compute() called before any sequence was seen")
        return self.distinct.double() / self.total.double()

    def bootstrap_ci(
        self, num_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
    ) -> tuple[float, float]:
        """Percentile-bootstrap CI of :math:`\\mathrm{Div}_n`, resampling sequences.

        Requires ``per_sequence=True``. Collective under DDP: call it on every process.
        """
        if not self.per_sequence:
            raise ValueError("bootstrap_ci needs per-sequence states: construct NgramDiversity(..., per_sequence=True)")
        with synced_cat_states(self, {"seq_distinct": torch.int64, "seq_total": torch.int64}) as st:
            num, den = st["seq_distinct"], st["seq_total"]
        if num.numel() == 0:
            raise EmptyMetricError(f"{type(self).__name__}.bootstrap_ci() called before any sequence was seen")
        return ratio_ci(num, den, num_resamples=num_resamples, confidence=confidence, seed=seed)


class DuplicationRate(TypedCatStateMixin, Metric):
    r"""Duplication rate across all sequences of all processes (paper Appendix
    ``app:appendix_metrics``, "Duplication Rate"; ``dup_rate`` in ``metrics_full.py``).

    .. math::
       \mathrm{Dup} = 1 - \frac{\bigl|\{x^{(s)}_{1:T} : 1 \le s \le N\}\bigr|}{N}

    Sequences are identified by 64-bit hashes (:func:`sequence_hashes`); the probability that any
    two distinct sequences among ``N`` collide is at most :math:`N(N-1)/2^{65}`. Sequences of
    different lengths are always distinct.

    ``update(samples)`` takes ``LongTensor[N, T]``; ``compute()`` returns a float64 scalar in
    ``[0, 1)``.  State: ``hashes`` (int64 list, ``dist_reduce_fx="cat"``), gathered over processes,
    so duplicates on different processes are found.

    There is deliberately no sequence-resampling bootstrap: drawing sequences *with replacement*
    creates duplicates by construction (a resample holds only ~63% distinct items), so the
    bootstrap distribution of :math:`\mathrm{Dup}` is biased far above the estimate.
    """

    is_differentiable = False
    higher_is_better = False
    full_state_update = False

    _cat_state_specs = {"hashes": (torch.int64, ())}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("hashes", default=[], dist_reduce_fx="cat")

    def update(self, samples: Tensor) -> None:
        """Add a batch ``LongTensor[N, T]`` of token ids."""
        self.hashes.append(sequence_hashes(samples).to(self.device))

    def compute(self) -> Tensor:
        """Return :math:`\\mathrm{Dup}` (float64 scalar)."""
        hashes = cat_state(self.hashes, torch.int64)  # already gathered by torchmetrics under DDP
        if hashes.numel() == 0:
            raise EmptyMetricError(f"{type(self).__name__} has no sequences: call update() first")
        num_unique = torch.unique(hashes).numel()
        return torch.tensor(1.0 - num_unique / hashes.numel(), dtype=torch.float64, device=hashes.device)
