"""P2's revealed-position weight conditions on z with its MASKs; upstream's planner is fed the proposal sequence
x0 (``planner(x0)`` in ``p2_sampling``, no MASK).  The two exact laws differ measurably on the tiny chain, and
``docs/samplers/p2.md`` lists it as a departure."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.samplers import P2
from test_p2 import N, SEED, ALPHA, V, p2_law

pytestmark = pytest.mark.usefixtures("single_thread")
#: upstream's defaults (tau = eta = noise scale = 1), T = 3, S = 3: one token per step, re-planned each step
CASE = dict(T=3, S=3, tau=1.0, eta=1.0, scale=1.0)


def test_exact_laws_differ(den) -> None:
    """L1 distance between the laws conditioned on z and on the proposals: 0.0436 at CASE (exact, enumeration)."""
    ours, theirs = p2_law(den, **CASE), p2_law(den, **CASE, planner="proposals")
    assert abs(float(ours.sum()) - 1) < 1e-9 and abs(float(theirs.sum()) - 1) < 1e-9
    assert float((ours - theirs).abs().sum()) > 0.04


@pytest.mark.slow
def test_samples_reject_the_proposal_conditioned_law(den) -> None:
    """P2's samples (N = 50000, seed 0) fit its own law and reject the proposal-conditioned one (p = 1.2e-31)."""
    x = P2(den, steps=CASE["S"]).sample(N, CASE["T"], CASE["S"], seed=SEED)
    counts = sequence_counts(x, V)
    p_ours = chi_square_pvalue(counts, p2_law(den, **CASE))
    p_theirs = chi_square_pvalue(counts, p2_law(den, **CASE, planner="proposals"))
    print(f"P2 T=3 S=3 N={N}: p against its own law {p_ours:.3g}, against the proposal-conditioned law {p_theirs:.3g}")
    assert p_ours > ALPHA and p_theirs < ALPHA


def test_doc_lists_the_planner_departure() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs/samplers/p2.md").read_text()
    assert "the same way" not in doc
    for phrase in ("planner(x0)", "tests/test_p2_planner_conditioning.py", "proposal sequence"):
        assert phrase in doc, phrase
