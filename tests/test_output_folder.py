"""One live run per output folder, leftovers of killed writes removed, samples.pt bytes stable, cache records sealed."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from dllm_lit.cli import main
from dllm_lit.denoisers import OracleDenoiser, oracle_cache
from dllm_lit.markov import synthetic_chain
from dllm_lit.results import ResultsWriter
from dllm_lit.results.output_folder import LOCK_NAME

REPO = Path(__file__).resolve().parents[1]
TINY = ["--data.num_sequences", "4", "--data.seq_len", "8", "--trainer.enable_progress_bar", "false",
        "--results.figures", "false", "--results.bootstrap_resamples", "0"]


def _predict(out: Path, steps: str = "[4, 8]", *extra: str) -> None:
    main(["predict", "--config", str(REPO / "configs/mdlm.yaml"), "--model.steps", steps, *TINY, *extra,
          "--trainer.default_root_dir", str(out)])


def test_second_writer_into_a_locked_folder_is_refused(tmp_path) -> None:
    trainer = SimpleNamespace(default_root_dir=str(tmp_path / "run"))
    first, second = ResultsWriter(), ResultsWriter()
    first.claim_output(trainer)
    with pytest.raises(ValueError, match=r"is in use by another live run \(pid \d+\)") as err:
        second.claim_output(trainer)
    assert "\n" not in str(err.value)
    first.release_output()
    second.claim_output(trainer)  # free again
    second.release_output()


def test_cli_refuses_a_second_live_run_and_a_dead_holder_frees_the_folder(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time; fh = open(sys.argv[1], 'a+'); fcntl.flock(fh, fcntl.LOCK_EX); "
        "fh.write(str(os.getpid())); fh.flush(); print('locked', flush=True); time.sleep(120)"), str(out / LOCK_NAME)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        started = time.perf_counter()
        with pytest.raises(SystemExit) as exc:
            _predict(out)
        assert exc.value.code == 2 and time.perf_counter() - started < 5.0
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"error: results.output_dir {str(out)!r} is in use by another live run (pid {holder.pid}); "
                       "wait for it to end or give this run another --trainer.default_root_dir"]
        assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]  # nothing written, not even config.yaml
    finally:
        holder.kill()
        holder.wait()
    _predict(out)  # the lock died with its holder
    assert (out / "metrics.json").exists()


def test_rerun_removes_leftover_temporary_files(tmp_path) -> None:
    out = tmp_path / "run"
    (out / "figures").mkdir(parents=True)
    leftovers = [out / ".samples.pt.k2j3h4.tmp", out / ".metrics.json.a1b2c3.tmp", out / ".samples.txt.zz.tmp",
                 out / ".write-check.q9", out / "figures" / ".kl_vs_steps.png.x1y2.tmp"]
    for p in leftovers:
        p.write_bytes(b"half a file")
    mine = out / ".notes.tmp"
    mine.write_text("not ours")
    _predict(out, "[4]")
    assert not any(p.exists() for p in leftovers) and mine.exists()


def test_samples_file_bytes_identical_after_a_resume(tmp_path) -> None:
    _predict(tmp_path / "fresh")
    _predict(tmp_path / "resumed", "[4]")
    _predict(tmp_path / "resumed")  # keeps the AR and steps=4 rows from disk, samples steps=8
    fresh, resumed = (tmp_path / d / "samples.pt" for d in ("fresh", "resumed"))
    assert fresh.read_bytes() == resumed.read_bytes()
    payload = torch.load(resumed, weights_only=True)
    assert [(r["label"], r["steps"]) for r in payload["rows"]] == [("ar", None), ("mdlm", 4), ("mdlm", 8)]


@pytest.mark.parametrize("field, value", [("certified", False), ("strictly_positive", False), ("residual", 0.5),
                                          ("depth", 3)])
def test_oracle_cache_record_flags_are_checksummed(tmp_path, monkeypatch, field, value) -> None:
    monkeypatch.setattr(oracle_cache, "DISK_CACHE_MIN_BYTES", 0)
    chain = synthetic_chain(30, 4, eps=1e-3, seed=0)
    ref = OracleDenoiser(chain, cache_dir=tmp_path)
    (meta,) = (tmp_path / "oracle").glob("*.json")
    (data,) = (tmp_path / "oracle").glob("*.bin")
    built = data.stat().st_ino
    assert OracleDenoiser(chain, cache_dir=tmp_path) is not None and data.stat().st_ino == built  # a valid entry loads
    record = json.loads(meta.read_text())
    assert record[field] != value
    record[field] = value
    meta.write_text(json.dumps(record))
    again = OracleDenoiser(chain, cache_dir=tmp_path)
    assert data.stat().st_ino != built  # the tampered record was not trusted: the table was built again
    assert (again.certified, again.strictly_positive, again.depth) == (ref.certified, ref.strictly_positive, ref.depth)
    assert torch.equal(again.table, ref.table)
    assert json.loads(meta.read_text())[field] == getattr(ref, "mixing_residual" if field == "residual" else field)
