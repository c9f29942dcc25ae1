"""The local sweep runner and the report: tables and figures from finished runs, refusal to mix runs of
different chains / N / T, option-sweep and NFE figures, seeds, and the end-to-end CLI path."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import matplotlib.pyplot as plt
import pytest
import torch

from dllm_lit.data import MarkovDataModule
from dllm_lit.engine import predict
from dllm_lit.experiments import report, sweep
from dllm_lit.results import ResultsWriter
from dllm_lit.results.figures import _steps_axis, write_figures
from dllm_lit.samplers import AR, MDLM, SEDD

ROOT = Path(__file__).resolve().parents[1]


def _run(out: Path, sampler, n: int = 10, t: int = 12, seed: int = 3, reference: bool = True) -> Path:
    torch.set_num_threads(1)
    dm = MarkovDataModule(num_sequences=n, seq_len=t, chunk_size=5, seed=seed)
    writer = ResultsWriter(output_dir=str(out), bootstrap_resamples=10, figures=False, num_text_examples=0)
    trainer = L.Trainer(accelerator="cpu", callbacks=[writer], logger=False, enable_progress_bar=False,
                        enable_model_summary=False)
    predict(sampler, dm, writer, trainer=trainer, reference=reference)
    return out


def test_report_tables_and_option_sweep_figures(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for beta in (1.0, 3.0):
        _run(runs / f"sedd-beta{beta:g}", SEDD(steps=[2, 4], beta=beta))
    _run(runs / "mdlm-seed3", MDLM(steps=[2, 4]))
    _run(runs / "mdlm-seed4", MDLM(steps=[2, 4]), seed=4)
    out = tmp_path / "report"
    assert report.main([str(runs), "--out", str(out), "--formats", "png,svg"]) == 0
    md = (out / "tables" / "results.md").read_text()
    lines = [ln for ln in md.splitlines() if ln.startswith("| `")]
    labels = [ln.split("|")[1].strip() for ln in lines]
    # one row per label x steps; the reference row of every run kept once per seed and averaged over seeds
    assert labels == ["`ar`", "`mdlm`", "`mdlm`", "`sedd`", "`sedd`", "`sedd[beta=3]`", "`sedd[beta=3]`"]
    tex = (out / "tables" / "results.tex").read_text()
    assert r"\begin{tabular}" in tex and r"sedd{[}beta=3{]}" in tex
    rows = json.loads((out / "rows.json").read_text())
    assert len(rows) == 2 + 2 + 2 + 4  # ar x 2 seeds, sedd x 2, sedd[beta=3] x 2, mdlm x 2 steps x 2 seeds
    figs = {p.name for p in (out / "figures").iterdir()}
    for key in ("kl", "nll", "entropy", "div3"):
        assert {f"{key}_vs_steps.png", f"{key}_vs_steps.svg", f"sedd_beta_{key}.png"} <= figs
    assert "kl_vs_nfe.png" in figs
    assert "![kl_vs_steps](figures/kl_vs_steps.png)" in (out / "report.md").read_text()


def test_report_never_mixes_chains_or_lengths(tmp_path: Path, capsys) -> None:
    a = _run(tmp_path / "runs" / "t12", MDLM(steps=[2]))
    b = _run(tmp_path / "runs" / "t14", MDLM(steps=[2]), t=14)
    assert report.main([str(a), str(b), "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err
    assert "different chains, N or T" in err and "N10-T12" in err and "N10-T14" in err and "--group" in err
    assert not (tmp_path / "rep").exists()
    assert report.main([str(tmp_path / "runs"), "--out", str(tmp_path / "rep"), "--group"]) == 0
    assert sorted(p.name for p in (tmp_path / "rep").iterdir()) == ["T12", "T14"]  # named by what differs


def test_group_folders_are_named_by_the_swept_value() -> None:
    """report --group names each folder by what differs between the groups (a swept source option such as rho),
    falling back to the chain fingerprint only where nothing else tells two groups apart."""
    from collections import OrderedDict

    def group(fp, rho, n=64, t=32):
        src = {"class_path": "dllm_lit.sources.SwitchingChains", "init_args": {"rho": rho, "topics": 2}}
        return (fp, n, t), [{"meta": {"chain": {"fingerprint": fp, "source": src}, "num_sequences": n, "seq_len": t}}]

    groups = OrderedDict([group("aa" * 32, 0.5), group("bb" * 32, 0.9), group("cc" * 32, 0.9, t=64)])
    names = report.group_names(groups)
    assert list(names.values()) == ["rho=0.5-T32", "rho=0.9-T32", "rho=0.9-T64"]
    twins = OrderedDict([group("aa" * 32, 0.5), group("bb" * 32, 0.5)])
    assert list(report.group_names(twins).values()) == [f"{c * 8}-N64-T32" for c in ("a", "b")]


def test_figures_read_plain_steps_and_handle_runs_without_steps(tmp_path: Path) -> None:
    fig, ax = plt.subplots()
    _steps_axis(ax, [8, 64, 1024])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["8", "64", "1024"]
    plt.close(fig)
    out = _run(tmp_path / "ar", AR(beta=2.0))
    rows = json.loads((out / "metrics.json").read_text())["rows"]
    assert [r["label"] for r in rows] == ["ar", "ar_beta2"] and all(r["steps"] is None for r in rows)
    paths = write_figures(rows, tmp_path / "figs", formats=("png", "pdf"))
    assert {p.name for p in paths} >= {"kl_vs_steps.png", "kl_vs_steps.pdf"}
    assert (tmp_path / "figs" / "figures" / "kl_vs_steps.pdf").read_bytes()[:4] == b"%PDF"


def test_sweep_grid_overrides_and_dry_run(tmp_path: Path, capsys) -> None:
    spec = sweep.load_sweep(ROOT / "sweeps" / "sedd_beta.yaml")
    points = sweep.grid_points(spec, ["steps=8,64", "data_config=null", "num_sequences=16"])
    assert len(points) == 6 * 2 and points[0]["data_config"] is None and points[0]["num_sequences"] == 16
    assert sweep.main([str(ROOT / "sweeps" / "sedd_beta.yaml"), "--dry-run", "--set", "steps=8",
                       "--output_root", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 6 and lines[0].startswith(str(tmp_path / "sedd-openwebtext-beta1-steps8-seed123"))
    with pytest.raises(ValueError, match="--set takes key=value"):
        sweep.grid_points(spec, ["steps"])
    assert sweep.main([str(tmp_path / "missing.yaml")]) == 2


@pytest.mark.slow
def test_sweep_runner_skips_finished_points_and_reports(tmp_path: Path) -> None:
    """``cli.py sweep`` runs each point as a real process, a rerun skips them, ``cli.py report`` aggregates."""
    sweep_file = tmp_path / "tiny.yaml"
    sweep_file.write_text(
        "program: sweeps/run_point.py\nmethod: grid\nmetric: {name: kl, goal: minimize}\nparameters:\n"
        "  config: {value: configs/mdlm.yaml}\n  steps: {values: [2, 4]}\n  seed: {values: [123]}\n"
        "  num_sequences: {value: 8}\n  seq_len: {value: 16}\n  reference: {value: true}\n"
        f"  output_root: {{value: {tmp_path / 'points'}}}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    first = subprocess.run([sys.executable, "cli.py", "sweep", str(sweep_file)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "2 points, 0 already finished" in first.stderr
    assert sorted(p.name for p in (tmp_path / "points").iterdir()) == ["mdlm-steps2-seed123", "mdlm-steps4-seed123"]
    again = subprocess.run([sys.executable, "cli.py", "sweep", str(sweep_file)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "2 points, 2 already finished" in again.stderr
    rep = subprocess.run([sys.executable, "cli.py", "report", str(tmp_path / "points"), "--out", str(tmp_path / "rep")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert rep.returncode == 0, rep.stderr[-2000:]
    md = (tmp_path / "rep" / "tables" / "results.md").read_text()
    assert md.count("| `ar` |") == 1 and "| `mdlm` | 2 |" in md and "| `mdlm` | 4 |" in md


def test_progress_bar_names_the_row(tmp_path: Path) -> None:
    from lightning.pytorch.callbacks import TQDMProgressBar

    captured = []
    dm = MarkovDataModule(num_sequences=4, seq_len=8, chunk_size=2, seed=1)
    writer = ResultsWriter(output_dir=str(tmp_path), figures=False)
    bar = TQDMProgressBar()
    trainer = L.Trainer(accelerator="cpu", callbacks=[writer, bar], logger=False, enable_model_summary=False)
    orig = writer.on_predict_batch_start

    def spy(trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        orig(trainer, pl_module, batch, batch_idx, dataloader_idx)
        captured.append(bar.predict_progress_bar.desc)

    writer.on_predict_batch_start = spy
    predict(SEDD(steps=[2], beta=3.0), dm, writer, trainer=trainer)
    assert captured[0].startswith("row 1/2 ar AR") and captured[-1].startswith("row 2/2 sedd[beta=3] steps=2")


def test_genppl_gaming_check_with_a_tiny_local_gpt2(tmp_path: Path) -> None:
    """The AR beta sweep with GenPPL (ar_beta_genppl.yaml's points, in process): the report draws GenPPL against beta."""
    from tiny_models import build_tiny_gpt2

    model = str(build_tiny_gpt2(tmp_path / "gpt2"))
    for beta in (1.0, 3.0):
        torch.set_num_threads(1)
        dm = MarkovDataModule(num_sequences=8, seq_len=24, chunk_size=4, seed=2, cache_dir=str(tmp_path / "cache"))
        writer = ResultsWriter(output_dir=str(tmp_path / "runs" / f"ar-beta{beta:g}"), bootstrap_resamples=10,
                               figures=False, genppl_model=model, max_text_length=100)
        trainer = L.Trainer(accelerator="cpu", callbacks=[writer], logger=False, enable_progress_bar=False,
                            enable_model_summary=False)
        predict(AR(beta=beta), dm, writer, trainer=trainer)
    assert report.main([str(tmp_path / "runs"), "--out", str(tmp_path / "rep")]) == 0
    rows = json.loads((tmp_path / "rep" / "rows.json").read_text())
    assert [(r["label"], r["settings"]["beta"]) for r in rows] == [("ar", 1.0), ("ar_beta3", 3.0)]
    assert all(r["genppl"] > 1 and r["nfe"] is None for r in rows)
    assert (tmp_path / "rep" / "figures" / "ar_beta_genppl.png").exists()
    assert "GenPPL" in (tmp_path / "rep" / "tables" / "results.md").read_text()
