"""The end-of-run table prints the numbers README says to quote (issue 40, item 4): NFE, the sequence-KL bracket
(the certified bracket, and the upper end's estimate with its interval), kl_excess with its interval, the plug-in kl."""
from __future__ import annotations

from dllm_lit.util.console import COLUMNS, LABEL_WIDTH, LEGEND, summary

ROW = {"sampler": "mdlm", "label": "mdlm", "steps": 8, "nfe": 8.0, "kl": 0.2448, "kl_excess": 0.2206,
       "kl_excess_ci": [0.157, 0.2839], "seq_kl_lower": 0.1168, "seq_kl_lower_ci": [0.0550, 0.1786],
       "seq_kl_upper": 0.2934, "seq_kl_upper_ci": [0.2344, 0.3748], "nll": 2.55, "entropy": 2.31,
       "seq_kl_bracket_lo": 0.0421, "seq_kl_bracket_hi": 0.3912}


def test_columns_are_the_quoted_numbers() -> None:
    lines = summary([ROW]).splitlines()
    assert [h for h, _ in COLUMNS] == ["sampler", "steps", "NFE", "seq KL certified (95%)", "seq KL upper [95% CI]",
                                       "kl_excess [95% CI]", "kl"]
    assert lines[1].split() == ["mdlm", "8", "8", "[0.0421,", "0.391]", "0.293", "[0.234,", "0.375]", "0.221", "[0.157,", "0.284]",
                                "0.245"]
    assert lines[2:] == LEGEND.splitlines() and all(len(line) <= 120 for line in lines)
    assert summary([dict(ROW, nfe=1025.0)]).splitlines()[1].split()[2] == "1025"  # not 1.02e+03


def test_missing_upper_end_negative_bound_and_long_labels() -> None:
    row = dict(ROW, label="external_generate[generate=examples.llada_generate:generate,kwargs={}]",
               seq_kl_upper=None, seq_kl_upper_ci=None, seq_kl_bracket_lo=-0.003, seq_kl_bracket_hi=None, steps=None,
               nfe=None)
    cells = summary([row]).splitlines()[1]
    name = cells.split()[0]
    assert len(name) == LABEL_WIDTH and name.endswith("...")
    assert cells.split()[1:7] == ["-", "-", "[0,", "-]", "-", "0.221"]  # KL >= 0: the trivial bound for a negative one
    old = {k: v for k, v in ROW.items() if not k.startswith("seq_kl_bracket")}  # a run from before the bracket
    assert summary([old]).splitlines()[1].split()[3] == "0.055"
