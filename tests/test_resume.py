"""Resume and clean stop: rows are committed one by one, a rerun keeps the rows already on disk for the
same settings (and recomputes the others), and SIGINT / SIGTERM sent to a real ``cli.py predict``
process stop it within seconds with every finished row on disk and nothing half-written; the rerun
then completes the run with results identical to an uninterrupted one."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch

from dllm_lit.util.atomic import atomic_write_text
from dllm_lit.data import MarkovDataModule
from dllm_lit.engine import predict
from dllm_lit.engine.plan import RunPlan
from dllm_lit.results import ResultsWriter
from dllm_lit.results.writer import load_metrics
from dllm_lit.samplers import AR, LLaDA, MDLM, SEDD, ReMDM

ROOT = Path(__file__).resolve().parents[1]


def _run(out: Path, sampler, n: int = 12, t: int = 16, resamples: int = 10, **writer_kwargs) -> ResultsWriter:
    torch.set_num_threads(1)
    dm = MarkovDataModule(num_sequences=n, seq_len=t, chunk_size=5, seed=3)
    writer = ResultsWriter(output_dir=str(out), bootstrap_resamples=resamples,
                           **{"figures": False, "num_text_examples": 2, **writer_kwargs})
    trainer = L.Trainer(accelerator="cpu", callbacks=[writer], logger=False, enable_progress_bar=False,
                        enable_model_summary=False)
    predict(sampler, dm, writer, trainer=trainer)
    return writer


def test_labels_name_the_options_that_differ() -> None:
    labels = [RunPlan.build(s, 4, 8, 0, reference=False).rows[0].label for s in (
        MDLM(), ReMDM(variant="conf", top_p=1.0), ReMDM(variant="conf", top_p=0.9), SEDD(beta=10.0),
        LLaDA(prompt_mode="pi_head"), AR(beta=2.0))]
    assert labels == ["mdlm", "remdm_conf[top_p=1]", "remdm_conf", "sedd[beta=10]", "llada[prompt_mode=pi_head]",
                      "ar_beta2"]


def test_a_learned_denoiser_row_is_not_called_like_the_oracle_row() -> None:
    from dllm_lit.denoisers.base import Denoiser

    class Checkpoint(Denoiser):
        def forward(self, z):  # pragma: no cover - never called
            raise NotImplementedError

        def describe(self) -> dict:
            return {"denoiser": "hf", "model_name_or_path": "/ckpts/mdlm-owt/"}

    learned = RunPlan.build(MDLM(denoiser=Checkpoint()), 4, 8, 0, reference=False).rows[0]
    assert learned.label == "mdlm[denoiser=mdlm-owt]"
    assert learned.settings()["denoiser"]["model_name_or_path"] == "/ckpts/mdlm-owt/"


def test_rerun_keeps_complete_rows_and_recomputes_changed_ones(tmp_path: Path) -> None:
    fresh = _run(tmp_path / "fresh", MDLM(steps=[2, 4, 8])).rows
    out = tmp_path / "out"
    first = _run(out, MDLM(steps=[2, 4]))
    assert [r["steps"] for r in first.rows] == [None, 2, 4] and first.meta["complete"]
    # the same command with one more steps value samples only the new row
    second = _run(out, MDLM(steps=[2, 4, 8]))
    # the reference row is drawn again (cheap) because kl_excess of the new row pairs with it
    assert second.plan.done == {1, 2}
    assert second.metrics[1] is None and second.metrics[0] is not None and second.metrics[3] is not None
    meta, rows = load_metrics(out)
    assert rows == fresh and meta["complete"]  # identical to a run that never stopped
    saved = torch.load(out / "samples.pt", weights_only=True)
    assert [r["steps"] for r in saved["rows"]] == [None, 2, 4, 8]
    # changed sampler settings: those rows are recomputed (and the reference row they pair with)
    with pytest.warns(UserWarning, match="other settings; they are replaced"):
        third = _run(out, MDLM(steps=[2], decoding="stepwise"))
    assert third.plan.done == set() and third.rows[0] == fresh[0]
    assert [r["settings"]["decoding"] for r in load_metrics(out)[1][1:]] == ["stepwise"]
    # changed metric options: every row is recomputed, the old files are removed with a warning
    with pytest.warns(UserWarning, match="another run's results"):
        fourth = _run(out, MDLM(steps=[2]), resamples=0)
    assert fourth.plan.done == set()
    # resume off: recomputed
    fifth = _run(out, MDLM(steps=[2]), resamples=0, resume=False)
    assert fifth.plan.done == set() and load_metrics(out)[1] == fourth.rows


def test_another_run_into_the_same_folder_leaves_no_stale_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _run(out, MDLM(steps=[2]), figures=True)
    assert (out / "samples.pt").exists() and (out / "figures" / "kl_vs_steps.png").exists()
    with pytest.warns(UserWarning, match=r"another run's results.*removed metrics.json, metrics.csv, samples.pt, "
                                         r"samples.txt, seals.json, \d+ figure"):
        _run(out, MDLM(steps=[2]), t=20, save_samples=False, num_text_examples=0)
    assert not (out / "samples.pt").exists() and not (out / "samples.txt").exists()
    assert not list((out / "figures").iterdir())
    assert load_metrics(out)[0]["seq_len"] == 20


def test_result_files_respect_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        path = atomic_write_text(tmp_path / "a.txt", "x")
        assert path.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)
    os.umask(0o022)
    try:
        writer_out = tmp_path / "run"
        _run(writer_out, MDLM(steps=[2]))
        for name in ("metrics.json", "metrics.csv", "samples.pt", "samples.txt", "seals.json"):
            assert (writer_out / name).stat().st_mode & 0o777 == 0o644, name
    finally:
        os.umask(old)


def test_all_rows_on_disk_runs_nothing_and_still_writes_figures(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _run(out, MDLM(steps=[2]))
    before = (out / "metrics.json").read_text()
    writer = _run(out, MDLM(steps=[2]), figures=True)
    assert writer.plan.done == {0, 1} and writer.plan.pending_work() == []
    assert (out / "metrics.json").read_text() == before and (out / "figures" / "kl_vs_steps.png").exists()


def _cli(out: Path, extra: list[str], delay: float, **popen) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
           "DLLM_TEST_ITEM_DELAY": str(delay), "OMP_NUM_THREADS": "1"}
    model = json.dumps({"class_path": "slow_sampler.SlowMDLM", "init_args": {"steps": [2, 4, 8]}})
    cmd = [sys.executable, "-m", "dllm_lit.cli", "predict", "--model", model, "--data.num_sequences", "24",
           "--data.seq_len", "32", "--data.chunk_size", "4", "--results.bootstrap_resamples", "20",
           "--trainer.default_root_dir", str(out), "--trainer.enable_progress_bar", "false", *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _rows_on_disk(out: Path) -> int:
    try:
        return len(load_metrics(out)[1])
    except (OSError, ValueError):
        return 0


@pytest.mark.slow
def test_signals_stop_cleanly_and_the_rerun_completes_identically(tmp_path: Path) -> None:
    """SIGTERM, then SIGINT, to real processes; then a rerun; compared with a run that was never stopped."""
    reference = _cli(tmp_path / "whole", [], delay=0.0)
    out = tmp_path / "stopped"
    counts = []
    for signum, min_rows in ((signal.SIGTERM, 2), (signal.SIGINT, 3)):
        started = time.time_ns()
        proc = _cli(out, [], delay=0.4)  # 6 items per row at 0.4 s: about 2.4 s per row
        deadline = time.monotonic() + 240

        def written_by_this_run() -> bool:  # rows left by the previous run do not count
            metrics = out / "metrics.json"
            return metrics.exists() and metrics.stat().st_mtime_ns > started

        while (_rows_on_disk(out) < min_rows or not written_by_this_run()) and proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        sent = time.monotonic()
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
        assert time.monotonic() - sent < 10  # stops within seconds
        assert proc.returncode == 128 + signum, err[-2000:]
        assert f"interrupted by {signal.Signals(signum).name}" in err
        meta, rows = load_metrics(out)
        assert not meta["complete"] and min_rows <= len(rows) < 4
        counts.append(len(rows))
        assert not [p.name for p in out.rglob("*.tmp")]  # nothing half-written
        saved = torch.load(out / "samples.pt", weights_only=True)
        assert [r["steps"] for r in saved["rows"]] == [r["steps"] for r in rows]
    rerun = _cli(out, [], delay=0.0)
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err[-2000:]
    _, err = reference.communicate(timeout=300)
    assert reference.returncode == 0, err[-2000:]
    meta, rows = load_metrics(out)
    whole_meta, whole_rows = load_metrics(tmp_path / "whole")
    assert meta["complete"] and rows == whole_rows
    a = torch.load(out / "samples.pt", weights_only=True)["rows"]
    b = torch.load(tmp_path / "whole" / "samples.pt", weights_only=True)["rows"]
    assert all(torch.equal(x["samples"], y["samples"]) for x, y in zip(a, b)) and len(a) == len(b) == 4
    assert (out / "samples.txt").read_text() == (tmp_path / "whole" / "samples.txt").read_text()
