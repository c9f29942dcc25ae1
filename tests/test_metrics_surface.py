"""Tests of the surface metrics (n-gram diversity, duplication rate) against plain-Python references."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from dllm_lit.metrics.distributed import EmptyMetricError
from dllm_lit.metrics.duplication_rate import DuplicationRate
from dllm_lit.metrics.functional.duplication import sequence_hashes
from dllm_lit.metrics.functional.duplication import splitmix64_finalizer as mix64
from dllm_lit.metrics.functional.ngram import distinct_ngrams_per_sequence
from dllm_lit.metrics.ngram_diversity import NgramDiversity


def _ref_distinct(rows: list[list[int]], n: int) -> list[int]:
    return [len({tuple(r[t : t + n]) for t in range(len(r) - n + 1)}) for r in rows]


def _np_mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser in unsigned numpy arithmetic (independent reference)."""
    x = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


# ----------------------------------------------------------------------------- n-gram counting
@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("vocab", [3, 27, 4096, 2**32 - 1])
def test_distinct_ngrams_match_python_reference(n: int, vocab: int) -> None:
    g = torch.Generator().manual_seed(n * 1000 + vocab % 997)
    # small effective alphabet inside a large id range so that repeats actually occur
    alphabet = torch.randint(0, vocab, (4,), generator=g, dtype=torch.int64)
    alphabet[0] = vocab - 1  # force the largest id (exercises the re-ranking path for big vocabularies)
    x = alphabet[torch.randint(0, 4, (37, 23), generator=g)]
    got = distinct_ngrams_per_sequence(x, n)
    assert got.dtype == torch.int64
    assert got.tolist() == _ref_distinct(x.tolist(), n)


def test_distinct_ngrams_long_n_multi_block_no_collisions() -> None:
    # base 2**32 forces one token per block: n - 1 re-ranking steps
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 3, (16, 40), generator=g) * (2**31 - 1) + 1  # max id 2**32 - 1
    for n in (2, 4, 8, 40):
        assert distinct_ngrams_per_sequence(x, n).tolist() == _ref_distinct(x.tolist(), n)


def test_ngram_diversity_hand_example_and_accumulation() -> None:
    m = NgramDiversity(n=2)
    m.update(torch.tensor([[1, 2, 1, 2], [3, 3, 3, 3]]))  # distinct bigrams: 2 and 1, of 3 each
    assert m.compute().item() == pytest.approx(3 / 6)
    assert m.compute().dtype == torch.float64
    m.update(torch.tensor([[5, 6, 7]]))  # different T across calls: 2 distinct of 2
    assert m.compute().item() == pytest.approx(5 / 8)


def test_ngram_diversity_equals_paper_formula_on_random_batches() -> None:
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 6, (b, 30), generator=g) for b in (5, 11, 1)]
    for n in (2, 3):
        m = NgramDiversity(n=n)
        for b in batches:
            m.update(b)
        rows = torch.cat(batches).tolist()
        expected = sum(_ref_distinct(rows, n)) / (len(rows) * (30 - n + 1))
        assert m.compute().item() == pytest.approx(expected, abs=1e-15)


def test_ngram_diversity_per_sequence_states_and_bootstrap() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randint(0, 5, (200, 20), generator=g)
    m = NgramDiversity(n=2, per_sequence=True)
    m.update(x[:150])
    m.update(x[150:])
    value = m.compute().item()
    assert torch.cat(m.seq_distinct).tolist() == _ref_distinct(x.tolist(), 2)
    assert torch.cat(m.seq_total).tolist() == [19] * 200
    lo, hi = m.bootstrap_ci(num_resamples=500, seed=1)
    assert lo < value < hi
    assert (lo, hi) == m.bootstrap_ci(num_resamples=500, seed=1)
    with pytest.raises(ValueError, match="per_sequence=True"):
        NgramDiversity(n=2).bootstrap_ci()


def test_ngram_diversity_is_fast_and_vectorised() -> None:
    x = torch.randint(0, 4096, (2000, 1024), generator=torch.Generator().manual_seed(0))
    m = NgramDiversity(n=3)
    start = time.perf_counter()
    m.update(x)
    elapsed = time.perf_counter() - start
    assert 0.99 < m.compute().item() <= 1.0
    assert elapsed < 10.0, f"NgramDiversity.update on 2000x1024 took {elapsed:.2f}s"


@pytest.mark.parametrize(
    ("kwargs", "samples", "match"),
    [
        ({"n": 0}, None, "`n` must be a positive integer"),
        ({"n": 2.0}, None, "`n` must be a positive integer"),
        ({"n": 3}, torch.zeros(4, 2, dtype=torch.long), r"T = 2, but T >= 3"),
        ({"n": 2}, torch.zeros(0, 5, dtype=torch.long), "empty"),
        ({"n": 2}, torch.zeros(5, dtype=torch.long), "2-D"),
        ({"n": 2}, torch.zeros(2, 5), "integer dtype"),
        ({"n": 2}, torch.tensor([[0, -1, 2]]), r"token ids in \[0, "),
        ({"n": 2}, [[1, 2, 3]], "torch.Tensor"),
    ],
)
def test_ngram_diversity_rejects_bad_input(kwargs: dict, samples: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        m = NgramDiversity(**kwargs)
        m.update(samples)  # type: ignore[arg-type]


def test_empty_metrics_raise_on_compute() -> None:
    with pytest.warns(UserWarning, match="before the ``update``"), pytest.raises(EmptyMetricError):
        NgramDiversity(n=2).compute()
    with pytest.warns(UserWarning, match="before the ``update``"), pytest.raises(EmptyMetricError):
        DuplicationRate().compute()


# ----------------------------------------------------------------------------- hashing / duplicates
def test_mix64_matches_unsigned_numpy_reference() -> None:
    vals = np.array([0, 1, 2**63 - 1, 2**63, 2**64 - 1, 0x123456789ABCDEF0], dtype=np.uint64)
    got = mix64(torch.from_numpy(vals.view(np.int64).copy())).numpy().view(np.uint64)
    np.testing.assert_array_equal(got, _np_mix64(vals))
    with pytest.raises(ValueError, match="int64"):
        mix64(torch.zeros(3, dtype=torch.int32))


def test_sequence_hashes_match_independent_reference() -> None:
    x = torch.randint(0, 2**32, (9, 13), generator=torch.Generator().manual_seed(5))
    xs = x.numpy().astype(np.uint64)
    pos = (np.arange(13, dtype=np.uint64) << np.uint64(32))[None, :]
    with np.errstate(over="ignore"):
        terms = _np_mix64((pos | xs) ^ np.uint64(0x9E3779B97F4A7C15))
        total = terms.sum(axis=1, dtype=np.uint64) + np.uint64(13) * np.uint64(0xD6E8FEB86659FD93)
    expected = _np_mix64(total)
    np.testing.assert_array_equal(sequence_hashes(x).numpy().view(np.uint64), expected)


def test_sequence_hashes_distinguish_near_identical_sequences() -> None:
    base = torch.randint(0, 50, (1, 64), generator=torch.Generator().manual_seed(2))
    variants = [base.clone()]
    for t in range(64):  # every single-token substitution
        v = base.clone()
        v[0, t] = (v[0, t] + 1) % 50
        variants.append(v)
    swapped = base.clone()
    swapped[0, [0, 1]] = swapped[0, [1, 0]]
    if not torch.equal(swapped, base):
        variants.append(swapped)
    h = sequence_hashes(torch.cat(variants))
    assert torch.unique(h).numel() == h.numel()
    # many random distinct sequences: no collisions
    r = torch.randint(0, 2, (20000, 40), generator=torch.Generator().manual_seed(3))
    n_distinct = torch.unique(r, dim=0).shape[0]
    assert torch.unique(sequence_hashes(r)).numel() == n_distinct


def test_duplication_rate_matches_set_reference() -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.randint(0, 2, (300, 8), generator=g)  # 256 possible sequences -> many duplicates
    m = DuplicationRate()
    m.update(x[:100])
    m.update(x[100:])
    expected = 1 - len({tuple(r) for r in x.tolist()}) / 300
    assert expected > 0.2
    assert m.compute().item() == pytest.approx(expected, abs=1e-15)


def test_duplication_rate_hand_example_and_lengths() -> None:
    m = DuplicationRate()
    m.update(torch.tensor([[1, 2, 3], [1, 2, 3], [3, 2, 1], [1, 2, 3]]))
    assert m.compute().item() == pytest.approx(1 - 2 / 4)
    m.update(torch.tensor([[1, 2, 3, 0]]))  # longer sequence is a new sequence
    assert m.compute().item() == pytest.approx(1 - 3 / 5)
    with pytest.raises(ValueError, match="empty"):
        m.update(torch.zeros(0, 3, dtype=torch.long))
