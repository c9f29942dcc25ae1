"""Per-row entropy estimators of the transition entropy rate (dllm_lit.metrics.functional.entropy)."""
from __future__ import annotations

import math

import pytest
import torch

from dllm_lit.markov import synthetic_chain
from dllm_lit.metrics.functional.entropy import transition_entropy
from dllm_lit.metrics.functional.sequence_kl import sequence_kl_values
from dllm_lit.metrics.functional.transition import transition_codes, transition_metrics_from_counts


def _chao_shen(row: list[int]) -> float:
    """Chao-Shen on one row of counts, written out term by term."""
    n = sum(row)
    seen = [c for c in row if c > 0]
    f1 = sum(1 for c in seen if c == 1)
    if f1 == n:
        f1 = n - 1
    cov = 1 - f1 / n
    return sum(-(cov * c / n) * math.log(cov * c / n) / (1 - (1 - cov * c / n) ** n) for c in seen)


def test_estimators_match_their_definitions() -> None:
    """plugin = entropy, mm = entropy_mm, cs = sum_i (n_i / M) ChaoShen(row i), and kl_cs = nll - cs (to 1e-12)."""
    ch = synthetic_chain(12, 4, eps=0.05, seed=2)
    codes = transition_codes(ch.sample(30, 20, seed=1), 12)
    counts = torch.bincount(codes.reshape(-1), minlength=144).view(12, 12)
    M = int(counts.sum())
    plug = transition_metrics_from_counts(counts, ch)
    vals = sequence_kl_values(codes, None, ch, None)
    direct = sum(int(r.sum()) / M * _chao_shen(r.tolist()) for r in counts if r.sum() > 0)
    assert transition_entropy(codes, 12, "plugin") == pytest.approx(plug["entropy"], rel=1e-12)
    assert transition_entropy(codes, 12, "mm") == pytest.approx(vals["entropy_mm"], rel=1e-12)
    assert transition_entropy(codes, 12, "cs") == pytest.approx(direct, rel=1e-12)
    assert vals["kl_cs"] == pytest.approx(plug["nll"] - direct, rel=1e-9, abs=1e-12)
    with pytest.raises(ValueError, match="estimator"):
        transition_entropy(codes, 12, "nsb")
