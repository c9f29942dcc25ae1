"""The native-sampler recipe of docs/architecture.md (examples/my_sampler.py), run as a user would."""
from __future__ import annotations

import json

import pytest

from dllm_lit.exact.conformance import goodness_of_fit
from dllm_lit.exact import chain_law
from examples.my_sampler import LeftToRight

pytestmark = pytest.mark.usefixtures("single_thread")


def test_one_position_per_step_is_exact(chain) -> None:
    s = LeftToRight(steps=4).connect(chain)
    assert goodness_of_fit(s.sample(4000, 4, seed=1), chain_law(chain, 4)).p_value > 0.01  # seeded: a fixed draw
    # chunking invariance, NFE and log q: the contract suite collects it (tests/test_sampler_contract.py)


def test_cli_run_reports_the_upper_bracket(tmp_path) -> None:
    from dllm_lit.cli import main

    main(["predict", "--model", "examples.my_sampler.LeftToRight", "--model.steps", "[4, 32]",
          "--data.num_sequences", "16", "--data.seq_len", "32", "--trainer.default_root_dir", str(tmp_path),
          "--trainer.enable_progress_bar", "false", "--results.figures", "false"])
    rows = json.loads((tmp_path / "metrics.json").read_text())["rows"]
    assert [r["sampler"] for r in rows] == ["ar", "left_to_right", "left_to_right"]
    assert rows[1]["seq_kl_upper"] is not None and rows[1]["seq_kl_upper"] > rows[2]["seq_kl_upper"]
