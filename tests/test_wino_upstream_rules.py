"""WINO follows the authors' official loop (d2Cache ``src/generation/wino_official.py`` at commit b8d5f1e): commit
above the threshold, re-masking capped by the previous call's commit count.  d2Cache's HEAD ``wino.py`` commits at
``>=`` the threshold and caps by the current call's count; both change the exact law on the tiny chain, and
``docs/samplers/wino.md`` says so."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import chi_square_pvalue, sequence_counts
from dllm_lit.samplers import WINO
from test_wino import ALPHA, N, V, wino_law

pytestmark = pytest.mark.usefixtures("single_thread")
#: one block of T = 4; wide-in threshold 0.5 is a confidence the tiny chain reaches exactly (its kernel row 2)
CASE = dict(T=4, L=4, thr=0.5, thr_back=0.9, tau=1.0, cap=16)


def test_head_rules_change_the_law(den) -> None:
    """L1 distances from the official loop's law: 0.0199 (``>=``) and 0.1216 (this call's count) at CASE."""
    official = wino_law(den, **CASE)
    at_threshold = wino_law(den, **CASE, at_threshold=True)
    this_call = wino_law(den, **CASE, cap_by_this_call=True)
    assert float((official - at_threshold).abs().sum()) > 0.019
    assert float((official - this_call).abs().sum()) > 0.12


@pytest.mark.slow
def test_samples_follow_the_official_loop(den) -> None:
    """WINO's samples (N = 50000) fit the official law and reject the HEAD rule's (both changes)."""
    x = WINO(den, block_length=CASE["L"], wide_in_threshold=CASE["thr"], narrow_out_threshold=CASE["thr_back"],
             temperature=CASE["tau"]).sample(N, CASE["T"], 1, seed=0)
    counts = sequence_counts(x, V)
    p_official = chi_square_pvalue(counts, wino_law(den, **CASE))
    p_head = chi_square_pvalue(counts, wino_law(den, **CASE, at_threshold=True, cap_by_this_call=True))
    print(f"WINO T=4 L=4 thr=0.5 N={N}: p against the official loop's law {p_official:.3g}, "
          f"against HEAD's {p_head:.3g}")
    assert p_official > ALPHA and p_head < ALPHA


def test_doc_cites_the_official_loop_and_head_differences() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs/samplers/wino.md").read_text()
    assert "the same rule batched" not in doc
    for phrase in ("b8d5f1e", "`>=`", "current call's commit count", "tests/test_wino_upstream_rules.py"):
        assert phrase in doc, phrase
