"""Transition metrics against direct dense formulas of the paper's App. D, dense vs sparse states."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.markov import synthetic_chain
from dllm_lit.metrics import TransitionMetrics
from dllm_lit.metrics.functional.transition import transition_counts


def reference_metrics(samples: torch.Tensor, chain) -> dict[str, float]:
    """Straight dense implementation of App. D (loops over rows for clarity)."""
    V = chain.vocab_size
    C = transition_counts(samples, V).double()
    M = C.sum()
    q = chain.kernel
    S = chain.topk_support()
    out = dict(nll=0.0, kl=0.0, tv=0.0, entropy=0.0, other_mass=0.0)
    w = C.sum(1) / M
    for i in range(V):
        if C[i].sum() == 0:
            continue
        p = C[i] / C[i].sum()
        obs = p > 0
        out["nll"] += -(w[i] * (p[obs] * q[i, obs].log()).sum()).item()
        out["kl"] += (w[i] * (p[obs] * (p[obs] / q[i, obs]).log()).sum()).item()
        out["tv"] += (w[i] * 0.5 * (p - q[i]).abs().sum()).item()
        out["entropy"] += -(w[i] * (p[obs] * p[obs].log()).sum()).item()
        out["other_mass"] += (w[i] * p[~S[i]].sum()).item()
    out["support_frac"] = ((C > 0).sum() / M).item()
    out["unigram_l1"] = (w - chain.stationary).abs().sum().item()
    return out


@pytest.mark.parametrize("dense_max_vocab", [1024, 4])
def test_matches_reference(dense_max_vocab: int) -> None:
    chain = synthetic_chain(12, 3, eps=0.05, seed=1)
    x = chain.sample(40, 50, seed=2)
    x[:5] = torch.randint(0, 12, (5, 50), generator=torch.Generator().manual_seed(0))  # off-support transitions
    m = TransitionMetrics(chain, dense_max_vocab=dense_max_vocab)
    m.update(x[:17])
    m.update(x[17:])
    got = m.compute()
    ref = reference_metrics(x, chain)
    for k, v in ref.items():
        assert got[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k
    assert got["other_mass"] > 0


def test_exact_samples_have_small_kl() -> None:
    chain = synthetic_chain(8, 3, eps=0.01, seed=3)
    m = TransitionMetrics(chain)
    m.update(chain.sample(400, 200, seed=1))
    r = m.compute()
    assert r["kl"] < 0.01 and r["unigram_l1"] < 0.05 and r["other_mass"] < 0.02


def test_bad_input() -> None:
    chain = synthetic_chain(5, 2, eps=0.1, seed=0)
    m = TransitionMetrics(chain)
    with pytest.raises(ValueError, match="T >= 2"):
        m.update(torch.zeros(3, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="MASK"):
        m.update(torch.full((2, 4), 5))
    with pytest.raises(ValueError, match="no transitions"):
        TransitionMetrics(chain).compute()
