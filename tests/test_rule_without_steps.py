"""A rule whose counts ignore ``steps`` (issue 40): it needs no steps, runs as one row without steps, and its NFE
comes from its counts; its law is still exact where the rule is (one position per step: the chain's law)."""
from __future__ import annotations

import json

import pytest
import torch

from dllm_lit.exact.conformance import goodness_of_fit
from dllm_lit.exact import chain_law
from dllm_lit.samplers.rule import RuleSampler

pytestmark = pytest.mark.usefixtures("single_thread")


class LeftmostFirst(RuleSampler):
    """One position per step, leftmost first: exact chain sampling whatever ``steps`` says."""

    sampler_name = "leftmost_first"
    uses_steps = False

    def score(self, probs, tok, pos):
        return -pos.to(torch.float64)

    def counts(self, n, steps):
        assert steps is None
        return [1] * n

    def log_q_reason(self, steps):
        return None


def test_no_steps_needed_and_nfe_from_the_counts(chain) -> None:
    s = LeftmostFirst().connect(chain)
    assert [r.steps for r in s.rows()] == [None]
    s.check_run(4, None)
    x, stats = s.generate_with_stats(torch.arange(4000), 4, None, 7)
    assert torch.equal(stats["nfe"], torch.full((4000,), 4.0, dtype=torch.float64))
    assert goodness_of_fit(x, chain_law(chain, 4)).p_value > 0.01  # seeded: a fixed draw
    assert torch.equal(s.generate(torch.arange(5, 9), 4, None, 7), x[5:9])


def test_cli_row_shows_no_steps(tmp_path) -> None:
    from dllm_lit.cli import main

    main(["predict", "--model", "test_rule_without_steps.LeftmostFirst", "--data.num_sequences", "8",
          "--data.seq_len", "16", "--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false",
          "--results.figures", "false"])
    rows = json.loads((tmp_path / "metrics.json").read_text())["rows"]
    assert [(r["label"], r["steps"], r["nfe"]) for r in rows] == [("ar", None, None), ("leftmost_first", None, 16.0)]
