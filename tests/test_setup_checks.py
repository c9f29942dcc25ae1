"""Set-up checks of a predict run: settings that would fail only after sampling (or sample part of a
row) end before sampling with one line naming the field; exit status 2."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dllm_lit.cli import main

ROOT = Path(__file__).resolve().parents[1]
BASE = ["predict", "--config", "configs/mdlm.yaml", "--model.steps", "[2]", "--data.num_sequences", "8",
        "--data.seq_len", "16", "--data.chunk_size", "2", "--trainer.enable_progress_bar", "false"]


@pytest.mark.parametrize("extra, message", [
    (["--trainer.limit_predict_batches", "3"], "trainer.limit_predict_batches=3 would sample only part"),
    (["--trainer.fast_dev_run", "true"], "trainer.fast_dev_run samples only the first work item"),
    (["--results.mauve_featurizer", "gpt2", "--results.mauve_num_buckets", "25"],
     "results.mauve_num_buckets=25 needs at least that many texts per row, but rows have 8"),
])
def test_bad_run_settings_fail_before_sampling(tmp_path, capsys, extra, message) -> None:
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as info:
        main([*BASE, "--trainer.default_root_dir", str(out), *extra])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and message in err[-1]
    assert not (out / "metrics.json").exists()


@pytest.mark.slow  # a fresh process (6 CPU s); in-process: tests/test_first_hour.py (an output folder that is a file)
def test_unwritable_output_dir_is_one_line_from_a_real_process(tmp_path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "cli.py", *BASE, "--results.output_dir", str(blocker / "out")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: results.output_dir") and "is not writable" in last


def test_writer_options_are_checked_at_construction() -> None:
    from dllm_lit.results import ResultsWriter

    with pytest.raises(ValueError, match="figure_formats must be one of"):
        ResultsWriter(figure_formats=["png", "jpg"])
    with pytest.raises(ValueError, match="mauve_num_buckets must be an integer >= 2"):
        ResultsWriter(mauve_num_buckets=1)
